//! Learned lightweight preconditioners, seed 002 Eq. 13 (initialisation: Appendix D.4):
//!
//! `P = diag(softplus(d)) + U V^T + V U^T`, `d in R^D`, `U, V in R^{D x R}`.
//!
//! One preconditioner per attention head scales that head's update (Eq. 14,
//! `sum_k P_k W_k^Q^T o_k`); one scales the MLP update (Eq. 15). The diagonal is
//! reparameterised as `d = sqrt(D) p` with `p` initialised to `1 / sqrt(D)`, so `d` starts at 1
//! and `P`'s diagonal at `softplus(1) = 1.313` (notes-cem.md §3.3 marks the paper's "starts at
//! 1" UNSURE: read literally, it is `d`, not `softplus(d)`, that starts at 1). Following LoRA,
//! `U ~ N(0, 0.02^2)` and `V = 0`, so `P` starts diagonal (and `U` receives no gradient until `V`
//! has moved). `P` is symmetric but, unlike the paper's claim, not guaranteed positive
//! definite once `U V^T + V U^T` grows.
//!
//! The attention form never builds the per-head `[B, K, N, D]` updates: the diagonal scales
//! the rows of `W^Q` head by head, and the low-rank terms go through `W_k^Q V_k` (`[D_r, R]`)
//! (notes-cem.md §3.3, "efficient per-head application").

use crate::model::PreconditionerKind;
use plugin_api::candle::{DType, Device, Tensor};
use plugin_api::candle_nn::{Init, VarBuilder};
use plugin_api::Result;

/// Standard deviation of the LoRA-style init of `U` (Appendix D.4).
pub const LOW_RANK_INIT_STD: f64 = 0.02;

/// `G` preconditioners of width `D` (one per attention head, or one for the MLP).
pub struct Preconditioner {
    kind: PreconditionerKind,
    groups: usize,
    width: usize,
    /// `p` `[G, D]`, with `d = sqrt(D) p`.
    diagonal_param: Option<Tensor>,
    /// `U` `[G, D, R]`.
    u: Option<Tensor>,
    /// `V` `[G, D, R]`.
    v: Option<Tensor>,
}

impl Preconditioner {
    /// Creates the parameters of `groups` preconditioners of width `width` and rank `rank`
    /// (used only by the low-rank kind) as `precond_diag`, `precond_u`, `precond_v`.
    pub fn new(kind: PreconditionerKind, groups: usize, width: usize, rank: usize, vb: VarBuilder) -> Result<Self> {
        let mut p = Preconditioner::identity(groups, width);
        p.kind = kind;
        if kind != PreconditionerKind::Identity {
            let p0 = 1.0 / (width as f64).sqrt();
            p.diagonal_param = Some(vb.get_with_hints((groups, width), "precond_diag", Init::Const(p0))?);
        }
        if kind == PreconditionerKind::DiagonalLowRank {
            let u_init = Init::Randn { mean: 0.0, stdev: LOW_RANK_INIT_STD };
            p.u = Some(vb.get_with_hints((groups, width, rank), "precond_u", u_init)?);
            p.v = Some(vb.get_with_hints((groups, width, rank), "precond_v", Init::Const(0.0))?);
        }
        Ok(p)
    }

    /// `P = I` for `groups` groups, with no parameters.
    pub fn identity(groups: usize, width: usize) -> Self {
        Preconditioner { kind: PreconditionerKind::Identity, groups, width, diagonal_param: None, u: None, v: None }
    }

    /// Which form of Eq. 13 this is.
    pub fn kind(&self) -> PreconditionerKind {
        self.kind
    }

    /// `softplus(d)` with `d = sqrt(D) p`, `[G, D]`; `None` for the identity.
    pub fn diagonal(&self) -> Result<Option<Tensor>> {
        match &self.diagonal_param {
            Some(p) => Ok(Some(softplus(&(p * (self.width as f64).sqrt())?)?)),
            None => Ok(None),
        }
    }

    /// The dense matrices `P_g` `[G, D, D]` (for checks; the layer never builds them).
    pub fn matrices(&self, dtype: DType, device: &Device) -> Result<Tensor> {
        let eye = Tensor::eye(self.width, dtype, device)?;
        let mut p = match self.diagonal()? {
            Some(s) => eye.unsqueeze(0)?.broadcast_mul(&s.unsqueeze(1)?)?,
            None => eye.unsqueeze(0)?.repeat((self.groups, 1, 1))?,
        };
        if let (Some(u), Some(v)) = (&self.u, &self.v) {
            p = ((p + u.matmul(&v.t()?)?)? + v.matmul(&u.t()?)?)?;
        }
        Ok(p)
    }

