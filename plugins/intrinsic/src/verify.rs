//! The seed's claims that each attention is one step of an optimiser on an energy, checked
//! by `workbench verify` with candle's autograd (in f64, on random tokens).
//!
//! All claims are about the attention *branch* as a function of its input (the normalised
//! tokens), in the seed's cross-attention view: the queries `z` move, the context `H` is
//! held fixed. Each is checked on the full context and with the causal attended set
//! `H_{<=t}` (App. A.1). What holds exactly:
//!
//! - softmax (Eq. 5-6): with the matching `W_{O,h} W_{V,h} = W_{Q,h}^T W_{K,h} / H`, the branch
//!   is `-dF/dz` for `F = -(1/H) sum_h T log sum_i exp(q_h . k_{i,h} / T)`;
//! - linear (Eq. 3) and gated linear (Eq. 4, gates held fixed): with the same matching, the
//!   branch is `-dF/dz` for `F = -(1/(2H)) sum_h sum_i gamma_i (q_h . k_{i,h})^2`;
//! - momentum (Eq. 8) and Nesterov (Eq. 9): with the same matching and any buffer `p`, the
//!   step's `p' - beta p` is `dF/dz` at `z` (momentum) or at `z~ = z - beta p` (Nesterov);
//! - newton (Eq. 16, 19): in head space, `q_h - k^_h = dF_h/dq_h` for the Euclidean free
//!   energy, and `q_h - k^_h - (1/T) (sum_i p d d^T)(q_h - k^_h)` is the Hessian-vector product
//!   `grad^2 F_h (q_h - k^_h)`, so Eq. 24's bracket is `(I - grad^2 F_h) grad F_h` with `T_b = T`;
//! - light_newton (A.3.2): with `tau = 0` and the matching, the branch is `-dF~/dz`; and with
//!   values equal to keys, `b_h = T grad^2 F~_h grad F~_h` in head space.
//!
//! - newton = full (Eq. 21) with `c_h = 1/T_h`: `C_h^-1 u_h` solves the head-space Newton
//!   system, `grad^2 F_h (C_h^-1 u_h) = u_h`.
//!
//! Descent checks (weaker, for `newton` in both forms): in the cross-attention view, each
//! head's own Newton move `z - step M_h g_h` (Eq. 18-21, the learned `W_{O,h} W_{V,h}` replaced
//! by `-step I`, `g_h` the layer's head-space direction, Eq. 21 or 24, with its learned `c_h`)
//! does not raise that head's `F_h`; the check sums `F_h` over heads before and after. It
//! holds for small steps wherever `C_h` (or its Taylor form `I + c_h S_h`) is positive
//! definite, since then `grad F_h . M_h g_h = u_h^T C_h^-1 u_h > 0`. For the full form the
//! claim is made for steps up to `NEWTON_FULL_MAX_STEP` (1e-2) only: on `verify`'s setting
//! (d = 128, parameters perturbed by 0.1) its move of size 0.1 raised the full-context energy.
//!
//! Not exact, so not claimed: the Taylor truncations themselves (Eq. 22, A.3.2), the learned
//! `W_V`, `W_O`, `T_b`, `tau` that replace the matched values, and anything through the pre-norms.

use crate::attention::light_newton::covariance_product;
use crate::attention::newton::{distance_free_energy, full_direction, newton_terms, NewtonAttention};
use crate::attention::softmax::attention_weights;
use crate::attention::{momentum, nesterov, Attention};
use crate::block::{Block, Coefficients, Residual};
use crate::config::NewtonForm;
use crate::dropout::Dropout;
use crate::ops::per_head;
use plugin_api::candle::{Tensor, Var};
use plugin_api::{DescentCheck, GradientIdentity, Result};

