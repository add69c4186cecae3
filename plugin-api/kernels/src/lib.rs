//! Fused CPU kernels with hand-written backward passes, shared by the layer plugins.
//!
//! A model built from candle's differentiable primitives spends most of a training step
//! outside its matrix products: every graph node costs a full pass over memory forward, and
//! in the backward candle adds each gradient into a fresh zero tensor, so an `RMSNorm` of six
//! ops costs some twenty passes. Each op here is one candle `CustomOp` with a `cpu_fwd` that
//! reads its inputs in any layout (transposed and narrowed views need no `contiguous()` copy)
//! and a `bwd` that is itself one pass, multi-threaded over rows with rayon when the work is
//! large enough:
//!
//! | function                 | computes                                              | replaces (`plugin_api::ops`)        |
//! |--------------------------|-------------------------------------------------------|-------------------------------------|
//! | [`rms_norm`]             | `x / sqrt(mean(x^2) + eps) * g` over the last dim      | `rms_norm`                          |
//! | [`normed_activation`]    | `act(rms_norm(x, g))`, `act` = identity, ReLU, GELU    | `rms_norm` then `relu` / `gelu_erf` |
//! | [`normed_feedforward`]   | `act(rms_norm(x D, g)) D^T`, one dictionary `D` twice | `linear`, `normed_activation`, `linear_transposed` |
//! | [`softmax`]              | softmax over the last dim                             | `softmax(x, D::Minus1)`             |
//! | [`bi_softmax`]           | `softmax(A, -1) + softmax(A, -2)`                      | `bi_softmax`                        |
//! | [`activation`]           | `relu(x)` or `gelu_erf(x)` ([`relu`], [`gelu_erf`])   | `Tensor::relu`, `Tensor::gelu_erf`  |
//! | [`linear`]               | `x w + b` for `x` of any rank                         | reshape, `matmul`, reshape, `broadcast_add` |
//! | [`add_row`]              | `x + v`, `v` added to every row                       | `broadcast_add`                     |
//! | [`add_scaled`]           | `x + sign a u`, element-wise                          | `*` then `+` or `-`                 |
//! | [`bi_softmax_attention`] | `(P + P^T) Z` per head, `Z = rms_norm(XW_h, g)`       | split, `rms_norm`, scores, `bi_softmax`, product, merge |
//! | [`softmax_attention`]    | `softmax(scale Q_h K_h^T) V_h` per head, optionally causal | split, scores, mask, `softmax`, product, merge |
//! | [`Kernels::softmax_attention`] | the same with GPT-2's dropout on the weights     | the same with `seeded_dropout` on the weights |
//! | [`tied_attention`]       | CEM's `softmax(scale Q_h K_h^T + S_b + A_h) K_h` per head | split, scores, additive scores, mask, `softmax`, product, merge |
//!
//! The fused forms run for f32 and f64 tensors on the CPU. On a CUDA device (a build with the
//! `cuda` feature) with `WORKBENCH_CUDA_KERNELS=1` (unfinished: not yet run on a GPU) the
//! normalisations (RMSNorm, LayerNorm, with ReLU after them) and the softmax along rows or
//! columns (so the bi-softmax too) are one CUDA kernel each way (`gpu.rs`), and the attention
//! ops are candle's composition around them; the rest is candle's composition there. On any
//! other device or dtype each function returns the differentiable composition of
//! `plugin_api::ops` instead; [`is_fused`] says whether a tensor gets the CPU kernels. Every
//! op's forward and backward are checked against autograd of that composition in f64 (relative
//! error <= 1e-6) on odd and non-contiguous shapes (`tests.rs`; the CUDA kernels' source under
//! an emulation of CUDA on the CPU, `tests_emulated.rs`, and the CUDA ops on a GPU,
//! `tests_cuda.rs`).
//!
//! A layer that wants both paths (to compare them, or for its identity checks) takes a
//! [`Kernels`] option: `Kernels::Composed` always composes.
//!
//! Inside the ops: reductions keep eight partial sums and `exp` / the normal distribution
//! function are branch-free polynomials for f32 (`vector.rs`), so the row loops vectorise;
//! f64 uses libm (it serves the exactness tests). Work is split over rayon's pool (as the
//! `gemm` crate's products are) only when it has more than one thread and the op more than
//! 16k entries; candle's own spinning pool was tried for it and was slower on two cores. The attention ops recompute
//! their `N x N` scores in the backward instead of keeping them in the graph.
//!
//! # Measuring
//!
//! - `workbench bench` prints wall and CPU time per step, samples/s, GFLOP/s and the number
//!   of recorded graph nodes and their bytes (`kernels=composed` for the old path);
//! - `plugin-api/kernels/profile-step.sh STEPS BENCH-ARGS` attributes a step's time per op
//!   site and kernel class from `perf` call stacks (example `perf_ops`);
//! - `plugin-api/kernels/bench-compare.sh REPEATS CONFIG...` gives medians of interleaved
//!   bench runs (one run says little on a shared machine);
//! - `cargo run --release -p kernels --example gemm_peak` measures candle's f32 gemm, the
//!   processor's f32 FMA limit, and the step's products with their operands out of cache.

/// `per_real!(storage, op_name, |T| body)`: `body` (a `Vec<T>`) for the storage's float type,
/// `T = f32` or `f64`, wrapped back into a `CpuStorage`; other dtypes are refused with the
/// op's name. One place for the dispatch every op's `cpu_fwd` needs.
macro_rules! per_real {
    ($storage:expr, $name:expr, |$t:ident| $body:expr) => {
        match $storage {
            candle_core::CpuStorage::F32(_) => {
                type $t = f32;
                candle_core::CpuStorage::F32($body)
            }
            candle_core::CpuStorage::F64(_) => {
                type $t = f64;
                candle_core::CpuStorage::F64($body)
            }
            other => {
                candle_core::bail!("{}: only f32 and f64 are supported, got {:?}", $name, crate::strided::dtype(other))
            }
        }
    };
}

