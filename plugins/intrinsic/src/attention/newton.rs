//! MHA2nd and MHA2nd1st: a per-head Newton step on the Euclidean free energy, with the
//! inverse of its Hessian's middle factor exact (MHA2nd, Eq. 21, `newton = full`) or replaced by
//! a first-order Taylor expansion (MHA2nd1st, Eq. 22-24, the default `newton = taylor`)
//! (seed 001, Section 3.2, App. A.3.1, Eq. 16-24).
//!
//! Energy: `F = (1/H) sum_h F_h`, `F_h = -T log sum_i exp(-||q_h - k_{i,h}||^2 / (2T))` with
//! `q_h = W_{Q,h} z`, `k_{i,h} = W_{K,h} h_i` (Eq. 16). With `p_{i,h}` the softmax of those
//! distance scores, `k^_h = sum_i p_{i,h} k_{i,h}` and `d_{i,h} = k_{i,h} - k^_h`:
//!
//! - gradient `grad F_h = W_{Q,h}^T (q_h - k^_h)` (Eq. 16);
//! - Hessian `W_{Q,h}^T C_h W_{Q,h}`, `C_h = I - (1/T) sum_i p_{i,h} d_{i,h} d_{i,h}^T` (Eq. 19);
//! - range-space pseudo-inverse `W^T (W W^T)^-1 C^-1 (W W^T)^-1 W` (Eq. 20), so the Newton
//!   direction is `M_h C_h^-1 (q_h - k^_h)` with `M_h = W_{Q,h}^T (W_{Q,h} W_{Q,h}^T)^-1` (Eq. 21);
//! - `C^-1 ~ I + (1/T) sum_i p d d^T` (Eq. 22) gives `M_h (q_h - k^_h + b_h)` (Eq. 23);
//! - implemented form (Eq. 24): `f(z) = sum_h W_{O,h} W_{V,h} M_h (q_h - k^_h + b_h)` with
//!   `b_h = (1/T_b) [sum_i p_{i,h} k_{i,h} (k_{i,h}^T u_h) - k^_h k^_h^T u_h]`, `u_h = q_h - k^_h`.
//!
//! MHA2nd (Eq. 21), `newton = full`: `f(z) = sum_h W_{O,h} W_{V,h} M_h C_h^-1 u_h`, with
//! `C_h = I - c_h sum_i p_{i,h} d_{i,h} d_{i,h}^T` inverted exactly for every query (one
//! `d_h x d_h` inverse per query and head, `O(N d_h^2)` memory: the cost the seed calls
//! impractical). `c_h` is the same learnable coefficient as MHA2nd1st's b-term (`1/T` in
//! Eq. 19-21, `c_h` or `1/T_b` once learnable), so Eq. 24's `u + b` is exactly the first-order
//! expansion `(I + c S) u` of this `(I - c S)^-1 u`, and the two forms differ by `O(c^2)`.
//! `C_h` may be singular (the energy is not convex, Lemma 1); the layer then reports an error.
//!
//! `W_{V,h}` acts on `M_h(.)`, a vector of `R^d`, not on the tokens: the "values" are the
//! keys, through `q - k^`. The seed's `+` sign (Newton's step has `-`) is kept; it is
//! absorbed in the learnable `W_V`, `W_O`, as is `eta / H`.
//!
//! Parameters beyond Eq. 6's: the head-wise learnable score temperature `T_h`, initialised to
//! `sqrt(2 d_h)` (`newton_temperature` is the factor 2), and the learnable b-term coefficient.
//! UNSURE (notes §3.3): the appendix says the "temperature in b_h" is initialised to 0.01,
//! which would multiply `b_h` by 100 if it divided. Default here: a head-wise multiplier
//! `c_h = 1/T_b` initialised to 0.01 (`newton_b_form = multiplier`, by analogy with
//! LightMHA2nd1st's `tau_h = 0.01`); `newton_b_form = temperature` divides by a learnable
//! `T_b` instead. `(W_{Q,h} W_{Q,h}^T)^-1` is computed once per forward from the weights
//! with [`crate::inverse::inverse`] (exact value and gradient); `newton_ridge` adds
//! `eps I` before inverting (the seed has none; 0 by default). With biases on, `q_h` is
//! affine; Eq. 24 is applied to it unchanged and `b_{V,h}` is added after `W_{V,h} M_h`.

