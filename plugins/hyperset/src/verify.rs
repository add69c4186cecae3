//! Hyper-SET's claims that its updates descend its energies, for `workbench verify`, for
//! every attention and feedforward variant (modules `attention` and `feedforward`).
//!
//! - Without normalisation, the attention update `sum_h W_h mix(Z_h)` with `Z_h = W_h^T X`
//!   is exactly `grad_X E_ATTN` (Eq. 7 for bi-softmax, Table 19 for sigmoid and linear) and
//!   the feedforward update `D a(D^T X)` is exactly `-grad_X E_FF` (Eq. 10 for ReLU,
//!   Table 20 for softmax and gated, the derived GELU energy for GELU).
//! - With RMSNorm on the projections (Eq. 8), the attention update is not `grad_X` of the
//!   normalised energy; it is the gradient of E_ATTN with respect to the normalised
//!   projections `Z~`, mapped back through `W` (`-dE/dZ~ = -mix(Z~)`). Likewise the
//!   feedforward update is `-dE_FF/dU~` for the normalised hidden units `U~`, mapped back
//!   through `D`. What still holds in `X`: a small fixed step does not raise the energy.
//! - With separate Q/K/V gains, the identity on `Z~` is stated for the gain-free `Ẑ` with
//!   values `Ẑ g_q g_k` (see `attention`'s module doc); it is not claimed for linear
//!   attention, whose separate-gain update is the gradient of no energy.
//! - With an optimiser other than `gd` (module `optimizer`), its own sub-steps of a fixed
//!   size `eta = step`, from the zero state as in a pass: one sub-step, and
//!   `OPTIMIZER_CHECK_STEPS` sub-steps carrying the state, each on the attention energy
//!   (attention sub-steps only) and on the feedforward energy (feedforward sub-steps only).
//!   What makes this hold for small steps: from zero velocity, momentum's and Nesterov's
//!   first step is the gd step; over a few small steps the gradient barely changes, so the
//!   velocity is about `(sum_n beta^n) g`, the gd direction scaled; RMSProp and Adam rescale
//!   `g` by positive per-element factors. So the claim is made for steps up to
//!   `OPTIMIZER_CHECK_MAX_STEP` (1e-2) only; larger steps get no optimiser check. Measured on
//!   `verify`'s setting (d = 128, parameters perturbed by 0.1) at step 0.1: RMSProp's first
//!   sub-step moves every coordinate by about `0.1 / sqrt(1 - beta2) = 1` and raises the
//!   attention energy, as do three Nesterov sub-steps; momentum and Adam still descend. Not
//!   claimed either: descent at every step of a long pass with learned step sizes.
//! - With depth-wise LoRA the claims are checked on the effective weights of each block's
//!   first iteration (they hold for any weights).

use crate::block::{linear, split_heads, AttentionGains, HyperSetBlock, IterationWeights};
use crate::config::RMS_EPS;
use crate::energy;
use crate::optimizer::{Optimizer, OptimizerState};
use crate::step_size::StepSize;
use plugin_api::candle::{Tensor, Var};
use plugin_api::ops::rms_norm;
use plugin_api::{DescentCheck, GradientIdentity, Result};

/// The attention and feedforward identities of `block`'s first iteration at tokens `x`.
pub fn gradient_identities(block: &HyperSetBlock, x: &Tensor) -> Result<Vec<GradientIdentity>> {
    let weights = block.weights(1)?;
    let mut out = attention_identities(block, &weights, x)?;
    out.extend(feedforward_identities(block, &weights, x)?);
    Ok(out)
}