/// `with_fma!(f::<T>(args...))`: `f::<T, true>(args...)` where the kernels' loops have fused
/// multiply-adds (`widest::fma_in_use`), else `f::<T, false>(args...)`. One load decides;
/// each instance then holds its choice as a constant, so its element loops stay branch-free.
macro_rules! with_fma {
    ($f:ident::<$t:ty>($($arg:expr),* $(,)?)) => {
        if $crate::widest::fma_in_use() {
            $f::<$t, true>($($arg),*)
        } else {
            $f::<$t, false>($($arg),*)
        }
    };
}

/// Calls `$body` with `$f` bound to the activation and `$df` to its derivative as closures,
/// so that each activation gets its own branch-free (vectorisable) copy of the loops.
macro_rules! with_activation {
    // An activation evaluated by polynomials: one copy of the loops with fused multiply-adds,
    // one without (`with_fma!`).
    (@fma $f:ident, $df:ident, $act:ident, $derivative:ident, $body:expr) => {
        if $crate::widest::fma_in_use() {
            let $f = $crate::norm::$act::<T, true>;
            let $df = $crate::norm::$derivative::<T, true>;
            $body
        } else {
            let $f = $crate::norm::$act::<T, false>;
            let $df = $crate::norm::$derivative::<T, false>;
            $body
        }
    };
    ($act:expr, |$f:ident, $df:ident| $body:expr) => {
        match $act {
            $crate::norm::Activation::Identity => {
                let $f = |u: T| u;
                let $df = |_: T| T::one();
                $body
            }
            $crate::norm::Activation::Relu => {
                let $f = |u: T| if u > T::zero() { u } else { T::zero() };
                let $df = |u: T| if u > T::zero() { T::one() } else { T::zero() };
                $body
            }
            $crate::norm::Activation::Gelu => with_activation!(@fma $f, $df, gelu, gelu_derivative, $body),
            $crate::norm::Activation::GeluTanh => with_activation!(@fma $f, $df, gelu_tanh, gelu_tanh_derivative, $body),
            $crate::norm::Activation::Silu => with_activation!(@fma $f, $df, silu, silu_derivative, $body),
        }
    };
}

mod activation;
mod attention;
mod cross_entropy;
pub mod dense;
mod dropout_mask;
mod energy_attention;
pub mod flops;
mod gpu;
mod head_product;
#[cfg(target_arch = "x86_64")]
mod lanes;
mod layer_norm;
mod linear;
mod lower_product;
mod newton_attention;
mod norm;
mod normed_feedforward;
mod real;
mod scaled;
mod scratch;
mod softmax;
mod softmax_attention;
#[cfg(target_arch = "x86_64")]
mod softmax_row_wide;
mod strided;
mod tied_attention;
mod transpose;
mod vector;
mod widest;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_emulated;
plugin_api::with_cuda! {
    #[cfg(test)]
    mod tests_cuda;
}

pub use head_product::product_f32 as head_product_f32;
pub use head_product::symmetric_f32 as symmetric_head_product_f32;
pub use layer_norm::{LayerNorm, LAYER_NORM_EPS};
pub use norm::Activation;

use candle_core::shape::Dim;
use candle_core::{DType, Result, Tensor, D};
use plugin_api::ops;

/// Whether the fused kernels serve `t`: f32 or f64 on the CPU. Otherwise the functions of this
/// crate fall back to the differentiable composition.
pub fn is_fused(t: &Tensor) -> bool {
    t.device().is_cpu() && matches!(t.dtype(), DType::F32 | DType::F64)
}

/// Whether `gain` can go to a fused op next to `x`: same dtype and device, shape `[len]`.
fn gain_fits(x: &Tensor, gain: &Tensor, len: usize) -> bool {
    gain.dtype() == x.dtype() && gain.device().same_device(x.device()) && gain.dims() == [len]
}

/// RMSNorm over the last dimension, `x / sqrt(mean(x^2) + eps)`, times `gain` when given
/// (shape `[last dim]`): `plugin_api::ops::rms_norm` as one op.
pub fn rms_norm(x: &Tensor, gain: Option<&Tensor>, eps: f64) -> Result<Tensor> {
    normed_activation(x, gain, eps, Activation::Identity)
}

/// `act(rms_norm(x, gain, eps))`: the normalised hidden units of a feedforward step and their
/// activation as one op (Hyper-SET's `ReLU(RMSNorm(D^T X))`, seed 000 Eq. 11).
pub fn normed_activation(x: &Tensor, gain: Option<&Tensor>, eps: f64, act: Activation) -> Result<Tensor> {
    let len = x.dims().last().copied().unwrap_or(1);
    if gain.is_some_and(|g| !gain_fits(x, g, len)) {
        return Kernels::Composed.normed_activation(x, gain, eps, act);
    }
    if gpu::serves(x) {
        return match gpu::serves_activation(act) {
            true => gpu::norm(x, gain, eps, act, false),
            false => activation(&gpu::norm(x, gain, eps, Activation::Identity, false)?, act),
        };
    }
    if !is_fused(x) {
        return Kernels::Composed.normed_activation(x, gain, eps, act);
    }
    match gain {
        None => x.apply_op1(norm::Norm { eps, act, centre: false }),
        Some(g) => x.apply_op2(g, norm::NormGain(norm::Norm { eps, act, centre: false })),
    }
}

/// `act(rms_norm(x D, gain, eps)) D^T` for `x` `[..., k]` and a dictionary `D` `[k, M]` used
/// for the up- and the down-projection (Hyper-SET's feedforward update, seed 000 Eq. 11), with
/// `gain` `[M]`: [`linear`], [`normed_activation`] and [`linear_transposed`] as one op, whose
/// intermediates live in a per-thread scratch and of which only `x D` is kept for the backward
/// (`normed_feedforward.rs`). Elsewhere than the CPU kernels serve, those three ops.
pub fn normed_feedforward(x: &Tensor, d: &Tensor, gain: Option<&Tensor>, eps: f64, act: Activation) -> Result<Tensor> {
    let width = d.dims().get(1).copied().unwrap_or(0);
    if !linear_fits(x, d, None, false) || gain.is_some_and(|g| !gain_fits(x, g, width)) {
        let activated = normed_activation(&linear(x, d, None)?, gain, eps, act)?;
        return linear_transposed(&activated, d, None);
    }
    let op = normed_feedforward::NormedFeedforward::new(eps, act);
    match gain {
        None => x.apply_op2(d, op),
        Some(g) => x.apply_op3(d, g, op),
    }
}