use super::Projections;
use crate::config::{IntrinsicConfig, NewtonBForm, NewtonForm};
use crate::dropout::Dropout;
use crate::inverse::inverse;
use crate::ops::{logsumexp, per_head};
use kernels::softmax;
use plugin_api::candle::{Tensor, D};
use plugin_api::candle_nn::{Init, VarBuilder};
use plugin_api::ops::causal_mask;
use plugin_api::Result;

/// MHA2nd (Eq. 21) or MHA2nd1st (Eq. 24).
pub struct NewtonAttention {
    /// `W_Q, W_K, W_V, W_O`.
    pub proj: Projections,
    /// Head-wise score temperature `T_h`, `[H]`.
    temperature: Tensor,
    /// Head-wise b-term coefficient (`c_h` or `T_b`), `[H]`.
    b_coefficient: Tensor,
    b_form: NewtonBForm,
    form: NewtonForm,
    ridge: f64,
}

/// The per-head quantities of one Newton step, each `[B, H, N, .]`.
pub struct NewtonTerms {
    /// The attention weights `p_{i,h}` of the distance scores, `[B, H, N, N]`.
    pub weights: Tensor,
    /// `k^_h = sum_i p_{i,h} k_{i,h}`.
    pub mean_key: Tensor,
    /// `u_h = q_h - k^_h`, the gradient of `F_h` in head space (Eq. 16).
    pub gradient: Tensor,
    /// `sum_i p k (k^T u) - k^ k^T u = (sum_i p d d^T) u`, Eq. 24's bracket (b_h before its
    /// coefficient).
    pub covariance_product: Tensor,
}

impl NewtonAttention {
    /// MHA2nd1st over `proj`, with `vb.temperature` and `vb.b_scale` / `vb.b_temperature`.
    pub fn new(proj: Projections, cfg: &IntrinsicConfig, vb: &VarBuilder) -> Result<Self> {
        let t0 = (cfg.newton_temperature * cfg.head_dim() as f64).sqrt();
        let temperature = vb.get_with_hints(cfg.heads, "temperature", Init::Const(t0))?;
        let b_name = match cfg.newton_b_form {
            NewtonBForm::Multiplier => "b_scale",
            NewtonBForm::Temperature => "b_temperature",
        };
        let b_coefficient = vb.get_with_hints(cfg.heads, b_name, Init::Const(cfg.newton_b_init))?;
        Ok(NewtonAttention {
            proj,
            temperature,
            b_coefficient,
            b_form: cfg.newton_b_form,
            form: cfg.newton_form,
            ridge: cfg.newton_ridge,
        })
    }

    /// The score temperatures `T_h`, `[H]`.
    pub fn temperature(&self) -> &Tensor {
        &self.temperature
    }

    /// `((W_{Q,h} W_{Q,h}^T + eps I)^-1, W_{Q,h})`, `[H, d_h, d_h]` and `[H, d_h, d]`: the
    /// factors of `M_h` (Eq. 20-21).
    fn gram_inverse(&self) -> Result<(Tensor, Tensor)> {
        let w_q = head_columns(&self.proj.q.weight, self.proj.heads)?; // [H, d, d_h] = W_{Q,h}^T
        let w_q_t = w_q.transpose(1, 2)?.contiguous()?;
        let gram = w_q_t.matmul(&w_q)?; // W_{Q,h} W_{Q,h}^T
        let gram = if self.ridge > 0.0 {
            let eye = Tensor::eye(gram.dim(1)?, gram.dtype(), gram.device())?;
            gram.broadcast_add(&(eye * self.ridge)?)?
        } else {
            gram
        };
        let inv = inverse(&gram).map_err(|e| {
            plugin_api::config_error(format!(
                "newton: W_Q,h W_Q,h^T cannot be inverted ({e}); set newton_ridge > 0 or a larger init_std"
            ))
        })?;
        Ok((inv, w_q_t))
    }

