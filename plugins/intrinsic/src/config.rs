//! The validated hyperparameters of the family and the choice of attention.

use plugin_api::{check_heads_and_layers, config_error, Config, ParamSpec, Result};

/// The attention (and the optimiser it stands for) of every block (seed 001, Table 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionKind {
    /// Multi-head softmax attention: one gradient step on the free energy (Eq. 5-6).
    Softmax,
    /// Unnormalised linear attention: one gradient step on `-T/2 sum_i E_i^2` (Eq. 3).
    Linear,
    /// Gated linear attention: the same with importance weights `gamma_i` (Eq. 4).
    GatedLinear,
    /// MomenMHA: softmax attention as the gradient of momentum descent (Eq. 8).
    Momentum,
    /// NagMHA: softmax attention evaluated at Nesterov's look-ahead point (Eq. 9).
    Nesterov,
    /// MHA2nd1st: a first-order Taylor approximation of a per-head Newton step (Eq. 18-24).
    Newton,
    /// LightMHA2nd1st: the Newton step on the dot-product upper bound (App. A.3.2).
    LightNewton,
}

impl AttentionKind {
    /// Every kind, in the order of the `attention` choice.
    pub const ALL: [AttentionKind; 7] = [
        AttentionKind::Softmax,
        AttentionKind::Linear,
        AttentionKind::GatedLinear,
        AttentionKind::Momentum,
        AttentionKind::Nesterov,
        AttentionKind::Newton,
        AttentionKind::LightNewton,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            AttentionKind::Softmax => "softmax",
            AttentionKind::Linear => "linear",
            AttentionKind::GatedLinear => "gated_linear",
            AttentionKind::Momentum => "momentum",
            AttentionKind::Nesterov => "nesterov",
            AttentionKind::Newton => "newton",
            AttentionKind::LightNewton => "light_newton",
        }
    }

    /// The kind named `name`.
    pub fn parse(name: &str) -> Result<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name).ok_or_else(|| {
            let names: Vec<_> = Self::ALL.iter().map(|k| k.name()).collect();
            config_error(format!("unknown attention `{name}`; choose one of {}", names.join(" | ")))
        })
    }

    /// Whether the scores are a softmax of dot products, which a key bias cannot change
    /// (`q . (k_i + b)` shifts every score of a query by the same `q . b`).
    pub fn key_bias_is_inert(self) -> bool {
        matches!(
            self,
            AttentionKind::Softmax | AttentionKind::Momentum | AttentionKind::Nesterov | AttentionKind::LightNewton
        )
    }
}

/// How MHA2nd inverts `C_h = I - (1/T) sum_i p d d^T` (option `newton`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewtonForm {
    /// MHA2nd1st: the first-order Taylor expansion `C^-1 ~ I + (1/T) sum p d d^T` (Eq. 22-24).
    Taylor,
    /// MHA2nd: `C_h^-1` itself, one `d_h x d_h` inverse per query and head (Eq. 21).
    Full,
}

/// Pre-norm of each sub-layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormKind {
    /// LayerNorm, as the GPT-2 blocks the seed trains (notes §2.4).
    Layer,
    /// RMSNorm with a gain, as the other plugins of the workbench.
    Rms,
}

/// What the learnable b-term coefficient of MHA2nd1st is (notes §3.3, UNSURE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewtonBForm {
    /// `b_h` is multiplied by a learnable `c_h = 1 / T_b`, initialised to `newton_b_init`.
    Multiplier,
    /// `b_h` is divided by a learnable temperature `T_b`, initialised to `newton_b_init`.
    Temperature,
}

