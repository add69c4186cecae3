//! Every fused op against autograd of its composition (`plugin_api::ops` or candle's
//! primitives) in f64: forward values and the gradients of every input, on odd shapes
//! (1, 7, 81) and on non-contiguous inputs (transposed, narrowed and broadcast views).

use super::*;
use candle_core::{Device, Var};
use plugin_testkit::{larger, max_abs};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};

/// The bound on `max |fused - composed| / max |composed|` for values and gradients.
const TOLERANCE: f64 = 1e-6;

pub(crate) fn normal(shape: &[usize], std: f64, seed: u64) -> Tensor {
    let mut rng = StdRng::seed_from_u64(seed);
    let dist = Normal::new(0.0, std).unwrap();
    let values: Vec<f64> = (0..shape.iter().product::<usize>()).map(|_| dist.sample(&mut rng)).collect();
    Tensor::from_vec(values, shape, &Device::Cpu).unwrap()
}

pub(crate) fn relative_error(fused: &Tensor, reference: &Tensor) -> f64 {
    assert_eq!(fused.dims(), reference.dims(), "shapes differ");
    if reference.elem_count() == 0 {
        return 0.0;
    }
    // A reference that is exactly zero (e.g. the gradient of a one-element softmax) asks for
    // an absolute error instead.
    let scale = max_abs(reference);
    let diff = max_abs(&(fused - reference).unwrap());
    if scale > 0.0 {
        diff / scale
    } else {
        diff
    }
}

/// How an op's input is presented: as the variable itself or as a view of it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum View {
    /// The variable, contiguous.
    Plain,
    /// The transpose of a variable of the transposed shape (last two dims swapped).
    Transposed,
    /// A narrow of a variable two wider in the last dim (offset 1).
    Narrowed,
    /// A variable with a leading dim of 1 broadcast to the shape.
    Broadcast,
}

/// A variable and the view of it of shape `shape` that the op receives.
fn input(shape: &[usize], view: View, seed: u64) -> (Var, Tensor) {
    input_on(shape, view, seed, &Device::Cpu)
}

/// [`input`] with the variable on `device`.
pub(crate) fn input_on(shape: &[usize], view: View, seed: u64, device: &Device) -> (Var, Tensor) {
    let rank = shape.len();
    let normal = |shape: &[usize], std: f64, seed: u64| normal(shape, std, seed).to_device(device).unwrap();
    match view {
        View::Plain => {
            let v = Var::from_tensor(&normal(shape, 1.0, seed)).unwrap();
            let t = v.as_tensor().clone();
            (v, t)
        }
        View::Transposed => {
            let mut swapped = shape.to_vec();
            swapped.swap(rank - 1, rank - 2);
            let v = Var::from_tensor(&normal(&swapped, 1.0, seed)).unwrap();
            let t = v.as_tensor().transpose(rank - 1, rank - 2).unwrap();
            (v, t)
        }
        View::Narrowed => {
            let mut wider = shape.to_vec();
            wider[rank - 1] += 2;
            let v = Var::from_tensor(&normal(&wider, 1.0, seed)).unwrap();
            let t = v.as_tensor().narrow(rank - 1, 1, shape[rank - 1]).unwrap();
            (v, t)
        }
        View::Broadcast => {
            let mut one = shape.to_vec();
            one[0] = 1;
            let v = Var::from_tensor(&normal(&one, 1.0, seed)).unwrap();
            let t = v.as_tensor().broadcast_as(shape).unwrap();
            (v, t)
        }
    }
}

/// Compares `fused(inputs)` with `composed(inputs)`: values, and the gradients of every
/// variable under the loss `sum(out * R)` for a fixed random `R`.
pub(crate) fn check(
    label: &str,
    vars: &[Var],
    inputs: &[Tensor],
    fused: impl Fn(&[Tensor]) -> Tensor,
    composed: impl Fn(&[Tensor]) -> Tensor,
) {
    let (y_fused, y_ref) = (fused(inputs), composed(inputs));
    let err = relative_error(&y_fused, &y_ref);
    assert!(err <= TOLERANCE, "{label}: forward relative error {err:e}");
    // The fused op's own count of its products is what its composition's products do.
    let (counted, composed_count) = (flops::forward_products(&y_fused).flops, flops::forward_products(&y_ref).flops);
    assert_eq!(
        counted, composed_count,
        "{label}: the fused op counts {counted} product FLOPs, its composition {composed_count}"
    );
    let r = normal(y_ref.dims(), 1.0, 99).to_device(y_ref.device()).unwrap();
    let g_fused = (y_fused * &r).unwrap().sum_all().unwrap().backward().unwrap();
    let g_ref = (y_ref * &r).unwrap().sum_all().unwrap().backward().unwrap();
    for (k, var) in vars.iter().enumerate() {
        let (a, b) = (g_fused.get(var.as_tensor()), g_ref.get(var.as_tensor()));
        let (a, b) = (a.unwrap_or_else(|| panic!("{label}: no fused gradient for input {k}")), b.unwrap());
        let err = relative_error(a, b);
        assert!(err <= TOLERANCE, "{label}: gradient {k} relative error {err:e}");
        assert!(max_abs(a) > 0.0 || max_abs(b) == 0.0, "{label}: gradient {k} is zero");
    }
}

#[test]
fn product_flops_are_two_per_multiply_add() {
    let (a, b) =
        (Var::from_tensor(&normal(&[2, 5, 3], 1.0, 1)).unwrap(), Var::from_tensor(&normal(&[3, 4], 1.0, 2)).unwrap());
    let product = a.as_tensor().broadcast_matmul(b.as_tensor()).unwrap();
    let counted = flops::forward_products(&product);
    assert_eq!((counted.flops, counted.nodes), (2 * 2 * 5 * 4 * 3, 1));
    assert_eq!(counted.training_step(), 3 * counted.flops);
    let fused = linear(a.as_tensor(), b.as_tensor(), None).unwrap();
    assert_eq!(flops::forward_products(&fused).flops, 2 * 2 * 5 * 4 * 3, "the fused linear");
    // Two products in a row, and an element-wise op between them that adds none.
    let c = Var::from_tensor(&normal(&[4, 6], 1.0, 3)).unwrap();
    let twice = linear(&fused.relu().unwrap(), c.as_tensor(), None).unwrap();
    let counted = flops::forward_products(&twice);
    assert_eq!((counted.flops, counted.nodes), (2 * 2 * 5 * 4 * 3 + 2 * 2 * 5 * 6 * 4, 2));
    // A product of tensors no variable reaches is no node of the backward's graph.
    let constant = normal(&[4, 4], 1.0, 3).matmul(&normal(&[4, 4], 1.0, 4)).unwrap();
    assert_eq!(flops::forward_products(&constant), flops::ProductFlops::default());
}

pub(crate) const VIEWS: [View; 4] = [View::Plain, View::Transposed, View::Narrowed, View::Broadcast];

/// Shapes with odd sizes, each of rank >= 2 (for the transposed view).
/// Attention shapes `(B, N, heads, p)`: a single token, odd token counts, one head of width 1.
const ATTENTION_CASES: [(usize, usize, usize, usize); 5] =
    [(1, 1, 1, 4), (2, 5, 3, 4), (2, 7, 3, 4), (1, 9, 2, 5), (3, 5, 1, 1)];

/// An attention shape with tokens enough for the causal products to go by blocks of rows (the
/// last block short).
const LONG_CASE: (usize, usize, usize, usize) = (2, 70, 2, 8);

pub(crate) const SHAPES: [&[usize]; 6] = [&[1, 1], &[1, 7], &[7, 1], &[3, 7], &[2, 81, 5], &[2, 3, 81]];

#[test]
fn rms_norm_matches_the_composition_with_and_without_gain() {
    for (s, shape) in SHAPES.iter().enumerate() {
        for view in VIEWS {
            let (xv, x) = input(shape, view, s as u64);
            let len = *shape.last().unwrap();
            let label = format!("rms_norm {shape:?} {view:?}");
            check(
                &label,
                std::slice::from_ref(&xv),
                std::slice::from_ref(&x),
                |i| rms_norm(&i[0], None, 1e-6).unwrap(),
                |i| ops::rms_norm(&i[0], None, 1e-6).unwrap(),
            );
            // A gain seen through a narrow (non-contiguous offset) of a larger variable.
            let gv = Var::from_tensor(&normal(&[len + 3], 1.0, 50 + s as u64)).unwrap();
            let g = gv.as_tensor().narrow(0, 2, len).unwrap();
            check(
                &format!("{label} with gain"),
                &[xv, gv],
                &[x, g],
                |i| rms_norm(&i[0], Some(&i[1]), 1e-6).unwrap(),
                |i| ops::rms_norm(&i[0], Some(&i[1]), 1e-6).unwrap(),
            );
        }
    }
}

/// PyTorch's LayerNorm written out: `(x - mean) / sqrt(var + eps) g + b`, biased variance.
pub(crate) fn composed_layer_norm(x: &Tensor, g: &Tensor, b: &Tensor, eps: f64) -> Tensor {
    let centred = x.broadcast_sub(&x.mean_keepdim(candle_core::D::Minus1).unwrap()).unwrap();
    let var = centred.sqr().unwrap().mean_keepdim(candle_core::D::Minus1).unwrap();
    let normed = centred.broadcast_div(&(var + eps).unwrap().sqrt().unwrap()).unwrap();
    normed.broadcast_mul(g).unwrap().broadcast_add(b).unwrap()
}