fn attention_identities(
    block: &HyperSetBlock,
    weights: &IterationWeights,
    x: &Tensor,
) -> Result<Vec<GradientIdentity>> {
    let (heads, head_dim) = block.heads();
    let (b, n, d) = x.dims3()?;
    let kind = block.attention_kind();
    let (formula, source) = kind.formula();
    let label = kind.name();
    let w = &weights.w;
    let mut out = Vec::new();

    // Without normalisation: descent in X is -W mix(Z), Z = W^T X.
    let xv = Var::from_tensor(x)?;
    let z = split_heads(&linear(xv.as_tensor(), w)?, heads, head_dim)?;
    let zd = z.detach();
    let mixed = kind.mix(&zd, &zd, &zd)?.transpose(1, 2)?.reshape((b, n, d))?;
    out.push(GradientIdentity {
        name: format!("attention ({label}), no norm: -W [{formula}](Z = W^T X) = -dE_ATTN/dX ({source})"),
        energy: kind.energy(&z, &z)?.sum_all()?,
        descent: linear(&mixed, &w.t()?)?.neg()?,
        variable: xv.as_tensor().clone(),
    });

    // Eq. 9: on the normalised projections (Eq. 8), with the layer's gains.
    match block.attention_gains() {
        AttentionGains::None | AttentionGains::Shared(_) => {
            let zv = Var::from_tensor(&block.project(x, w)?.query.detach())?;
            let z = zv.as_tensor();
            out.push(GradientIdentity {
                name: format!(
                    "attention ({label}), RMSNorm: -[{formula}](Z = Z~) = -dE_ATTN/dZ~ ({source} on Eq. 8's Z~)"
                ),
                energy: kind.energy(z, z)?.sum_all()?,
                descent: kind.mix(&z.detach(), &z.detach(), &z.detach())?.neg()?,
                variable: z.clone(),
            });
        }
        AttentionGains::PerRole { query, key, .. } if kind.has_symmetric_scores() => {
            let raw = split_heads(&linear(x, w)?, heads, head_dim)?;
            let zv = Var::from_tensor(&rms_norm(&raw, None, RMS_EPS)?.detach())?;
            let z = zv.as_tensor();
            let (q, k) = (z.broadcast_mul(query)?, z.broadcast_mul(key)?);
            let value = z.detach().broadcast_mul(&(query * key)?.detach())?;
            out.push(GradientIdentity {
                name: format!(
                    "attention ({label}), Q/K/V gains: -mix(Z g_q, Z g_k, Z g_q g_k) = -dE_ATTN/dZ for the gain-free \
                     RMSNorm Z; the layer's values use g_v ({source} on Eq. 8's Z)"
                ),
                energy: kind.energy(&q, &k)?.sum_all()?,
                descent: kind.mix(&q.detach(), &k.detach(), &value)?.neg()?,
                variable: z.clone(),
            });
        }
        AttentionGains::PerRole { .. } => {} // linear attention with separate gains: no energy (module doc).
    }
    Ok(out)
}

fn feedforward_identities(
    block: &HyperSetBlock,
    weights: &IterationWeights,
    x: &Tensor,
) -> Result<Vec<GradientIdentity>> {
    let kind = block.feedforward_kind();
    let (formula, source) = kind.formula();
    let label = kind.name();
    let d_ff = &weights.d_ff;

    // Without normalisation: D a(D^T X) = -dE_FF/dX.
    let xv = Var::from_tensor(x)?;
    let u = linear(xv.as_tensor(), d_ff)?;
    let unnormalised = GradientIdentity {
        name: format!("feedforward ({label}), no norm: D {formula}(D^T X) = -dE_FF/dX ({source})"),
        energy: kind.energy(&u)?.sum_all()?,
        descent: linear(&kind.activation(&u.detach())?, &d_ff.t()?)?,
        variable: xv.as_tensor().clone(),
    };

    // Eq. 11: on the normalised hidden units U~ = RMSNorm(D^T X).
    let u_norm = rms_norm(&linear(x, d_ff)?, block.ff_gain(), RMS_EPS)?;
    let uv = Var::from_tensor(&u_norm.detach())?;
    let normalised = GradientIdentity {
        name: format!("feedforward ({label}), RMSNorm: {formula}(U~) = -dE_FF/dU~ ({source} on Eq. 11's U~)"),
        energy: kind.energy(uv.as_tensor())?.sum_all()?,
        descent: kind.activation(&uv.as_tensor().detach())?,
        variable: uv.as_tensor().clone(),
    };
    Ok(vec![unnormalised, normalised])
}