/// Softmax along `dim`: fused when `dim` is the last dimension (on a CUDA device also the one
/// before it), else candle's composition.
pub fn softmax(x: &Tensor, dim: D) -> Result<Tensor> {
    let Some(last) = x.rank().checked_sub(1) else { return ops::softmax(x, dim) };
    let index = dim.to_index(x.shape(), "softmax")?;
    if gpu::serves(x) && index + 1 >= last {
        return gpu::softmax(x, if index == last { gpu::Along::Rows } else { gpu::Along::Columns });
    }
    if is_fused(x) && index == last {
        x.apply_op1(softmax::SoftmaxLastDim)
    } else {
        ops::softmax(x, dim)
    }
}

/// `softmax(a, -1) + softmax(a, -2)` over the last two dimensions (for symmetric scores
/// `P + P^T`, Hyper-SET's bi-softmax, seed 000 Eq. 7 and 9); `a` of rank >= 2.
pub fn bi_softmax(a: &Tensor) -> Result<Tensor> {
    if gpu::serves(a) && a.rank() >= 2 {
        return gpu::softmax(a, gpu::Along::Rows)? + gpu::softmax(a, gpu::Along::Columns)?;
    }
    if is_fused(a) && a.rank() >= 2 {
        a.apply_op1(softmax::BiSoftmax)
    } else {
        ops::bi_softmax(a)
    }
}

/// `act(x)` element-wise with a one-pass backward: [`Activation::Relu`] (candle's `relu`),
/// [`Activation::Gelu`] (candle's `gelu_erf`), [`Activation::GeluTanh`] (candle's `gelu`,
/// whose backward is a dozen candle ops) or [`Activation::Silu`] (candle's `silu`);
/// `Identity` returns `x`.
pub fn activation(x: &Tensor, act: Activation) -> Result<Tensor> {
    match act {
        Activation::Identity => Ok(x.clone()),
        _ if is_fused(x) => x.apply_op1(activation::Elementwise { act }),
        _ => Kernels::Composed.activation(x, act),
    }
}

/// `gate act(x)` element-wise (both of one shape, any layout) with a one-pass backward for
/// both: a gated MLP's hidden layer (CEM's `gamma o SiLU(V u)`, seed 002 Eq. 8), one op and
/// one recorded tensor where the composition takes two of each.
pub fn gated_activation(x: &Tensor, gate: &Tensor, act: Activation) -> Result<Tensor> {
    let fits =
        is_fused(x) && gate.dtype() == x.dtype() && gate.device().same_device(x.device()) && gate.dims() == x.dims();
    if fits {
        x.apply_op2(gate, activation::Gated { act })
    } else {
        gate * Kernels::Composed.activation(x, act)?
    }
}

/// `act(x + v)` with `v` (`[n]`) added to every row of `x` (`[..., n]`), as one op with a
/// one-pass backward; elsewhere [`add_row`] then [`activation`].
pub fn shifted_activation(x: &Tensor, v: &Tensor, act: Activation) -> Result<Tensor> {
    let n = x.dims().last().copied().unwrap_or(1);
    if is_fused(x) && x.rank() >= 1 && gain_fits(x, v, n) {
        x.apply_op2(v, activation::ShiftedActivation { act })
    } else {
        activation(&add_row(x, v)?, act)
    }
}

/// The exact GELU `x Ncdf(x)` (candle's `gelu_erf`) with a one-pass backward.
pub fn gelu_erf(x: &Tensor) -> Result<Tensor> {
    activation(x, Activation::Gelu)
}

/// ReLU (candle's `relu`) with a one-pass backward.
pub fn relu(x: &Tensor) -> Result<Tensor> {
    activation(x, Activation::Relu)
}

/// `tril(u k^T)` per sample for `u`, `k` `[B, N, D]`: `[B, N, N]`, zero above the diagonal,
/// the scores of a causal attention without the half the mask discards (CEM's shared
/// KQ-diagonal scores), with its own backward (`lower_product.rs`); elsewhere the masked
/// batched product.
pub fn lower_product(u: &Tensor, k: &Tensor) -> Result<Tensor> {
    if is_fused(u) && k.dtype() == u.dtype() && k.device().same_device(u.device()) {
        return u.apply_op2(k, lower_product::LowerProduct);
    }
    let n = u.dim(1)?;
    let lower = Tensor::tril2(n, u.dtype(), u.device())?;
    u.matmul(&k.t()?)?.broadcast_mul(&lower)
}

/// `x w (+ bias)` for `x` `[..., k]`, `w` `[k, n]` (any strides: pass `W^T` as the view
/// `w.t()`), `bias` `[n]`: a linear map of the last dimension as one op.
pub fn linear(x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    linear_op(x, w, bias, false)
}

/// `x w^T (+ bias)` for a weight `w` `[n, k]` (the layout of PyTorch's `nn.Linear`): as
/// [`linear`] with `w.t()`, but the weight's gradient comes back in its own layout, where the
/// transposed view's would reach it through candle's transpose and be added to its other
/// gradients entry by entry.
pub fn linear_transposed(x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    linear_op(x, w, bias, true)
}

/// `relu(x w)` for `x` `[..., k]`, `w` `[k, n]`: [`linear`] and [`relu`] as one op, the
/// rectifier applied while the product's output is in the cache, and only its output kept
/// for the backward (a Transformer MLP's up-projection).
pub fn linear_relu(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    if linear_fits(x, w, None, false) {
        x.apply_op2(w, linear::Linear { transposed: false, relu: true })
    } else {
        Kernels::Composed.relu(&Kernels::Composed.linear(x, w, None)?)
    }
}

/// `relu(x w^T)` for a weight `w` `[n, k]`: [`linear_relu`] with the weight as
/// [`linear_transposed`] takes it (the Energy Transformer's memories, `ReLU(g Xi^T)`).
pub fn linear_transposed_relu(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    if linear_fits(x, w, None, true) {
        x.apply_op2(w, linear::Linear { transposed: true, relu: true })
    } else {
        Kernels::Composed.relu(&Kernels::Composed.linear(x, &w.t()?, None)?)
    }
}

