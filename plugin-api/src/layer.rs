//! The layer contract: a recurrent block that owns its parameters and its iteration loop.

use crate::error::Result;
use candle_core::Tensor;

/// Receives the token state after each iteration of a layer's loop.
///
/// The host uses it to record per-iteration diagnostics (energies, effective rank, angles)
/// without the layer knowing what is measured.
pub trait StateObserver {
    /// Called with `t = 0` for the input and `t = 1..=iterations` after each full iteration
    /// (for Hyper-SET: after the attention and the feedforward sub-step).
    fn observe(&mut self, t: usize, x: &Tensor) -> Result<()>;
}

/// How one forward pass should run.
pub struct Pass<'a> {
    /// Number of iterations to run; evaluation may use more than training (extrapolation).
    pub iterations: usize,
    /// Whether token `i` may only see tokens `<= i` (language modelling).
    pub causal: bool,
    /// Whether the pass computes a training loss: training-only behaviour of a layer
    /// (dropout) runs only then, never in evaluation, diagnostics or verification.
    pub train: bool,
    /// Optional observer of the state after every iteration.
    pub observer: Option<&'a mut dyn StateObserver>,
}

impl<'a> Pass<'a> {
    /// A plain pass with `iterations` iterations, not causal, not training, unobserved.
    pub fn new(iterations: usize) -> Self {
        Pass { iterations, causal: false, train: false, observer: None }
    }

    /// Reports the state after iteration `t` to the observer, if any.
    pub fn observe(&mut self, t: usize, x: &Tensor) -> Result<()> {
        match self.observer.as_mut() {
            Some(o) => o.observe(t, x),
            None => Ok(()),
        }
    }
}

/// A named energy of one iteration state, one value per sample.
pub struct Energy {
    /// Name as shown in plots (`attention`, `feedforward`, ...).
    pub name: String,
    /// Per-sample values, shape `[B]`.
    pub per_sample: Tensor,
}

/// A layer plugin's model: maps tokens `[B, N, d]` to tokens `[B, N, d]`.
///
/// The layer owns its parameters (created from the `VarBuilder` it was built with), its
/// iteration loop (recurrent depth, step sizes) and the definitions of its energies.
pub trait Layer: Send + Sync {
    /// Width `d` of the tokens the layer reads and writes.
    fn width(&self) -> usize;

    /// Number of iterations used in training (the recurrent depth `L`).
    fn train_iterations(&self) -> usize;

    /// Runs `pass.iterations` iterations on the embedded tokens `x0` (`[B, N, d]`), calling
    /// `pass.observe` after each one, and returns the final state.
    fn forward(&self, x0: &Tensor, pass: &mut Pass<'_>) -> Result<Tensor>;

    /// Whether the layer can run with a causal mask ([`Pass::causal`]).
    fn supports_causal(&self) -> bool {
        false
    }

    /// The layer's named energies of the state `x` reached after iteration `t` of a pass of
    /// `iterations` iterations (which fixes the block that ran `t` in a multi-block layer),
    /// per sample. `x0` is the layer input (some step-size networks condition on it). Layers
    /// that define no energy return an empty list.
    fn energies(&self, _t: usize, _iterations: usize, _x: &Tensor, _x0: &Tensor) -> Result<Vec<Energy>> {
        Ok(Vec::new())
    }

    /// The normalised per-head projections `[B, H, N, p]` of the state `x` after iteration
    /// `t` of a pass of `iterations` iterations, on which effective rank and average angle
    /// are measured. `None` if the layer has no head subspaces.
    fn head_projections(&self, _t: usize, _iterations: usize, _x: &Tensor) -> Result<Option<Tensor>> {
        Ok(None)
    }

    /// The layer's claims that its updates are energy gradients, evaluated at tokens `x`
    /// (`[B, N, d]`, f64). Layers derived from no energy return an empty list.
    fn gradient_identities(&self, _x: &Tensor) -> Result<Vec<GradientIdentity>> {
        Ok(Vec::new())
    }

    /// The layer's weaker claims that one fixed step of size `step` from `x` does not raise
    /// an energy.
    fn descent_checks(&self, _x: &Tensor, _step: f64) -> Result<Vec<DescentCheck>> {
        Ok(Vec::new())
    }
}

impl<L: Layer + ?Sized> Layer for Box<L> {
    fn width(&self) -> usize {
        (**self).width()
    }
    fn train_iterations(&self) -> usize {
        (**self).train_iterations()
    }
    fn forward(&self, x0: &Tensor, pass: &mut Pass<'_>) -> Result<Tensor> {
        (**self).forward(x0, pass)
    }
    fn supports_causal(&self) -> bool {
        (**self).supports_causal()
    }
    fn energies(&self, t: usize, iterations: usize, x: &Tensor, x0: &Tensor) -> Result<Vec<Energy>> {
        (**self).energies(t, iterations, x, x0)
    }
    fn head_projections(&self, t: usize, iterations: usize, x: &Tensor) -> Result<Option<Tensor>> {
        (**self).head_projections(t, iterations, x)
    }
    fn gradient_identities(&self, x: &Tensor) -> Result<Vec<GradientIdentity>> {
        (**self).gradient_identities(x)
    }
    fn descent_checks(&self, x: &Tensor, step: f64) -> Result<Vec<DescentCheck>> {
        (**self).descent_checks(x, step)
    }
}

/// How a layer of `blocks` distinct blocks spreads `iterations` iterations: block `b` runs
/// iterations `b * I/k + 1 ..= (b + 1) * I/k` (the seeds' "k layers x L/k iterations").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockSchedule {
    /// Distinct blocks `k`.
    pub blocks: usize,
    /// Iterations each block runs.
    pub per_block: usize,
}