    /// `P_g y` for every group `g`: `y` `[B, N, D]` to `[B, G, N, D]` (each token row `y_i`
    /// becomes `P_g y_i`; `P` is symmetric, so the row form `y P` is the same).
    pub fn apply_each(&self, y: &Tensor) -> Result<Tensor> {
        let y = y.unsqueeze(1)?;
        let mut out = match self.diagonal()? {
            Some(s) => y.broadcast_mul(&s.unsqueeze(1)?.unsqueeze(0)?)?,
            None => y.repeat((1, self.groups, 1, 1))?,
        };
        if let (Some(u), Some(v)) = (&self.u, &self.v) {
            out = ((out + y.broadcast_matmul(v)?.broadcast_matmul(&u.t()?)?)?
                + y.broadcast_matmul(u)?.broadcast_matmul(&v.t()?)?)?;
        }
        Ok(out)
    }

    /// `P y` for a single preconditioner (`G = 1`, the MLP's): `[B, N, D]` to `[B, N, D]`.
    pub fn apply(&self, y: &Tensor) -> Result<Tensor> {
        self.prepare_single()?.apply(y)
    }

    /// The matrices of `P y` for a single preconditioner, built once for every step of a
    /// recursion.
    pub fn prepare_single(&self) -> Result<PreparedSingle> {
        let diagonal = self.diagonal()?;
        let low_rank = match (&self.u, &self.v) {
            // One linear map of the token rows onto [V | U], one back.
            (Some(u), Some(v)) => Some(LowRank {
                onto: Tensor::cat(&[&v.squeeze(0)?, &u.squeeze(0)?], 1)?,
                back: self.stacked_back(u, v)?,
            }),
            _ => None,
        };
        Ok(PreparedSingle { diagonal, low_rank })
    }

    /// `sum_g P_g y_g` for per-group vectors `y` `[B, G, N, D]`, giving `[B, N, D]`.
    pub fn apply_sum(&self, y: &Tensor) -> Result<Tensor> {
        let mut out = match self.diagonal()? {
            Some(s) => y.broadcast_mul(&s.unsqueeze(1)?.unsqueeze(0)?)?.sum(1)?,
            None => y.sum(1)?,
        };
        if let (Some(u), Some(v)) = (&self.u, &self.v) {
            let (b, _, n, _) = y.dims4()?;
            let side_by_side = |t: Tensor| -> Result<Tensor> { Ok(t.transpose(1, 2)?.reshape((b, n, ()))?) };
            let through =
                Tensor::cat(&[side_by_side(y.broadcast_matmul(v)?)?, side_by_side(y.broadcast_matmul(u)?)?], 2)?;
            out = (out + kernels::linear(&through, &self.stacked_back(u, v)?, None)?)?;
        }
        Ok(out)
    }

    /// `sum_k P_k W_k^T o_k` (Eq. 14) for head outputs `o` `[B, K, N, D_r]` and the query
    /// projection `w` `[D, K D_r]` (row form: `q = u w`, so `W_k^T o_k` is `o_k w_k^T`).
    pub fn apply_through_heads(&self, o: &Tensor, w: &Tensor) -> Result<Tensor> {
        self.prepare_heads(w)?.apply(o)
    }

    /// The matrices of `sum_k P_k W_k^T o_k` for the query projection `w` `[D, K D_r]`,
    /// built once for every step of a recursion.
    pub fn prepare_heads(&self, w: &Tensor) -> Result<PreparedHeads> {
        let k = self.groups;
        let head_dim = w.dim(1)? / k;
        let w_heads = w.t()?.reshape((k, head_dim, self.width))?; // W_k^Q, [K, D_r, D]
        let scaled = match self.diagonal()? {
            // sum_k diag(s_k) W_k^T o_k = merged @ (W^T with head k's rows scaled by s_k)
            Some(s) => w_heads.broadcast_mul(&s.unsqueeze(1)?)?,
            None => w_heads.clone(),
        };
        let low_rank = match (&self.u, &self.v) {
            // V_k^T W_k^T o_k = o_k (W_k V_k), with W_k V_k of shape [D_r, R]: every head at
            // once as the merged outputs times the block-diagonal [K D_r, K R] of the W_k V_k,
            // which gives the heads' coordinates side by side.
            (Some(u), Some(v)) => Some(LowRank {
                onto: Tensor::cat(&[block_diagonal(&w_heads.matmul(v)?)?, block_diagonal(&w_heads.matmul(u)?)?], 1)?,
                back: self.stacked_back(u, v)?,
            }),
            _ => None,
        };
        Ok(PreparedHeads { merged_weight: scaled.reshape((k * head_dim, self.width))?, low_rank })
    }