/// Whether [`linear`] (or [`linear_transposed`]) can run as a fused op on these arguments.
fn linear_fits(x: &Tensor, w: &Tensor, bias: Option<&Tensor>, transposed: bool) -> bool {
    let k = x.dims().last().copied().unwrap_or(0);
    let (inner, outer) = if transposed { (1, 0) } else { (0, 1) };
    is_fused(x)
        && x.rank() >= 1
        && w.dims().len() == 2
        && w.dims()[inner] == k
        && w.dtype() == x.dtype()
        && w.device().same_device(x.device())
        && bias.is_none_or(|b| gain_fits(x, b, w.dims()[outer]))
}

fn linear_op(x: &Tensor, w: &Tensor, bias: Option<&Tensor>, transposed: bool) -> Result<Tensor> {
    if !linear_fits(x, w, bias, transposed) {
        return match transposed {
            true => Kernels::Composed.linear(x, &w.t()?, bias),
            false => Kernels::Composed.linear(x, w, bias),
        };
    }
    match bias {
        None => x.apply_op2(w, linear::Linear { transposed, relu: false }),
        Some(b) => x.apply_op3(w, b, linear::LinearBias { transposed }),
    }
}

/// LayerNorm over the last dimension, `(x - mean) / sqrt(var + eps) gain + bias`, with the
/// biased variance of PyTorch's `nn.LayerNorm`. The variance is the mean square of the centred
/// `x`, so this is [`rms_norm`] of `x - mean`: one fused op with its own backward (and the
/// bias added by [`add_row`]), instead of the eight candle ops of the composition.
pub fn layer_norm(x: &Tensor, gain: Option<&Tensor>, bias: Option<&Tensor>, eps: f64) -> Result<Tensor> {
    let len = x.dims().last().copied().unwrap_or(1);
    let gain_serves = gain.is_none_or(|g| gain_fits(x, g, len));
    let normed = if gpu::serves(x) && gain_serves {
        gpu::norm(x, gain, eps, Activation::Identity, true)?
    } else if !is_fused(x) || !gain_serves {
        rms_norm(&x.broadcast_sub(&x.mean_keepdim(candle_core::D::Minus1)?)?, gain, eps)?
    } else {
        let norm = norm::Norm { eps, act: Activation::Identity, centre: true };
        match gain {
            None => x.apply_op1(norm)?,
            Some(g) => x.apply_op2(g, norm::NormGain(norm))?,
        }
    };
    match bias {
        Some(b) => add_row(&normed, b),
        None => Ok(normed),
    }
}

/// The weighted mean cross-entropy of `logits` `[M, C]` against class ids `targets` `[M]` (u32),
/// with optional row weights `weights` `[M]` (the plain mean without): the value of
/// `plugin_api::ops::weighted_cross_entropy` as one op on the CPU (its composition elsewhere).
/// Only the logits get a gradient.
pub fn weighted_cross_entropy(logits: &Tensor, targets: &Tensor, weights: Option<&Tensor>) -> Result<Tensor> {
    let rows = logits.dims().first().copied().unwrap_or(0);
    let fits = is_fused(logits)
        && logits.rank() == 2
        && targets.dtype() == DType::U32
        && targets.dims() == [rows]
        && targets.device().same_device(logits.device())
        && weights.is_none_or(|w| w.dims() == [rows] && w.device().same_device(logits.device()));
    if !fits {
        return ops::weighted_cross_entropy(logits, targets, weights);
    }
    let weights = match weights {
        Some(w) => w.to_dtype(logits.dtype())?.contiguous()?,
        None => Tensor::ones(rows, logits.dtype(), logits.device())?,
    };
    logits.apply_op3(&targets.contiguous()?, &weights, cross_entropy::CrossEntropy { grad: None })
}

/// `x + v` with the row vector `v` (`[n]`) added to every row of `x` (`[..., n]`).
pub fn add_row(x: &Tensor, v: &Tensor) -> Result<Tensor> {
    let n = x.dims().last().copied().unwrap_or(1);
    if is_fused(x) && x.rank() >= 1 && gain_fits(x, v, n) {
        x.apply_op2(v, linear::AddRow)
    } else {
        x.broadcast_add(v)
    }
}

/// `x + sign a u` element-wise (all three of one shape, any layout; `sign` +1 or -1): a
/// gradient step of per-entry size `a` along `u` (Hyper-SET's `X - alpha . A(X)`, seed 000
/// Eq. 9, and `X + gamma . F(X)`, Eq. 11) as one op.
pub fn add_scaled(x: &Tensor, a: &Tensor, u: &Tensor, sign: f64) -> Result<Tensor> {
    let fits = is_fused(x)
        && [a, u].iter().all(|t| t.dtype() == x.dtype() && t.device().same_device(x.device()) && t.dims() == x.dims());
    if fits {
        x.apply_op3(a, u, scaled::AddScaled { sign })
    } else {
        Kernels::Composed.add_scaled(x, a, u, sign)
    }
}

/// `x + s u` for a one-element `s` (a learned scalar step size, any shape of one element) and
/// `x`, `u` of one shape (any layout), with a one-pass backward (`ds = sum(dy u)` without
/// candle's broadcast reduction); elsewhere `x + u s` by broadcasting.
pub fn add_times_scalar(x: &Tensor, s: &Tensor, u: &Tensor) -> Result<Tensor> {
    let fits = is_fused(x)
        && s.elem_count() == 1
        && u.dims() == x.dims()
        && [s, u].iter().all(|t| t.dtype() == x.dtype() && t.device().same_device(x.device()));
    if fits {
        x.apply_op3(s, u, scaled::AddTimesScalar)
    } else {
        x + u.broadcast_mul(s)?
    }
}

/// Bi-softmax attention on RMS-normalised heads, merged back (seed 000, Eq. 7-9): for `xw`
/// `[B, N, H p]` (the projection `X W`), per head `Z = rms_norm(xw_h, gain, eps)` and the
/// output's head columns are `(softmax_row(A) + softmax_col(A)) Z` with `A = beta Z Z^T`.
/// `gain` is `[p]` or absent.
pub fn bi_softmax_attention(xw: &Tensor, gain: Option<&Tensor>, heads: usize, beta: f64, eps: f64) -> Result<Tensor> {
    let width = xw.dims().last().copied().unwrap_or(0);
    let head_dim = width.checked_div(heads).unwrap_or(0);
    if !is_fused(xw) || xw.rank() != 3 || gain.is_some_and(|g| !gain_fits(xw, g, head_dim)) {
        return composed_bi_softmax_attention(xw, gain, heads, beta, eps, Kernels::Fused);
    }
    let gain = match gain {
        Some(g) => g.clone(),
        // The ops always take a gain; ones (not a variable) leave the result unchanged.
        None => Tensor::ones(head_dim, xw.dtype(), xw.device())?,
    };
    xw.apply_op2(&gain, attention::BiSoftmaxAttention { heads, eps, beta, weights: Default::default() })
}