impl BlockSchedule {
    /// The schedule of `iterations` over `blocks`; an error names the fix when they do not divide.
    pub fn new(iterations: usize, blocks: usize) -> Result<Self> {
        if blocks == 0 || !iterations.is_multiple_of(blocks) {
            return Err(crate::config_error(format!(
                "{iterations} iterations cannot be split over {blocks} layers; use a multiple of {blocks} (each layer runs iterations / layers times)"
            )));
        }
        Ok(BlockSchedule { blocks, per_block: iterations / blocks })
    }

    /// The block running global iteration `t` (1-based; 0 maps to block 0) and the
    /// iteration's index within that block's loop (1-based).
    pub fn locate(&self, t: usize) -> (usize, usize) {
        let i = t.max(1) - 1;
        ((i / self.per_block).min(self.blocks - 1), i % self.per_block + 1)
    }
}

/// The `k` distinct blocks of a recurrent layer, block `b` running iterations
/// `b * I/k + 1 ..= (b + 1) * I/k` of a pass of `I` iterations ([`BlockSchedule`]).
pub struct BlockStack<B> {
    blocks: Vec<B>,
}

impl<B> BlockStack<B> {
    /// Builds `count` blocks, block `b` from `vb.pp("block{b}")`.
    pub fn new(
        count: usize,
        vb: &candle_nn::VarBuilder,
        mut build: impl FnMut(candle_nn::VarBuilder) -> Result<B>,
    ) -> Result<Self> {
        let blocks = (0..count).map(|b| build(vb.pp(format!("block{b}")))).collect::<Result<Vec<_>>>()?;
        Ok(BlockStack { blocks })
    }

    /// The blocks, in order.
    pub fn blocks(&self) -> &[B] {
        &self.blocks
    }

    /// The block that produced the state after global iteration `t` of a pass of
    /// `iterations` iterations (block 0 for `t = 0`).
    pub fn at(&self, t: usize, iterations: usize) -> Result<&B> {
        Ok(self.locate(t, iterations)?.0)
    }

    /// As [`at`](Self::at), with the block-local iteration (1-based; `t = 0` maps to block
    /// 0's first) for blocks whose weights or step sizes depend on it.
    pub fn locate(&self, t: usize, iterations: usize) -> Result<(&B, usize)> {
        let (b, local_t) = BlockSchedule::new(iterations, self.blocks.len())?.locate(t);
        Ok((&self.blocks[b], local_t))
    }

