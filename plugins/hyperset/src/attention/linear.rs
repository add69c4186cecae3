//! Linear attention with `Φ = σ` (seed 000, Appendix G.1, Table 19; Table 4 ablation).
//!
//! Eq. 19 with `f(x) = beta^-1 x / 2` and `K(x, y) = (beta Φ(x)^T Φ(y))^2 / 2`:
//!
//! `E^h = 1/4 beta^-1 sum_i sum_j (beta Φ(z_i)^T Φ(z_j))^2 = beta/4 ||Φ(Z)^T Φ(Z)||_F^2`
//!
//! and `dE^h/dZ = Φ'(Z) ⊙ (beta Φ(Z) (Φ(Z)^T Φ(Z)))` (Table 19's last column, which is
//! `+grad E`; the layer subtracts it, notes-hyperset.md §2.1).
//!
//! Row-major, per head, the `p x p` matrix `Φ(K)^T Φ(V)` is formed first, so no `N x N`
//! matrix is ever built: the cost is `O(N p^2)` (the energy likewise uses two `p x p`
//! Gram matrices). The seeds use `beta = 1/sqrt(p)`; the authors' masked-image-modelling
//! code scales by `T^-1/2` instead (notes-hyperset.md §9), which is not followed here.

use crate::phi::{phi, phi_prime};
use plugin_api::candle::{Result, Tensor};

/// `Φ'(q) ⊙ (beta Φ(q) (Φ(k)^T Φ(v)))`, in `O(N p^2)` per head.
pub fn mix(query: &Tensor, key: &Tensor, value: &Tensor, beta: f64) -> Result<Tensor> {
    let key_value = phi(key)?.t()?.matmul(&phi(value)?)?; // [B, H, p, p]
    let attended = (phi(query)?.matmul(&key_value)? * beta)?;
    phi_prime(query)? * attended
}

/// `beta/4 <Φ(q)^T Φ(q), Φ(k)^T Φ(k)>_F` per sample, i.e.
/// `1/4 beta^-1 sum_h sum_i sum_j (beta Φ(q_i)^T Φ(k_j))^2`, in `O(N p^2)`.
pub fn energy(query: &Tensor, key: &Tensor, beta: f64) -> Result<Tensor> {
    let gram = |z: &Tensor| -> Result<Tensor> {
        let f = phi(z)?;
        f.t()?.matmul(&f)
    };
    (gram(query)? * gram(key)?)?.flatten_from(1)?.sum(1)? * (beta / 4.0)
}
