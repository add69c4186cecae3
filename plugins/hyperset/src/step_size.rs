//! The step sizes `alpha_t`, `gamma_t` of Eq. 9 and 11: learned by the small network of
//! Eq. 12, or fixed (option `step_sizes`).
//!
//! **Learned** (ICLR §4.3, Eq. 12, Table 6; notes-hyperset.md §1.7 and §9): per-token,
//! channel-wise `alpha_t, gamma_t in R^d` from the iteration index `t` and the tokens `X`
//! (the layer input `X0`, or the current `X_t`, option `step_cond`). Four forms (option
//! `step_net`), following the authors' code for each task of the paper:
//!
//! - `plain` (Sudoku): `e = Linear(GELU(Linear(sinusoid(t))))`, `c = e + X`,
//!   `[alpha, gamma] = Linear(GELU(c))`.
//! - `normed` (ImageNet classification): `e = N3(Linear(N2(GELU(N1(Linear(sinusoid(t)))))))`,
//!   `c = e + N_in(X)`, `[alpha, gamma] = Linear(GELU(c))`.
//! - `normed_cond` (CIFAR classification, "HyperSETBasic"): as `normed`, with one more
//!   RMSNorm on `c` before the GELU.
//! - `direct` (masked image modelling, "time MLP removed"): `c = RMSNorm(sinusoid_d(t) + X)`,
//!   `[alpha, gamma] = Linear(GELU(c))`; needs `time_dim = d`.
//!
//! `N*` are RMSNorms with learnable gains (always, whatever `norm_gain` says: the paper's
//! parameter counts include them). The output Linear is zero-initialised (ReZero), so every
//! iteration starts as the identity; no sign constraint is put on the steps.
//!
//! **Fixed** (Table 4 ablation, Table 16-17 runtime rows; notes-hyperset.md §2.2):
//! `alpha_t = gamma_t = c` (`step_c`), one scalar for both sub-steps as in the authors'
//! code; the whole network is removed (0.91M instead of 1.55M parameters at d = 384).

use crate::config::HyperSetConfig;
use kernels::{Activation, Kernels};
use plugin_api::candle::{Tensor, D};
use plugin_api::candle_nn::{Init, Linear, VarBuilder};
use plugin_api::ops::sinusoidal_embedding;
use plugin_api::{config_error, Result};

/// How the step sizes are produced (option `step_sizes`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StepSizeMode {
    /// By the step-size network of Eq. 12, in the given form.
    Learned(StepNetForm),
    /// A constant `alpha_t = gamma_t = c`.
    Fixed(f64),
}

/// The form of the learned step-size network (option `step_net`; see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepNetForm {
    /// Time MLP without normalisation, `c = e + X` (Sudoku).
    Plain,
    /// RMSNorms in the time MLP and on `X` (ImageNet classification).
    Normed,
    /// As `Normed`, plus an RMSNorm on `c` (CIFAR classification).
    NormedCond,
    /// No time MLP: `c = RMSNorm(sinusoid_d(t) + X)` (masked image modelling).
    Direct,
}

impl StepNetForm {
    /// The option values, in the order of [`StepNetForm`].
    pub const NAMES: [&'static str; 4] = ["plain", "normed", "normed_cond", "direct"];

    /// Parses an option value.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "plain" => Ok(StepNetForm::Plain),
            "normed" => Ok(StepNetForm::Normed),
            "normed_cond" => Ok(StepNetForm::NormedCond),
            "direct" => Ok(StepNetForm::Direct),
            other => {
                Err(config_error(format!("step_net = {other} is unknown; choose one of {}", Self::NAMES.join(" | "))))
            }
        }
    }
}

/// One sub-step's step size: channel-wise per token (learned) or one constant (fixed).
pub enum StepSize {
    /// `[B, N, d]`, multiplied element-wise with the update.
    Channelwise(Tensor),
    /// A scalar.
    Constant(f64),
}

impl StepSize {
    /// `step * update`.
    pub fn scale(&self, update: Tensor) -> Result<Tensor> {
        Ok(match self {
            StepSize::Channelwise(s) => (s * update)?,
            StepSize::Constant(c) => (update * *c)?,
        })
    }

