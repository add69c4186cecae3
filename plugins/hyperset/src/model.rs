//! The recurrent Hyper-SET model: k blocks sharing one step-size network, iterated L times.

use crate::block::{HyperSetBlock, IterationWeights};
use crate::config::HyperSetConfig;
use crate::energy;
use crate::optimizer::OptimizerState;
use crate::step_size::StepSizes;
use crate::verify;
use plugin_api::candle::Tensor;
use plugin_api::candle_nn::VarBuilder;
use plugin_api::{BlockStack, DescentCheck, Energy, GradientIdentity, Layer, Pass, Result};

/// k Hyper-SET blocks; block `b` runs iterations `b * L/k + 1 ..= (b + 1) * L/k`, with the
/// iteration index restarting at 1 in each block (one time-MLP for all blocks, as the
/// authors' code does; notes-hyperset.md §2.4). Depth-wise LoRA adapters (if any) belong to
/// the block-local iterations.
pub struct HyperSet {
    cfg: HyperSetConfig,
    blocks: BlockStack<HyperSetBlock>,
    step_sizes: StepSizes,
}

impl HyperSet {
    /// Creates the blocks (`block{b}.*`) and the step sizes (`step.*`) under `vb`.
    pub fn new(cfg: &HyperSetConfig, vb: VarBuilder) -> Result<Self> {
        let per_block = cfg.iterations / cfg.layers;
        let blocks = BlockStack::new(cfg.layers, &vb, |vb| HyperSetBlock::new(cfg, per_block, vb))?;
        let step_sizes = StepSizes::new(cfg, vb.pp("step"))?;
        Ok(HyperSet { cfg: cfg.clone(), blocks, step_sizes })
    }

    /// Block `b` (for tests that recompute an iteration by hand).
    #[cfg(test)]
    pub(crate) fn block(&self, b: usize) -> &HyperSetBlock {
        &self.blocks.blocks()[b]
    }

    /// The block that produced the state after global iteration `t` of a pass of
    /// `iterations` iterations (block 0 for t = 0), and the weights it used then.
    fn weights_at(&self, t: usize, iterations: usize) -> Result<(&HyperSetBlock, IterationWeights)> {
        let (block, local_t) = self.blocks.locate(t, iterations)?;
        Ok((block, block.weights(local_t)?))
    }
}

impl Layer for HyperSet {
    fn width(&self) -> usize {
        self.cfg.d
    }

    fn train_iterations(&self) -> usize {
        self.cfg.iterations
    }

    fn forward(&self, x0: &Tensor, pass: &mut Pass<'_>) -> Result<Tensor> {
        // The optimiser's state starts at zero and runs through every sub-step of the pass.
        let mut state = OptimizerState::default();
        // Each block's learned momentum coefficient (learn_beta), once for all its iterations.
        let blocks = self.blocks.prepare(HyperSetBlock::learned_beta)?;
        blocks.run_local(x0, pass, |(block, beta), local_t, x| {
            let cond = if self.cfg.condition_on_x0 { x0 } else { x };
            let (alpha, gamma) = self.step_sizes.at(local_t, cond)?;
            let weights = block.weights(local_t)?;
            block.iterate_with(x, &alpha, &gamma, &weights, &self.cfg.optimizer, beta.as_ref(), &mut state)
        })
    }

    fn energies(&self, t: usize, iterations: usize, x: &Tensor, _x0: &Tensor) -> Result<Vec<Energy>> {
        let (_, weights) = self.weights_at(t, iterations)?;
        let attention = energy::attention(x, &weights.w, self.cfg.heads, self.cfg.attention)?;
        let feedforward = energy::feedforward(x, &weights.d_ff, self.cfg.feedforward)?;
        let total = (&attention + &feedforward)?;
        Ok(vec![
            Energy { name: "attention".into(), per_sample: attention },
            Energy { name: "feedforward".into(), per_sample: feedforward },
            Energy { name: "total".into(), per_sample: total },
        ])
    }

    fn gradient_identities(&self, x: &Tensor) -> Result<Vec<GradientIdentity>> {
        self.blocks.gradient_identities(|block| verify::gradient_identities(block, x))
    }

    fn descent_checks(&self, x: &Tensor, step: f64) -> Result<Vec<DescentCheck>> {
        let mut checks = verify::descent_checks(&self.blocks.blocks()[0], x, step)?;
        checks.extend(verify::optimizer_descent_checks(&self.blocks.blocks()[0], &self.cfg.optimizer, x, step)?);
        Ok(checks)
    }

    fn head_projections(&self, t: usize, iterations: usize, x: &Tensor) -> Result<Option<Tensor>> {
        let (_, weights) = self.weights_at(t, iterations)?;
        Ok(Some(energy::normalised_heads(x, &weights.w, self.cfg.heads)?))
    }
}