/// The gradient identities of one block at tokens `x` (`[B, N, d]`).
pub fn gradient_identities(block: &Block, x: &Tensor) -> Result<Vec<GradientIdentity>> {
    let mut out = Vec::new();
    for causal in [false, true] {
        let scope = if causal { "causal" } else { "full context" };
        match (&block.attention, &block.residual) {
            (Attention::Softmax(a), Residual::Plain) => out.push(branch_identity(
                &Attention::Softmax(a.tied()?),
                x,
                causal,
                format!("softmax (Eq. 6), W_O,h W_V,h = W_Q,h^T W_K,h / H: branch = -dF/dz, {scope}"),
            )?),
            (Attention::Softmax(a), Residual::Momentum(c)) => out.push(momentum_identity(
                &Attention::Softmax(a.tied()?),
                c,
                x,
                causal,
                false,
                format!("momentum (Eq. 8), matched softmax branch: p' - beta p = dF/dz, {scope}"),
            )?),
            (Attention::Softmax(a), Residual::Nesterov(c)) => out.push(momentum_identity(
                &Attention::Softmax(a.tied()?),
                c,
                x,
                causal,
                true,
                format!("nesterov (Eq. 9), matched softmax branch: p' - beta p = dF/dz at z - beta p, {scope}"),
            )?),
            (Attention::Linear(a), _) => out.push(branch_identity(
                &Attention::Linear(a.tied()?),
                x,
                causal,
                format!("linear (Eq. 3), W_O,h W_V,h = W_Q,h^T W_K,h / H: branch = -dF/dz, {scope}"),
            )?),
            (Attention::GatedLinear(a), _) => out.push(branch_identity(
                &Attention::GatedLinear(a.tied()?),
                x,
                causal,
                format!("gated linear (Eq. 4), gates fixed, matched W_O W_V: branch = -dF/dz, {scope}"),
            )?),
            (Attention::Newton(a), _) => out.extend(newton_identities(a, x, causal, scope)?),
            (Attention::LightNewton(a), _) => {
                out.push(branch_identity(
                    &Attention::LightNewton(a.tied_first_order()?),
                    x,
                    causal,
                    format!("light_newton (A.3.2), tau = 0, matched W_O W_V: branch = -dF~/dz, {scope}"),
                )?);
                out.push(light_hessian_identity(block, x, causal, scope)?);
            }
        }
    }
    Ok(out)
}

/// `branch(z; H) = -dF(z; H)/dz` with the context `H = x` held fixed.
fn branch_identity(matched: &Attention, x: &Tensor, causal: bool, name: String) -> Result<GradientIdentity> {
    let context = x.detach();
    let z = Var::from_tensor(&context)?;
    let energy = matched.energy(z.as_tensor(), &context, causal)?.sum_all()?;
    let descent = matched.forward(&context, &context, causal, Dropout::NONE)?;
    Ok(GradientIdentity { name, variable: z.as_tensor().clone(), energy, descent })
}

/// One momentum (Eq. 8) or Nesterov (Eq. 9) step from `z = x` with a random buffer: the
/// step's `m' - beta m = -(p' - beta p)` is `-dF/dz` at `z` or at the look-ahead point.
fn momentum_identity(
    matched: &Attention,
    coefficients: &Coefficients,
    x: &Tensor,
    causal: bool,
    look_ahead: bool,
    name: String,
) -> Result<GradientIdentity> {
    let context = x.detach();
    let beta = coefficients.beta_attn.detach();
    let eta = coefficients.eta_attn.detach();
    // A generic momentum state, neither zero nor parallel to `x`, made from `x` (whose draw
    // `verify` seeds) rather than from candle's unseedable generator: the same every run.
    let m = ((x * 3.7)? + 1.3)?.sin()?;
    let branch = |y: &Tensor| matched.forward(y, &context, causal, Dropout::NONE);
    let (_, m_next) = if look_ahead {
        nesterov::step(&context, Some(&m), &beta, &eta, branch)?
    } else {
        momentum::step(&context, Some(&m), &beta, &eta, branch)?
    };
    let descent = (m_next - m.broadcast_mul(&beta)?)?;
    let z = Var::from_tensor(&context)?;
    let point = if look_ahead { nesterov::lookahead(z.as_tensor(), Some(&m), &beta)? } else { z.as_tensor().clone() };
    let energy = matched.energy(&point, &context, causal)?.sum_all()?;
    Ok(GradientIdentity { name, variable: z.as_tensor().clone(), energy, descent })
}

/// MHA2nd1st's gradient (Eq. 16) and Hessian (Eq. 19) in the head space of `q_h`.
fn newton_identities(a: &NewtonAttention, x: &Tensor, causal: bool, scope: &str) -> Result<Vec<GradientIdentity>> {
    let q = a.proj.queries(x)?.detach();
    let k = a.proj.keys(x)?.detach();
    let temperature = a.temperature().detach();
    let terms = newton_terms(&q, &k, &temperature, causal, Dropout::NONE)?;

    let qv = Var::from_tensor(&q)?;
    let gradient = GradientIdentity {
        name: format!("newton (Eq. 16), head space: q_h - k^_h = dF_h/dq_h, {scope}"),
        energy: distance_free_energy(qv.as_tensor(), &k, &temperature, causal)?.sum_all()?,
        descent: terms.gradient.neg()?,
        variable: qv.as_tensor().clone(),
    };

    // d/dq [grad F_h(q) . u] = grad^2 F_h u for a fixed u (grad F_h from the identity above).
    let u = terms.gradient.detach();
    let qv = Var::from_tensor(&q)?;
    let moving = newton_terms(qv.as_tensor(), &k, &temperature, causal, Dropout::NONE)?;
    let hessian_energy = ((qv.as_tensor() - &moving.mean_key)? * &u)?.sum_all()?;
    let hessian_u = (&u - terms.covariance_product.broadcast_div(&per_head(&temperature)?)?)?;
    let hessian = GradientIdentity {
        name: format!("newton (Eq. 19, 24), head space: u - b_h(T_b = T) = grad^2 F_h u, {scope}"),
        energy: hessian_energy,
        descent: hessian_u.neg()?,
        variable: qv.as_tensor().clone(),
    };
    let mut out = vec![gradient, hessian];
    if a.form() == NewtonForm::Full {
        // d/dq [grad F_h(q) . s] = grad^2 F_h s for the fixed solution s = C^-1 u, c = 1/T.
        let solution = full_direction(&terms, &k, &per_head(&temperature)?.recip()?)?.detach();
        let qv = Var::from_tensor(&q)?;
        let moving = newton_terms(qv.as_tensor(), &k, &temperature, causal, Dropout::NONE)?;
        out.push(GradientIdentity {
            name: format!("newton full (Eq. 19-21), c_h = 1/T_h, head space: grad^2 F_h (C_h^-1 u_h) = u_h, {scope}"),
            energy: ((qv.as_tensor() - &moving.mean_key)? * &solution)?.sum_all()?,
            descent: u.neg()?,
            variable: qv.as_tensor().clone(),
        });
    }
    Ok(out)
}