/// Multi-head softmax attention, merged back: for `q`, `k`, `v` `[B, N, H p]` (the merged
/// projections, any strides; they may be one tensor), per head
/// `softmax_row(scale Q_h K_h^T) V_h` into the output's head columns, with key `j > i` left out
/// of query `i` when `causal`. The backward recomputes the `N x N` weights per (sample, head).
/// [`Kernels::softmax_attention`] adds GPT-2's attention dropout.
pub fn softmax_attention(q: &Tensor, k: &Tensor, v: &Tensor, heads: usize, scale: f64, causal: bool) -> Result<Tensor> {
    Kernels::Fused.softmax_attention(q, k, v, heads, scale, causal, None)
}

/// GPT-2's attention dropout: the `[B, H, N, N]` attention weights' mask at `rate` (in
/// `[0, 1)`), drawn from `seed` exactly as `plugin_api::ops::seeded_dropout` draws it on those
/// weights, kept entries scaled by `1 / (1 - rate)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionDropout {
    pub rate: f64,
    pub seed: u64,
}

/// The differentiable composition of [`Kernels::softmax_attention`] on `[q, k, v]`, its softmax
/// from `kernels` (fused where it applies: on a CUDA device): the dropout, if any, is
/// `seeded_dropout` on the weights, with the same mask as the fused op's.
fn composed_softmax_attention(
    [q, k, v]: [&Tensor; 3],
    heads: usize,
    scale: f64,
    causal: bool,
    dropout: Option<AttentionDropout>,
    kernels: Kernels,
) -> Result<Tensor> {
    let (_, n, width) = q.dims3()?;
    if heads == 0 || width % heads != 0 {
        candle_core::bail!("softmax_attention: width {width} is not divisible by {heads} heads")
    }
    let (qh, kh, vh) = (split_heads(q, heads)?, split_heads(k, heads)?, split_heads(v, heads)?);
    let mut scores = (qh.matmul(&kh.t()?)? * scale)?;
    if causal {
        scores = scores.broadcast_add(&ops::causal_mask(n, scores.dtype(), scores.device())?)?;
    }
    let mut weights = kernels.softmax(&scores, D::Minus1)?;
    if let Some(AttentionDropout { rate, seed }) = dropout {
        weights = ops::seeded_dropout(&weights, rate, seed)?;
    }
    merge_heads(&weights.matmul(&vh)?)
}

/// `[B, N, H p]` to `[B, H, N, p]` (contiguous): the heads of a merged projection, as the
/// compositions of the attention ops take them.
fn split_heads(x: &Tensor, heads: usize) -> Result<Tensor> {
    let (b, n, width) = x.dims3()?;
    x.reshape((b, n, heads, width / heads))?.transpose(1, 2)?.contiguous()
}

/// `[B, H, N, p]` back to the merged `[B, N, H p]`.
fn merge_heads(x: &Tensor) -> Result<Tensor> {
    let (b, heads, n, p) = x.dims4()?;
    x.transpose(1, 2)?.reshape((b, n, heads * p))
}

/// `dropout` with rate 0 taken as none; a rate outside `[0, 1)` is refused.
fn checked_dropout(dropout: Option<AttentionDropout>) -> Result<Option<AttentionDropout>> {
    let dropout = dropout.filter(|d| d.rate != 0.0);
    if let Some(AttentionDropout { rate, .. }) = dropout {
        if !(0.0..1.0).contains(&rate) {
            candle_core::bail!("softmax_attention: the dropout rate must be in [0, 1), got {rate}")
        }
    }
    Ok(dropout)
}

/// The fused attention's dropout mask for `[B, N, W]` inputs, if any: drawn once, block by block
/// (flags only, one per weight); the weights are never formed as a tensor.
fn dropout_mask(
    (batch, tokens, _): (usize, usize, usize),
    heads: usize,
    dropout: Option<AttentionDropout>,
) -> Option<std::sync::Arc<dropout_mask::DropMask>> {
    dropout.map(|AttentionDropout { rate, seed }| {
        std::sync::Arc::new(dropout_mask::DropMask::draw(batch * heads, tokens * tokens, rate, seed))
    })
}

/// The composition of [`bi_softmax_attention`] (split the heads, RMSNorm, the scores, the
/// bi-softmax, the product with `Z`, merge the heads), its RMSNorm and bi-softmax from `kernels`
/// (fused where they apply: on a CUDA device).
fn composed_bi_softmax_attention(
    xw: &Tensor,
    gain: Option<&Tensor>,
    heads: usize,
    beta: f64,
    eps: f64,
    kernels: Kernels,
) -> Result<Tensor> {
    let width = xw.dim(2)?;
    if heads == 0 || width % heads != 0 {
        candle_core::bail!("bi_softmax_attention: width {width} is not divisible by {heads} heads")
    }
    let z = split_heads(xw, heads)?;
    let z = kernels.rms_norm(&z, gain, eps)?;
    let scores = (z.matmul(&z.t()?)? * beta)?;
    merge_heads(&kernels.bi_softmax(&scores)?.matmul(&z)?)
}