    /// The stacked `[U_g^T; V_g^T]` `[2 G R, D]`: one product with it gives
    /// `sum_g U_g r_g + V_g s_g` from `[r_1 .. r_G | s_1 .. s_G]`.
    fn stacked_back(&self, u: &Tensor, v: &Tensor) -> Result<Tensor> {
        let (g, _, r) = u.dims3()?;
        let stacked = |m: &Tensor| m.transpose(1, 2)?.reshape((g * r, self.width));
        Ok(Tensor::cat(&[stacked(u)?, stacked(v)?], 0)?)
    }
}

/// The low-rank terms `U V^T + V U^T` of Eq. 13 as two products: the rows onto the
/// coordinates `[r | s]` (`r = V^T y`, `s = U^T y`, per group), then back with `[U^T; V^T]`.
struct LowRank {
    onto: Tensor,
    back: Tensor,
}

impl LowRank {
    fn apply(&self, y: &Tensor) -> Result<Tensor> {
        Ok(kernels::linear(&kernels::linear(y, &self.onto, None)?, &self.back, None)?)
    }
}

/// `P y` (`G = 1`) with its matrices derived from the parameters once per forward pass: each
/// recursion step reuses them, so their ops (and the gradients back through them) are in the
/// graph once, not once per step.
pub struct PreparedSingle {
    /// `softplus(d)` `[1, D]`.
    diagonal: Option<Tensor>,
    low_rank: Option<LowRank>,
}

impl PreparedSingle {
    /// `P y` for the token rows `y` `[B, N, D]`.
    pub fn apply(&self, y: &Tensor) -> Result<Tensor> {
        let mut out = match &self.diagonal {
            Some(s) => y.broadcast_mul(s)?,
            None => y.clone(),
        };
        if let Some(low_rank) = &self.low_rank {
            out = (out + low_rank.apply(y)?)?;
        }
        Ok(out)
    }
}

/// `sum_k P_k W_k^T o_k` (Eq. 14) with its matrices derived once per forward pass, as
/// [`PreparedSingle`].
pub struct PreparedHeads {
    /// `W^T` with head `k`'s rows scaled by `softplus(d_k)`, `[K D_r, D]`.
    merged_weight: Tensor,
    low_rank: Option<LowRank>,
}

impl PreparedHeads {
    /// The sum over the heads' outputs `o` `[B, K, N, D_r]`, giving `[B, N, D]`.
    pub fn apply(&self, o: &Tensor) -> Result<Tensor> {
        let (b, k, n, head_dim) = o.dims4()?;
        self.apply_merged(&o.transpose(1, 2)?.reshape((b, n, k * head_dim))?)
    }

    /// The same for the heads' outputs in the merged layout `[B, N, K D_r]`.
    pub fn apply_merged(&self, merged: &Tensor) -> Result<Tensor> {
        let mut out = kernels::linear(merged, &self.merged_weight, None)?;
        if let Some(low_rank) = &self.low_rank {
            out = (out + low_rank.apply(merged)?)?;
        }
        Ok(out)
    }
}

/// The block-diagonal `[K a, K c]` matrix of `K` blocks `[a, c]` (`blocks` `[K, a, c]`).
fn block_diagonal(blocks: &Tensor) -> Result<Tensor> {
    let (k, a, c) = blocks.dims3()?;
    let rows = (0..k)
        .map(|i| {
            let block = blocks.get(i)?;
            let before = Tensor::zeros((a, i * c), blocks.dtype(), blocks.device())?;
            let after = Tensor::zeros((a, (k - 1 - i) * c), blocks.dtype(), blocks.device())?;
            Tensor::cat(&[&before, &block, &after], 1)
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(Tensor::cat(&rows, 0)?)
}

/// `log(1 + e^x)`, computed as `max(x, 0) + log(1 + e^{-|x|})` so it never overflows.
pub fn softplus(x: &Tensor) -> Result<Tensor> {
    Ok((x.relu()? + (x.abs()?.neg()?.exp()? + 1.0)?.log()?)?)
}