    /// `x - step * update` (`descend`) or `x + step * update`; with fused kernels a
    /// channel-wise step is one op.
    pub fn apply(&self, x: &Tensor, update: Tensor, descend: bool, kernels: Kernels) -> Result<Tensor> {
        let sign = if descend { -1.0 } else { 1.0 };
        Ok(match self {
            StepSize::Channelwise(s) => kernels.add_scaled(x, s, &update, sign)?,
            StepSize::Constant(_) if descend => (x - self.scale(update)?)?,
            StepSize::Constant(_) => (x + self.scale(update)?)?,
        })
    }
}

/// The step sizes of every iteration: a network or a constant.
pub enum StepSizes {
    /// The network of Eq. 12.
    Learned(StepSizeNet),
    /// `alpha_t = gamma_t = c`.
    Fixed(f64),
}

impl StepSizes {
    /// Builds the network (parameters under `vb`) or the constant of `cfg.step_sizes`.
    pub fn new(cfg: &HyperSetConfig, vb: VarBuilder) -> Result<Self> {
        Ok(match cfg.step_sizes {
            StepSizeMode::Learned(form) => StepSizes::Learned(StepSizeNet::new(cfg, form, vb)?),
            StepSizeMode::Fixed(c) => StepSizes::Fixed(c),
        })
    }

    /// `(alpha_t, gamma_t)` for the block-local iteration `t` (1-based), given the
    /// conditioning tokens `cond` (`X0` or `X_t`, `[B, N, d]`).
    pub fn at(&self, t: usize, cond: &Tensor) -> Result<(StepSize, StepSize)> {
        Ok(match self {
            StepSizes::Learned(net) => {
                let (alpha, gamma) = net.forward(t, cond)?;
                (StepSize::Channelwise(alpha), StepSize::Channelwise(gamma))
            }
            StepSizes::Fixed(c) => (StepSize::Constant(*c), StepSize::Constant(*c)),
        })
    }
}

/// The time MLP `sinusoid(t) -> d`, with the RMSNorm gains of the `normed` forms.
struct TimeMlp {
    time_in: Linear,
    time_out: Linear,
    /// Gains of the RMSNorms after `time_in`, after the GELU, and after `time_out`.
    norms: Option<[Tensor; 3]>,
}

impl TimeMlp {
    fn forward(&self, sinusoid: &Tensor, kernels: Kernels, eps: f64) -> Result<Tensor> {
        let rms_norm = |x: &Tensor, gain: &Tensor| kernels.rms_norm(x, Some(gain), eps);
        // The weights' gradients come back in their own layout: through candle's `Linear`
        // (a product with the transposed view) every iteration's gradient would reach the
        // weight through a transpose and be added to the others entry by entry.
        let linear = |layer: &Linear, x: &Tensor| kernels.linear_transposed(x, layer.weight(), layer.bias());
        Ok(match &self.norms {
            None => linear(&self.time_out, &kernels.gelu_erf(&linear(&self.time_in, sinusoid)?)?)?,
            Some([first, mid, last]) => {
                let h = kernels.gelu_erf(&rms_norm(&linear(&self.time_in, sinusoid)?, first)?)?;
                let h = linear(&self.time_out, &rms_norm(&h, mid)?)?;
                rms_norm(&h, last)?
            }
        })
    }
}

/// The step-size network of Eq. 12 in one of the forms of [`StepNetForm`].
pub struct StepSizeNet {
    time_mlp: Option<TimeMlp>,
    input_norm: Option<Tensor>,
    cond_norm: Option<Tensor>,
    step_out: Linear,
    time_dim: usize,
    kernels: Kernels,
    norm_eps: f64,
}