/// The composition of [`energy_attention`], its softmax from `kernels` (fused where it
/// applies: on a CUDA device).
fn composed_energy_attention(
    qk: &Tensor,
    heads: usize,
    beta: f64,
    attend_self: bool,
    kernels: Kernels,
) -> Result<Tensor> {
    let (_, n, both) = qk.dims3()?;
    if heads == 0 || both % (2 * heads) != 0 {
        candle_core::bail!("energy_attention: width {both} is not divisible by 2 x {heads} heads")
    }
    if !attend_self && n < 2 {
        candle_core::bail!(
            "energy_attention: leaving each token out of its own attention needs at least 2 tokens, got {n}"
        )
    }
    let width = both / 2;
    let (q, k) = (split_heads(&qk.narrow(2, 0, width)?, heads)?, split_heads(&qk.narrow(2, width, width)?, heads)?);
    let mut scores = (q.matmul(&k.t()?)? * beta)?;
    if !attend_self {
        scores = scores.broadcast_add(&ops::self_exclusion_mask(n, scores.dtype(), scores.device())?)?;
    }
    let p = kernels.softmax(&scores, D::Minus1)?;
    Tensor::cat(&[merge_heads(&p.matmul(&k)?)?, merge_heads(&p.t()?.matmul(&q)?)?], 2)
}

/// The Energy Transformer's attention descent directions: for `qk` `[B, N, 2 H p]` (queries
/// then keys, side by side), per sample and head `P = softmax_row(beta Q_h K_h^T)` (with the
/// diagonal left out unless `attend_self`), and `[P K_h | P^T Q_h]` into the head's columns of
/// each half (`-dE/dQ` and `-dE/dK`, seed 003 Eq. 3-4). One op with its own backward; the
/// `[B, H, N, N]` weights are never stored.
pub fn energy_attention(qk: &Tensor, heads: usize, beta: f64, attend_self: bool) -> Result<Tensor> {
    if !is_fused(qk) || qk.rank() != 3 {
        return composed_energy_attention(qk, heads, beta, attend_self, Kernels::Fused);
    }
    qk.apply_op1(energy_attention::EnergyAttention { heads, beta, attend_self })
}

/// CEM's attention, keys tied to values (seed 002 Eq. 5): for queries `q` and keys `k`
/// (`[B, N, H p]` each, merged layout, any strides), per sample `b` and head `h`
/// `softmax_row(scale Q_h K_h^T + S_b + A_h) K_h` into the output's head columns, with
/// `sample_scores` `S` (`[B, N, N]`, added to every head of a sample) and `head_scores` `A`
/// (`[H, N, N]`, added to every sample), each optional, and key `j > i` left out of query `i`
/// when `causal`. One op with its own backward (`tied_attention.rs`); on other devices or
/// dtypes, the composition.
pub fn tied_attention(
    q: &Tensor,
    k: &Tensor,
    heads: usize,
    scale: f64,
    causal: bool,
    sample_scores: Option<&Tensor>,
    head_scores: Option<&Tensor>,
) -> Result<Tensor> {
    let (b, n, width) = q.dims3()?;
    if k.dims() != q.dims() {
        candle_core::bail!("tied_attention: q and k must have one shape, got {:?} and {:?}", q.dims(), k.dims())
    }
    if heads == 0 || width % heads != 0 {
        candle_core::bail!("tied_attention: width {width} is not divisible by {heads} heads")
    }
    for (scores, want, what) in
        [(sample_scores, [b, n, n], "sample_scores"), (head_scores, [heads, n, n], "head_scores")]
    {
        if let Some(s) = scores.filter(|s| s.dims() != want) {
            candle_core::bail!("tied_attention: {what} must be {want:?}, got {:?}", s.dims())
        }
    }
    let inputs = [Some(k), sample_scores, head_scores];
    let fused =
        is_fused(q) && inputs.iter().flatten().all(|t| t.dtype() == q.dtype() && t.device().same_device(q.device()));
    if !fused {
        return composed_tied_attention([q, k], heads, scale, causal, [sample_scores, head_scores]);
    }
    let extra = tied_attention::ExtraScores { per_sample: sample_scores.is_some(), per_head: head_scores.is_some() };
    let parts: Vec<Tensor> =
        [sample_scores, head_scores].into_iter().flatten().map(Tensor::flatten_all).collect::<Result<_>>()?;
    let packed = match parts.len() {
        0 => Tensor::zeros(0, q.dtype(), q.device())?,
        1 => parts[0].clone(),
        _ => Tensor::cat(&parts, 0)?,
    };
    let keep_weights = inputs.iter().flatten().chain([&q]).any(|t| t.track_op());
    q.apply_op3(k, &packed, tied_attention::TiedAttention::new(heads, scale, causal, extra, keep_weights))
}

/// The composition of [`tied_attention`]: split the heads, the scores, the additive scores and
/// the mask, `softmax`, the product with the keys, merge the heads.
fn composed_tied_attention(
    [q, k]: [&Tensor; 2],
    heads: usize,
    scale: f64,
    causal: bool,
    [sample_scores, head_scores]: [Option<&Tensor>; 2],
) -> Result<Tensor> {
    let n = q.dim(1)?;
    let (qh, kh) = (split_heads(q, heads)?, split_heads(k, heads)?);
    let mut scores = (qh.matmul(&kh.t()?)? * scale)?;
    if let Some(s) = sample_scores {
        scores = scores.broadcast_add(&s.unsqueeze(1)?)?;
    }
    if let Some(a) = head_scores {
        scores = scores.broadcast_add(a)?;
    }
    if causal {
        scores = scores.broadcast_add(&ops::causal_mask(n, scores.dtype(), scores.device())?)?;
    }
    merge_heads(&softmax(&scores, D::Minus1)?.matmul(&kh)?)
}

