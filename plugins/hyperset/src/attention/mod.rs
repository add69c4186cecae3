//! The attention sub-step's operators (seed 000, Appendix G.1, Eq. 19 and Table 19).
//!
//! Every variant descends an attention energy of the generalised form (Eq. 19)
//!
//! `E_ATTN = sum_h sum_i f( sum_j K(W_h^T x_i, W_h^T x_j) )`
//!
//! on the normalised per-head projections `Z~ = RMSNorm(W_h^T X)` (Eq. 8), with
//! `beta = 1 / sqrt(p)`. Each file holds one choice of `f` and `K`:
//!
//! | option      | file           | `f(x)`           | `K(x, y)`                   | cost per head |
//! |-------------|----------------|------------------|-----------------------------|---------------|
//! | `bisoftmax` | `bisoftmax.rs` | `beta^-1 log x`  | `exp(beta x^T y)`           | `O(N^2 p)`    |
//! | `sigmoid`   | `sigmoid.rs`   | `beta^-1 x / 2`  | `σ(beta x^T y)`             | `O(N^2 p)`    |
//! | `linear`    | `linear.rs`    | `beta^-1 x / 2`  | `(beta Φ(x)^T Φ(y))^2 / 2`  | `O(N p^2)`    |
//!
//! Each file provides `mix(q, k, v, beta)`, the per-head output that the layer maps back
//! through `W` and subtracts (Eq. 9's bracket), and `energy(q, k, beta)`, one value per
//! sample. With one shared normalisation (`q = k = v = Z~`) `mix` is exactly `dE/dZ~`.
//!
//! **Separate Q/K/V gains** (`qkv_gains`, the image-classification model of the authors'
//! code, notes-hyperset.md §9): `q = Ẑ g_q`, `k = Ẑ g_k`, `v = Ẑ g_v` with `Ẑ` the gain-free
//! RMSNorm. For `bisoftmax` and `sigmoid` the scores `beta q k^T = beta Ẑ diag(g_q g_k) Ẑ^T`
//! stay symmetric, and `mix(q, k, Ẑ g_q g_k)` is exactly `dE/dẐ`: the layer's values,
//! which use `g_v` instead of `g_q g_k`, rescale that gradient channel-wise by
//! `g_v / (g_q g_k)`. For `linear` the kernel `Φ(g_q ẑ_i)^T Φ(g_k ẑ_j)` is not symmetric
//! and the update is the gradient of no energy we know of: its identity is not claimed.
//! How `linear` uses separate gains is not in the seeds (UNSURE); the choice here follows
//! the usual linear-attention reading, `Φ'(q) ⊙ beta Φ(q) (Φ(k)^T Φ(v))`.

pub mod bisoftmax;
pub mod linear;
pub mod sigmoid;

use plugin_api::candle::Tensor;
use plugin_api::{config_error, Result};

/// Which attention energy the layer descends (option `attention`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionKind {
    /// Bi-softmax attention, the default (Eq. 3, 7, 9).
    BiSoftmax,
    /// Sigmoid attention (Table 19, "Sigmoid-Softmax").
    Sigmoid,
    /// Linear attention with `Φ = σ` (Table 19), linear in the number of tokens.
    Linear,
}

impl AttentionKind {
    /// The option values, in the order of [`AttentionKind`].
    pub const NAMES: [&'static str; 3] = ["bisoftmax", "sigmoid", "linear"];

    /// Parses an option value.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "bisoftmax" => Ok(AttentionKind::BiSoftmax),
            "sigmoid" => Ok(AttentionKind::Sigmoid),
            "linear" => Ok(AttentionKind::Linear),
            other => {
                Err(config_error(format!("attention = {other} is unknown; choose one of {}", Self::NAMES.join(" | "))))
            }
        }
    }

    /// The per-head output `[B, H, N, p]` from normalised queries, keys and values
    /// (`[B, H, N, p]` each): `dE/dZ~` when all three are the same `Z~`.
    pub fn mix(self, query: &Tensor, key: &Tensor, value: &Tensor) -> Result<Tensor> {
        let beta = inverse_temperature(query)?;
        Ok(match self {
            AttentionKind::BiSoftmax => bisoftmax::mix(query, key, value, beta)?,
            AttentionKind::Sigmoid => sigmoid::mix(query, key, value, beta)?,
            AttentionKind::Linear => linear::mix(query, key, value, beta)?,
        })
    }

    /// The option value naming this variant.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// The energy, one value per sample (`[B]`), of queries and keys `[B, H, N, p]`
    /// (`query = key = Z~` for the energy of Eq. 19).
    pub fn energy(self, query: &Tensor, key: &Tensor) -> Result<Tensor> {
        let beta = inverse_temperature(query)?;
        Ok(match self {
            AttentionKind::BiSoftmax => bisoftmax::energy(query, key, beta)?,
            AttentionKind::Sigmoid => sigmoid::energy(query, key, beta)?,
            AttentionKind::Linear => linear::energy(query, key, beta)?,
        })
    }

    /// Whether `beta q k^T` enters the energy as a symmetric score matrix, so that the
    /// separate-gain identity of the module doc holds.
    pub fn has_symmetric_scores(self) -> bool {
        !matches!(self, AttentionKind::Linear)
    }

    /// The update's formula and its source, for the names of gradient identities.
    pub fn formula(self) -> (&'static str, &'static str) {
        match self {
            AttentionKind::BiSoftmax => ("(P+P^T) Z", "Eq. 7"),
            AttentionKind::Sigmoid => ("[s(1-s)](beta Z Z^T) Z", "Table 19, Eq. 19"),
            AttentionKind::Linear => ("Phi'(Z) . beta Phi(Z) Phi(Z)^T Phi(Z)", "Table 19, Eq. 19"),
        }
    }
}

/// `beta = 1 / sqrt(p)` for projections `[B, H, N, p]` (notes-hyperset.md §1.1).
pub fn inverse_temperature(z: &Tensor) -> Result<f64> {
    Ok(head_inverse_temperature(z.dim(3)?))
}

/// `beta = 1 / sqrt(p)` for heads of width `p`: the one place beta is computed.
pub fn head_inverse_temperature(head_dim: usize) -> f64 {
    1.0 / (head_dim as f64).sqrt()
}