/// The hyperparameter schema of the plugin.
pub fn params() -> Vec<ParamSpec> {
    vec![
        ParamSpec::int("d", 128, 2, 8192, "token width d"),
        ParamSpec::int("heads", 4, 1, 256, "attention heads H (d_h = d / H)"),
        ParamSpec::int("iterations", 6, 1, 1024, "block applications L used in training"),
        ParamSpec::int("layers", 6, 1, 1024, "k distinct blocks, each applied L / k times in a row"),
        ParamSpec::int("ff_ratio", 4, 1, 64, "GELU MLP width = ff_ratio * d"),
        ParamSpec::choice(
            "attention",
            "softmax",
            &["softmax", "linear", "gated_linear", "momentum", "nesterov", "newton", "light_newton"],
            "attention of every block: softmax (Eq. 6), linear (Eq. 3), gated_linear (Eq. 4), momentum = MomenMHA \
             (Eq. 8), nesterov = NagMHA (Eq. 9), newton = MHA2nd1st (Eq. 24), light_newton = LightMHA2nd1st (A.3.2)",
        ),
        ParamSpec::choice("norm", "layer", &["layer", "rms"], "pre-norm of each sub-layer: LayerNorm (GPT-2) or RMSNorm"),
        ParamSpec::bool("bias", true, "biases in the projections, the MLP and the LayerNorms (GPT-2)"),
        ParamSpec::float("init_std", 0.02, 0.0, 10.0, "standard deviation of the N(0, s^2) init of every weight matrix"),
        ParamSpec::float("momentum_beta", 0.9, 0.0, 1.0, "momentum/nesterov: initial learnable beta (Eq. 8-9)"),
        ParamSpec::float("momentum_eta", 1.0, 0.0, 10.0, "momentum/nesterov: initial learnable step eta (Eq. 8-9)"),
        ParamSpec::bool(
            "momentum_ffn",
            true,
            "momentum/nesterov: the MLP is a momentum step too, sharing the buffer (the seed's choice)",
        ),
        ParamSpec::float(
            "newton_temperature",
            2.0,
            1e-6,
            1e6,
            "newton: score temperature T_h initialised to sqrt(newton_temperature * d_h) (seed: sqrt(2 d_h))",
        ),
        ParamSpec::choice(
            "newton_b_form",
            "multiplier",
            &["multiplier", "temperature"],
            "newton: b_h scaled by a learnable multiplier c_h = 1/T_b, or divided by a learnable T_b (UNSURE in the seed)",
        ),
        ParamSpec::choice(
            "newton",
            "taylor",
            &["taylor", "full"],
            "newton: MHA2nd1st's first-order Taylor inverse (Eq. 22-24) or MHA2nd's exact C_h^-1 per query (Eq. 21, \
             O(N d_h^2) memory per head)",
        ),
        ParamSpec::float("newton_b_init", 0.01, 0.0, 1e6, "newton: initial c_h (multiplier) or T_b (temperature)"),
        ParamSpec::float(
            "newton_ridge",
            0.0,
            0.0,
            1e6,
            "newton: eps in (W_Q,h W_Q,h^T + eps I)^-1 (0 = the seed's exact inverse)",
        ),
        ParamSpec::float("light_tau", 0.01, -1e3, 1e3, "light_newton: initial head-wise tau_h"),
        ParamSpec::float(
            "dropout",
            0.0,
            0.0,
            1.0,
            "dropout rate on each sub-layer's branch output in training passes only, in [0, 1) (seed: 0.1, placement \
             unspecified; 0 = none)",
        ),
        ParamSpec::float(
            "attn_dropout",
            0.0,
            0.0,
            1.0,
            "dropout rate on the attention probabilities in training passes only, in [0, 1) (GPT-2's attention \
             dropout; softmax, momentum, nesterov, newton, light_newton; 0 = none)",
        ),
        ParamSpec::float(
            "gate_bias",
            3.0,
            -30.0,
            30.0,
            "gated_linear: initial bias of the forget gate alpha = sigmoid(x w + b) (3 gives alpha ~ 0.95)",
        ),
    ]
}

/// Validated hyperparameters of the layer.
#[derive(Debug, Clone, PartialEq)]
pub struct IntrinsicConfig {
    /// Token width `d`.
    pub d: usize,
    /// Heads `H`.
    pub heads: usize,
    /// Block applications in training.
    pub iterations: usize,
    /// Distinct blocks `k`.
    pub layers: usize,
    /// MLP width.
    pub mlp_width: usize,
    /// The attention of every block.
    pub attention: AttentionKind,
    /// The pre-norm.
    pub norm: NormKind,
    /// Whether projections, MLP and LayerNorms carry biases.
    pub bias: bool,
    /// Standard deviation of the weight init.
    pub init_std: f64,
    /// Initial momentum coefficient beta.
    pub momentum_beta: f64,
    /// Initial step size eta.
    pub momentum_eta: f64,
    /// Whether the MLP is a momentum step.
    pub momentum_ffn: bool,
    /// `T_h` starts at `sqrt(newton_temperature * d_h)`.
    pub newton_temperature: f64,
    /// How the b-term coefficient of MHA2nd1st acts.
    pub newton_b_form: NewtonBForm,
    /// Taylor (MHA2nd1st) or exact (MHA2nd) inverse of `C_h`.
    pub newton_form: NewtonForm,
    /// Initial b-term coefficient.
    pub newton_b_init: f64,
    /// Ridge added to `W_Q,h W_Q,h^T` before inversion.
    pub newton_ridge: f64,
    /// Initial `tau_h` of LightMHA2nd1st.
    pub light_tau: f64,
    /// Initial bias of the gated linear attention's forget gate.
    pub gate_bias: f64,
    /// Dropout rate on the branch outputs in training passes.
    pub dropout: f64,
    /// Dropout rate on the attention probabilities in training passes.
    pub attn_dropout: f64,
}

