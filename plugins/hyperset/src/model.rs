//! The recurrent Hyper-SET model: k blocks sharing one step-size network, iterated L times.

use crate::attention::AttentionKind;
use crate::block::{HyperSetBlock, IterationWeights};
use crate::energy;
use crate::feedforward::FeedforwardKind;
use crate::step_size::{StepNetForm, StepSizeMode, StepSizes};
use crate::verify;
use kernels::Kernels;
use plugin_api::candle::Tensor;
use plugin_api::candle_nn::VarBuilder;
use plugin_api::{
    check_heads_and_layers, config_error, BlockSchedule, Config, DescentCheck, Energy, GradientIdentity, Layer, Pass,
    Result,
};

/// Validated hyperparameters of the layer.
#[derive(Debug, Clone, PartialEq)]
pub struct HyperSetConfig {
    /// Token width `d`.
    pub d: usize,
    /// Attention heads `H` (`p = d / H`).
    pub heads: usize,
    /// Recurrent depth `L` used in training.
    pub iterations: usize,
    /// Feedforward width `M`.
    pub ff_width: usize,
    /// Distinct blocks `k`, each iterated `L / k` times.
    pub layers: usize,
    /// Size of the sinusoidal iteration embedding.
    pub time_dim: usize,
    /// Step sizes conditioned on `X0` (true) or on `X_t` (false).
    pub condition_on_x0: bool,
    /// Every Linear of the step network zero-initialised (not only the last).
    pub zero_init_all: bool,
    /// Learnable gains on the per-head and feedforward RMSNorms.
    pub norm_gain: bool,
    /// Standard deviation of the initialisation of `W`, `D` and the time MLP.
    pub init_std: f64,
    /// The attention energy (option `attention`).
    pub attention: AttentionKind,
    /// The feedforward energy (option `feedforward`).
    pub feedforward: FeedforwardKind,
    /// Learned (with the network's form) or fixed step sizes.
    pub step_sizes: StepSizeMode,
    /// Rank of the depth-wise LoRA adapters; 0 for none.
    pub lora_rank: usize,
    /// Scaling factor `s` of the LoRA deltas `s A B`.
    pub lora_scale: f64,
    /// Separate RMSNorm gains for queries, keys and values.
    pub qkv_gains: bool,
    /// Fused kernels or candle's composition (option `kernels`).
    pub kernels: Kernels,
}

impl HyperSetConfig {
    /// Reads and checks the plugin's options; every refusal names the problem and the fix.
    /// `cfg` has every key of the schema (the contract fills in those a stored configuration
    /// lacks: `Declaration::complete`).
    pub fn from_config(cfg: &Config) -> Result<Self> {
        let step_sizes = match cfg.str("step_sizes")? {
            "learned" => StepSizeMode::Learned(StepNetForm::parse(cfg.str("step_net")?)?),
            "fixed" => StepSizeMode::Fixed(cfg.f64("step_c")?),
            other => return Err(config_error(format!("step_sizes = {other} is unknown; choose learned | fixed"))),
        };
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
            attention: AttentionKind::parse(cfg.str("attention")?)?,
            feedforward: FeedforwardKind::parse(cfg.str("feedforward")?)?,
            step_sizes,
            lora_rank: cfg.usize("lora_rank")?,
            lora_scale: cfg.f64("lora_scale")?,
            qkv_gains: cfg.bool("qkv_gains")?,
            kernels: Kernels::parse(cfg.str("kernels")?).ok_or_else(|| {
                config_error(format!(
                    "kernels = {} is unknown; choose one of {}",
                    cfg.str("kernels").unwrap_or_default(),
                    Kernels::NAMES.join(" | ")
                ))
            })?,
        };
        check_heads_and_layers(c.d, c.heads, c.iterations, c.layers)?;
        if !c.time_dim.is_multiple_of(2) {
            return Err(config_error(format!("time_dim = {} must be even (sin and cos halves)", c.time_dim)));
        }
        match c.step_sizes {
            StepSizeMode::Learned(StepNetForm::Direct) if c.time_dim != c.d => {
                return Err(config_error(format!(
                    "step_net = direct adds the iteration embedding to the tokens, so time_dim = {} must equal d = {}; \
                     set time_dim={}",
                    c.time_dim, c.d, c.d
                )));
            }
            StepSizeMode::Learned(_) => {
                refuse_unless_default(cfg, "step_c", "step_sizes = learned", "step_sizes=fixed")?
            }
            StepSizeMode::Fixed(_) => {
                for key in ["step_net", "step_cond", "step_init"] {
                    refuse_unless_default(
                        cfg,
                        key,
                        "step_sizes = fixed (there is no step network)",
                        "step_sizes=learned",
                    )?;
                }
            }
        }
        if c.lora_rank == 0 {
            refuse_unless_default(cfg, "lora_scale", "lora_rank = 0 (no adapters)", "lora_rank=4")?;
        } else if c.lora_rank > c.d {
            return Err(config_error(format!(
                "lora_rank = {} exceeds d = {}: a delta A B of rank above d adds parameters but no rank; use lora_rank <= {}",
                c.lora_rank, c.d, c.d
            )));
        }
        if c.qkv_gains && !c.norm_gain {
            return Err(config_error(
                "qkv_gains = true asks for separate learnable Q/K/V RMSNorm gains but norm_gain = false removes all \
                 gains; set norm_gain=true or qkv_gains=false",
            ));
        }
        Ok(c)
    }

    /// Head width `p = d / H`.
    pub fn head_dim(&self) -> usize {
        self.d / self.heads
    }
}