#[test]
fn layer_norm_matches_the_composition() {
    for (s, shape) in SHAPES.iter().enumerate().filter(|(_, shape)| *shape.last().unwrap() > 1) {
        for view in VIEWS {
            let (xv, x) = input(shape, view, s as u64);
            let len = *shape.last().unwrap();
            let gv = Var::from_tensor(&normal(&[len], 1.0, 60 + s as u64)).unwrap();
            let bv = Var::from_tensor(&normal(&[len], 1.0, 70 + s as u64)).unwrap();
            let (g, b) = (gv.as_tensor().clone(), bv.as_tensor().clone());
            check(
                &format!("layer_norm {shape:?} {view:?}"),
                &[xv, gv, bv],
                &[x, g, b],
                |i| layer_norm(&i[0], Some(&i[1]), Some(&i[2]), 1e-5).unwrap(),
                |i| composed_layer_norm(&i[0], &i[1], &i[2], 1e-5),
            );
            let (xv, x) = input(shape, view, 80 + s as u64);
            let (ones, zeros) = (
                Tensor::ones(len, DType::F64, &Device::Cpu).unwrap(),
                Tensor::zeros(len, DType::F64, &Device::Cpu).unwrap(),
            );
            check(
                &format!("layer_norm {shape:?} {view:?} without gain and bias"),
                std::slice::from_ref(&xv),
                std::slice::from_ref(&x),
                |i| layer_norm(&i[0], None, None, 1e-5).unwrap(),
                |i| composed_layer_norm(&i[0], &ones, &zeros, 1e-5),
            );
        }
    }
}

/// `x Ncdf(x)` from differentiable primitives with exact constants (candle's own `gelu_erf`
/// backward rounds `1/sqrt(2 pi)` to six digits, so it is no reference at 1e-6).
fn exact_gelu(x: &Tensor) -> Tensor {
    let cdf = ((x * std::f64::consts::FRAC_1_SQRT_2).unwrap().erf().unwrap() + 1.0).unwrap() * 0.5;
    (x * cdf.unwrap()).unwrap()
}

#[test]
fn normed_activations_match_the_composition() {
    for (s, shape) in SHAPES.iter().enumerate() {
        for view in VIEWS {
            for act in [Activation::Relu, Activation::Gelu, Activation::GeluTanh, Activation::Silu] {
                let (xv, x) = input(shape, view, 10 + s as u64);
                let len = *shape.last().unwrap();
                let gv = Var::from_tensor(&normal(&[len], 1.0, 60 + s as u64)).unwrap();
                let activate = |u: Tensor| match act {
                    Activation::Relu => u.relu().unwrap(),
                    Activation::Gelu => exact_gelu(&u),
                    Activation::GeluTanh => composed_gelu_tanh(&u),
                    Activation::Silu => composed_silu(&u),
                    Activation::Identity => u,
                };
                check(
                    &format!("{act:?}(rms_norm) {shape:?} {view:?}"),
                    &[xv.clone(), gv.clone()],
                    &[x.clone(), gv.as_tensor().clone()],
                    |i| normed_activation(&i[0], Some(&i[1]), 1e-6, act).unwrap(),
                    |i| activate(ops::rms_norm(&i[0], Some(&i[1]), 1e-6).unwrap()),
                );
                check(
                    &format!("{act:?}(rms_norm) {shape:?} {view:?} without gain"),
                    &[xv],
                    &[x],
                    |i| normed_activation(&i[0], None, 1e-6, act).unwrap(),
                    |i| activate(ops::rms_norm(&i[0], None, 1e-6).unwrap()),
                );
            }
        }
    }
}

#[test]
fn gelu_matches_the_exact_composition_and_candle_forward() {
    for (s, shape) in SHAPES.iter().enumerate() {
        for view in VIEWS {
            let (xv, x) = input(shape, view, 20 + s as u64);
            check(
                &format!("gelu {shape:?} {view:?}"),
                &[xv],
                std::slice::from_ref(&x),
                |i| gelu_erf(&i[0]).unwrap(),
                |i| exact_gelu(&i[0]),
            );
            // The forward is computed in candle's order: equal bit for bit.
            let diff = max_abs(&(gelu_erf(&x).unwrap() - x.gelu_erf().unwrap()).unwrap());
            assert_eq!(diff, 0.0, "gelu {shape:?} {view:?}");
        }
    }
}

/// `u (1 + tanh(sqrt(2/pi) (u + 0.044715 u^3))) / 2` from differentiable primitives.
fn composed_gelu_tanh(u: &Tensor) -> Tensor {
    let cubic = (u + (u.powf(3.0).unwrap() * 0.044715).unwrap()).unwrap();
    let t = (cubic * (2.0 / std::f64::consts::PI).sqrt()).unwrap().tanh().unwrap();
    (((t + 1.0).unwrap() * u).unwrap() * 0.5).unwrap()
}

/// `u / (1 + e^-u)` from differentiable primitives.
fn composed_silu(u: &Tensor) -> Tensor {
    (u / (u.neg().unwrap().exp().unwrap() + 1.0).unwrap()).unwrap()
}

/// GELU's tanh form and SiLU: the gradient against the composition, the forward against
/// candle's own op (f64), and the f32 kernels (vectorised exp) within single precision.
#[test]
fn smooth_activations_match_the_composition_and_candle_forward() {
    type Reference = fn(&Tensor) -> Tensor;
    let cases: [(Activation, Reference, Reference); 2] = [
        (Activation::GeluTanh, composed_gelu_tanh, |x| x.gelu().unwrap()),
        (Activation::Silu, composed_silu, |x| x.silu().unwrap()),
    ];
    for (act, composed, candle) in cases {
        for (s, shape) in SHAPES.iter().enumerate() {
            for view in VIEWS {
                let (xv, x) = input(shape, view, 30 + s as u64);
                let label = format!("{act:?} {shape:?} {view:?}");
                check(
                    &label,
                    &[xv],
                    std::slice::from_ref(&x),
                    |i| activation(&i[0], act).unwrap(),
                    |i| composed(&i[0]),
                );
                let candle = candle(&x);
                let err = relative_error(&activation(&x, act).unwrap(), &candle);
                assert!(err <= 1e-12, "{label} against candle: {err:e}");
                let x32 = x.to_dtype(DType::F32).unwrap();
                let y32 = activation(&x32, act).unwrap().to_dtype(DType::F64).unwrap();
                let err = relative_error(&y32, &candle);
                assert!(err <= 1e-6, "{label} in f32: {err:e}");
            }
        }
    }
}

#[test]
fn relu_matches_candle() {
    for (s, shape) in SHAPES.iter().enumerate() {
        for view in VIEWS {
            let (xv, x) = input(shape, view, 25 + s as u64);
            check(&format!("relu {shape:?} {view:?}"), &[xv], &[x], |i| relu(&i[0]).unwrap(), |i| i[0].relu().unwrap());
        }
    }
}

#[test]
fn softmax_matches_the_composition() {
    for (s, shape) in SHAPES.iter().enumerate() {
        for view in VIEWS {
            let (xv, x) = input(shape, view, 30 + s as u64);
            check(
                &format!("softmax {shape:?} {view:?}"),
                &[xv],
                &[x],
                |i| softmax(&i[0], D::Minus1).unwrap(),
                |i| ops::softmax(&i[0], D::Minus1).unwrap(),
            );
        }
    }
}

#[test]
fn bi_softmax_matches_the_composition_on_square_and_rectangular_scores() {
    bi_softmax_matches_the_composition_on(&Device::Cpu);
}

/// The bi-softmax against its composition on square and rectangular scores on `device`.
pub(crate) fn bi_softmax_matches_the_composition_on(device: &Device) {
    let shapes: [&[usize]; 6] = [&[1, 1], &[7, 7], &[3, 7, 5], &[2, 2, 9, 4], &[1, 81, 81], &[2, 1, 7]];
    for (s, shape) in shapes.iter().enumerate() {
        for view in VIEWS {
            let (xv, x) = input_on(shape, view, 40 + s as u64, device);
            check(
                &format!("bi_softmax {shape:?} {view:?}"),
                &[xv],
                &[x],
                |i| bi_softmax(&i[0]).unwrap(),
                |i| ops::bi_softmax(&i[0]).unwrap(),
            );
        }
    }
}

#[test]
fn bi_softmax_attention_matches_the_composition() {
    bi_softmax_attention_matches_the_composition_on(&Device::Cpu);
}

/// The bi-softmax attention against its composition with every input on `device`.
pub(crate) fn bi_softmax_attention_matches_the_composition_on(device: &Device) {
    // (B, N, heads, p): single token, odd token counts, Sudoku's 81 tokens.
    let cases = [(1, 1, 1, 4), (2, 7, 3, 2), (1, 9, 2, 5), (2, 81, 2, 8), (3, 5, 1, 1)];
    for (s, &(b, n, heads, p)) in cases.iter().enumerate() {
        for view in [View::Plain, View::Transposed, View::Narrowed, View::Broadcast] {
            let (xv, xw) = input_on(&[b, n, heads * p], view, 70 + s as u64, device);
            // Scores of the size a trained model sees (|A| up to a few units).
            let beta = 1.0 / (p as f64).sqrt();
            let gain = (normal(&[p], 0.3, 80 + s as u64) + 1.0).unwrap().to_device(device).unwrap();
            let gv = Var::from_tensor(&gain).unwrap();
            let label = format!("attention B={b} N={n} H={heads} p={p} {view:?}");
            check(
                &label,
                &[xv.clone(), gv.clone()],
                &[xw.clone(), gv.as_tensor().clone()],
                |i| bi_softmax_attention(&i[0], Some(&i[1]), heads, beta, 1e-6).unwrap(),
                |i| Kernels::Composed.bi_softmax_attention(&i[0], Some(&i[1]), heads, beta, 1e-6).unwrap(),
            );
            check(
                &format!("{label} without gain"),
                &[xv],
                &[xw],
                |i| bi_softmax_attention(&i[0], None, heads, beta, 1e-6).unwrap(),
                |i| Kernels::Composed.bi_softmax_attention(&i[0], None, heads, beta, 1e-6).unwrap(),
            );
        }
    }
}

/// Scores whose row maxima lie far apart (one channel's gain eight times the others', so the
/// rows' largest scores differ by hundreds): each head's `P + P^T` then comes from transposing
/// `P`, not from the row factors that would leave f32's range; values and gradients still
/// match the composition.
#[test]
fn bi_softmax_attention_with_row_maxima_far_apart_matches_the_composition() {
    let (b, n, heads, p) = (2, 81, 2, 8);
    let (xv, xw) = input(&[b, n, heads * p], View::Plain, 90);
    let gain: Vec<f64> = (0..p).map(|c| if c == 0 { 8.0 } else { 1.0 }).collect();
    let gv = Var::from_tensor(&Tensor::new(gain.as_slice(), &Device::Cpu).unwrap()).unwrap();
    check(
        "attention with row maxima far apart",
        &[xv, gv.clone()],
        &[xw.clone(), gv.as_tensor().clone()],
        |i| bi_softmax_attention(&i[0], Some(&i[1]), heads, 1.0, 1e-6).unwrap(),
        |i| Kernels::Composed.bi_softmax_attention(&i[0], Some(&i[1]), heads, 1.0, 1e-6).unwrap(),
    );
    // In f32, where the factors `e^(m_i - c)` would overflow.
    check_f32_against_f64("attention with row maxima far apart", &[xw, gv.as_tensor().clone()], |i| {
        bi_softmax_attention(&i[0], Some(&i[1]), heads, 1.0, 1e-6).unwrap()
    });
}