/// MHA2nd1st's head-space Newton direction (seed 001, Eq. 16, 19, 22-24): for queries `q` and
/// keys `k` (`[B, N, H p]` each, merged layout, any strides), head-wise score temperatures
/// `temperature` `T` and b-term coefficients `coefficient` `c` (`[H]` each), per sample and
/// head `u + c_h (sum_i p_i d_i d_i^T) u` with `p = softmax_i(-||q - k_i||^2 / (2 T_h))`,
/// `k^ = sum_i p_i k_i`, `u = q - k^` and `d_i = k_i - k^`, into the output's head columns;
/// key `i > t` is left out of query `t` when `causal`. One op with its own backward
/// (`newton_attention.rs`); on other devices or dtypes, the composition.
pub fn newton_direction(
    q: &Tensor,
    k: &Tensor,
    temperature: &Tensor,
    coefficient: &Tensor,
    heads: usize,
    causal: bool,
) -> Result<Tensor> {
    let (_, _, width) = q.dims3()?;
    if k.dims() != q.dims() {
        candle_core::bail!("newton_direction: q and k must have one shape, got {:?} and {:?}", q.dims(), k.dims())
    }
    if heads == 0 || width % heads != 0 {
        candle_core::bail!("newton_direction: width {width} is not divisible by {heads} heads")
    }
    for (t, what) in [(temperature, "temperature"), (coefficient, "coefficient")] {
        if t.dims() != [heads] {
            candle_core::bail!("newton_direction: {what} must be [{heads}] (one per head), got {:?}", t.dims())
        }
    }
    let inputs = [k, temperature, coefficient];
    if !(is_fused(q) && inputs.iter().all(|t| t.dtype() == q.dtype() && t.device().same_device(q.device()))) {
        return composed_newton_direction([q, k], temperature, coefficient, heads, causal);
    }
    let keep = inputs.iter().chain([&q]).any(|t| t.track_op());
    let coefficients = Tensor::cat(&[temperature, coefficient], 0)?;
    q.apply_op3(k, &coefficients, newton_attention::NewtonAttention::new(heads, causal, keep))
}

/// The composition of [`newton_direction`]: split the heads, the distance softmax, the mean
/// key, the gradient `u` and the covariance product as seed 001 App. A.3.1 orders them (inner
/// products first), merge the heads.
fn composed_newton_direction(
    [q, k]: [&Tensor; 2],
    temperature: &Tensor,
    coefficient: &Tensor,
    heads: usize,
    causal: bool,
) -> Result<Tensor> {
    let n = q.dim(1)?;
    let (q, k) = (split_heads(q, heads)?, split_heads(k, heads)?);
    let per_head = |v: &Tensor| v.reshape((1, heads, 1, 1));
    let t = per_head(temperature)?;
    let distances = (q.matmul(&k.t()?)? * 2.0)?
        .broadcast_sub(&q.sqr()?.sum_keepdim(D::Minus1)?)?
        .broadcast_sub(&k.sqr()?.sum_keepdim(D::Minus1)?.transpose(2, 3)?)?;
    let mut scores = distances.broadcast_div(&(t * 2.0)?)?;
    if causal {
        scores = scores.broadcast_add(&ops::causal_mask(n, scores.dtype(), scores.device())?)?;
    }
    let p = softmax(&scores, D::Minus1)?;
    let mean_key = p.matmul(&k)?;
    let u = (&q - &mean_key)?;
    let spread = (&p * u.matmul(&k.t()?)?)?.matmul(&k)?;
    let mean_dot_u = (&mean_key * &u)?.sum_keepdim(D::Minus1)?;
    let covariance_product = (spread - mean_key.broadcast_mul(&mean_dot_u)?)?;
    merge_heads(&(u + covariance_product.broadcast_mul(&per_head(coefficient)?)?)?)
}

/// Which implementation a layer runs: the fused kernels of this crate (falling back to the
/// composition where they do not apply), or always the differentiable composition of
/// `plugin_api::ops` (a layer option, `kernels = fused | composed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernels {
    /// The fused ops of this crate.
    Fused,
    /// candle's differentiable primitives, as `plugin_api::ops` composes them.
    Composed,
}

