//! CEM's claims that its updates are energy gradients, for `workbench verify` (f64 autograd).
//!
//! Each claim is taken at the start of a block's recursions, `x = h` (the tokens given), and
//! in the normalised state `u = RMSNorm(x)`: the in-loop RMSNorm makes the steps gradients in
//! `u` applied to `x`, not exact gradient steps in `x` (notes-cem.md §3.6). The mask is causal.
//!
//! - Eq. 1-2, per head: the head outputs `o_k` are `-d eps / d q_k` (exact in every
//!   configuration, the diagonal score term and the bias being constants in `q`).
//! - Eq. 2 with the ties of Eq. 5 and the diagonal of Eq. 12: the unpreconditioned update
//!   `sum_k W_k^Q^T o_k [+ d_k o sum_j softmax_j hn_j]` is `-d eps / d u`. Exact with
//!   `diag_value = true` or no diagonal; with Algorithm 1's scores-only diagonal it holds under
//!   the condition that the diagonal score term is held fixed (no gradient through it).
//! - Eq. 13-14: with the preconditioners fixed, `sum_k P_k (...)` is
//!   `-d/dw sum_k eps_k(u + P_k w)` at `w = 0` (since `P_k` is symmetric), `eps_k` being head
//!   `k`'s share of `eps`; same condition on the diagonal.
//! - Eq. 7-8: `V^T (gamma o SiLU(V u))` is `-d xi / d u` (exact).
//! - Eq. 15: with `P_mlp` fixed, `P_mlp V^T (...)` is `-d/dw xi(u + P_mlp w)` at `w = 0`.

use crate::attention::CemAttention;
use crate::block::CemBlock;
use crate::mlp::CemMlp;
use crate::model::PreconditionerKind;
use plugin_api::candle::{DType, Tensor, Var};
use plugin_api::{DescentCheck, GradientIdentity, Result};

/// The identities of one block at tokens `x` `[B, N, d]`.
pub fn gradient_identities(block: &CemBlock, x: &Tensor) -> Result<Vec<GradientIdentity>> {
    let mut out = Vec::new();
    if let Some(attention) = block.attention() {
        out.extend(attention_identities(attention, x)?);
    }
    out.extend(mlp_identities(block.mlp(), x)?);
    Ok(out)
}

/// The attention claims (Eq. 1-2, 4-5, 12-14) at `x = h`.
pub fn attention_identities(attention: &CemAttention, x: &Tensor) -> Result<Vec<GradientIdentity>> {
    let ctx = attention.context(x, true)?;
    let u = attention.normalise(x)?.detach();
    let held = attention.diagonal_in_scores_only();
    let condition =
        if held { "; KQ-diagonal score term held fixed, as Algorithm 1 leaves it out of the update" } else { "" };
    let mut out = Vec::new();

    // Eq. 1-2 per head: o_k = -d eps / d q_k.
    let q = Var::from_tensor(&attention.queries(&u)?)?;
    let diagonal = attention.diagonal_scores(&ctx, &u)?;
    let (_, outputs) = attention.head_outputs(&ctx, &u)?;
    out.push(GradientIdentity {
        name: "attention: head outputs o_k = -d eps / d q_k (Eq. 1-2)".into(),
        energy: attention.energy_of_logits(&attention.logits(&ctx, q.as_tensor(), diagonal.as_ref())?)?.sum_all()?,
        descent: outputs,
        variable: q.as_tensor().clone(),
    });

    // Eq. 2 with Eq. 5 (and 12): sum_k W_k^Q^T o_k [+ d o sum_j p hn_j] = -d eps / d u.
    let uv = Var::from_tensor(&u)?;
    out.push(GradientIdentity {
        name: format!("attention: sum_k W_k^Q^T o_k = -d eps / d u (Eq. 2, 5, 12{condition})"),
        energy: attention.energy(&ctx, uv.as_tensor(), held)?.sum_all()?,
        descent: attention.gradient_direction(&ctx, &u)?,
        variable: uv.as_tensor().clone(),
    });

    // Eq. 13-14: sum_k P_k (...) = -d/dw sum_k eps_k(u + P_k w) at w = 0, P_k fixed.
    let p = attention.preconditioner();
    if p.kind() != PreconditionerKind::Identity {
        let w = Var::from_tensor(&u.zeros_like()?)?;
        let per_head_states = u.unsqueeze(1)?.broadcast_add(&p.apply_each(w.as_tensor())?)?;
        out.push(GradientIdentity {
            name: format!(
                "attention: sum_k P_k W_k^Q^T o_k = -d/dw sum_k eps_k(u + P_k w) at w = 0, P_k fixed (Eq. 13-14{condition})"
            ),
            energy: attention.energy(&ctx, &per_head_states, held)?.sum_all()?,
            descent: attention.update(&ctx, &u)?,
            variable: w.as_tensor().clone(),
        });
    }
    Ok(out)
}

