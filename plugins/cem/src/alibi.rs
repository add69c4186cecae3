//! Positions for CEM attention: ALiBi with learnable self / cross biases (seed 002 Appendix B).
//!
//! RoPE would make `A_k` depend on the query index and so make the "values" `beta_kj`
//! query-dependent; CEM adds instead a bias to the scores, which shifts the logits inside the
//! log-sum-exp of the energy (Appendix B):
//!
//! `s_ijk = beta_kj^T x_i / tau + b_ijk`, `b_ijk = -m_k |i - j| + b_self,k [i = j] + b_cross,k [i != j]`.
//!
//! Choices (notes-cem.md §3.5, UNSURE): the distance term is a penalty (the paper's `+m_k`
//! would favour distant tokens; standard ALiBi subtracts); the slopes are Press et al.'s
//! `m_k = 2^(-8k/K)`, which is the paper's example `2^(-k)` for `K = 8`; the self and cross
//! biases are learnable scalars per head, initialised to 0 (only their difference changes the
//! softmax, but both shift the energy).

use plugin_api::candle::{DType, Device, Tensor};
use plugin_api::candle_nn::{Init, VarBuilder};
use plugin_api::ops::causal_mask;
use plugin_api::Result;

/// ALiBi slopes and the learnable per-head self / cross biases of one attention sub-layer.
pub struct Alibi {
    slopes: Vec<f64>,
    /// `b_{i=j}` per head, `[K]`.
    self_bias: Tensor,
    /// `b_{i!=j}` per head, `[K]`.
    cross_bias: Tensor,
}

impl Alibi {
    /// Creates `alibi_self` and `alibi_cross` (`[K]`, zero) for `heads` heads.
    pub fn new(heads: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Alibi {
            slopes: slopes(heads),
            self_bias: vb.get_with_hints(heads, "alibi_self", Init::Const(0.0))?,
            cross_bias: vb.get_with_hints(heads, "alibi_cross", Init::Const(0.0))?,
        })
    }

    /// `b_ijk` `[K, N, N]` for a sequence of `n` tokens.
    pub fn bias(&self, n: usize, dtype: DType, device: &Device) -> Result<Tensor> {
        let heads = self.slopes.len();
        let distance: Vec<f64> = (0..n).flat_map(|i| (0..n).map(move |j| i.abs_diff(j) as f64)).collect();
        let distance = Tensor::from_vec(distance, (1, n, n), device)?.to_dtype(dtype)?;
        let slopes = Tensor::from_vec(self.slopes.clone(), (heads, 1, 1), device)?.to_dtype(dtype)?;
        let eye = Tensor::eye(n, dtype, device)?.unsqueeze(0)?;
        let off_diagonal = (1.0 - &eye)?;
        let penalty = slopes.broadcast_mul(&distance)?.neg()?;
        let self_term = self.self_bias.reshape((heads, 1, 1))?.broadcast_mul(&eye)?;
        let cross_term = self.cross_bias.reshape((heads, 1, 1))?.broadcast_mul(&off_diagonal)?;
        Ok(((penalty + self_term)? + cross_term)?)
    }
}

/// Press et al.'s geometric slopes `m_k = 2^(-8k/K)`, `k = 1..=K`.
pub fn slopes(heads: usize) -> Vec<f64> {
    (1..=heads).map(|k| 2f64.powf(-8.0 * k as f64 / heads as f64)).collect()
}

/// Everything added to the attention scores: the ALiBi bias (`[K, N, N]`, if any, as
/// [`Alibi::bias`] built it) plus, for a causal pass, `-inf` above the diagonal (the sums over
/// `j <= i` of Eq. 1); `None` if neither.
pub fn score_bias(
    bias: Option<Tensor>,
    n: usize,
    causal: bool,
    dtype: DType,
    device: &Device,
) -> Result<Option<Tensor>> {
    if !causal {
        return Ok(bias);
    }
    let mask = causal_mask(n, dtype, device)?.unsqueeze(0)?;
    Ok(Some(match bias {
        Some(b) => b.broadcast_add(&mask)?,
        None => mask,
    }))
}