/// Heads of width 0 (a `[B, N, 0]` projection): an empty output and empty gradients, on one
/// thread and in parallel chunks (where the output's chunks are empty and the kept weights'
/// are not).
#[test]
fn bi_softmax_attention_on_empty_heads_gives_empty_results() {
    for batch in [1, 64] {
        let xv = Var::from_tensor(&normal(&[batch, 81, 0], 1.0, 91)).unwrap();
        let y = bi_softmax_attention(xv.as_tensor(), None, 2, 1.0, 1e-6).unwrap();
        assert_eq!(y.dims(), [batch, 81, 0]);
        let grads = y.sum_all().unwrap().backward().unwrap();
        assert_eq!(grads.get(xv.as_tensor()).expect("a gradient").dims(), [batch, 81, 0]);
    }
}

#[test]
fn softmax_attention_matches_the_composition() {
    softmax_attention_matches_the_composition_on(&Device::Cpu);
}

/// The softmax attention against its composition with every input on `device`; with GPT-2's
/// dropout on the CPU only (on a CUDA device both sides compose `seeded_dropout` alike).
pub(crate) fn softmax_attention_matches_the_composition_on(device: &Device) {
    for (s, &(b, n, heads, p)) in ATTENTION_CASES.iter().chain([&LONG_CASE]).enumerate() {
        let shape = [b, n, heads * p];
        let scale = 1.0 / (p as f64).sqrt();
        for causal in [false, true] {
            for (v, view) in VIEWS.into_iter().enumerate() {
                let seed = 200 + 10 * s as u64 + v as u64;
                // Each input in a different layout: the view, then the next two.
                let (qv, q) = input_on(&shape, view, seed, device);
                let (kv, k) = input_on(&shape, VIEWS[(v + 1) % 4], seed + 100, device);
                let (vv, val) = input_on(&shape, VIEWS[(v + 2) % 4], seed + 200, device);
                let label = format!("softmax attention B={b} N={n} H={heads} p={p} causal={causal} {view:?}");
                check(
                    &label,
                    &[qv, kv, vv],
                    &[q, k, val],
                    |i| softmax_attention(&i[0], &i[1], &i[2], heads, scale, causal).unwrap(),
                    |i| Kernels::Composed.softmax_attention(&i[0], &i[1], &i[2], heads, scale, causal, None).unwrap(),
                );
                // One tensor as query, key and value (CRATE's MSSA): candle adds the three
                // gradients.
                let (xv, x) = input_on(&shape, view, seed + 300, device);
                check(
                    &format!("{label} q = k = v"),
                    &[xv],
                    &[x],
                    |i| softmax_attention(&i[0], &i[0], &i[0], heads, scale, causal).unwrap(),
                    |i| Kernels::Composed.softmax_attention(&i[0], &i[0], &i[0], heads, scale, causal, None).unwrap(),
                );
                if device.is_cpu() {
                    check_dropped_attention(&format!("{label} dropped"), &shape, view, heads, scale, causal, seed);
                }
            }
        }
    }
}

/// CEM's tied attention against its composition: every combination of additive scores,
/// causal or not, each input in another layout; values and the gradients of `q`, `k` and the
/// scores.
#[test]
fn tied_attention_matches_the_composition() {
    // The first of the last two cases is large enough for the backward to split the samples
    // into tasks, whose shares of the per-head scores' gradient are then summed; the second has
    // the causal products go by blocks of rows.
    let large = [(6, 40, 4, 20), LONG_CASE];
    for (s, &(b, n, heads, p)) in ATTENTION_CASES.iter().chain(&large).enumerate() {
        let shape = [b, n, heads * p];
        let scale = 1.0 / (p as f64).sqrt();
        for causal in [false, true] {
            for (v, view) in VIEWS.into_iter().enumerate() {
                for (per_sample, per_head) in [(false, false), (true, false), (false, true), (true, true)] {
                    let seed = 600 + 10 * s as u64 + v as u64;
                    let (qv, q) = input(&shape, view, seed);
                    let (kv, k) = input(&shape, VIEWS[(v + 1) % 4], seed + 100);
                    let (sv, st) = input(&[b, n, n], VIEWS[(v + 2) % 4], seed + 200);
                    let (av, at) = input(&[heads, n, n], VIEWS[(v + 3) % 4], seed + 300);
                    let (mut vars, mut inputs) = (vec![qv, kv], vec![q, k]);
                    for (with, var, t) in [(per_sample, sv, st), (per_head, av, at)] {
                        if with {
                            vars.push(var);
                            inputs.push(t);
                        }
                    }
                    // The additive scores among the inputs, in order.
                    let extras = |i: &[Tensor]| -> [Option<Tensor>; 2] {
                        let mut rest = i[2..].iter().cloned();
                        [per_sample.then(|| rest.next().unwrap()), per_head.then(|| rest.next().unwrap())]
                    };
                    let label = format!(
                        "tied attention B={b} N={n} H={heads} p={p} causal={causal} {view:?} S={per_sample} A={per_head}"
                    );
                    check(
                        &label,
                        &vars,
                        &inputs,
                        |i| {
                            let [st, at] = extras(i);
                            tied_attention(&i[0], &i[1], heads, scale, causal, st.as_ref(), at.as_ref()).unwrap()
                        },
                        |i| {
                            let [st, at] = extras(i);
                            composed_tied_attention([&i[0], &i[1]], heads, scale, causal, [st.as_ref(), at.as_ref()])
                                .unwrap()
                        },
                    );
                }
            }
        }
    }
}

#[test]
fn tied_attention_refuses_scores_of_another_shape_and_names_them() {
    let q = normal(&[2, 5, 6], 1.0, 650);
    let wrong = normal(&[2, 5, 4], 1.0, 651);
    let error = tied_attention(&q, &q, 3, 0.5, false, Some(&wrong), None).unwrap_err().to_string();
    assert!(error.contains("sample_scores must be [2, 5, 5], got [2, 5, 4]"), "{error}");
    let error = tied_attention(&q, &q, 3, 0.5, false, None, Some(&wrong)).unwrap_err().to_string();
    assert!(error.contains("head_scores must be [3, 5, 5], got [2, 5, 4]"), "{error}");
    let error = tied_attention(&q, &q, 4, 0.5, false, None, None).unwrap_err().to_string();
    assert!(error.contains("width 6 is not divisible by 4 heads"), "{error}");
}

/// The Newton direction's head-wise temperatures `T_h` (about `sqrt(2 p)`, as the layer starts
/// them) and b-term coefficients `c_h` (large enough for the b-term to weigh), as variables.
fn newton_coefficients(heads: usize, p: usize, seed: u64) -> [(Var, Tensor); 2] {
    let temperature = (normal(&[heads], 0.3, seed) + (2.0 * p as f64).sqrt()).unwrap();
    let coefficient = (normal(&[heads], 0.2, seed + 1) + 0.3).unwrap();
    [temperature, coefficient].map(|t| {
        let v = Var::from_tensor(&t).unwrap();
        let t = v.as_tensor().clone();
        (v, t)
    })
}

/// MHA2nd1st's Newton direction against its composition, causal or not, each input in
/// another layout: values and the gradients of `q`, `k`, the temperatures and the
/// coefficients.
#[test]
fn newton_direction_matches_the_composition() {
    // The last two cases are large enough for the backward to split the samples into tasks,
    // whose shares of the head-wise gradients are then summed, and have tokens enough for the
    // causal products to go by blocks of rows (the last block short).
    let large = [(6, 40, 4, 20), LONG_CASE];
    for (s, &(b, n, heads, p)) in ATTENTION_CASES.iter().chain(&large).enumerate() {
        let shape = [b, n, heads * p];
        for causal in [false, true] {
            for (v, view) in VIEWS.into_iter().enumerate() {
                let seed = 1100 + 10 * s as u64 + v as u64;
                let (qv, q) = input(&shape, view, seed);
                let (kv, k) = input(&shape, VIEWS[(v + 1) % 4], seed + 100);
                let [(tv, t), (cv, c)] = newton_coefficients(heads, p, seed + 200);
                check(
                    &format!("newton direction B={b} N={n} H={heads} p={p} causal={causal} {view:?}"),
                    &[qv, kv, tv, cv],
                    &[q, k, t, c],
                    |i| newton_direction(&i[0], &i[1], &i[2], &i[3], heads, causal).unwrap(),
                    |i| composed_newton_direction([&i[0], &i[1]], &i[2], &i[3], heads, causal).unwrap(),
                );
            }
        }
    }
}

/// The Newton direction's two forwards, keeping `P` and `U` for a backward (inputs recorded by
/// the graph) or not (detached inputs), give the same values.
#[test]
fn newton_direction_gives_the_same_values_whether_it_keeps_its_terms_or_not() {
    for (s, &(b, n, heads, p)) in [(2, 7, 3, 4), (1, 9, 2, 5), (3, 5, 1, 1)].iter().enumerate() {
        for causal in [false, true] {
            let seed = 1200 + 10 * s as u64;
            let (_, q) = input(&[b, n, heads * p], View::Narrowed, seed);
            let (_, k) = input(&[b, n, heads * p], View::Transposed, seed + 1);
            let [(_, t), (_, c)] = newton_coefficients(heads, p, seed + 2);
            let direction = |[q, k, t, c]: [&Tensor; 4]| newton_direction(q, k, t, c, heads, causal).unwrap();
            let detached = [&q, &k, &t, &c].map(Tensor::detach);
            assert!(q.track_op() && !detached[0].track_op());
            let label = format!("B={b} N={n} H={heads} p={p} causal={causal}");
            let error = relative_error(&direction([&q, &k, &t, &c]), &direction(detached.each_ref()));
            assert_eq!(error, 0.0, "{label}");
        }
    }
}