/// The MLP claims (Eq. 7-8, 15) at `x = h`.
pub fn mlp_identities(mlp: &CemMlp, x: &Tensor) -> Result<Vec<GradientIdentity>> {
    let gamma = mlp.gamma(x)?.detach();
    let u = mlp.normalise(x)?.detach();
    let mut out = Vec::new();

    let uv = Var::from_tensor(&u)?;
    out.push(GradientIdentity {
        name: "feedforward: V^T (gamma o SiLU(V u)) = -d xi / d u (Eq. 7-8, phi' = SiLU)".into(),
        energy: mlp.energy(&gamma, uv.as_tensor())?.sum_all()?,
        descent: mlp.gradient_direction(&gamma, &u)?,
        variable: uv.as_tensor().clone(),
    });

    let p = mlp.preconditioner();
    if p.kind() != PreconditionerKind::Identity {
        let w = Var::from_tensor(&u.zeros_like()?)?;
        let state = (&u + p.apply(w.as_tensor())?)?;
        out.push(GradientIdentity {
            name: "feedforward: P_mlp V^T (gamma o SiLU(V u)) = -d/dw xi(u + P_mlp w) at w = 0, P_mlp fixed (Eq. 15)"
                .into(),
            energy: mlp.energy(&gamma, &state)?.sum_all()?,
            descent: mlp.update(&gamma, &u)?,
            variable: w.as_tensor().clone(),
        });
    }
    Ok(out)
}

/// One step of size `step` of each sub-layer of `block` from `x = h`, as the layer takes it
/// (Eq. 14 and 15: `x + step * update(RMSNorm(x))`, preconditioned), against the energy it
/// descends at the normalised state (`eps` with the keys of `h`, causal mask; `xi` with the
/// gate `gamma` of `h`). Descent is expected for small steps: the update is minus the
/// gradient in `u`, mapped through `P` and the RMSNorm's tangent projection.
pub fn descent_checks(block: &CemBlock, x: &Tensor, step: f64) -> Result<Vec<DescentCheck>> {
    let total = |t: Tensor| -> Result<f64> { Ok(t.sum_all()?.to_dtype(DType::F64)?.to_scalar::<f64>()?) };
    let mut out = Vec::new();
    if let Some(attention) = block.attention() {
        let ctx = attention.context(x, true)?;
        let held = attention.diagonal_in_scores_only();
        let u = attention.normalise(x)?;
        let after = (x + (attention.update(&ctx, &u)? * step)?)?;
        out.push(DescentCheck {
            name: format!("attention step {step} (Eq. 14): eps(RMSNorm(x)) does not rise"),
            before: total(attention.energy(&ctx, &u, held)?)?,
            after: total(attention.energy(&ctx, &attention.normalise(&after)?, held)?)?,
        });
    }
    let mlp = block.mlp();
    let gamma = mlp.gamma(x)?;
    let u = mlp.normalise(x)?;
    let after = (x + (mlp.update(&gamma, &u)? * step)?)?;
    out.push(DescentCheck {
        name: format!("feedforward step {step} (Eq. 15): xi(RMSNorm(x)) does not rise"),
        before: total(mlp.energy(&gamma, &u)?)?,
        after: total(mlp.energy(&gamma, &mlp.normalise(&after)?)?)?,
    });
    Ok(out)
}