/// The largest step (in absolute value) at which the full form's descent is claimed.
pub const NEWTON_FULL_MAX_STEP: f64 = 1e-2;

/// For `newton`: each head's Newton move of size `step` lowers its own `F_h` (module doc),
/// on the full context and causally (for the full form, for `|step| <= NEWTON_FULL_MAX_STEP`).
pub fn descent_checks(block: &Block, x: &Tensor, step: f64) -> Result<Vec<DescentCheck>> {
    let Attention::Newton(a) = &block.attention else {
        return Ok(Vec::new());
    };
    if a.form() == NewtonForm::Full && step.abs() > NEWTON_FULL_MAX_STEP {
        return Ok(Vec::new());
    }
    let form = match a.form() {
        NewtonForm::Taylor => "taylor, Eq. 24",
        NewtonForm::Full => "full, Eq. 21",
    };
    let total = |t: Tensor| -> Result<f64> { Ok(t.sum_all()?.to_dtype(plugin_api::candle::DType::F64)?.to_scalar()?) };
    let context = x.detach();
    let k = a.proj.keys(&context)?;
    let q = a.proj.queries(&context)?;
    let moves = a.direction(&q, &k, false, Dropout::NONE)?.broadcast_matmul(&a.range_map()?.unsqueeze(0)?)?; // [B, H, N, d]
    let mut out = Vec::new();
    for causal in [false, true] {
        let moves = if causal {
            a.direction(&q, &k, true, Dropout::NONE)?.broadcast_matmul(&a.range_map()?.unsqueeze(0)?)?
        } else {
            moves.clone()
        };
        let before = total(distance_free_energy(&q, &k, a.temperature(), causal)?)?;
        let mut after = 0.0;
        for h in 0..a.proj.heads {
            let moved = (&context - (moves.narrow(1, h, 1)?.squeeze(1)? * step)?)?;
            let energies = distance_free_energy(&a.proj.queries(&moved)?, &k, a.temperature(), causal)?;
            after += total(energies.narrow(1, h, 1)?)?;
        }
        let scope = if causal { "causal" } else { "full context" };
        out.push(DescentCheck {
            name: format!("newton ({form}): each head's move z - {step} M_h g_h does not raise its F_h, {scope}"),
            before,
            after,
        });
    }
    Ok(out)
}

/// LightMHA2nd1st's correction with values = keys: `b = Cov_p(k) k^ = T grad^2 F~ grad F~`,
/// as `d/dq [k^(q) . k^_0] = (1/T) Cov_p(k) k^_0`.
fn light_hessian_identity(block: &Block, x: &Tensor, causal: bool, scope: &str) -> Result<GradientIdentity> {
    let Attention::LightNewton(a) = &block.attention else {
        return Err(plugin_api::PluginError::Other("light identity on another attention".into()));
    };
    let q = a.proj.queries(x)?.detach();
    let k = a.proj.keys(x)?.detach();
    let temperature = a.temperature()?;
    let p = attention_weights(&q, &k, temperature, causal)?;
    let mean_key = p.matmul(&k)?;
    let qv = Var::from_tensor(&q)?;
    let moving_mean = attention_weights(qv.as_tensor(), &k, temperature, causal)?.matmul(&k)?;
    Ok(GradientIdentity {
        name: format!("light_newton (A.3.2), head space, v = k: b_h = T grad^2 F~_h grad F~_h, {scope}"),
        energy: (moving_mean * &mean_key)?.sum_all()?,
        descent: (covariance_product(&p, &k, &mean_key)? / -temperature)?,
        variable: qv.as_tensor().clone(),
    })
}