#[test]
fn newton_direction_refuses_coefficients_of_another_shape_and_names_them() {
    let q = normal(&[2, 5, 6], 1.0, 1250);
    let (three, two) = (normal(&[3], 1.0, 1251), normal(&[2], 1.0, 1252));
    let error = newton_direction(&q, &q, &two, &three, 3, false).unwrap_err().to_string();
    assert!(error.contains("temperature must be [3] (one per head), got [2]"), "{error}");
    let error = newton_direction(&q, &q, &three, &two, 3, false).unwrap_err().to_string();
    assert!(error.contains("coefficient must be [3] (one per head), got [2]"), "{error}");
    let error = newton_direction(&q, &q, &three, &three, 4, false).unwrap_err().to_string();
    assert!(error.contains("width 6 is not divisible by 4 heads"), "{error}");
    let other = normal(&[2, 4, 6], 1.0, 1253);
    let error = newton_direction(&q, &other, &three, &three, 3, false).unwrap_err().to_string();
    assert!(error.contains("q and k must have one shape"), "{error}");
}

/// The attention of one packed projection `[Q | K | V]` against the composition on its three
/// parts, values and the packed gradient, in every layout, causal or not, with and without
/// dropout.
#[test]
fn packed_softmax_attention_matches_the_composition_on_its_parts() {
    packed_softmax_attention_matches_the_composition_on(&Device::Cpu);
}

/// [`packed_softmax_attention_matches_the_composition_on_its_parts`] with the input on `device`
/// (with dropout on the CPU only, as for the separate attention).
pub(crate) fn packed_softmax_attention_matches_the_composition_on(device: &Device) {
    for (s, &(b, n, heads, p)) in ATTENTION_CASES.iter().chain([&LONG_CASE]).enumerate() {
        let width = heads * p;
        let scale = 1.0 / (p as f64).sqrt();
        let parts = |x: &Tensor| [0, 1, 2].map(|i| x.narrow(2, i * width, width).unwrap());
        for causal in [false, true] {
            let dropped = Some(AttentionDropout { rate: 0.3, seed: 17 + s as u64 });
            for dropout in if device.is_cpu() { vec![None, dropped] } else { vec![None] } {
                for (v, view) in VIEWS.into_iter().enumerate() {
                    let (xv, x) = input_on(&[b, n, 3 * width], view, 700 + 10 * s as u64 + v as u64, device);
                    check(
                        &format!(
                            "packed softmax attention B={b} N={n} H={heads} p={p} causal={causal} {dropout:?} {view:?}"
                        ),
                        &[xv],
                        &[x],
                        |i| Kernels::Fused.softmax_attention_packed(&i[0], heads, scale, causal, dropout).unwrap(),
                        |i| {
                            let [q, k, v] = parts(&i[0]);
                            Kernels::Composed.softmax_attention(&q, &k, &v, heads, scale, causal, dropout).unwrap()
                        },
                    );
                }
            }
        }
    }
}

/// The softmax attention's two forwards, keeping the weights for a backward (inputs recorded
/// by the graph) or computing them head by head (detached inputs), give the same values, with
/// and without dropout, separate or packed.
#[test]
fn softmax_attention_gives_the_same_values_whether_it_keeps_its_weights_or_not() {
    for (s, &(b, n, heads, p)) in [(2, 7, 3, 4), (1, 9, 2, 5), (3, 5, 1, 1)].iter().enumerate() {
        let scale = 1.0 / (p as f64).sqrt();
        for causal in [false, true] {
            for dropout in [None, Some(AttentionDropout { rate: 0.3, seed: 5 + s as u64 })] {
                let (_, tracked) = input(&[b, n, 3 * heads * p], View::Narrowed, 900 + s as u64);
                let detached = tracked.detach();
                let separate = |x: &Tensor| {
                    let [q, k, v] = [0, 1, 2].map(|i| x.narrow(2, i * heads * p, heads * p).unwrap());
                    Kernels::Fused.softmax_attention(&q, &k, &v, heads, scale, causal, dropout).unwrap()
                };
                let packed =
                    |x: &Tensor| Kernels::Fused.softmax_attention_packed(x, heads, scale, causal, dropout).unwrap();
                let label = format!("B={b} N={n} H={heads} p={p} causal={causal} {dropout:?}");
                assert!(tracked.track_op() && !detached.track_op());
                assert_eq!(relative_error(&separate(&tracked), &separate(&detached)), 0.0, "separate {label}");
                assert_eq!(relative_error(&packed(&tracked), &packed(&detached)), 0.0, "packed {label}");
            }
        }
    }
}

/// The tied attention's two forwards, keeping the weights for a backward (inputs recorded by
/// the graph) or computing them head by head (detached inputs), give the same values.
#[test]
fn tied_attention_gives_the_same_values_whether_it_keeps_its_weights_or_not() {
    for (s, &(b, n, heads, p)) in [(2, 7, 3, 4), (1, 9, 2, 5), (3, 5, 1, 1)].iter().enumerate() {
        for causal in [false, true] {
            let seed = 950 + 10 * s as u64;
            let (_, q) = input(&[b, n, heads * p], View::Narrowed, seed);
            let (_, k) = input(&[b, n, heads * p], View::Transposed, seed + 1);
            let (_, scores) = input(&[b, n, n], View::Plain, seed + 2);
            let (_, bias) = input(&[heads, n, n], View::Plain, seed + 3);
            let attend = |[q, k, scores, bias]: [&Tensor; 4]| {
                tied_attention(q, k, heads, 0.4, causal, Some(scores), Some(bias)).unwrap()
            };
            let detached = [&q, &k, &scores, &bias].map(Tensor::detach);
            assert!(q.track_op() && !detached[0].track_op());
            let label = format!("B={b} N={n} H={heads} p={p} causal={causal}");
            assert_eq!(relative_error(&attend([&q, &k, &scores, &bias]), &attend(detached.each_ref())), 0.0, "{label}");
        }
    }
}

/// A packed projection whose width is not three equal parts is refused, naming the shape.
#[test]
fn packed_softmax_attention_needs_three_equal_parts() {
    let (_, x) = input(&[2, 5, 8], View::Plain, 3);
    for kernels in [Kernels::Fused, Kernels::Composed] {
        let err = kernels.softmax_attention_packed(&x, 2, 0.5, false, None).unwrap_err().to_string();
        assert!(err.contains("8 is not three widths"), "{kernels:?}: {err}");
    }
}

/// GPT-2's attention dropout in the fused op against the composition with `seeded_dropout` on
/// the weights (which holds the same mask only if the op draws it exactly as that function
/// does), values and gradients; and the mask does act.
fn check_dropped_attention(
    label: &str,
    shape: &[usize],
    view: View,
    heads: usize,
    scale: f64,
    causal: bool,
    seed: u64,
) {
    let dropout = Some(AttentionDropout { rate: 0.3, seed: seed * 31 + 5 });
    let (qv, q) = input(shape, view, seed + 400);
    let (kv, k) = input(shape, VIEWS[(view as usize + 1) % 4], seed + 500);
    let (vv, v) = input(shape, VIEWS[(view as usize + 3) % 4], seed + 600);
    check(
        label,
        &[qv, kv, vv],
        &[q.clone(), k.clone(), v.clone()],
        |i| Kernels::Fused.softmax_attention(&i[0], &i[1], &i[2], heads, scale, causal, dropout).unwrap(),
        |i| Kernels::Composed.softmax_attention(&i[0], &i[1], &i[2], heads, scale, causal, dropout).unwrap(),
    );
    let (tokens, entries) = (shape[1], shape.iter().product::<usize>());
    if tokens * tokens * heads * shape[0] >= 20 && entries > 1 {
        let plain = softmax_attention(&q, &k, &v, heads, scale, causal).unwrap();
        let dropped = Kernels::Fused.softmax_attention(&q, &k, &v, heads, scale, causal, dropout).unwrap();
        assert!(relative_error(&dropped, &plain) > 1e-3, "{label}: the mask changes nothing");
    }
}

/// Dropout rates outside `[0, 1)` are refused; rate 0 is the plain attention.
#[test]
fn attention_dropout_rates_are_checked() {
    let (_, x) = input(&[2, 5, 6], View::Plain, 7);
    for rate in [1.0, -0.1, f64::NAN] {
        let dropout = Some(AttentionDropout { rate, seed: 1 });
        let err = Kernels::Fused.softmax_attention(&x, &x, &x, 2, 0.5, true, dropout).unwrap_err().to_string();
        assert!(err.contains("[0, 1)"), "rate {rate}: {err}");
    }
    let zero =
        Kernels::Fused.softmax_attention(&x, &x, &x, 2, 0.5, true, Some(AttentionDropout { rate: 0.0, seed: 1 }));
    assert_eq!(relative_error(&zero.unwrap(), &softmax_attention(&x, &x, &x, 2, 0.5, true).unwrap()), 0.0);
}

#[test]
fn energy_attention_matches_the_composition() {
    energy_attention_matches_the_composition_on(&Device::Cpu);
}

/// The Energy Transformer's attention against its composition with every input on `device`.
pub(crate) fn energy_attention_matches_the_composition_on(device: &Device) {
    // (B, N, heads, p): a single token (attending to itself only), odd token counts, one head
    // of width 1.
    for (s, &(b, n, heads, p)) in ATTENTION_CASES.iter().enumerate() {
        for attend_self in [true, false] {
            if n < 2 && !attend_self {
                let qk = normal(&[b, n, 2 * heads * p], 1.0, 0);
                assert!(energy_attention(&qk, heads, 0.5, false).is_err(), "one token cannot leave itself out");
                continue;
            }
            for (v, view) in VIEWS.into_iter().enumerate() {
                let (qkv, qk) = input_on(&[b, n, 2 * heads * p], view, 400 + 10 * s as u64 + v as u64, device);
                check(
                    &format!("energy attention B={b} N={n} H={heads} p={p} attend_self={attend_self} {view:?}"),
                    &[qkv],
                    &[qk],
                    |i| energy_attention(&i[0], heads, 0.7, attend_self).unwrap(),
                    |i| Kernels::Composed.energy_attention(&i[0], heads, 0.7, attend_self).unwrap(),
                );
            }
        }
    }
}