    /// `W_{V,h} M_h` as a right factor of row vectors: `(W_{Q,h} W_{Q,h}^T + eps I)^-1
    /// W_{Q,h} W_{V,h}^T`, `[H, d_h, d_h]`.
    pub fn preconditioner(&self) -> Result<Tensor> {
        let (inv, w_q_t) = self.gram_inverse()?;
        let w_v = head_columns(&self.proj.v.weight, self.proj.heads)?;
        Ok(inv.matmul(&w_q_t.matmul(&w_v)?)?)
    }

    /// `M_h` as a right factor of row vectors, `(W_{Q,h} W_{Q,h}^T + eps I)^-1 W_{Q,h}`,
    /// `[H, d_h, d]`: maps a head-space direction back to the token space (Eq. 20).
    pub fn range_map(&self) -> Result<Tensor> {
        let (inv, w_q_t) = self.gram_inverse()?;
        Ok(inv.matmul(&w_q_t)?)
    }

    /// The b-term coefficient `c_h` (the multiplier, or `1 / T_b`), `[1, H, 1, 1]`.
    fn coefficient(&self) -> Result<Tensor> {
        Ok(match self.b_form {
            NewtonBForm::Multiplier => per_head(&self.b_coefficient)?,
            NewtonBForm::Temperature => per_head(&self.b_coefficient)?.recip()?,
        })
    }

    /// The head-space Newton direction for queries `q` and keys `k` (`[B, H, N, d_h]`):
    /// `u + c (sum p d d^T) u` (Eq. 23-24) or `(I - c sum p d d^T)^-1 u` (Eq. 21), the `p` of
    /// every term dropped by `dropout`.
    pub fn direction(&self, q: &Tensor, k: &Tensor, causal: bool, dropout: Dropout) -> Result<Tensor> {
        let terms = newton_terms(q, k, &self.temperature, causal, dropout)?;
        match self.form {
            NewtonForm::Taylor => {
                let b = match self.b_form {
                    NewtonBForm::Multiplier => {
                        terms.covariance_product.broadcast_mul(&per_head(&self.b_coefficient)?)?
                    }
                    NewtonBForm::Temperature => {
                        terms.covariance_product.broadcast_div(&per_head(&self.b_coefficient)?)?
                    }
                };
                Ok((terms.gradient + b)?)
            }
            NewtonForm::Full => full_direction(&terms, k, &self.coefficient()?),
        }
    }

    /// The configured form.
    pub fn form(&self) -> NewtonForm {
        self.form
    }

    /// `f(z) = sum_h W_{O,h} (W_{V,h} M_h g_h + b_{V,h})` with `g_h` the head-space
    /// direction of [`direction`](Self::direction) (Eq. 21 or Eq. 24).
    pub fn forward(&self, queries: &Tensor, context: &Tensor, causal: bool, dropout: Dropout) -> Result<Tensor> {
        if self.form == NewtonForm::Taylor && !dropout.is_active() {
            return self.fused_forward(queries, context, causal);
        }
        self.composed_forward(queries, context, causal, dropout)
    }

    /// [`forward`](Self::forward) for MHA2nd1st without attention dropout: the direction as
    /// one op on the merged projections ([`kernels::newton_direction`]), then `W_{V,h} M_h`
    /// and `W_O` as one map, since row block `h` of `blockdiag(R_h) W_O` is `R_h W_{O,h}`
    /// (`R_h` the [`preconditioner`](Self::preconditioner)): `g (R W_O) + (b_V W_O + b_O)`.
    fn fused_forward(&self, queries: &Tensor, context: &Tensor, causal: bool) -> Result<Tensor> {
        let p = &self.proj;
        let (q, k) = (p.q.forward(queries)?, p.k.forward(context)?);
        let coefficient = self.coefficient()?.flatten_all()?;
        let direction = kernels::newton_direction(&q, &k, &self.temperature, &coefficient, p.heads, causal)?;
        let (width, d) = p.o.weight.dims2()?;
        let w_o = p.o.weight.reshape((p.heads, width / p.heads, d))?;
        let weight = self.preconditioner()?.matmul(&w_o)?.reshape((width, d))?;
        let value_bias = match &p.v.bias {
            Some(b_v) => Some(b_v.unsqueeze(0)?.matmul(&p.o.weight)?.squeeze(0)?),
            None => None,
        };
        let bias = match (value_bias, &p.o.bias) {
            (Some(v), Some(o)) => Some((v + o)?),
            (v, o) => v.or_else(|| o.clone()),
        };
        Ok(kernels::linear(&direction, &weight, bias.as_ref())?)
    }

