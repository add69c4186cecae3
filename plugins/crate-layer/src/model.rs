//! k CRATE layers, layer `b` applied for iterations `b * L/k + 1 ..= (b + 1) * L/k`.

use crate::block::CrateBlock;
use crate::rate;
use crate::verify;
use plugin_api::candle::Tensor;
use plugin_api::candle_nn::VarBuilder;
use plugin_api::{
    check_heads_and_layers, config_error, BlockStack, Config, DescentCheck, Energy, GradientIdentity, Layer, Pass,
    Result,
};

/// Which CRATE the layer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Yu et al. 2023 as implemented: a learned output projection after MSSA.
    Crate,
    /// Hu et al. 2024c: the output goes back through the shared projection (no `W_o`).
    CrateT,
}

/// Validated hyperparameters of the layer.
#[derive(Debug, Clone, PartialEq)]
pub struct CrateConfig {
    /// Token width `d`.
    pub d: usize,
    /// Heads (subspaces) `K`; `p = d / K`.
    pub heads: usize,
    /// Recurrent depth `L` used in training.
    pub iterations: usize,
    /// Distinct layers `k`.
    pub layers: usize,
    /// CRATE or CRATE-T.
    pub variant: Variant,
    /// ISTA step size `eta`.
    pub eta: f64,
    /// ISTA sparsity weight `lambda`.
    pub lambda: f64,
    /// Standard deviation of the normal init of `U` and `W_o`.
    pub init_std: f64,
    /// Precision `eps` of the coding-rate diagnostics.
    pub rate_eps: f64,
}

impl CrateConfig {
    /// Reads and checks a configuration; errors name the problem and the fix.
    pub fn from_config(cfg: &Config) -> Result<Self> {
        let variant = match cfg.str("variant")? {
            "crate" => Variant::Crate,
            "crate_t" => Variant::CrateT,
            other => return Err(config_error(format!("variant `{other}` is unknown; use crate or crate_t"))),
        };
        let c = CrateConfig {
            d: cfg.usize("d")?,
            heads: cfg.usize("heads")?,
            iterations: cfg.usize("iterations")?,
            layers: cfg.usize("layers")?,
            variant,
            eta: cfg.f64("eta")?,
            lambda: cfg.f64("lambda")?,
            init_std: cfg.f64("init_std")?,
            rate_eps: cfg.f64("rate_eps")?,
        };
        check_heads_and_layers(c.d, c.heads, c.iterations, c.layers)?;
        if c.rate_eps <= 0.0 {
            return Err(config_error(format!(
                "rate_eps = {} must be positive (it divides the Gram matrix)",
                c.rate_eps
            )));
        }
        Ok(c)
    }

    /// Parameters of one layer: `LN (2d) + U (d^2) + [W_o (d^2) + b_o (d)] + LN (2d) + D (d^2)`,
    /// i.e. `3d^2 + 5d` for CRATE and `2d^2 + 4d` for CRATE-T.
    #[cfg(test)]
    pub fn parameters_per_layer(&self) -> usize {
        let d = self.d;
        match self.variant {
            Variant::Crate => 3 * d * d + 5 * d,
            Variant::CrateT => 2 * d * d + 4 * d,
        }
    }
}

/// The CRATE layer plugin's model: `layers` blocks sharing nothing, iterated per the
/// [`BlockStack`].
pub struct Crate {
    cfg: CrateConfig,
    blocks: BlockStack<CrateBlock>,
}

impl Crate {
    /// Creates the blocks' parameters under `vb` (`block0`, `block1`, ...).
    pub fn new(cfg: &CrateConfig, vb: VarBuilder) -> Result<Self> {
        let blocks = BlockStack::new(cfg.layers, &vb, |vb| CrateBlock::new(cfg, vb))?;
        Ok(Crate { cfg: cfg.clone(), blocks })
    }
}

impl Layer for Crate {
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
        let causal = pass.causal;
        self.blocks.run(x0, pass, |block, x| block.iterate(x, causal))
    }

    /// The terms of the sparse rate reduction of the state (see `rate`): `compression`
    /// `R^c(X; U)` in the subspaces of the block that produced it, `expansion` `-R(X)`,
    /// `sparsity` `lambda ||X||_1` and their sum `total`.
    fn energies(&self, t: usize, iterations: usize, x: &Tensor, _x0: &Tensor) -> Result<Vec<Energy>> {
        let block = self.blocks.at(t, iterations)?;
        let compression = rate::compression(&block.project(x)?, self.cfg.rate_eps, x)?;
        let expansion = rate::expansion(x, self.cfg.rate_eps)?.neg()?;
        let sparsity = rate::sparsity(x, block.lambda())?;
        let total = ((&compression + &expansion)? + &sparsity)?;
        Ok(vec![
            Energy { name: "compression".into(), per_sample: compression },
            Energy { name: "expansion".into(), per_sample: expansion },
            Energy { name: "sparsity".into(), per_sample: sparsity },
            Energy { name: "total".into(), per_sample: total },
        ])
    }

    fn head_projections(&self, t: usize, iterations: usize, x: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(self.blocks.at(t, iterations)?.normalised_projections(x)?))
    }

    fn gradient_identities(&self, x: &Tensor) -> Result<Vec<GradientIdentity>> {
        self.blocks.gradient_identities(|block| Ok(vec![verify::ista_identity(block, x)?]))
    }

    fn descent_checks(&self, x: &Tensor, step: f64) -> Result<Vec<DescentCheck>> {
        verify::descent_checks(&self.blocks.blocks()[0], x, step, self.cfg.rate_eps)
    }
}