#[test]
fn linear_matches_the_composition_for_any_layout() {
    // [1, 1] and [1, 9]: a single row, whose product and weight gradient (an outer product)
    // take the row path rather than gemm.
    let shapes: [&[usize]; 6] = [&[1, 1], &[1, 9], &[7, 5], &[2, 81, 5], &[3, 1, 7], &[2, 2, 3, 4]];
    for (s, shape) in shapes.iter().enumerate() {
        let k = *shape.last().unwrap();
        for view in VIEWS {
            for (n, transposed_weight) in [(1, false), (3, true), (6, false)] {
                let (xv, x) = input(shape, view, 90 + s as u64);
                // The weight as a variable [k, n], or as the view w^T of a variable [n, k].
                let (wv, w) = if transposed_weight {
                    let v = Var::from_tensor(&normal(&[n, k], 1.0, 91)).unwrap();
                    let t = v.as_tensor().t().unwrap();
                    (v, t)
                } else {
                    let v = Var::from_tensor(&normal(&[k, n], 1.0, 92)).unwrap();
                    let t = v.as_tensor().clone();
                    (v, t)
                };
                let bv = Var::from_tensor(&normal(&[n + 1], 1.0, 93)).unwrap();
                let b = bv.as_tensor().narrow(0, 1, n).unwrap();
                let label = format!("linear {shape:?} {view:?} n={n} w^T={transposed_weight}");
                check(
                    &label,
                    &[xv.clone(), wv.clone()],
                    &[x.clone(), w.clone()],
                    |i| linear(&i[0], &i[1], None).unwrap(),
                    |i| Kernels::Composed.linear(&i[0], &i[1], None).unwrap(),
                );
                check(
                    &format!("{label} with bias"),
                    &[xv.clone(), wv.clone(), bv.clone()],
                    &[x.clone(), w.clone(), b.clone()],
                    |i| linear(&i[0], &i[1], Some(&i[2])).unwrap(),
                    |i| Kernels::Composed.linear(&i[0], &i[1], Some(&i[2])).unwrap(),
                );
                // The same product from the weight's transpose, as `linear_transposed` takes it.
                let wt = if transposed_weight { wv.as_tensor().clone() } else { wv.as_tensor().t().unwrap() };
                check(
                    &format!("{label} transposed"),
                    &[xv, wv, bv],
                    &[x, wt, b],
                    |i| linear_transposed(&i[0], &i[1], Some(&i[2])).unwrap(),
                    |i| Kernels::Composed.linear(&i[0], &i[1].t().unwrap(), Some(&i[2])).unwrap(),
                );
            }
        }
    }
}

#[test]
fn linear_relu_matches_the_composition() {
    for (s, shape) in [&[1usize, 9][..], &[7, 5], &[2, 81, 5], &[2, 2, 3, 4]].into_iter().enumerate() {
        let k = *shape.last().unwrap();
        for view in VIEWS {
            let (xv, x) = input(shape, view, 120 + s as u64);
            let wv = Var::from_tensor(&normal(&[k, 6], 1.0, 121)).unwrap();
            check(
                &format!("linear_relu {shape:?} {view:?}"),
                &[xv.clone(), wv.clone()],
                &[x.clone(), wv.as_tensor().clone()],
                |i| linear_relu(&i[0], &i[1]).unwrap(),
                |i| Kernels::Composed.linear(&i[0], &i[1], None).unwrap().relu().unwrap(),
            );
            // The weight as the transposed view of a [n, k] variable.
            let wt = Var::from_tensor(&normal(&[6, k], 1.0, 122)).unwrap();
            check(
                &format!("linear_relu {shape:?} {view:?} w^T"),
                &[xv.clone(), wt.clone()],
                &[x.clone(), wt.as_tensor().t().unwrap()],
                |i| linear_relu(&i[0], &i[1]).unwrap(),
                |i| Kernels::Composed.linear(&i[0], &i[1], None).unwrap().relu().unwrap(),
            );
            // The same variable taken as `nn.Linear` keeps it.
            check(
                &format!("linear_transposed_relu {shape:?} {view:?}"),
                &[xv, wt.clone()],
                &[x, wt.as_tensor().clone()],
                |i| linear_transposed_relu(&i[0], &i[1]).unwrap(),
                |i| Kernels::Composed.linear(&i[0], &i[1].t().unwrap(), None).unwrap().relu().unwrap(),
            );
        }
    }
}

#[test]
fn normed_feedforward_matches_the_composition() {
    // Rows of 1, 7 and 2 x 81 tokens; inputs of width 1, 5 and 6; dictionaries of 3, 4 and
    // 11 hidden units (past a row's eight partial sums). One hidden unit would make the norm a
    // sign, whose gradient is zero but for rounding.
    for (s, (shape, width)) in [(&[1usize, 1][..], 3), (&[7, 5], 4), (&[2, 81, 6], 11)].into_iter().enumerate() {
        let k = *shape.last().unwrap();
        for view in VIEWS {
            for act in [Activation::Relu, Activation::Gelu] {
                let (xv, x) = input(shape, view, 130 + s as u64);
                let dv = Var::from_tensor(&normal(&[k, width], 1.0, 131 + s as u64)).unwrap();
                let gv = Var::from_tensor(&normal(&[width], 1.0, 132 + s as u64)).unwrap();
                let composed = |x: &Tensor, d: &Tensor, g: Option<&Tensor>| {
                    let hidden = Kernels::Composed.linear(x, d, None).unwrap();
                    let activated = Kernels::Composed.normed_activation(&hidden, g, 1e-6, act).unwrap();
                    Kernels::Composed.linear(&activated, &d.t().unwrap(), None).unwrap()
                };
                check(
                    &format!("normed_feedforward {act:?} {shape:?} {view:?}"),
                    &[xv.clone(), dv.clone(), gv.clone()],
                    &[x.clone(), dv.as_tensor().clone(), gv.as_tensor().clone()],
                    |i| normed_feedforward(&i[0], &i[1], Some(&i[2]), 1e-6, act).unwrap(),
                    |i| composed(&i[0], &i[1], Some(&i[2])),
                );
                // The dictionary as the transposed view of a [M, k] variable, without gain.
                let dt = Var::from_tensor(&normal(&[width, k], 1.0, 133 + s as u64)).unwrap();
                check(
                    &format!("normed_feedforward {act:?} {shape:?} {view:?} D^T without gain"),
                    &[xv, dt.clone()],
                    &[x, dt.as_tensor().t().unwrap()],
                    |i| normed_feedforward(&i[0], &i[1], None, 1e-6, act).unwrap(),
                    |i| composed(&i[0], &i[1], None),
                );
            }
        }
    }
}

#[test]
fn normed_feedforward_refuses_a_gain_of_another_width_by_composing() {
    let x = normal(&[3, 4], 1.0, 140);
    let d = normal(&[4, 6], 1.0, 141);
    // A gain that fits neither the fused op nor the composition is the composition's error.
    let err = normed_feedforward(&x, &d, Some(&normal(&[5], 1.0, 142)), 1e-6, Activation::Relu).unwrap_err();
    assert!(err.to_string().contains("shape"), "{err}");
    let err = normed_feedforward(&x, &normal(&[5, 6], 1.0, 143), None, 1e-6, Activation::Relu).unwrap_err();
    assert!(err.to_string().contains("shape"), "{err}");
}

#[test]
fn add_row_matches_broadcast_add() {
    for (s, shape) in SHAPES.iter().enumerate() {
        for view in VIEWS {
            let (xv, x) = input(shape, view, 110 + s as u64);
            let n = *shape.last().unwrap();
            let vv = Var::from_tensor(&normal(&[n], 1.0, 111)).unwrap();
            check(
                &format!("add_row {shape:?} {view:?}"),
                &[xv, vv.clone()],
                &[x, vv.as_tensor().clone()],
                |i| add_row(&i[0], &i[1]).unwrap(),
                |i| i[0].broadcast_add(&i[1]).unwrap(),
            );
        }
    }
}

/// `act(x + v)` in one op against the one-op row shift then the one-op activation (each held
/// to candle's composition above): the value and both gradients for every activation, on every
/// view; a row vector of another width is refused, naming both widths.
#[test]
fn shifted_activation_matches_the_row_shift_then_the_activation() {
    let acts = [Activation::Identity, Activation::Relu, Activation::Gelu, Activation::GeluTanh, Activation::Silu];
    for (s, shape) in SHAPES.iter().enumerate() {
        for view in VIEWS {
            for act in acts {
                let (xv, x) = input(shape, view, 112 + s as u64);
                let n = *shape.last().unwrap();
                let vv = Var::from_tensor(&normal(&[n], 1.0, 113)).unwrap();
                check(
                    &format!("shifted_activation {shape:?} {view:?} {act:?}"),
                    &[xv, vv.clone()],
                    &[x, vv.as_tensor().clone()],
                    |i| shifted_activation(&i[0], &i[1], act).unwrap(),
                    |i| activation(&add_row(&i[0], &i[1]).unwrap(), act).unwrap(),
                );
            }
        }
    }
    let x = normal(&[3, 8], 1.0, 114);
    let err = x.apply_op2(&normal(&[5], 1.0, 115), crate::activation::ShiftedActivation { act: Activation::Gelu });
    let err = err.unwrap_err().to_string();
    assert!(err.contains("[8]") && err.contains("[5]"), "{err}");
}

#[test]
fn add_scaled_matches_the_composition() {
    for (s, shape) in SHAPES.iter().enumerate() {
        for (v, view) in VIEWS.into_iter().enumerate() {
            for sign in [1.0, -1.0] {
                let (xv, x) = input(shape, view, 120 + s as u64);
                let (av, a) = input(shape, VIEWS[(v + 1) % 4], 121 + s as u64);
                let (uv, u) = input(shape, VIEWS[(v + 2) % 4], 122 + s as u64);
                check(
                    &format!("add_scaled {shape:?} {view:?} sign {sign}"),
                    &[xv, av, uv],
                    &[x, a, u],
                    |i| add_scaled(&i[0], &i[1], &i[2], sign).unwrap(),
                    |i| Kernels::Composed.add_scaled(&i[0], &i[1], &i[2], sign).unwrap(),
                );
            }
        }
    }
}

