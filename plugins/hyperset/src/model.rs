//! The recurrent Hyper-SET model: k blocks sharing one step-size network, iterated L times.

use crate::block::HyperSetBlock;
use crate::energy;
use crate::step_size::StepSizeNet;
use crate::verify;
use plugin_api::candle::Tensor;
use plugin_api::candle_nn::VarBuilder;
use plugin_api::{
    check_heads_and_layers, config_error, BlockSchedule, Config, DescentCheck, Energy, GradientIdentity, Layer, Pass,
    Result,
};

/// Validated hyperparameters of the layer.
#[derive(Debug, Clone, PartialEq)]
pub struct HyperSetConfig {
    pub d: usize,
    pub heads: usize,
    pub iterations: usize,
    pub ff_width: usize,
    pub layers: usize,
    pub time_dim: usize,
    pub condition_on_x0: bool,
    pub zero_init_all: bool,
    pub norm_gain: bool,
    pub init_std: f64,
}

impl HyperSetConfig {
    pub fn from_config(cfg: &Config) -> Result<Self> {
        let c = HyperSetConfig {
            d: cfg.usize("d")?,
            heads: cfg.usize("heads")?,
            iterations: cfg.usize("iterations")?,
            ff_width: cfg.usize("ff_ratio")? * cfg.usize("d")?,
            layers: cfg.usize("layers")?,
            time_dim: cfg.usize("time_dim")?,
            condition_on_x0: cfg.str("step_cond")? == "x0",
            zero_init_all: cfg.str("step_init")? == "all",
            norm_gain: cfg.bool("norm_gain")?,
            init_std: cfg.f64("init_std")?,
        };
        check_heads_and_layers(c.d, c.heads, c.iterations, c.layers)?;
        if !c.time_dim.is_multiple_of(2) {
            return Err(config_error(format!("time_dim = {} must be even (sin and cos halves)", c.time_dim)));
        }
        Ok(c)
    }

    pub fn head_dim(&self) -> usize {
        self.d / self.heads
    }
}

/// k Hyper-SET blocks; block `b` runs iterations `b * L/k + 1 ..= (b + 1) * L/k`, with the
/// iteration index restarting at 1 in each block (one time-MLP for all blocks, as the
/// authors' code does; notes-hyperset.md §2.4).
pub struct HyperSet {
    cfg: HyperSetConfig,
    blocks: Vec<HyperSetBlock>,
    step_sizes: StepSizeNet,
}

impl HyperSet {
    pub fn new(cfg: &HyperSetConfig, vb: VarBuilder) -> Result<Self> {
        let blocks =
            (0..cfg.layers).map(|b| HyperSetBlock::new(cfg, vb.pp(format!("block{b}")))).collect::<Result<Vec<_>>>()?;
        let step_sizes = StepSizeNet::new(cfg, vb.pp("step"))?;
        Ok(HyperSet { cfg: cfg.clone(), blocks, step_sizes })
    }

    /// The block that produced the state after global iteration `t` of a pass of
    /// `iterations` iterations (block 0 for t = 0).
    fn block_at(&self, t: usize, iterations: usize) -> Result<&HyperSetBlock> {
        let (b, _) = BlockSchedule::new(iterations, self.cfg.layers)?.locate(t);
        Ok(&self.blocks[b])
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
        let schedule = BlockSchedule::new(pass.iterations, self.cfg.layers)?;
        let mut x = x0.clone();
        pass.observe(0, &x)?;
        for t in 1..=pass.iterations {
            let (b, local_t) = schedule.locate(t);
            let cond = if self.cfg.condition_on_x0 { x0 } else { &x };
            let (alpha, gamma) = self.step_sizes.forward(local_t, cond)?;
            x = self.blocks[b].iterate(&x, &alpha, &gamma)?;
            pass.observe(t, &x)?;
        }
        Ok(x)
    }

    fn energies(&self, t: usize, iterations: usize, x: &Tensor, _x0: &Tensor) -> Result<Vec<Energy>> {
        let block = self.block_at(t, iterations)?;
        let attention = energy::attention(x, block.w(), self.cfg.heads)?;
        let feedforward = energy::feedforward(x, block.d_ff())?;
        let total = (&attention + &feedforward)?;
        Ok(vec![
            Energy { name: "attention".into(), per_sample: attention },
            Energy { name: "feedforward".into(), per_sample: feedforward },
            Energy { name: "total".into(), per_sample: total },
        ])
    }

    fn gradient_identities(&self, x: &Tensor) -> Result<Vec<GradientIdentity>> {
        let mut all = Vec::new();
        for (b, block) in self.blocks.iter().enumerate() {
            for mut identity in verify::gradient_identities(block, x)? {
                if self.blocks.len() > 1 {
                    identity.name = format!("layer {b}: {}", identity.name);
                }
                all.push(identity);
            }
        }
        Ok(all)
    }

    fn descent_checks(&self, x: &Tensor, step: f64) -> Result<Vec<DescentCheck>> {
        verify::descent_checks(&self.blocks[0], x, step)
    }

    fn head_projections(&self, t: usize, iterations: usize, x: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(energy::normalised_heads(x, self.block_at(t, iterations)?.w(), self.cfg.heads)?))
    }
}
