//! Hyper-SET's claims that its updates descend its energies, for `workbench verify`.
//!
//! - Without normalisation, the attention update `sum_h W_h (P + P^T) Z_h` with
//!   `Z_h = W_h^T X` is exactly `grad_X E_ATTN` (Eq. 7) and the feedforward update
//!   `D ReLU(D^T X)` is exactly `-grad_X E_FF` (Eq. 10).
//! - With RMSNorm on the projections (Eq. 8), the attention update is not `grad_X` of the
//!   normalised energy; it is the gradient of E_ATTN with respect to the normalised
//!   projections `Z~`, mapped back through `W` (`-dE/dZ~ = -(P + P^T) Z~`). Likewise the
//!   feedforward update is `-dE_FF/dU~` for the normalised hidden units `U~`, mapped back
//!   through `D`. What still holds in `X`: a small fixed step does not raise the energy.

use crate::block::{linear, split_heads, HyperSetBlock, RMS_EPS};
use crate::energy;
use plugin_api::candle::{Tensor, Var, D};
use plugin_api::ops::{bi_softmax, rms_norm};
use plugin_api::{DescentCheck, GradientIdentity, Result};

/// `E_ATTN = beta^-1 sum_h sum_i logsumexp_j(beta z_i . z_j)` of projections `z` `[B, H, N, p]`,
/// summed over the batch.
fn attention_energy(z: &Tensor) -> Result<Tensor> {
    let beta = 1.0 / (z.dim(3)? as f64).sqrt();
    let scores = (z.matmul(&z.t()?)? * beta)?;
    let max = scores.max_keepdim(D::Minus1)?.detach();
    let lse = (scores.broadcast_sub(&max)?.exp()?.sum_keepdim(D::Minus1)?.log()? + max)?;
    Ok((lse.sum_all()? / beta)?)
}

/// `(P + P^T) z` per head, `P = softmax(beta z z^T)`.
fn attention_mix(z: &Tensor) -> Result<Tensor> {
    let beta = 1.0 / (z.dim(3)? as f64).sqrt();
    Ok(bi_softmax(&(z.matmul(&z.t()?)? * beta)?)?.matmul(z)?)
}

/// `E_FF = -1/2 sum ReLU(u)^2` of hidden units `u`, summed over the batch.
fn feedforward_energy(u: &Tensor) -> Result<Tensor> {
    Ok((u.relu()?.sqr()?.sum_all()? * -0.5)?)
}

pub fn gradient_identities(block: &HyperSetBlock, x: &Tensor) -> Result<Vec<GradientIdentity>> {
    let (heads, head_dim) = block.heads();
    let (b, n, d) = x.dims3()?;
    let mut out = Vec::new();

    // Eq. 7 without normalisation: descent in X is -W (P + P^T) Z, Z = W^T X.
    let xv = Var::from_tensor(x)?;
    let z = split_heads(&linear(xv.as_tensor(), block.w())?, heads, head_dim)?;
    let mixed = attention_mix(&z.detach())?.transpose(1, 2)?.reshape((b, n, d))?;
    out.push(GradientIdentity {
        name: "attention, no norm: -W (P+P^T) W^T X = -dE_ATTN/dX (Eq. 7)".into(),
        energy: attention_energy(&z)?,
        descent: linear(&mixed, &block.w().t()?)?.neg()?,
        variable: xv.as_tensor().clone(),
    });

    // Eq. 9: on the normalised projections Z~ = RMSNorm(W^T X) (with the layer's gains).
    let z_norm = rms_norm(&split_heads(&linear(x, block.w())?, heads, head_dim)?, block.attn_gain(), RMS_EPS)?;
    let zv = Var::from_tensor(&z_norm.detach())?;
    out.push(GradientIdentity {
        name: "attention, RMSNorm: -(P+P^T) Z~ = -dE_ATTN/dZ~ (Eq. 7 on Eq. 8's Z~)".into(),
        energy: attention_energy(zv.as_tensor())?,
        descent: attention_mix(&zv.as_tensor().detach())?.neg()?,
        variable: zv.as_tensor().clone(),
    });

    // Eq. 10 without normalisation: D ReLU(D^T X) = -dE_FF/dX.
    let xv = Var::from_tensor(x)?;
    let u = linear(xv.as_tensor(), block.d_ff())?;
    out.push(GradientIdentity {
        name: "feedforward, no norm: D ReLU(D^T X) = -dE_FF/dX (Eq. 10)".into(),
        energy: feedforward_energy(&u)?,
        descent: linear(&u.detach().relu()?, &block.d_ff().t()?)?,
        variable: xv.as_tensor().clone(),
    });

    // Eq. 11: on the normalised hidden units U~ = RMSNorm(D^T X).
    let u_norm = rms_norm(&linear(x, block.d_ff())?, block.ff_gain(), RMS_EPS)?;
    let uv = Var::from_tensor(&u_norm.detach())?;
    out.push(GradientIdentity {
        name: "feedforward, RMSNorm: ReLU(U~) = -dE_FF/dU~ (Eq. 10 on Eq. 11's U~)".into(),
        energy: feedforward_energy(uv.as_tensor())?,
        descent: uv.as_tensor().detach().relu()?,
        variable: uv.as_tensor().clone(),
    });
    Ok(out)
}

/// One attention sub-step and one feedforward sub-step of size `step` (alpha = gamma = step)
/// against the normalised energies of notes-hyperset.md §5.
pub fn descent_checks(block: &HyperSetBlock, x: &Tensor, step: f64) -> Result<Vec<DescentCheck>> {
    let (heads, _) = block.heads();
    let total =
        |t: Tensor| -> Result<f64> { Ok(t.sum_all()?.to_dtype(plugin_api::candle::DType::F64)?.to_scalar::<f64>()?) };
    let after_attention = (x - (block.attention_update(x)? * step)?)?;
    let after_feedforward = (x + (block.feedforward_update(x)? * step)?)?;
    Ok(vec![
        DescentCheck {
            name: format!("attention step {step}: E_ATTN(RMSNorm(W^T X)) does not rise"),
            before: total(energy::attention(x, block.w(), heads)?)?,
            after: total(energy::attention(&after_attention, block.w(), heads)?)?,
        },
        DescentCheck {
            name: format!("feedforward step {step}: E_FF(RMSNorm(D^T X)) does not rise"),
            before: total(energy::feedforward(x, block.d_ff())?)?,
            after: total(energy::feedforward(&after_feedforward, block.d_ff())?)?,
        },
    ])
}