/// `gate act(x)` against the product of the gate and the one-op activation (itself held to
/// the composition above; candle's exact GELU rounds its derivative's constant): the value and
/// both arguments' gradients for every activation, on every view; a gate of another shape is
/// refused, naming both.
#[test]
fn gated_activation_matches_the_composition() {
    let acts = [Activation::Identity, Activation::Relu, Activation::Gelu, Activation::GeluTanh, Activation::Silu];
    for (s, shape) in SHAPES.iter().enumerate() {
        for (v, view) in VIEWS.into_iter().enumerate() {
            for act in acts {
                let (xv, x) = input(shape, view, 140 + s as u64);
                let (gv, g) = input(shape, VIEWS[(v + 1) % 4], 141 + s as u64);
                check(
                    &format!("gated_activation {shape:?} {view:?} {act:?}"),
                    &[xv, gv],
                    &[x, g],
                    |i| gated_activation(&i[0], &i[1], act).unwrap(),
                    |i| (&i[1] * activation(&i[0], act).unwrap()).unwrap(),
                );
            }
        }
    }
    let x = normal(&[3, 8], 1.0, 142);
    let gate = normal(&[3, 8], 1.0, 143).t().unwrap().contiguous().unwrap();
    let err = x.apply_op2(&gate, crate::activation::Gated { act: Activation::Silu }).unwrap_err().to_string();
    assert!(err.contains("[3, 8]") && err.contains("[8, 3]"), "{err}");
}

/// `x + s u` for a learned scalar `s` against `x + u s` by broadcasting: every view of `x`
/// and `u`, scales of shape `[1]` and `[]`, and a scale of two elements refused.
#[test]
fn add_times_scalar_matches_the_broadcast_product() {
    for (i, shape) in SHAPES.iter().enumerate() {
        for (v, view) in VIEWS.into_iter().enumerate() {
            let (xv, x) = input(shape, view, 160 + i as u64);
            let (uv, u) = input(shape, VIEWS[(v + 1) % 4], 161 + i as u64);
            let scale = if v % 2 == 0 { normal(&[1], 1.0, 162) } else { normal(&[1], 1.0, 162).squeeze(0).unwrap() };
            let sv = Var::from_tensor(&scale).unwrap();
            check(
                &format!("add_times_scalar {shape:?} {view:?}"),
                &[xv, sv.clone(), uv],
                &[x, sv.as_tensor().clone(), u],
                |i| add_times_scalar(&i[0], &i[1], &i[2]).unwrap(),
                |i| (&i[0] + i[2].broadcast_mul(&i[1]).unwrap()).unwrap(),
            );
        }
    }
    let x = normal(&[3, 8], 1.0, 163);
    let err = x.apply_op3(&normal(&[2], 1.0, 164), &x, crate::scaled::AddTimesScalar).unwrap_err().to_string();
    assert!(err.contains("one element") && err.contains('2'), "{err}");
}

/// `tril(u k^T)` against the masked batched product: the causal products by blocks (100
/// tokens: four blocks, the last short), a single token, every view of both operands, and
/// the f32 path against the f64 one; a gradient given above the diagonal reaches neither
/// argument.
#[test]
fn lower_product_matches_the_masked_product() {
    let masked = |i: &[Tensor]| {
        let n = i[0].dim(1).unwrap();
        let lower = Tensor::tril2(n, i[0].dtype(), i[0].device()).unwrap();
        i[0].matmul(&i[1].t().unwrap()).unwrap().broadcast_mul(&lower).unwrap()
    };
    for (s, shape) in [[2, 100, 7], [1, 1, 3], [3, 5, 4]].iter().enumerate() {
        for (v, view) in VIEWS.into_iter().enumerate() {
            let (uv, u) = input(shape, view, 150 + s as u64);
            let (kv, k) = input(shape, VIEWS[(v + 1) % 4], 151 + s as u64);
            check(
                &format!("lower_product {shape:?} {view:?}"),
                &[uv, kv],
                &[u, k],
                |i| lower_product(&i[0], &i[1]).unwrap(),
                masked,
            );
        }
        let inputs = [normal(shape, 1.0, 152), normal(shape, 1.0, 153)];
        check_f32_against_f64(&format!("lower_product {shape:?}"), &inputs, |i| lower_product(&i[0], &i[1]).unwrap());
    }
    let (u, k) =
        (Var::new(&[[[1f64], [2.0]]], &Device::Cpu).unwrap(), Var::new(&[[[3f64], [5.0]]], &Device::Cpu).unwrap());
    let upper = Tensor::new(&[[[0f64, 1.0], [0.0, 0.0]]], &Device::Cpu).unwrap();
    let y = lower_product(u.as_tensor(), k.as_tensor()).unwrap();
    assert_eq!(y.to_vec3::<f64>().unwrap(), [[[3.0, 0.0], [6.0, 10.0]]]);
    let grads = (y * upper).unwrap().sum_all().unwrap().backward().unwrap();
    for v in [&u, &k] {
        assert_eq!(max_abs(grads.get(v.as_tensor()).unwrap()), 0.0);
    }
}

/// Tensors the kernels do not serve (here f16 on the CPU) get the composition, which keeps
/// its gradients.
#[test]
fn other_dtypes_fall_back_to_the_composition() {
    let x = normal(&[3, 8], 1.0, 5).to_dtype(DType::F16).unwrap();
    assert!(!is_fused(&x));
    assert!(is_fused(&x.to_dtype(DType::F32).unwrap()));
    let fused = rms_norm(&x, None, 1e-6).unwrap();
    let composed = ops::rms_norm(&x, None, 1e-6).unwrap();
    let diff = (fused.to_dtype(DType::F64).unwrap() - composed.to_dtype(DType::F64).unwrap()).unwrap();
    assert_eq!(max_abs(&diff), 0.0);
    let xv = Var::from_tensor(&x).unwrap();
    let grads = rms_norm(xv.as_tensor(), None, 1e-6).unwrap().sqr().unwrap().sum_all().unwrap().backward().unwrap();
    assert!(grads.get(xv.as_tensor()).is_some());
}

/// Shapes large enough to be split into chunks (over threads when there are several):
/// the same agreement, in f32 and f64.
#[test]
fn large_shapes_split_into_chunks_match_the_composition() {
    let (xv, x) = input(&[3, 81, 96], View::Transposed, 130);
    let gv = Var::from_tensor(&normal(&[96], 1.0, 131)).unwrap();
    check(
        "rms_norm large",
        &[xv.clone(), gv.clone()],
        &[x.clone(), gv.as_tensor().clone()],
        |i| normed_activation(&i[0], Some(&i[1]), 1e-6, Activation::Relu).unwrap(),
        |i| ops::rms_norm(&i[0], Some(&i[1]), 1e-6).unwrap().relu().unwrap(),
    );
    check(
        "softmax large",
        std::slice::from_ref(&xv),
        std::slice::from_ref(&x),
        |i| softmax(&i[0], D::Minus1).unwrap(),
        |i| ops::softmax(&i[0], D::Minus1).unwrap(),
    );
    let dv = Var::from_tensor(&normal(&[96, 96], 0.3, 138)).unwrap();
    check(
        "normed_feedforward large",
        &[xv.clone(), dv.clone(), gv.clone()],
        &[x.clone(), dv.as_tensor().clone(), gv.as_tensor().clone()],
        |i| normed_feedforward(&i[0], &i[1], Some(&i[2]), 1e-6, Activation::Relu).unwrap(),
        |i| Kernels::Composed.normed_feedforward(&i[0], &i[1], Some(&i[2]), 1e-6, Activation::Relu).unwrap(),
    );
    let (av, a) = input(&[3, 81, 96], View::Plain, 132);
    let (uv, u) = input(&[3, 81, 96], View::Narrowed, 133);
    check(
        "add_scaled large",
        &[xv.clone(), av, uv],
        &[x.clone(), a, u],
        |i| add_scaled(&i[0], &i[1], &i[2], -1.0).unwrap(),
        |i| Kernels::Composed.add_scaled(&i[0], &i[1], &i[2], -1.0).unwrap(),
    );
    let g = Var::from_tensor(&(normal(&[32], 0.3, 134) + 1.0).unwrap()).unwrap();
    check(
        "attention large",
        &[xv.clone(), g.clone()],
        &[x.clone(), g.as_tensor().clone()],
        |i| bi_softmax_attention(&i[0], Some(&i[1]), 3, 0.2, 1e-6).unwrap(),
        |i| Kernels::Composed.bi_softmax_attention(&i[0], Some(&i[1]), 3, 0.2, 1e-6).unwrap(),
    );
    for causal in [false, true] {
        let (kv, k) = input(&[3, 81, 96], View::Narrowed, 135);
        let (vv, v) = input(&[3, 81, 96], View::Plain, 136);
        check(
            &format!("softmax attention large causal={causal}"),
            &[xv.clone(), kv, vv],
            &[x.clone(), k, v],
            |i| softmax_attention(&i[0], &i[1], &i[2], 4, 0.3, causal).unwrap(),
            |i| Kernels::Composed.softmax_attention(&i[0], &i[1], &i[2], 4, 0.3, causal, None).unwrap(),
        );
        check_dropped_attention(
            &format!("dropped attention large causal={causal}"),
            &[3, 81, 96],
            View::Narrowed,
            4,
            0.3,
            causal,
            137,
        );
    }
    // f32: the chunked result equals the f64 one to f32 precision.
    let x32 = x.to_dtype(DType::F32).unwrap();
    let y32 = rms_norm(&x32, None, 1e-6).unwrap().to_dtype(DType::F64).unwrap();
    assert!(relative_error(&y32, &rms_norm(&x, None, 1e-6).unwrap()) < 1e-6);
}