impl IntrinsicConfig {
    /// Reads and checks a configuration; errors name the problem and its fix.
    pub fn from_config(cfg: &Config) -> Result<Self> {
        let c = IntrinsicConfig {
            d: cfg.usize("d")?,
            heads: cfg.usize("heads")?,
            iterations: cfg.usize("iterations")?,
            layers: cfg.usize("layers")?,
            mlp_width: cfg.usize("ff_ratio")? * cfg.usize("d")?,
            attention: AttentionKind::parse(cfg.str("attention")?)?,
            norm: match cfg.str("norm")? {
                "layer" => NormKind::Layer,
                "rms" => NormKind::Rms,
                other => return Err(config_error(format!("unknown norm `{other}`; choose layer | rms"))),
            },
            bias: cfg.bool("bias")?,
            init_std: cfg.f64("init_std")?,
            momentum_beta: cfg.f64("momentum_beta")?,
            momentum_eta: cfg.f64("momentum_eta")?,
            momentum_ffn: cfg.bool("momentum_ffn")?,
            newton_temperature: cfg.f64("newton_temperature")?,
            newton_b_form: match cfg.str("newton_b_form")? {
                "multiplier" => NewtonBForm::Multiplier,
                "temperature" => NewtonBForm::Temperature,
                other => {
                    return Err(config_error(format!(
                        "unknown newton_b_form `{other}`; choose multiplier | temperature"
                    )))
                }
            },
            newton_form: match cfg.str("newton")? {
                "taylor" => NewtonForm::Taylor,
                "full" => NewtonForm::Full,
                other => return Err(config_error(format!("unknown newton `{other}`; choose taylor | full"))),
            },
            newton_b_init: cfg.f64("newton_b_init")?,
            newton_ridge: cfg.f64("newton_ridge")?,
            light_tau: cfg.f64("light_tau")?,
            gate_bias: cfg.f64("gate_bias")?,
            dropout: cfg.f64("dropout")?,
            attn_dropout: cfg.f64("attn_dropout")?,
        };
        for (key, rate, what) in
            [("dropout", c.dropout, "branch output"), ("attn_dropout", c.attn_dropout, "attention probability")]
        {
            if !(0.0..1.0).contains(&rate) {
                return Err(config_error(format!(
                    "{key} = {rate} must lie in [0, 1) (1 would drop every {what}); use e.g. {key}=0.1"
                )));
            }
        }
        if c.attn_dropout > 0.0 && matches!(c.attention, AttentionKind::Linear | AttentionKind::GatedLinear) {
            return Err(config_error(format!(
                "attn_dropout = {} acts on attention probabilities, which attention = {} does not form (its scores \
                 are unnormalised); set attn_dropout=0 and use dropout for the branch output",
                c.attn_dropout,
                c.attention.name()
            )));
        }
        check_heads_and_layers(c.d, c.heads, c.iterations, c.layers)?;
        if c.attention == AttentionKind::Newton {
            if c.init_std == 0.0 && c.newton_ridge == 0.0 {
                return Err(config_error(
                    "attention = newton inverts W_Q,h W_Q,h^T, which is singular with init_std = 0; \
                     set init_std > 0 or newton_ridge > 0",
                ));
            }
            if c.newton_temperature <= 0.0 {
                return Err(config_error("newton_temperature must be positive (T_h = sqrt(newton_temperature * d_h))"));
            }
            if c.newton_b_form == NewtonBForm::Temperature && c.newton_b_init <= 0.0 {
                return Err(config_error(
                    "newton_b_form = temperature divides b_h by T_b, so newton_b_init must be positive; \
                     use a positive value or newton_b_form = multiplier",
                ));
            }
        }
        Ok(c)
    }

    /// Width of one head, `d_h = d / H`.
    pub fn head_dim(&self) -> usize {
        self.d / self.heads
    }
}