    /// [`forward`](Self::forward) as the seed writes it, term by term: every form, with or
    /// without attention dropout.
    pub fn composed_forward(
        &self,
        queries: &Tensor,
        context: &Tensor,
        causal: bool,
        dropout: Dropout,
    ) -> Result<Tensor> {
        let q = self.proj.queries(queries)?;
        let k = self.proj.keys(context)?;
        let direction = self.direction(&q, &k, causal, dropout)?;
        let mut out = direction.broadcast_matmul(&self.preconditioner()?.unsqueeze(0)?)?;
        if let Some(bias) = &self.proj.v.bias {
            let (heads, head_dim) = (self.proj.heads, self.proj.head_dim()?);
            out = out.broadcast_add(&bias.reshape((1, heads, 1, head_dim))?)?;
        }
        Ok(self.proj.output(&out)?)
    }

    /// `F = (1/H) sum_h F_h` (Eq. 16's energy) per sample, `[B]`.
    pub fn energy(&self, queries: &Tensor, context: &Tensor, causal: bool) -> Result<Tensor> {
        let q = self.proj.queries(queries)?;
        let k = self.proj.keys(context)?;
        Ok(distance_free_energy(&q, &k, &self.temperature, causal)?.mean(1)?)
    }
}

/// `-||q_t - k_i||^2 / (2 T_h)` per head, `[B, H, N, N]`, with `-inf` for `i > t` when causal.
fn distance_scores(q: &Tensor, k: &Tensor, temperature: &Tensor, causal: bool) -> Result<Tensor> {
    let q_sq = q.sqr()?.sum_keepdim(D::Minus1)?; // [B, H, N, 1]
    let k_sq = k.sqr()?.sum_keepdim(D::Minus1)?.transpose(2, 3)?; // [B, H, 1, N]
    let sq_dist = ((q.matmul(&k.t()?)? * -2.0)?.broadcast_add(&q_sq)?.broadcast_add(&k_sq))?;
    let mut scores = sq_dist.broadcast_div(&(per_head(temperature)? * -2.0)?)?;
    if causal {
        scores = scores.broadcast_add(&causal_mask(scores.dim(2)?, scores.dtype(), scores.device())?)?;
    }
    Ok(scores)
}

/// `p_ti = softmax_i(-||q_t - k_i||^2 / (2 T_h))` `[B, H, N, N]`. The `||q_t||^2` term is the
/// same for every key and cancels in the softmax; what is left, `q_t . k_i / T_h -
/// ||k_i||^2 / (2 T_h)`, is one product of the queries `[q / T_h, 1]` and keys
/// `[k, -||k||^2 / (2 T_h)]`, instead of five passes over the scores and their broadcasts.
fn distance_weights(q: &Tensor, k: &Tensor, temperature: &Tensor, causal: bool) -> Result<Tensor> {
    let t = per_head(temperature)?;
    let ones = Tensor::ones(q.dims()[..3].to_vec(), q.dtype(), q.device())?.unsqueeze(3)?;
    let queries = Tensor::cat(&[&q.broadcast_div(&t)?, &ones], 3)?;
    let key_term = (k.sqr()?.sum_keepdim(D::Minus1)? * -0.5)?.broadcast_div(&t)?;
    let keys = Tensor::cat(&[k, &key_term], 3)?;
    let mut scores = queries.matmul(&keys.t()?)?;
    if causal {
        scores = scores.broadcast_add(&causal_mask(scores.dim(2)?, scores.dtype(), scores.device())?)?;
    }
    Ok(softmax(&scores, D::Minus1)?)
}