/// Empty tensors give empty results (no panic on zero-length rows).
#[test]
fn empty_shapes_give_empty_results() {
    for shape in [&[2usize, 0][..], &[0, 5], &[0, 3, 3]] {
        let x = Tensor::zeros(shape, DType::F64, &Device::Cpu).unwrap();
        assert_eq!(rms_norm(&x, None, 1e-6).unwrap().dims(), shape);
        assert_eq!(softmax(&x, D::Minus1).unwrap().dims(), shape);
        assert_eq!(gelu_erf(&x).unwrap().dims(), shape);
        assert_eq!(bi_softmax(&x).unwrap().dims(), shape);
    }
    for shape in [[0usize, 3, 6], [2, 0, 6]] {
        let xv = Var::from_tensor(&Tensor::zeros(&shape, DType::F64, &Device::Cpu).unwrap()).unwrap();
        let y = softmax_attention(xv.as_tensor(), xv.as_tensor(), xv.as_tensor(), 3, 1.0, true).unwrap();
        assert_eq!(y.dims(), shape);
        let grads = y.sum_all().unwrap().backward().unwrap();
        assert_eq!(grads.get(xv.as_tensor()).unwrap().dims(), shape);
    }
    // No rows, and a dictionary of no hidden units (the output then zero, its gradient too).
    for (shape, width) in [([0usize, 4], 3), ([3, 4], 0)] {
        let xv = Var::from_tensor(&normal(&shape, 1.0, 150)).unwrap();
        let dv = Var::from_tensor(&normal(&[4, width], 1.0, 151)).unwrap();
        let y = normed_feedforward(xv.as_tensor(), dv.as_tensor(), None, 1e-6, Activation::Relu).unwrap();
        assert_eq!(y.dims(), shape);
        assert_eq!(max_abs(&y), 0.0);
        let grads = y.sum_all().unwrap().backward().unwrap();
        assert_eq!(grads.get(xv.as_tensor()).unwrap().dims(), shape);
        assert_eq!(grads.get(dv.as_tensor()).unwrap().dims(), [4, width]);
    }
}

/// Shapes the fused ops refuse are errors naming the problem, not panics.
#[test]
fn bad_shapes_are_errors() {
    let x = normal(&[2, 3, 6], 1.0, 1);
    let err = bi_softmax_attention(&x, None, 4, 1.0, 1e-6).unwrap_err().to_string();
    assert!(err.contains("not divisible by 4 heads"), "{err}");
    let err = softmax_attention(&x, &x, &x, 4, 1.0, false).unwrap_err().to_string();
    assert!(err.contains("not divisible by 4 heads"), "{err}");
    let g = normal(&[5], 1.0, 2);
    // A gain of the wrong length goes to the composition, whose broadcast then fails.
    assert!(rms_norm(&x, Some(&g), 1e-6).is_err());
}

/// f32 agrees with f64 to f32 precision (the dtype the models train in).
#[test]
fn f32_agrees_with_f64() {
    let x = normal(&[4, 81, 16], 1.0, 3);
    let g = (normal(&[8], 0.3, 4) + 1.0).unwrap();
    let y64 = bi_softmax_attention(&x, Some(&g), 2, 0.35, 1e-6).unwrap();
    let y32 =
        bi_softmax_attention(&x.to_dtype(DType::F32).unwrap(), Some(&g.to_dtype(DType::F32).unwrap()), 2, 0.35, 1e-6)
            .unwrap();
    let err = relative_error(&y32.to_dtype(DType::F64).unwrap(), &y64);
    assert!(err < 1e-5, "f32 vs f64: {err:e}");
}

/// f32 softmax attention agrees with f64 to f32 precision, causal or not.
#[test]
fn f32_softmax_attention_agrees_with_f64() {
    let (q, k, v) = (normal(&[4, 81, 16], 1.0, 5), normal(&[4, 81, 16], 1.0, 6), normal(&[4, 81, 16], 1.0, 7));
    let f32 = |t: &Tensor| t.to_dtype(DType::F32).unwrap();
    for causal in [false, true] {
        let y64 = softmax_attention(&q, &k, &v, 2, 0.35, causal).unwrap();
        let y32 = softmax_attention(&f32(&q), &f32(&k), &f32(&v), 2, 0.35, causal).unwrap();
        let err = relative_error(&y32.to_dtype(DType::F64).unwrap(), &y64);
        assert!(err < 1e-5, "f32 vs f64 causal={causal}: {err:e}");
    }
}

/// An op in f32 against the same op in f64, values and every input's gradient: the f32 paths
/// (the per-head products' register tiles among them, `head_product.rs`) within single
/// precision of the f64 ones, which the tests above hold to the composition.
fn check_f32_against_f64(label: &str, inputs: &[Tensor], op: impl Fn(&[Tensor]) -> Tensor) {
    let run = |dtype: DType| {
        let vars: Vec<Var> = inputs.iter().map(|t| Var::from_tensor(&t.to_dtype(dtype).unwrap()).unwrap()).collect();
        let tensors: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
        let y = op(&tensors);
        let r = normal(y.dims(), 1.0, 98).to_dtype(dtype).unwrap();
        let grads = (&y * &r).unwrap().sum_all().unwrap().backward().unwrap();
        let as_f64 = |t: &Tensor| t.to_dtype(DType::F64).unwrap();
        let grads: Vec<Tensor> = vars.iter().map(|v| as_f64(grads.get(v).expect("a gradient"))).collect();
        (as_f64(&y), grads)
    };
    let ((y32, g32), (y64, g64)) = (run(DType::F32), run(DType::F64));
    let err = relative_error(&y32, &y64);
    assert!(err < 1e-5, "{label}: f32 forward vs f64 {err:e}");
    for (i, (a, b)) in g32.iter().zip(&g64).enumerate() {
        let err = relative_error(a, b);
        assert!(err < 1e-4, "{label}: f32 gradient of input {i} vs f64 {err:e}");
    }
}

/// Every attention op's f32 path, forward and backward, against its f64 path, at the default
/// model's shape (81 tokens, heads of 32) and at odd ones.
#[test]
fn f32_attention_gradients_agree_with_f64() {
    for (b, n, heads, p) in [(2, 81, 4, 32), (3, 17, 2, 7), (1, 100, 1, 40)] {
        let w = heads * p;
        let shape = format!("B={b} N={n} H={heads} p={p}");
        let x = normal(&[b, n, w], 1.0, 41);
        let g = (normal(&[p], 0.3, 42) + 1.0).unwrap();
        check_f32_against_f64(&format!("bi-softmax attention {shape}"), &[x, g], |i| {
            bi_softmax_attention(&i[0], Some(&i[1]), heads, 0.35, 1e-6).unwrap()
        });
        for causal in [false, true] {
            let qkv = [43, 44, 45].map(|seed| normal(&[b, n, w], 1.0, seed));
            check_f32_against_f64(&format!("softmax attention {shape} causal={causal}"), &qkv, |i| {
                softmax_attention(&i[0], &i[1], &i[2], heads, 0.35, causal).unwrap()
            });
            check_f32_against_f64(
                &format!("packed softmax attention {shape} causal={causal}"),
                &[normal(&[b, n, 3 * w], 1.0, 46)],
                |i| Kernels::Fused.softmax_attention_packed(&i[0], heads, 0.35, causal, None).unwrap(),
            );
        }
        for causal in [false, true] {
            let inputs = [
                normal(&[b, n, w], 1.0, 48),
                normal(&[b, n, w], 1.0, 49),
                normal(&[b, n, n], 1.0, 50),
                normal(&[heads, n, n], 1.0, 51),
            ];
            check_f32_against_f64(&format!("tied attention {shape} causal={causal}"), &inputs, |i| {
                tied_attention(&i[0], &i[1], heads, 0.35, causal, Some(&i[2]), Some(&i[3])).unwrap()
            });
        }
        for causal in [false, true] {
            let temperature = (normal(&[heads], 0.3, 52) + (2.0 * p as f64).sqrt()).unwrap();
            let coefficient = (normal(&[heads], 0.2, 53) + 0.3).unwrap();
            let inputs = [normal(&[b, n, w], 1.0, 54), normal(&[b, n, w], 1.0, 55), temperature, coefficient];
            check_f32_against_f64(&format!("newton direction {shape} causal={causal}"), &inputs, |i| {
                newton_direction(&i[0], &i[1], &i[2], &i[3], heads, causal).unwrap()
            });
        }
        for attend_self in [false, true] {
            check_f32_against_f64(
                &format!("energy attention {shape} attend_self={attend_self}"),
                &[normal(&[b, n, 2 * w], 1.0, 47)],
                |i| energy_attention(&i[0], heads, 0.35, attend_self).unwrap(),
            );
        }
    }
}

/// candle's sums (the vendored run-by-run `ReduceSum`, what every broadcast op's backward
/// computes) against a plain per-entry sum, for every choice of reduced dimensions of a
/// `[3, 4, 5, 6]` tensor.
#[test]
fn sums_over_any_dimensions_match_per_entry_sums() {
    let dims = [3, 4, 5, 6];
    let x = normal(&dims, 1.0, 11);
    let values = x.flatten_all().unwrap().to_vec1::<f64>().unwrap();
    for mask in 1..(1u32 << dims.len()) {
        let reduced: Vec<usize> = (0..dims.len()).filter(|d| mask & (1 << d) != 0).collect();
        let kept: Vec<usize> =
            dims.iter().enumerate().map(|(d, &n)| if reduced.contains(&d) { 1 } else { n }).collect();
        let mut expected = vec![0.0; kept.iter().product()];
        for (flat, v) in values.iter().enumerate() {
            let mut rest = flat;
            let mut target = 0;
            for d in 0..dims.len() {
                let stride: usize = dims[d + 1..].iter().product();
                let index = if reduced.contains(&d) { 0 } else { rest / stride };
                rest %= stride;
                target = target * kept[d] + index;
            }
            expected[target] += v;
        }
        let summed = x.sum_keepdim(reduced.clone()).unwrap();
        assert_eq!(summed.dims(), kept.as_slice(), "dims {reduced:?}");
        let got = summed.flatten_all().unwrap().to_vec1::<f64>().unwrap();
        let worst = got.iter().zip(&expected).map(|(a, b)| (a - b).abs()).fold(0.0, larger);
        assert!(worst < 1e-12, "sum over {reduced:?}: off by {worst}");
    }
}

