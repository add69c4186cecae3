//! The layer's validated hyperparameters, read from the plugin's options (`crate::params`):
//! every refusal of a combination that makes no sense happens here, before a block is built.

use crate::attention::AttentionKind;
use crate::feedforward::FeedforwardKind;
use crate::optimizer::{Optimizer, KEYS as OPTIMIZER_KEYS};
use crate::step_size::{StepNetForm, StepSizeMode};
use kernels::Kernels;
use plugin_api::{check_heads_and_layers, config_error, Config, Result};

/// The epsilon of the RMSNorms inside the energies (diagnostics and `verify`), and the
/// default of option `norm_eps`, the epsilon of the layer's own RMSNorms.
pub(crate) const RMS_EPS: f64 = 1e-6;

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
    /// Epsilon of the layer's RMSNorms (option `norm_eps`; PyTorch's `nn.RMSNorm` default is
    /// the float32 machine epsilon, which imported checkpoints were trained with).
    pub norm_eps: f64,
    /// The optimiser of every sub-step (option `optimizer`, with `beta`, `beta2`, `eps`).
    pub optimizer: Optimizer,
    /// Each block learns its momentum coefficient, starting at `beta` (option `learn_beta`).
    pub learn_beta: bool,
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
            norm_eps: cfg.f64("norm_eps")?,
            optimizer: Optimizer::parse(cfg.str("optimizer")?, cfg.f64("beta")?, cfg.f64("beta2")?, cfg.f64("eps")?)?,
            learn_beta: cfg.bool("learn_beta")?,
        };
        if c.learn_beta && !c.optimizer.has_momentum() {
            return Err(config_error(format!(
                "learn_beta = true has no momentum coefficient to learn with optimizer = {}; use optimizer=momentum or \
                 optimizer=nesterov, or learn_beta=false",
                c.optimizer.name()
            )));
        }
        if c.learn_beta && cfg.f64("beta")? <= 0.0 {
            return Err(config_error(
                "learn_beta = true starts the learned coefficient at beta, which must lie in (0, 1) (a sigmoid keeps it \
                 there and cannot start at 0); use e.g. beta=0.9",
            ));
        }
        for (key, users) in OPTIMIZER_KEYS {
            if !c.optimizer.reads(key) {
                let context = format!("optimizer = {}", c.optimizer.name());
                refuse_unless_default(cfg, key, &context, &format!("optimizer={}", users.join(" | ")))?;
            }
        }
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