impl StepSizeNet {
    /// The output Linear is zero-initialised (ReZero: every iteration starts as the identity).
    /// With `zero_init_all` the two time Linears are zero too, as in the authors' code; their
    /// weights then never receive a gradient, which the plugin's tests demonstrate.
    pub fn new(cfg: &HyperSetConfig, form: StepNetForm, vb: VarBuilder) -> Result<Self> {
        let hidden = if cfg.zero_init_all { Init::Const(0.0) } else { Init::Randn { mean: 0.0, stdev: cfg.init_std } };
        let gain = |name: &str| vb.get_with_hints(cfg.d, name, Init::Const(1.0));
        let time_mlp = match form {
            StepNetForm::Direct => None,
            StepNetForm::Plain | StepNetForm::Normed | StepNetForm::NormedCond => Some(TimeMlp {
                time_in: linear_init(cfg.time_dim, cfg.d, hidden, vb.pp("time_in"))?,
                time_out: linear_init(cfg.d, cfg.d, hidden, vb.pp("time_out"))?,
                norms: match form {
                    StepNetForm::Plain => None,
                    _ => Some([gain("time_norm_in")?, gain("time_norm_mid")?, gain("time_norm_out")?]),
                },
            }),
        };
        let input_norm = match form {
            StepNetForm::Normed | StepNetForm::NormedCond => Some(gain("input_norm")?),
            StepNetForm::Plain | StepNetForm::Direct => None,
        };
        let cond_norm = match form {
            StepNetForm::NormedCond | StepNetForm::Direct => Some(gain("cond_norm")?),
            StepNetForm::Plain | StepNetForm::Normed => None,
        };
        Ok(StepSizeNet {
            time_mlp,
            input_norm,
            cond_norm,
            step_out: linear_init(cfg.d, 2 * cfg.d, Init::Const(0.0), vb.pp("out"))?,
            time_dim: cfg.time_dim,
            kernels: cfg.kernels,
            norm_eps: cfg.norm_eps,
        })
    }

    /// `(alpha_t, gamma_t)`, each `[B, N, d]`, for iteration `t` (1-based) given `cond`
    /// (`X0` or `X_t`, `[B, N, d]`).
    pub fn forward(&self, t: usize, cond: &Tensor) -> Result<(Tensor, Tensor)> {
        let sinusoid = sinusoidal_embedding(t as f64, self.time_dim, cond.dtype(), cond.device())?;
        let kernels = self.kernels;
        let e = match &self.time_mlp {
            Some(mlp) => mlp.forward(&sinusoid.unsqueeze(0)?, kernels, self.norm_eps)?.squeeze(0)?,
            None => sinusoid,
        };
        let x = match &self.input_norm {
            Some(g) => kernels.rms_norm(cond, Some(g), self.norm_eps)?,
            None => cond.clone(),
        };
        let h = match &self.cond_norm {
            Some(g) => kernels.gelu_erf(&kernels.rms_norm(&kernels.add_row(&x, &e)?, Some(g), self.norm_eps)?)?,
            // The shift by the iteration's embedding and the GELU as one op.
            None => kernels.shifted_activation(&x, &e, Activation::Gelu)?,
        };
        let d = cond.dim(D::Minus1)?;
        let (weight, bias) = (self.step_out.weight(), self.step_out.bias());
        match (kernels, bias) {
            // Two products on the halves of the weight: `alpha` and `gamma` come out
            // contiguous (no narrowed views of the activations, whose backward pads with zeros),
            // each half's gradient in the weight's own layout.
            (Kernels::Fused, Some(bias)) => {
                let half = |start: usize| -> Result<Tensor> {
                    let w = weight.narrow(0, start, d)?;
                    Ok(kernels::linear_transposed(&h, &w, Some(&bias.narrow(0, start, d)?))?)
                };
                Ok((half(0)?, half(d)?))
            }
            _ => {
                let s = kernels.linear_transposed(&h, weight, bias)?;
                Ok((s.narrow(D::Minus1, 0, d)?, s.narrow(D::Minus1, d, d)?))
            }
        }
    }
}

/// A Linear layer with bias whose weight uses `init` and whose bias starts at zero.
fn linear_init(input: usize, output: usize, init: Init, vb: VarBuilder) -> Result<Linear> {
    let weight = vb.get_with_hints((output, input), "weight", init)?;
    let bias = vb.get_with_hints(output, "bias", Init::Const(0.0))?;
    Ok(Linear::new(weight, Some(bias)))
}
