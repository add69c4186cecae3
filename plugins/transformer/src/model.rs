//! k Transformer blocks, block `b` applied for iterations `b * L/k + 1 ..= (b + 1) * L/k`
//! (a `plugin_api::BlockStack`).

use crate::block::TransformerBlock;
use kernels::Kernels;
use plugin_api::candle::Tensor;
use plugin_api::candle_nn::VarBuilder;
use plugin_api::{check_heads_and_layers, config_error, BlockStack, Config, Layer, Pass, Result};

#[derive(Debug, Clone, PartialEq)]
pub struct TransformerConfig {
    pub d: usize,
    pub heads: usize,
    pub iterations: usize,
    pub mlp_width: usize,
    pub layers: usize,
    pub shared_qkv: bool,
    /// Whether the attention output is subtracted (`attention_sign=reversed`) instead of added.
    pub reversed_attention: bool,
    pub init_std: f64,
    /// Fused kernels or candle's composition (option `kernels`).
    pub kernels: Kernels,
    /// Epsilon of the RMSNorms (option `norm_eps`).
    pub norm_eps: f64,
}

impl TransformerConfig {
    pub fn from_config(cfg: &Config) -> Result<Self> {
        let c = TransformerConfig {
            d: cfg.usize("d")?,
            heads: cfg.usize("heads")?,
            iterations: cfg.usize("iterations")?,
            mlp_width: cfg.usize("ff_ratio")? * cfg.usize("d")?,
            layers: cfg.usize("layers")?,
            shared_qkv: cfg.bool("shared_qkv")?,
            reversed_attention: reversed_attention(cfg)?,
            init_std: cfg.f64("init_std")?,
            kernels: kernels_option(cfg)?,
            norm_eps: cfg.f64("norm_eps")?,
        };
        check_heads_and_layers(c.d, c.heads, c.iterations, c.layers)?;
        Ok(c)
    }
}

/// Reads `kernels`.
fn kernels_option(cfg: &Config) -> Result<Kernels> {
    let name = cfg.str("kernels")?;
    Kernels::parse(name).ok_or_else(|| {
        config_error(format!("kernels = {name} is unknown; choose one of {}", Kernels::NAMES.join(" | ")))
    })
}

/// Reads `attention_sign` (`standard` is its default, so configurations stored before the
/// option existed keep the standard sign).
fn reversed_attention(cfg: &Config) -> Result<bool> {
    match cfg.str("attention_sign")? {
        "standard" => Ok(false),
        "reversed" => Ok(true),
        other => Err(config_error(format!("attention_sign `{other}` is unknown; use standard or reversed"))),
    }
}

pub struct Transformer {
    cfg: TransformerConfig,
    blocks: BlockStack<TransformerBlock>,
}

impl Transformer {
    pub fn new(cfg: &TransformerConfig, vb: VarBuilder) -> Result<Self> {
        let blocks = BlockStack::new(cfg.layers, &vb, |vb| TransformerBlock::new(cfg, vb))?;
        Ok(Transformer { cfg: cfg.clone(), blocks })
    }
}

impl Layer for Transformer {
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
        self.blocks.run(x0, pass, |block, x| block.forward(x, causal))
    }

    fn head_projections(&self, t: usize, iterations: usize, x: &Tensor) -> Result<Option<Tensor>> {
        let block = self.blocks.at(t, iterations)?;
        Ok(Some(block.normalised_queries(x)?))
    }
}