    /// The same stack with each block paired with what `prepare` derives from it, once per
    /// pass: weight matrices built from the parameters that every iteration of the block
    /// uses, so that they (and the gradients back through them) enter the graph once.
    pub fn prepare<'a, P>(&'a self, mut prepare: impl FnMut(&'a B) -> Result<P>) -> Result<BlockStack<(&'a B, P)>> {
        let blocks = self.blocks.iter().map(|b| Ok((b, prepare(b)?))).collect::<Result<Vec<_>>>()?;
        Ok(BlockStack { blocks })
    }

    /// The gradient identities `identities(block)` of every block, in order; with several
    /// blocks each claim's name says its layer (`layer 1: ...`).
    pub fn gradient_identities(
        &self,
        mut identities: impl FnMut(&B) -> Result<Vec<GradientIdentity>>,
    ) -> Result<Vec<GradientIdentity>> {
        let several = self.blocks.len() > 1;
        let mut all = Vec::new();
        for (b, block) in self.blocks.iter().enumerate() {
            for mut identity in identities(block)? {
                if several {
                    identity.name = format!("layer {b}: {}", identity.name);
                }
                all.push(identity);
            }
        }
        Ok(all)
    }

    /// Runs a pass: `x_t = step(block(t), x_{t-1})` for `t = 1..=pass.iterations`, reporting
    /// `x_0` and every `x_t` to the pass's observer. State carried across iterations (a
    /// momentum buffer) lives in the closure.
    pub fn run(
        &self,
        x0: &Tensor,
        pass: &mut Pass<'_>,
        mut step: impl FnMut(&B, &Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        self.run_local(x0, pass, |block, _, x| step(block, x))
    }

    /// As [`run`](Self::run), also giving `step` the block-local iteration `1..=I/k` (for
    /// per-iteration weights such as depth-wise adapters, or step sizes of the iteration).
    pub fn run_local(
        &self,
        x0: &Tensor,
        pass: &mut Pass<'_>,
        mut step: impl FnMut(&B, usize, &Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let schedule = BlockSchedule::new(pass.iterations, self.blocks.len())?;
        let mut x = x0.clone();
        pass.observe(0, &x)?;
        for t in 1..=pass.iterations {
            let (b, local_t) = schedule.locate(t);
            x = step(&self.blocks[b], local_t, &x)?;
            pass.observe(t, &x)?;
        }
        Ok(x)
    }
}

/// Checks the usual shape constraints of a multi-head recurrent layer: `heads` divides `d`
/// and `layers` divides `iterations`.
pub fn check_heads_and_layers(d: usize, heads: usize, iterations: usize, layers: usize) -> Result<()> {
    if heads == 0 || !d.is_multiple_of(heads) {
        return Err(crate::config_error(format!(
            "d = {d} is not divisible by heads = {heads}; choose heads dividing d"
        )));
    }
    BlockSchedule::new(iterations, layers).map(|_| ())
}

/// A claim that a layer's update direction is minus the gradient of an energy, checked
/// numerically by `workbench verify` with candle's autograd (in f64, on random inputs).
pub struct GradientIdentity {
    /// The claim, citing its equation (e.g. "attention step = -dE_ATTN/dZ, Eq. 7").
    pub name: String,
    /// The variable the gradient is taken with respect to: a `Var`'s tensor the layer made
    /// (a leaf of the graph of `energy`).
    pub variable: Tensor,
    /// The scalar energy, computed from `variable`.
    pub energy: Tensor,
    /// The layer's update direction for `variable` (same shape); the claim is
    /// `descent = -d energy / d variable`.
    pub descent: Tensor,
}

/// A weaker claim, for updates that are not exact gradients (normalisation inside the loop,
/// learned unsigned steps): one small fixed step does not raise the energy.
pub struct DescentCheck {
    /// The claim (which step, which energy, which step size).
    pub name: String,
    /// Energy before the step (summed over the batch).
    pub before: f64,
    /// Energy after the step.
    pub after: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};
    use candle_nn::{VarBuilder, VarMap};

    struct Record(Vec<usize>);
    impl StateObserver for Record {
        fn observe(&mut self, t: usize, _x: &Tensor) -> Result<()> {
            self.0.push(t);
            Ok(())
        }
    }

    #[test]
    fn gradient_identities_name_their_layer_when_there_are_several() {
        let map = VarMap::new();
        let vb = VarBuilder::from_varmap(&map, DType::F32, &Device::Cpu);
        let x = Tensor::zeros(1, DType::F32, &Device::Cpu).unwrap();
        let claim = |name: &str| GradientIdentity {
            name: name.into(),
            variable: x.clone(),
            energy: x.clone(),
            descent: x.clone(),
        };
        let names = |count: usize| -> Vec<String> {
            let stack = BlockStack::new(count, &vb, |_| Ok(())).unwrap();
            let all = stack.gradient_identities(|_| Ok(vec![claim("attention, Eq. 7"), claim("feedforward, Eq. 5")]));
            all.unwrap().into_iter().map(|identity| identity.name).collect()
        };
        assert_eq!(names(1), ["attention, Eq. 7", "feedforward, Eq. 5"]);
        assert_eq!(
            names(2),
            [
                "layer 0: attention, Eq. 7",
                "layer 0: feedforward, Eq. 5",
                "layer 1: attention, Eq. 7",
                "layer 1: feedforward, Eq. 5"
            ]
        );
        let stack = BlockStack::new(2, &vb, |_| Ok(())).unwrap();
        assert!(
            stack.gradient_identities(|_| Err(crate::config_error("no energy"))).is_err(),
            "a block's error is returned"
        );
    }

    #[test]
    fn block_stacks_run_each_block_for_its_share_of_the_iterations() {
        let map = VarMap::new();
        let vb = VarBuilder::from_varmap(&map, DType::F32, &Device::Cpu);
        let mut names = Vec::new();
        let stack = BlockStack::new(2, &vb, |vb| {
            names.push(vb.prefix());
            Ok(names.len() - 1)
        })
        .unwrap();
        assert_eq!(names, vec!["block0", "block1"]);
        let mut order = Vec::new();
        let mut record = Record(vec![]);
        let mut pass = Pass::new(4);
        pass.observer = Some(&mut record);
        let x0 = Tensor::zeros(1, DType::F32, &Device::Cpu).unwrap();
        let x = stack
            .run(&x0, &mut pass, |b, x| {
                order.push(*b);
                Ok((x + 1.0)?)
            })
            .unwrap();
        assert_eq!(order, vec![0, 0, 1, 1]);
        assert_eq!(record.0, vec![0, 1, 2, 3, 4]);
        assert_eq!(x.to_vec1::<f32>().unwrap(), vec![4.0]);
        assert_eq!(*stack.at(0, 4).unwrap(), 0);
        assert_eq!(*stack.at(3, 4).unwrap(), 1);
        assert_eq!(stack.locate(3, 4).map(|(b, local)| (*b, local)).unwrap(), (1, 1));
        assert_eq!(stack.locate(4, 4).map(|(b, local)| (*b, local)).unwrap(), (1, 2));
        let mut local = Vec::new();
        stack
            .run_local(&x0, &mut Pass::new(4), |_, t, x| {
                local.push(t);
                Ok(x.clone())
            })
            .unwrap();
        assert_eq!(local, vec![1, 2, 1, 2]);
        assert!(stack.at(1, 3).is_err(), "3 iterations cannot be split over 2 blocks");
        let mut pass = Pass::new(3);
        assert!(stack.run(&x0, &mut pass, |_, x| Ok(x.clone())).is_err());
        // Prepared once per block, then each iteration sees its own block's value.
        let mut prepared_for = Vec::new();
        let prepared = stack
            .prepare(|b| {
                prepared_for.push(*b);
                Ok(10 * b)
            })
            .unwrap();
        assert_eq!(prepared_for, vec![0, 1]);
        let mut seen = Vec::new();
        prepared
            .run(&x0, &mut Pass::new(4), |(b, value), x| {
                seen.push((**b, *value));
                Ok(x.clone())
            })
            .unwrap();
        assert_eq!(seen, vec![(0, 0), (0, 0), (1, 10), (1, 10)]);
    }
}
