//! The recurrent layer: k distinct blocks, block `b` applied for iterations
//! `b L/k + 1 ..= (b + 1) L/k`, with one momentum buffer carried through every sub-layer.

use crate::block::Block;
use crate::config::IntrinsicConfig;
use crate::verify;
use plugin_api::candle::Tensor;
use plugin_api::candle_nn::VarBuilder;
use plugin_api::{BlockStack, DescentCheck, Energy, GradientIdentity, Layer, Pass, Result};

/// The intrinsic-optimizer layer family (seed 001).
pub struct Intrinsic {
    cfg: IntrinsicConfig,
    blocks: BlockStack<Block>,
}

impl Intrinsic {
    /// Builds `cfg.layers` blocks under `vb.block{b}`.
    pub fn new(cfg: &IntrinsicConfig, vb: VarBuilder) -> Result<Self> {
        let blocks = BlockStack::new(cfg.layers, &vb, |vb| Block::new(cfg, vb))?;
        Ok(Intrinsic { cfg: cfg.clone(), blocks })
    }

    /// The distinct blocks, in order.
    #[cfg(test)]
    pub(crate) fn blocks(&self) -> &[Block] {
        self.blocks.blocks()
    }
}

impl Layer for Intrinsic {
    fn width(&self) -> usize {
        self.cfg.d
    }

    fn train_iterations(&self) -> usize {
        self.cfg.iterations
    }

    fn supports_causal(&self) -> bool {
        true
    }

    fn forward(&self, x0: &Tensor, pass: &mut Pass<'_>) -> Result<Tensor> {
        let (causal, train) = (pass.causal, pass.train);
        let mut momentum: Option<Tensor> = None; // m = -p, p^(0) = 0 (Eq. 8-9)
        self.blocks.run(x0, pass, |block, z| {
            let (z, m) = block.iterate(z, momentum.as_ref(), causal, train)?;
            momentum = m;
            Ok(z)
        })
    }

    /// The global energy `F` of the block that produced `x` (the free energy for the softmax
    /// kinds, the Euclidean one for newton, the squared-score sums for the linear kinds), on
    /// the block's normalised input and over the full context.
    fn energies(&self, t: usize, iterations: usize, x: &Tensor, _x0: &Tensor) -> Result<Vec<Energy>> {
        let per_sample = self.blocks.at(t, iterations)?.attention_energy(x)?;
        Ok(vec![Energy { name: "attention".into(), per_sample }])
    }

    fn head_projections(&self, t: usize, iterations: usize, x: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(self.blocks.at(t, iterations)?.normalised_queries(x)?))
    }

    fn gradient_identities(&self, x: &Tensor) -> Result<Vec<GradientIdentity>> {
        self.blocks.gradient_identities(|block| verify::gradient_identities(block, x))
    }

    fn descent_checks(&self, x: &Tensor, step: f64) -> Result<Vec<DescentCheck>> {
        verify::descent_checks(&self.blocks.blocks()[0], x, step)
    }
}