/// The `LayerNorm` layer (gain and bias variables, PyTorch's eps) against candle_nn's
/// forward-only `layer_norm`, with gradients reaching the input, the gain and the bias.
#[test]
fn layer_norm_layer_matches_candle_and_passes_gradients() {
    use candle_core::DType;
    use plugin_api::candle_nn::{VarBuilder, VarMap};
    let dev = Device::Cpu;
    let map = VarMap::new();
    let norm = LayerNorm::new(6, VarBuilder::from_varmap(&map, DType::F32, &dev)).unwrap();
    for (i, var) in map.all_vars().iter().enumerate() {
        var.set(&(normal(&[6], 1.0, 70 + i as u64) + 0.5).unwrap().to_dtype(DType::F32).unwrap()).unwrap();
    }
    let x = Var::from_tensor(&normal(&[2, 4, 6], 3.0, 72).to_dtype(DType::F32).unwrap()).unwrap();
    let y = norm.forward(x.as_tensor()).unwrap();
    let vars = map.data().lock().unwrap();
    let (weight, bias) = (vars["weight"].as_tensor(), vars["bias"].as_tensor());
    let reference = plugin_api::candle_nn::ops::layer_norm(x.as_tensor(), weight, bias, LAYER_NORM_EPS as f32).unwrap();
    let diff = plugin_testkit::max_abs_diff(&y, &reference);
    assert!(diff < 1e-5, "differs from candle's layer_norm by {diff}");
    let grads = y.sin().unwrap().sum_all().unwrap().backward().unwrap();
    for t in [x.as_tensor(), weight, bias] {
        let g = grads.get(t).expect("a gradient");
        assert!(g.abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap() > 0.0);
    }
}

/// Gradient sums (the vendored candle's in-place sum): a gradient that reaches a node already
/// holding one is added into the stored tensor only when nothing else holds that tensor. An
/// `Add` hands one gradient tensor to both of its arguments, so summing into one argument's
/// gradient in place would change the other's too. In `y = u + (v + 3 u)`, `u = x^2`,
/// `v = e^x`, the pass gives `u`, `v` and `3 u` one shared gradient, then sums `3 u`'s into
/// `u`'s before `v` is differentiated; checked against the analytic `dy/dx = 8 x + e^x`.
#[test]
fn gradient_sums_leave_shared_gradients_unchanged() {
    let values = [0.5f64, -1.25, 2.0];
    let x = Var::new(&values[..], &Device::Cpu).unwrap();
    let u = x.as_tensor().sqr().unwrap();
    let v = x.as_tensor().exp().unwrap();
    let y = (&u + (&v + (&u * 3.0).unwrap()).unwrap()).unwrap();
    let grads = y.sum_all().unwrap().backward().unwrap();
    let got = grads.get(x.as_tensor()).unwrap().to_vec1::<f64>().unwrap();
    for (g, x) in got.iter().zip(values) {
        let expected = 8.0 * x + x.exp();
        assert!((g - expected).abs() < 1e-12 * expected.abs().max(1.0), "dy/dx at {x} is {g}, expected {expected}");
    }
}

/// `M + M^T` by tiles (the f32 AVX-512 and AVX paths: 16 x 16 tiles, 8 x 8 in the band between
/// the two widths) and by pairs (f64, and the edges past the last full tile) against the
/// definition, exactly: each entry is one sum of the same two numbers.
#[test]
fn add_transpose_matches_the_definition_in_and_out_of_place() {
    fn check<T: crate::real::Real + std::fmt::Debug>(values: &[T], n: usize) {
        let m = &values[..n * n];
        let expected: Vec<T> = (0..n * n).map(|k| m[k] + m[(k % n) * n + k / n]).collect();
        let mut out = vec![T::zero(); n * n];
        crate::transpose::add_transpose(m, &mut out, n);
        assert_eq!(out, expected, "out of place, n = {n}");
        let mut in_place = m.to_vec();
        crate::transpose::add_transpose_in_place(&mut in_place, n);
        assert_eq!(in_place, expected, "in place, n = {n}");
    }
    for n in [0, 1, 5, 8, 9, 16, 17, 24, 31, 32, 40, 47, 48, 81] {
        let m = normal(&[n * n], 1.0, n as u64);
        check(&m.to_vec1::<f64>().unwrap(), n);
        check(&m.to_dtype(DType::F32).unwrap().to_vec1::<f32>().unwrap(), n);
    }
}

/// The fused cross-entropy against `plugin_api::ops`' composition in f64: the loss and the
/// logits' gradient, plain and transposed logits, without weights and with weights some of
/// which are zero; an out-of-range class id is refused, naming it.
#[test]
fn cross_entropy_matches_the_composition() {
    for (s, &(rows, classes)) in [(1, 1), (7, 9), (13, 256)].iter().enumerate() {
        let ids: Vec<u32> = (0..rows).map(|i| ((i * 7 + s) % classes) as u32).collect();
        let targets = Tensor::new(ids.as_slice(), &Device::Cpu).unwrap();
        let weights =
            Tensor::from_vec((0..rows).map(|i| (i % 3) as f64 * 0.5).collect::<Vec<_>>(), rows, &Device::Cpu).unwrap();
        for view in [View::Plain, View::Transposed] {
            let (xv, x) = input(&[rows, classes], view, 40 + s as u64);
            for w in [None, Some(&weights)] {
                check(
                    &format!("cross entropy {rows}x{classes} {view:?} weights={}", w.is_some()),
                    std::slice::from_ref(&xv),
                    std::slice::from_ref(&x),
                    |i| weighted_cross_entropy(&i[0], &targets, w).unwrap(),
                    |i| ops::weighted_cross_entropy(&i[0], &targets, w).unwrap(),
                );
            }
        }
    }
    let (_, x) = input(&[2, 3], View::Plain, 1);
    let err = weighted_cross_entropy(&x, &Tensor::new(&[0u32, 3], &Device::Cpu).unwrap(), None).unwrap_err();
    assert!(err.to_string().contains("class id 3 is out of range for 3 classes"), "{err}");
}

/// Every test of this binary again, in a child process with `variable=value`, but those
/// matching `skips` and the CUDA emulation's (they run no CPU kernel); fails with the child's
/// report unless all pass and at least 40 ran.
fn every_test_passes_again_with(skips: &[&str], (variable, value): (&str, &str)) {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap());
    for skip in skips.iter().chain(&["tests_emulated", "tests_cuda"]) {
        child.args(["--skip", skip]);
    }
    let out = child.args(["--test-threads", "2"]).env(variable, value).output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "with {variable}={value}:\n{report}\n{}", String::from_utf8_lossy(&out.stderr));
    let passed = report.lines().filter(|line| line.starts_with("test ") && line.ends_with(" ok")).count();
    assert!(passed >= 40, "with {variable}={value} only {passed} tests ran:\n{report}");
}

/// The products on a C BLAS library (`WORKBENCH_BLAS`, `plugin_api::blas`): every test of the
/// crate again, in a child process of this test binary with the variable set, so each fused
/// op's values and gradients are held to candle's composition (whose products stay `gemm`'s)
/// with `linear.rs`'s products on the library. Required where CI is set (`.ci/run` installs
/// Debian's OpenBLAS); elsewhere skipped, saying so, when no library is installed.
#[test]
fn every_test_passes_with_the_products_on_a_blas_library() {
    use plugin_api::blas::{Blas, BLAS_VARIABLE, DEBIAN_OPENBLAS};
    let this = "tests::every_test_passes_with_the_products_on_a_blas_library";
    let library = std::env::var("WORKBENCH_TEST_BLAS").unwrap_or_else(|_| DEBIAN_OPENBLAS.to_string());
    if !std::path::Path::new(&library).is_file() {
        assert!(
            std::env::var_os("CI").is_none(),
            "no BLAS library at {library}: install Debian's libopenblas0-pthread or set WORKBENCH_TEST_BLAS"
        );
        eprintln!("skipped: no BLAS library at {library} (Debian: libopenblas0-pthread; or set WORKBENCH_TEST_BLAS)");
        return;
    }
    // The library itself first: a product through it against a plain sum.
    let blas = Blas::load(std::path::Path::new(&library)).unwrap();
    let (a, b) = ([1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], [1.0f64, -1.0, 0.5, 2.0, 0.0, 1.0]);
    let mut c = [0.0f64; 4];
    // SAFETY: a is 2 x 3 row-major, b 3 x 2 read through its transpose's strides, c 2 x 2.
    let ran = unsafe { blas.product((2, 2, 3), c.as_mut_ptr(), (a.as_ptr(), 3, 1), (b.as_ptr(), 1, 3), false) };
    assert!(ran);
    let expected: Vec<f64> = (0..4).map(|e| (0..3).map(|p| a[(e / 2) * 3 + p] * b[(e % 2) * 3 + p]).sum()).collect();
    assert_eq!(c.to_vec(), expected, "{library}");
    // The narrower sets' re-run is left out: under it, this test would start one again.
    every_test_passes_again_with(&[this, "narrower_instruction_set"], (BLAS_VARIABLE, &library));
    eprintln!("the kernels' tests passed again with {BLAS_VARIABLE}={library}");
}

/// The paths this processor's dispatch does not take: every test of the crate again, in a
/// child process of this test binary, under each narrower `WORKBENCH_KERNELS_ISA` (AVX2 and
/// baseline code on an AVX-512 machine, as a cluster's older nodes run it). The CUDA
/// emulation's tests are left out: they run no CPU kernel.
#[test]
fn every_test_passes_on_each_narrower_instruction_set() {
    use plugin_api::isa::{Isa, ISA_VARIABLE};
    let this = "tests::every_test_passes_on_each_narrower_instruction_set";
    let narrower: Vec<Isa> =
        [Isa::Baseline, Isa::Avx2].into_iter().filter(|isa| *isa < plugin_api::isa::kernels_isa()).collect();
    if narrower.is_empty() {
        eprintln!(
            "skipped: no instruction set narrower than {} to run the tests under",
            plugin_api::isa::kernels_isa().name()
        );
    }
    for isa in &narrower {
        every_test_passes_again_with(&[this], (ISA_VARIABLE, isa.name()));
    }
    eprintln!(
        "the kernels' tests passed again under: {:?} (this process: {:?})",
        narrower,
        plugin_api::isa::kernels_isa()
    );
}