/// One attention sub-step and one feedforward sub-step of size `step` (alpha = gamma = step)
/// of `block`'s first iteration against the normalised energies of notes-hyperset.md §5.
pub fn descent_checks(block: &HyperSetBlock, x: &Tensor, step: f64) -> Result<Vec<DescentCheck>> {
    let (heads, _) = block.heads();
    let weights = block.weights(1)?;
    let (attention, feedforward) = (block.attention_kind(), block.feedforward_kind());
    let total =
        |t: Tensor| -> Result<f64> { Ok(t.sum_all()?.to_dtype(plugin_api::candle::DType::F64)?.to_scalar::<f64>()?) };
    let after_attention = (x - (block.attention_update(x, &weights.w)? * step)?)?;
    let after_feedforward = (x + (block.feedforward_update(x, &weights.d_ff)? * step)?)?;
    Ok(vec![
        DescentCheck {
            name: format!("attention step {step}: E_ATTN(RMSNorm(W^T X)) does not rise"),
            before: total(energy::attention(x, &weights.w, heads, attention)?)?,
            after: total(energy::attention(&after_attention, &weights.w, heads, attention)?)?,
        },
        DescentCheck {
            name: format!("feedforward step {step}: E_FF(RMSNorm(D^T X)) does not rise"),
            before: total(energy::feedforward(x, &weights.d_ff, feedforward)?)?,
            after: total(energy::feedforward(&after_feedforward, &weights.d_ff, feedforward)?)?,
        },
    ])
}

/// Sub-steps of the longer optimiser checks.
pub const OPTIMIZER_CHECK_STEPS: usize = 3;

/// The largest step (in absolute value) at which the optimiser checks are claimed.
pub const OPTIMIZER_CHECK_MAX_STEP: f64 = 1e-2;

/// For an optimiser other than `gd`: 1 and `OPTIMIZER_CHECK_STEPS` attention sub-steps of
/// size `step` from the zero state against the attention energy, and the same for the
/// feedforward sub-steps and energy (module doc), for `|step| <= OPTIMIZER_CHECK_MAX_STEP`.
/// A negative `step` reverses every move.
pub fn optimizer_descent_checks(
    block: &HyperSetBlock,
    optimizer: &Optimizer,
    x: &Tensor,
    step: f64,
) -> Result<Vec<DescentCheck>> {
    if *optimizer == Optimizer::Gd || step.abs() > OPTIMIZER_CHECK_MAX_STEP {
        return Ok(Vec::new());
    }
    let (heads, _) = block.heads();
    let weights = block.weights(1)?;
    let (attention, feedforward) = (block.attention_kind(), block.feedforward_kind());
    let eta = StepSize::Constant(step);
    let run = |sub_steps: usize, gradient: &dyn Fn(&Tensor) -> Result<Tensor>| -> Result<Tensor> {
        let mut state = OptimizerState::default();
        let mut y = x.clone();
        let beta = block.learned_beta()?;
        for _ in 0..sub_steps {
            y = optimizer.step(&mut state, &y, &eta, beta.as_ref(), block.kernels(), gradient)?;
        }
        Ok(y)
    };
    let total =
        |t: Tensor| -> Result<f64> { Ok(t.sum_all()?.to_dtype(plugin_api::candle::DType::F64)?.to_scalar::<f64>()?) };
    let attention_gradient = |y: &Tensor| block.attention_update(y, &weights.w);
    let feedforward_gradient = |y: &Tensor| Ok(block.feedforward_update(y, &weights.d_ff)?.neg()?);
    let name = optimizer.name();
    let mut checks = Vec::new();
    for sub_steps in [1, OPTIMIZER_CHECK_STEPS] {
        let y = run(sub_steps, &attention_gradient)?;
        checks.push(DescentCheck {
            name: format!(
                "attention, {name}: {sub_steps} sub-step(s) of size {step} from zero state: E_ATTN(RMSNorm(W^T X)) \
                 does not rise"
            ),
            before: total(energy::attention(x, &weights.w, heads, attention)?)?,
            after: total(energy::attention(&y, &weights.w, heads, attention)?)?,
        });
        let y = run(sub_steps, &feedforward_gradient)?;
        checks.push(DescentCheck {
            name: format!(
                "feedforward, {name}: {sub_steps} sub-step(s) of size {step} from zero state: E_FF(RMSNorm(D^T X)) \
                 does not rise"
            ),
            before: total(energy::feedforward(x, &weights.d_ff, feedforward)?)?,
            after: total(energy::feedforward(&y, &weights.d_ff, feedforward)?)?,
        });
    }
    Ok(checks)
}