/// Refuses a non-default `key` when `context` makes it meaningless, naming the fix.
fn refuse_unless_default(cfg: &Config, key: &str, context: &str, fix: &str) -> Result<()> {
    let default = crate::params().into_iter().find(|p| p.name == key).map(|p| p.default);
    match (cfg.0.get(key), default) {
        (Some(value), Some(default)) if *value != default => {
            Err(config_error(format!("{key} = {value} has no effect with {context}; remove it or set {fix}")))
        }
        _ => Ok(()),
    }
}

/// k Hyper-SET blocks; block `b` runs iterations `b * L/k + 1 ..= (b + 1) * L/k`, with the
/// iteration index restarting at 1 in each block (one time-MLP for all blocks, as the
/// authors' code does; notes-hyperset.md §2.4). Depth-wise LoRA adapters (if any) belong to
/// the block-local iterations.
pub struct HyperSet {
    cfg: HyperSetConfig,
    blocks: Vec<HyperSetBlock>,
    step_sizes: StepSizes,
}

impl HyperSet {
    /// Creates the blocks (`block{b}.*`) and the step sizes (`step.*`) under `vb`.
    pub fn new(cfg: &HyperSetConfig, vb: VarBuilder) -> Result<Self> {
        let per_block = cfg.iterations / cfg.layers;
        let blocks = (0..cfg.layers)
            .map(|b| HyperSetBlock::new(cfg, per_block, vb.pp(format!("block{b}"))))
            .collect::<Result<Vec<_>>>()?;
        let step_sizes = StepSizes::new(cfg, vb.pp("step"))?;
        Ok(HyperSet { cfg: cfg.clone(), blocks, step_sizes })
    }

    /// Block `b` (for tests that recompute an iteration by hand).
    #[cfg(test)]
    pub(crate) fn block(&self, b: usize) -> &HyperSetBlock {
        &self.blocks[b]
    }

    /// The block that produced the state after global iteration `t` of a pass of
    /// `iterations` iterations (block 0 for t = 0), and the weights it used then.
    fn weights_at(&self, t: usize, iterations: usize) -> Result<(&HyperSetBlock, IterationWeights)> {
        let (b, local_t) = BlockSchedule::new(iterations, self.cfg.layers)?.locate(t);
        Ok((&self.blocks[b], self.blocks[b].weights(local_t)?))
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
            let (alpha, gamma) = self.step_sizes.at(local_t, cond)?;
            let block = &self.blocks[b];
            x = block.iterate(&x, &alpha, &gamma, &block.weights(local_t)?)?;
            pass.observe(t, &x)?;
        }
        Ok(x)
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
        let (_, weights) = self.weights_at(t, iterations)?;
        Ok(Some(energy::normalised_heads(x, &weights.w, self.cfg.heads)?))
    }
}
