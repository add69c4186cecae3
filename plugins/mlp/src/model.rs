//! k MLP blocks, block `b` applied for iterations `b * L/k + 1 ..= (b + 1) * L/k` (a
//! `plugin_api::BlockStack`).

use crate::block::MlpBlock;
use plugin_api::candle::Tensor;
use plugin_api::candle_nn::VarBuilder;
use plugin_api::{config_error, BlockSchedule, BlockStack, Config, Layer, Pass, Result};

#[derive(Debug, Clone, PartialEq)]
pub struct MlpConfig {
    pub d: usize,
    pub gated: bool,
    pub hidden: usize,
    pub iterations: usize,
    pub layers: usize,
    pub init_std: f64,
}

impl MlpConfig {
    pub fn from_config(cfg: &Config) -> Result<Self> {
        let gated = match cfg.str("kind")? {
            "gated" => true,
            "plain" => false,
            other => return Err(config_error(format!("kind `{other}` is unknown; use gated or plain"))),
        };
        let c = MlpConfig {
            d: cfg.usize("d")?,
            gated,
            hidden: cfg.usize("hidden")?,
            iterations: cfg.usize("iterations")?,
            layers: cfg.usize("layers")?,
            init_std: cfg.f64("init_std")?,
        };
        BlockSchedule::new(c.iterations, c.layers)?;
        Ok(c)
    }
}

pub struct Mlp {
    cfg: MlpConfig,
    blocks: BlockStack<MlpBlock>,
}

impl Mlp {
    pub fn new(cfg: &MlpConfig, vb: VarBuilder) -> Result<Self> {
        let blocks = BlockStack::new(cfg.layers, &vb, |vb| MlpBlock::new(cfg, vb))?;
        Ok(Mlp { cfg: cfg.clone(), blocks })
    }
}

impl Layer for Mlp {
    fn width(&self) -> usize {
        self.cfg.d
    }

    fn train_iterations(&self) -> usize {
        self.cfg.iterations
    }

    /// Tokens never mix, so every pass is causal.
    fn supports_causal(&self) -> bool {
        true
    }

    fn forward(&self, x0: &Tensor, pass: &mut Pass<'_>) -> Result<Tensor> {
        self.blocks.run(x0, pass, |block, x| block.forward(x))
    }
}
