//! k Energy Transformer blocks, block `b` applied for iterations `b * L/k + 1 ..= (b + 1) * L/k`.

use crate::block::EtBlock;
use crate::verify;
use plugin_api::candle::Tensor;
use plugin_api::candle_nn::VarBuilder;
use plugin_api::{
    config_error, BlockSchedule, BlockStack, Config, DescentCheck, Energy, GradientIdentity, Layer, Pass, PluginError,
    Result,
};

/// Validated hyperparameters of the layer.
#[derive(Debug, Clone, PartialEq)]
pub struct EtConfig {
    /// Token width `d`.
    pub d: usize,
    /// Attention heads `H`.
    pub heads: usize,
    /// Query/key width per head `p` (resolved: `d / H` when the option is 0).
    pub head_dim: usize,
    /// Hopfield memories `M = floor(hopfield_ratio * d)`.
    pub memories: usize,
    /// Inverse temperature `beta` (resolved: `1 / sqrt(p)` when the option is 0).
    pub beta: f64,
    /// Step size `alpha` of `x <- x - alpha dE/dg`.
    pub alpha: f64,
    /// Recurrent depth `L` used in training.
    pub iterations: usize,
    /// Distinct blocks `k`.
    pub layers: usize,
    /// Whether the attention energy's inner sum includes `B = C`.
    pub attend_self: bool,
    /// Standard deviation of the normal init of `Wq` and `Wk`.
    pub init_std: f64,
}

impl EtConfig {
    /// Reads and checks a configuration; errors name the problem and the fix.
    pub fn from_config(cfg: &Config) -> Result<Self> {
        let d = cfg.usize("d")?;
        let heads = cfg.usize("heads")?;
        let head_dim = match cfg.usize("head_dim")? {
            0 if heads == 0 || !d.is_multiple_of(heads) => {
                return Err(config_error(format!(
                    "head_dim = 0 means d / heads, but d = {d} is not divisible by heads = {heads}; choose heads dividing d or set head_dim"
                )))
            }
            0 => d / heads,
            p => p,
        };
        let ratio = cfg.f64("hopfield_ratio")?;
        let memories = (ratio * d as f64).floor() as usize;
        if memories == 0 {
            return Err(config_error(format!(
                "hopfield_ratio = {ratio} gives floor({ratio} * {d}) = 0 memories; raise hopfield_ratio to at least {}",
                1.0 / d as f64
            )));
        }
        let beta_option = cfg.f64("beta")?;
        let beta = if beta_option == 0.0 { 1.0 / (head_dim as f64).sqrt() } else { beta_option };
        let c = EtConfig {
            d,
            heads,
            head_dim,
            memories,
            beta,
            alpha: cfg.f64("alpha")?,
            iterations: cfg.usize("iterations")?,
            layers: cfg.usize("layers")?,
            attend_self: cfg.bool("attend_self")?,
            init_std: cfg.f64("init_std")?,
        };
        BlockSchedule::new(c.iterations, c.layers)?;
        Ok(c)
    }

    /// Parameters of one block: `gamma (1) + delta (d) + Wq, Wk (2 H p d) + Xi (M d)`; with
    /// `H p = d` and `M = 4d` that is `6d^2 + d + 1`.
    #[cfg(test)]
    pub fn parameters_per_layer(&self) -> usize {
        1 + self.d + 2 * self.heads * self.head_dim * self.d + self.memories * self.d
    }
}

/// The Energy Transformer layer plugin's model.
pub struct EnergyTransformer {
    cfg: EtConfig,
    blocks: BlockStack<EtBlock>,
}

impl EnergyTransformer {
    /// Creates the blocks' parameters under `vb` (`block0`, `block1`, ...).
    pub fn new(cfg: &EtConfig, vb: VarBuilder) -> Result<Self> {
        let blocks = BlockStack::new(cfg.layers, &vb, |vb| EtBlock::new(cfg, vb))?;
        Ok(EnergyTransformer { cfg: cfg.clone(), blocks })
    }
}

impl Layer for EnergyTransformer {
    fn width(&self) -> usize {
        self.cfg.d
    }

    fn train_iterations(&self) -> usize {
        self.cfg.iterations
    }

    /// No: the gradient of the attention energy moves each key with the queries that read it,
    /// including later ones (`P^T Q`), so token `B` would see tokens after it.
    fn supports_causal(&self) -> bool {
        false
    }

    fn forward(&self, x0: &Tensor, pass: &mut Pass<'_>) -> Result<Tensor> {
        if pass.causal {
            return Err(PluginError::Other(
                "the Energy Transformer has no causal form (its key gradient P^T Q carries later tokens back); use a non-causal task".into(),
            ));
        }
        // [W^Q; W^K] of each block, stacked once for all of its iterations.
        let blocks = self.blocks.prepare(EtBlock::query_key_weights)?;
        blocks.run(x0, pass, |(block, query_key), x| block.iterate(query_key, x))
    }

    /// `attention` (E_ATT), `hopfield` (E_HN) and `total` at `g = LN(x)` with the block that
    /// produced `x`.
    fn energies(&self, t: usize, iterations: usize, x: &Tensor, _x0: &Tensor) -> Result<Vec<Energy>> {
        let block = self.blocks.at(t, iterations)?;
        let g = block.norm().forward(x)?;
        let attention = block.attention_energy(&g)?;
        let hopfield = block.hopfield_energy(&g)?;
        let total = (&attention + &hopfield)?;
        Ok(vec![
            Energy { name: "attention".into(), per_sample: attention },
            Energy { name: "hopfield".into(), per_sample: hopfield },
            Energy { name: "total".into(), per_sample: total },
        ])
    }

    fn head_projections(&self, t: usize, iterations: usize, x: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(self.blocks.at(t, iterations)?.normalised_queries(x)?))
    }

    fn gradient_identities(&self, x: &Tensor) -> Result<Vec<GradientIdentity>> {
        self.blocks.gradient_identities(|block| verify::gradient_identities(block, x))
    }

    fn descent_checks(&self, x: &Tensor, step: f64) -> Result<Vec<DescentCheck>> {
        Ok(vec![verify::descent_check(&self.blocks.blocks()[0], x, step)?])
    }
}