impl Kernels {
    /// The option values, in the order of [`Kernels`].
    pub const NAMES: [&'static str; 2] = ["fused", "composed"];

    /// Parses an option value.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "fused" => Some(Kernels::Fused),
            "composed" => Some(Kernels::Composed),
            _ => None,
        }
    }

    /// The option value naming this choice.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// [`rms_norm`], or `plugin_api::ops::rms_norm`.
    pub fn rms_norm(self, x: &Tensor, gain: Option<&Tensor>, eps: f64) -> Result<Tensor> {
        match self {
            Kernels::Fused => rms_norm(x, gain, eps),
            Kernels::Composed => ops::rms_norm(x, gain, eps),
        }
    }

    /// [`normed_activation`], or the RMSNorm of `plugin_api::ops` then candle's activation.
    pub fn normed_activation(self, x: &Tensor, gain: Option<&Tensor>, eps: f64, act: Activation) -> Result<Tensor> {
        match self {
            Kernels::Fused => normed_activation(x, gain, eps, act),
            Kernels::Composed => Kernels::Composed.activation(&ops::rms_norm(x, gain, eps)?, act),
        }
    }

    /// [`normed_feedforward`], or its three ops composed.
    pub fn normed_feedforward(
        self,
        x: &Tensor,
        d: &Tensor,
        gain: Option<&Tensor>,
        eps: f64,
        act: Activation,
    ) -> Result<Tensor> {
        match self {
            Kernels::Fused => normed_feedforward(x, d, gain, eps, act),
            Kernels::Composed => {
                let activated = self.normed_activation(&self.linear(x, d, None)?, gain, eps, act)?;
                self.linear_transposed(&activated, d, None)
            }
        }
    }

    /// [`linear`], or candle's `reshape`, `matmul`, `reshape` and `broadcast_add`.
    pub fn linear_transposed(self, x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        match self {
            Kernels::Fused => linear_transposed(x, w, bias),
            Kernels::Composed => self.linear(x, &w.t()?, bias),
        }
    }

    pub fn linear(self, x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        match self {
            Kernels::Fused => linear(x, w, bias),
            Kernels::Composed => {
                let dims = x.dims().to_vec();
                let k = dims.last().copied().unwrap_or(1);
                let rows: usize = dims[..dims.len().saturating_sub(1)].iter().product();
                let y = x.reshape((rows, k))?.matmul(w)?;
                let mut out_dims = dims;
                if let Some(last) = out_dims.last_mut() {
                    *last = w.dim(1)?;
                }
                let y = y.reshape(out_dims)?;
                match bias {
                    Some(b) => y.broadcast_add(b),
                    None => Ok(y),
                }
            }
        }
    }

    /// [`linear_relu`], or candle's composition of [`Kernels::linear`] and `relu`.
    pub fn linear_relu(self, x: &Tensor, w: &Tensor) -> Result<Tensor> {
        match self {
            Kernels::Fused => linear_relu(x, w),
            Kernels::Composed => self.relu(&self.linear(x, w, None)?),
        }
    }

    /// [`add_row`], or candle's `broadcast_add`.
    pub fn add_row(self, x: &Tensor, v: &Tensor) -> Result<Tensor> {
        match self {
            Kernels::Fused => add_row(x, v),
            Kernels::Composed => x.broadcast_add(v),
        }
    }

    /// [`add_scaled`], or candle's product and sum (`x - a u` for a negative sign).
    pub fn add_scaled(self, x: &Tensor, a: &Tensor, u: &Tensor, sign: f64) -> Result<Tensor> {
        match self {
            Kernels::Fused => add_scaled(x, a, u, sign),
            Kernels::Composed if sign < 0.0 => x - (a * u)?,
            Kernels::Composed => x + (a * u)?,
        }
    }

    /// [`softmax`], or `plugin_api::ops::softmax`.
    pub fn softmax(self, x: &Tensor, dim: D) -> Result<Tensor> {
        match self {
            Kernels::Fused => softmax(x, dim),
            Kernels::Composed => ops::softmax(x, dim),
        }
    }

    /// [`bi_softmax`], or `plugin_api::ops::bi_softmax`.
    pub fn bi_softmax(self, a: &Tensor) -> Result<Tensor> {
        match self {
            Kernels::Fused => bi_softmax(a),
            Kernels::Composed => ops::bi_softmax(a),
        }
    }

    /// [`activation`], or candle's `relu` / `gelu_erf`.
    pub fn activation(self, x: &Tensor, act: Activation) -> Result<Tensor> {
        match (self, act) {
            (Kernels::Fused, _) => activation(x, act),
            (Kernels::Composed, Activation::Identity) => Ok(x.clone()),
            (Kernels::Composed, Activation::Relu) => x.relu(),
            (Kernels::Composed, Activation::Gelu) => x.gelu_erf(),
            (Kernels::Composed, Activation::GeluTanh) => x.gelu(),
            (Kernels::Composed, Activation::Silu) => x.silu(),
        }
    }

    /// [`shifted_activation`], or candle's broadcast sum then the activation.
    pub fn shifted_activation(self, x: &Tensor, v: &Tensor, act: Activation) -> Result<Tensor> {
        match self {
            Kernels::Fused => shifted_activation(x, v, act),
            Kernels::Composed => self.activation(&x.broadcast_add(v)?, act),
        }
    }

    /// [`gelu_erf`], or candle's `gelu_erf`.
    pub fn gelu_erf(self, x: &Tensor) -> Result<Tensor> {
        self.activation(x, Activation::Gelu)
    }

    /// [`relu`], or candle's `relu`.
    pub fn relu(self, x: &Tensor) -> Result<Tensor> {
        self.activation(x, Activation::Relu)
    }

    /// [`bi_softmax_attention`], or its composition: split the heads, `ops::rms_norm`, the
    /// scores, `ops::bi_softmax`, the product with `Z`, and merge the heads.
    pub fn bi_softmax_attention(
        self,
        xw: &Tensor,
        gain: Option<&Tensor>,
        heads: usize,
        beta: f64,
        eps: f64,
    ) -> Result<Tensor> {
        match self {
            Kernels::Fused => bi_softmax_attention(xw, gain, heads, beta, eps),
            Kernels::Composed => composed_bi_softmax_attention(xw, gain, heads, beta, eps, self),
        }
    }

    /// [`softmax_attention`], or its composition: split the heads, the scaled scores, the
    /// causal mask of `plugin_api::ops`, `ops::softmax`, the product with `V`, merge the heads.
    pub fn energy_attention(self, qk: &Tensor, heads: usize, beta: f64, attend_self: bool) -> Result<Tensor> {
        match self {
            Kernels::Fused => energy_attention(qk, heads, beta, attend_self),
            Kernels::Composed => composed_energy_attention(qk, heads, beta, attend_self, self),
        }
    }

    /// [`softmax_attention`], with the weights dropped by `dropout` (the identity for `None` or
    /// rate 0) before they weigh the values: `D(softmax_row(scale Q_h K_h^T)) V_h`. Both paths
    /// drop the same entries.
    #[allow(clippy::too_many_arguments)]
    pub fn softmax_attention(
        self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        heads: usize,
        scale: f64,
        causal: bool,
        dropout: Option<AttentionDropout>,
    ) -> Result<Tensor> {
        let dropout = checked_dropout(dropout)?;
        let fits = is_fused(q)
            && q.rank() == 3
            && [k, v]
                .iter()
                .all(|t| t.dtype() == q.dtype() && t.device().same_device(q.device()) && t.dims() == q.dims());
        if self == Kernels::Composed || !fits {
            return composed_softmax_attention([q, k, v], heads, scale, causal, dropout, self);
        }
        let mask = dropout_mask(q.dims3()?, heads, dropout);
        let keep_weights = [q, k, v].iter().any(|t| t.track_op());
        q.apply_op3(k, v, softmax_attention::SoftmaxAttention::new(heads, scale, causal, mask, keep_weights))
    }

    /// [`Kernels::softmax_attention`] of one projection `qkv` = `[Q | K | V]` (`[B, N, 3 H p]`,
    /// the three side by side in each row, as `x [W_Q | W_K | W_V]` gives them): the same
    /// values, and the gradient comes back in `qkv`'s layout, so one product serves the three
    /// projections forward and backward.
    pub fn softmax_attention_packed(
        self,
        qkv: &Tensor,
        heads: usize,
        scale: f64,
        causal: bool,
        dropout: Option<AttentionDropout>,
    ) -> Result<Tensor> {
        let (batch, tokens, packed) = qkv.dims3()?;
        if packed % 3 != 0 {
            candle_core::bail!("softmax_attention_packed: the last dimension {packed} is not three widths [Q | K | V]")
        }
        let width = packed / 3;
        if self == Kernels::Composed || !is_fused(qkv) {
            let part = |i: usize| qkv.narrow(2, i * width, width);
            return self.softmax_attention(&part(0)?, &part(1)?, &part(2)?, heads, scale, causal, dropout);
        }
        let dropout = checked_dropout(dropout)?;
        let mask = dropout_mask((batch, tokens, width), heads, dropout);
        let op = softmax_attention::SoftmaxAttention::new(heads, scale, causal, mask, qkv.track_op());
        qkv.apply_op1(softmax_attention::PackedSoftmaxAttention(op))
    }
}