/// `p`, `k^`, `u = q - k^` and `(sum_i p d d^T) u` for queries and keys `[B, H, N, d_h]` and
/// head-wise temperatures `[H]` (Eq. 16, 19, 24), with `p` dropped by `dropout` before any
/// term uses it.
pub fn newton_terms(
    q: &Tensor,
    k: &Tensor,
    temperature: &Tensor,
    causal: bool,
    dropout: Dropout,
) -> Result<NewtonTerms> {
    let weights = dropout.apply(distance_weights(q, k, temperature, causal)?)?;
    let mean_key = weights.matmul(k)?;
    let gradient = (q - &mean_key)?;
    // sum_i p_i k_i (k_i . u) - k^ (k^ . u): inner products first (App. A.3.1, cost O(N d_h)).
    let key_dot_u = gradient.matmul(&k.t()?)?; // [t, i] = k_i . u_t
    let spread = (&weights * key_dot_u)?.matmul(k)?;
    let mean_dot_u = (&mean_key * &gradient)?.sum_keepdim(D::Minus1)?;
    let covariance_product = (spread - mean_key.broadcast_mul(&mean_dot_u)?)?;
    Ok(NewtonTerms { weights, mean_key, gradient, covariance_product })
}

/// `(I - c S)^-1 u` for every query and head (Eq. 21), with `S = sum_i p_i k_i k_i^T - k^ k^T`
/// (`= sum_i p_i d_i d_i^T`) built explicitly, `[B, H, N, d_h, d_h]`; `c` is `[1, H, 1, 1]`.
pub fn full_direction(terms: &NewtonTerms, k: &Tensor, c: &Tensor) -> Result<Tensor> {
    let (b, h, n, dh) = k.dims4()?;
    let outer = |a: &Tensor| a.unsqueeze(4)?.broadcast_mul(&a.unsqueeze(3)?); // [B, H, N, d_h, d_h]
    let key_outer = outer(k)?.reshape((b, h, n, dh * dh))?;
    let second_moment = terms.weights.matmul(&key_outer)?.reshape((b, h, n, dh, dh))?;
    let covariance = (second_moment - outer(&terms.mean_key)?)?;
    let eye = Tensor::eye(dh, k.dtype(), k.device())?;
    // One batch axis of `d_h x d_h` matrices for the inverse and the products.
    let c_matrix = eye.broadcast_sub(&covariance.broadcast_mul(&c.unsqueeze(4)?)?)?.reshape((b * h * n, dh, dh))?;
    let c_inverse = inverse(&c_matrix).map_err(|e| match e {
        plugin_api::PluginError::Other(message) if message.contains("singular") => {
            plugin_api::PluginError::Other(format!(
                "newton = full: C_h = I - c_h sum_i p d d^T is singular for some query ({message}); lower \
                 newton_b_init or use newton = taylor"
            ))
        }
        other => other,
    })?;
    let u = terms.gradient.reshape((b * h * n, dh, 1))?;
    Ok(c_inverse.matmul(&u)?.reshape((b, h, n, dh))?)
}

/// `F_h = -sum_t T_h log sum_i exp(-||q_t - k_i||^2 / (2 T_h))` per sample and head, `[B, H]`.
pub fn distance_free_energy(q: &Tensor, k: &Tensor, temperature: &Tensor, causal: bool) -> Result<Tensor> {
    let lse = logsumexp(&distance_scores(q, k, temperature, causal)?)?; // [B, H, N]
    let temperature = temperature.reshape((1, temperature.elem_count(), 1))?;
    Ok(lse.broadcast_mul(&temperature)?.sum(D::Minus1)?.neg()?)
}

/// Head `h`'s columns of a `[d, H d_h]` weight, `[H, d, d_h]` (= `W_{.,h}^T`).
fn head_columns(w: &Tensor, heads: usize) -> Result<Tensor> {
    let (d, width) = w.dims2()?;
    Ok(w.reshape((d, heads, width / heads))?.transpose(0, 1)?.contiguous()?)
}
