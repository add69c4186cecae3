use super::*;
use crate::attention::{momentum, nesterov, Attention};
use crate::block::Block;
use crate::config::AttentionKind;
use crate::dropout::Dropout;
use nalgebra::DMatrix;
use plugin_api::candle::{DType, Device, Tensor, Var, D};
use plugin_api::candle_nn::{VarBuilder, VarMap};
use plugin_api::{Config, GradientIdentity, Layer, Pass, Value};
use plugin_testkit::{
    gradient_sizes, loss_before_and_after, max_abs_diff, mean_squared_error, named_vars, param_count, perturb_seeded,
    relative_error,
};
use rand::rngs::StdRng;
use rand::SeedableRng;

fn config(pairs: &[(&str, Value)]) -> Config {
    plugin_testkit::config(&params(), pairs)
}

fn kind_config(kind: AttentionKind, pairs: &[(&str, Value)]) -> Config {
    let mut cfg = config(pairs);
    cfg.set("attention", Value::Str(kind.name().into()));
    cfg
}

fn build(cfg: &Config, dtype: DType) -> (VarMap, Intrinsic) {
    plugin_testkit::build(dtype, |vb| Intrinsic::new(&IntrinsicConfig::from_config(cfg).unwrap(), vb))
}

fn build_block(cfg: &Config, dtype: DType) -> (VarMap, Block) {
    plugin_testkit::build(dtype, |vb| Block::new(&IntrinsicConfig::from_config(cfg).unwrap(), vb))
}

/// A reproducible `N(0, std^2)` tensor of `dtype`.
fn normal(rng: &mut StdRng, shape: &[usize], std: f64, dtype: DType) -> Tensor {
    plugin_testkit::normal(shape, std, rng).to_dtype(dtype).unwrap()
}

/// Redraws every weight matrix (not the scalars and vectors: gains, biases, beta, eta, T_h,
/// tau keep their initial values) from `N(0, std^2)` with a fixed seed.
fn randomise_matrices(map: &VarMap, seed: u64, std: f64) {
    let mut rng = StdRng::seed_from_u64(seed);
    for (_, var) in named_vars(map) {
        if var.rank() == 2 {
            var.set(&normal(&mut rng, var.dims(), std, var.dtype())).unwrap();
        }
    }
}

/// Adds `N(0, std^2)` noise to every parameter (as `workbench verify` does), so gains,
/// step sizes and temperatures are off their initial values.
fn perturb_all(map: &VarMap, seed: u64, std: f64) {
    perturb_seeded(map, std, &mut StdRng::seed_from_u64(seed));
}

fn small(kind: AttentionKind) -> Config {
    kind_config(
        kind,
        &[
            ("d", Value::Int(16)),
            ("heads", Value::Int(2)),
            ("layers", Value::Int(2)),
            ("iterations", Value::Int(4)),
            ("ff_ratio", Value::Int(2)),
        ],
    )
}

/// The count of one block, by the formula of each kind: pre-norms (gain, and bias for a
/// LayerNorm with biases), `4 d^2` projections plus biases (no key bias where it is inert),
/// the MLP `2 d M + M + d`, and the extras: 4 momentum scalars (2 without `momentum_ffn`),
/// `2H` for MHA2nd1st (`T_h`, `c_h`), `H` for LightMHA2nd1st (`tau_h`), `dH + H` for the gate.
fn formula(kind: AttentionKind, d: usize, heads: usize, ff_ratio: usize, bias: bool, layer_norm: bool) -> usize {
    let m = ff_ratio * d;
    let norm = if layer_norm && bias { 2 * d } else { d };
    let key_bias = bias && !kind.key_bias_is_inert();
    let attention = 4 * d * d + if bias { 3 * d } else { 0 } + if key_bias { d } else { 0 };
    let mlp = 2 * d * m + if bias { m + d } else { 0 };
    let extra = match kind {
        AttentionKind::Momentum | AttentionKind::Nesterov => 4,
        AttentionKind::Newton => 2 * heads,
        AttentionKind::LightNewton => heads,
        AttentionKind::GatedLinear => d * heads + heads,
        AttentionKind::Softmax | AttentionKind::Linear => 0,
    };
    2 * norm + attention + mlp + extra
}

#[test]
fn parameter_counts_follow_the_formula_for_every_kind() {
    for kind in AttentionKind::ALL {
        for (bias, norm) in [(true, "layer"), (false, "layer"), (true, "rms")] {
            let cfg = kind_config(
                kind,
                &[
                    ("d", Value::Int(24)),
                    ("heads", Value::Int(3)),
                    ("layers", Value::Int(2)),
                    ("iterations", Value::Int(2)),
                    ("ff_ratio", Value::Int(3)),
                    ("bias", Value::Bool(bias)),
                    ("norm", Value::Str(norm.into())),
                ],
            );
            let (map, _) = build(&cfg, DType::F32);
            let expected = 2 * formula(kind, 24, 3, 3, bias, norm == "layer");
            assert_eq!(param_count(&map), expected, "{} bias={bias} norm={norm}", kind.name());
        }
    }
    let cfg = kind_config(AttentionKind::Momentum, &[("d", Value::Int(8)), ("momentum_ffn", Value::Bool(false))]);
    let (one_block, _) = build_block(&cfg, DType::F32);
    assert_eq!(param_count(&one_block), formula(AttentionKind::Momentum, 8, 4, 4, true, true) - 2);
}

/// notes §4: the seed's models (GPT-2 blocks, d_h = 64, untied input embedding and LM head,
/// vocabulary 50257, 256 learned positions, final LayerNorm) have about 30.5M, 52.9M, 76.8M
/// and 162.4M parameters. The layer's blocks plus that task share must give the same figures
/// to 0.1M for the four kinds the seed trains and the MHA baseline.
#[test]
fn paper_configurations_match_the_notes_parameter_counts() {
    let configs = [(6usize, 4usize, 256usize, 305u64), (8, 6, 384, 529), (8, 8, 512, 768), (12, 12, 768, 1624)];
    for (layers, heads, d, tenths_of_millions) in configs {
        let task_share = 2 * 50257 * d + 256 * d + 2 * d;
        for kind in [
            AttentionKind::Softmax,
            AttentionKind::Momentum,
            AttentionKind::Nesterov,
            AttentionKind::Newton,
            AttentionKind::LightNewton,
        ] {
            let cfg = kind_config(kind, &[("d", Value::Int(d as i64)), ("heads", Value::Int(heads as i64))]);
            let (map, _) = build_block(&cfg, DType::F32);
            let block = param_count(&map);
            assert_eq!(block, formula(kind, d, heads, 4, true, true));
            let total = layers * block + task_share;
            assert_eq!((total as f64 / 1e5).round() as u64, tenths_of_millions, "{} d={d}: {total}", kind.name());
        }
    }
}

#[test]
fn output_has_the_input_shape_for_every_kind() {
    for kind in AttentionKind::ALL {
        let (_, layer) = build(&small(kind), DType::F32);
        for n in [7, 1] {
            for causal in [false, true] {
                let x = plugin_testkit::randn(0f32, 1.0, (2, n, 16), &Device::Cpu).unwrap();
                let mut pass = Pass { iterations: 4, causal, train: false, observer: None };
                let y = layer.forward(&x, &mut pass).unwrap();
                assert_eq!(y.dims(), &[2, n, 16], "{}", kind.name());
                let finite = plugin_testkit::entries(&y).iter().all(|v| v.is_finite());
                assert!(finite, "{} produced a non-finite value", kind.name());
            }
        }
    }
}

#[test]
fn every_parameter_receives_a_gradient_for_every_kind() {
    for kind in AttentionKind::ALL {
        let (map, layer) = build(&small(kind), DType::F32);
        randomise_matrices(&map, 1, 0.3);
        let mut rng = StdRng::seed_from_u64(2);
        let x = normal(&mut rng, &[2, 5, 16], 1.0, DType::F32);
        let r = normal(&mut rng, &[2, 5, 16], 1.0, DType::F32);
        let mut pass = Pass { iterations: 4, causal: true, train: false, observer: None };
        let y = layer.forward(&x, &mut pass).unwrap();
        let grads = (y * r).unwrap().sum_all().unwrap().backward().unwrap();
        let sizes = gradient_sizes(&map, &grads);
        assert!(!sizes.is_empty());
        for (name, g) in sizes {
            assert!(g > 0.0, "{}: parameter {name} received no gradient", kind.name());
        }
    }
}

/// With the causal mask, changing the last token leaves every earlier output unchanged;
/// without it, the change reaches the earlier outputs (so the check can fail).
#[test]
fn causal_pass_does_not_look_ahead_for_every_kind() {
    for kind in AttentionKind::ALL {
        let (map, layer) = build(&small(kind), DType::F64);
        randomise_matrices(&map, 3, 0.3);
        let mut rng = StdRng::seed_from_u64(4);
        let x = normal(&mut rng, &[2, 6, 16], 1.0, DType::F64);
        let later =
            Tensor::cat(&[x.narrow(1, 0, 5).unwrap(), normal(&mut rng, &[2, 1, 16], 1.0, DType::F64)], 1).unwrap();
        let earlier_outputs = |x: &Tensor, causal: bool| {
            let mut pass = Pass { iterations: 4, causal, train: false, observer: None };
            layer.forward(x, &mut pass).unwrap().narrow(1, 0, 5).unwrap()
        };
        let causal_change = max_abs_diff(&earlier_outputs(&x, true), &earlier_outputs(&later, true));
        assert!(causal_change < 1e-12, "{}: earlier tokens changed by {causal_change}", kind.name());
        let full_change = max_abs_diff(&earlier_outputs(&x, false), &earlier_outputs(&later, false));
        assert!(full_change > 1e-6, "{}: without the mask the last token should matter", kind.name());
    }
}

/// The inverse's gradient (through the in-graph Newton-Schulz step) matches central finite
/// differences in f64, and its value is the inverse.
#[test]
fn inverse_gradient_matches_finite_differences() {
    let mut rng = StdRng::seed_from_u64(5);
    let n = 4;
    let w = normal(&mut rng, &[2, n, 7], 1.0, DType::F64);
    let a = w.matmul(&w.t().unwrap()).unwrap(); // two SPD 4x4 matrices, like W_Q,h W_Q,h^T
    let weights = normal(&mut rng, &[2, n, n], 1.0, DType::F64);
    let loss = |a: &Tensor| -> Tensor { (inverse::inverse(a).unwrap() * &weights).unwrap().sum_all().unwrap() };

    let value = inverse::inverse(&a).unwrap();
    let identity = Tensor::eye(n, DType::F64, &Device::Cpu).unwrap().unsqueeze(0).unwrap().repeat((2, 1, 1)).unwrap();
    assert!(max_abs_diff(&a.matmul(&value).unwrap(), &identity) < 1e-10);

    let av = Var::from_tensor(&a).unwrap();
    let grad = loss(av.as_tensor()).backward().unwrap().get(av.as_tensor()).unwrap().flatten_all().unwrap();
    let grad: Vec<f64> = grad.to_vec1().unwrap();
    let base: Vec<f64> = a.flatten_all().unwrap().to_vec1().unwrap();
    let h = 1e-6;
    for (index, analytic) in grad.iter().enumerate() {
        let shifted = |delta: f64| {
            let mut values = base.clone();
            values[index] += delta;
            let t = Tensor::from_vec(values, (2, n, n), &Device::Cpu).unwrap();
            loss(&t).to_scalar::<f64>().unwrap()
        };
        let numeric = (shifted(h) - shifted(-h)) / (2.0 * h);
        assert!((numeric - analytic).abs() < 1e-6 * (1.0 + numeric.abs()), "entry {index}: {numeric} vs {analytic}");
    }
    // A singular matrix is reported, not inverted.
    assert!(inverse::inverse(&Tensor::zeros((1, 2, 2), DType::F64, &Device::Cpu).unwrap()).is_err());
}

fn attention_of(block: &Block) -> &Attention {
    &block.attention
}

/// MHA2nd1st against a direct evaluation of Eq. 24 for every query, head by head, with
/// `M_h` from nalgebra's Moore-Penrose pseudo-inverse of `W_{Q,h}` (Eq. 20-21's range-space
/// inverse) and Euclidean scores with the learned `T_h` and `c_h`.
#[test]
fn newton_branch_matches_a_direct_evaluation_of_eq_24() {
    let (d, heads, n) = (8usize, 2usize, 5usize);
    let dh = d / heads;
    let cfg = kind_config(
        AttentionKind::Newton,
        &[("d", Value::Int(d as i64)), ("heads", Value::Int(heads as i64)), ("bias", Value::Bool(false))],
    );
    let (map, block) = build_block(&cfg, DType::F64);
    randomise_matrices(&map, 6, 0.5);
    perturb_all(&map, 7, 0.05);
    let get = |name: &str| -> Vec<f64> {
        map.data().lock().unwrap()[name].as_tensor().flatten_all().unwrap().to_vec1().unwrap()
    };
    let (wq, wk, wv, wo) = (get("attn.q.weight"), get("attn.k.weight"), get("attn.v.weight"), get("attn.o.weight"));
    let (temperature, b_scale) = (get("attn.temperature"), get("attn.b_scale"));
    // Head h's W_{.,h} (d_h x d): row r is column h d_h + r of the [d, d] row-major weight.
    let head_rows = |w: &[f64], h: usize| DMatrix::from_fn(dh, d, |r, c| w[c * d + h * dh + r]);
    let mut rng = StdRng::seed_from_u64(8);
    let x = normal(&mut rng, &[1, n, d], 1.0, DType::F64);
    let xs: Vec<f64> = x.flatten_all().unwrap().to_vec1().unwrap();
    let token = |i: usize| nalgebra::DVector::from_column_slice(&xs[i * d..(i + 1) * d]);

    for causal in [false, true] {
        let got: Vec<f64> = attention_of(&block)
            .forward(&x, &x, causal, Dropout::NONE)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        for t in 0..n {
            let mut expected = nalgebra::DVector::<f64>::zeros(d);
            for h in 0..heads {
                let (w_q, w_k, w_v) = (head_rows(&wq, h), head_rows(&wk, h), head_rows(&wv, h));
                // W_{O,h} (d x d_h): row-major o = merged @ W_O, so W_{O,h}[r, c] = W_O[h d_h + c, r].
                let w_o = DMatrix::from_fn(d, dh, |r, c| wo[(h * dh + c) * d + r]);
                let keys_seen = if causal { t + 1 } else { n };
                let q = &w_q * token(t);
                let keys: Vec<_> = (0..keys_seen).map(|i| &w_k * token(i)).collect();
                let scores: Vec<f64> = keys.iter().map(|k| -(&q - k).norm_squared() / (2.0 * temperature[h])).collect();
                let top = scores.iter().cloned().fold(f64::MIN, f64::max);
                let total: f64 = scores.iter().map(|s| (s - top).exp()).sum();
                let p: Vec<f64> = scores.iter().map(|s| (s - top).exp() / total).collect();
                let mean_key = keys.iter().zip(&p).fold(nalgebra::DVector::zeros(dh), |acc, (k, pi)| acc + k * *pi);
                let u = &q - &mean_key;
                let spread =
                    keys.iter().zip(&p).fold(nalgebra::DVector::zeros(dh), |acc, (k, pi)| acc + k * (pi * k.dot(&u)));
                let b = (spread - &mean_key * mean_key.dot(&u)) * b_scale[h];
                let m_h = w_q.clone().pseudo_inverse(1e-12).unwrap(); // = W^T (W W^T)^-1
                expected += &w_o * (&w_v * (m_h * (u + b)));
            }
            for c in 0..d {
                let diff = (got[t * d + c] - expected[c]).abs();
                assert!(diff < 1e-9 * (1.0 + expected[c].abs()), "causal={causal} t={t} c={c}: {diff}");
            }
        }
    }
}

/// Eq. 8 unrolled (Fig. 1): `z^(L) = z^(0) + sum_k (eta sum_{n<L-k} beta^n) f^(k)`; Eq. 9
/// unrolled (Figs. 2-3): the same for `z`, and `z~^(L) = z^(0) + sum_k (eta sum_{n<L-k} beta^n
/// + beta^(L-k)) f~^(k)` for the look-ahead points.
#[test]
fn momentum_and_nesterov_unroll_to_geometric_skip_connections() {
    let (beta, eta) = (0.7, 0.5);
    let scalar = |v: f64| Tensor::new(&[v], &Device::Cpu).unwrap();
    let (beta_t, eta_t) = (scalar(beta), scalar(eta));
    let z0 = 0.3;
    let fs = [1.0, -2.0, 0.5, 4.0];
    let coefficient = |k: usize, l: usize| eta * (0..l - k).map(|n| beta.powi(n as i32)).sum::<f64>();
    let value = |t: &Tensor| t.to_vec1::<f64>().unwrap()[0];

    let (mut z, mut m) = (scalar(z0), None::<Tensor>);
    for (k, f) in fs.iter().enumerate() {
        (z, m) =
            momentum::step(&z, m.as_ref(), &beta_t, &eta_t, |_| Ok(scalar(*f))).map(|(z, m)| (z, Some(m))).unwrap();
        let l = k + 1;
        let expected = z0 + (0..l).map(|j| coefficient(j, l) * fs[j]).sum::<f64>();
        assert!((value(&z) - expected).abs() < 1e-12, "momentum L={l}");
    }

    let (mut z, mut m) = (scalar(z0), None::<Tensor>);
    for (k, f) in fs.iter().enumerate() {
        let mut seen = None;
        (z, m) = nesterov::step(&z, m.as_ref(), &beta_t, &eta_t, |point| {
            seen = Some(value(point));
            Ok(scalar(*f))
        })
        .map(|(z, m)| (z, Some(m)))
        .unwrap();
        // The point the branch saw at step k is z~^(k).
        let lookahead = z0 + (0..k).map(|j| (coefficient(j, k) + beta.powi((k - j) as i32)) * fs[j]).sum::<f64>();
        assert!((seen.unwrap() - lookahead).abs() < 1e-12, "nesterov look-ahead at k={k}");
        let l = k + 1;
        let expected = z0 + (0..l).map(|j| coefficient(j, l) * fs[j]).sum::<f64>();
        assert!((value(&z) - expected).abs() < 1e-12, "nesterov L={l}");
    }
}

/// With `beta = 0`, `eta = 1` MomenMHA and NagMHA are the plain residual (softmax) layer, and
/// LightMHA2nd1st with `tau = 0` is softmax attention; different settings differ.
#[test]
fn special_cases_reduce_to_the_softmax_layer() {
    let dims =
        [("d", Value::Int(16)), ("heads", Value::Int(2)), ("layers", Value::Int(2)), ("iterations", Value::Int(4))];
    let mut rng = StdRng::seed_from_u64(9);
    let x = normal(&mut rng, &[2, 6, 16], 1.0, DType::F64);
    let run = |layer: &Intrinsic| {
        layer.forward(&x, &mut Pass { iterations: 4, causal: true, train: false, observer: None }).unwrap()
    };
    for (kind, pairs, reduces) in [
        (
            AttentionKind::Momentum,
            vec![("momentum_beta", Value::Float(0.0)), ("momentum_eta", Value::Float(1.0))],
            true,
        ),
        (
            AttentionKind::Nesterov,
            vec![("momentum_beta", Value::Float(0.0)), ("momentum_eta", Value::Float(1.0))],
            true,
        ),
        (AttentionKind::LightNewton, vec![("light_tau", Value::Float(0.0))], true),
        (AttentionKind::Momentum, vec![], false),
        (AttentionKind::Nesterov, vec![], false),
        (AttentionKind::LightNewton, vec![("light_tau", Value::Float(0.5))], false),
    ] {
        let mut all: Vec<(&str, Value)> = dims.to_vec();
        all.extend(pairs);
        let (map, special) = build(&kind_config(kind, &all), DType::F64);
        randomise_matrices(&map, 10, 0.3);
        // The softmax layer built on the same map shares every weight.
        let vb = VarBuilder::from_varmap(&map, DType::F64, &Device::Cpu);
        let plain =
            Intrinsic::new(&IntrinsicConfig::from_config(&kind_config(AttentionKind::Softmax, &all)).unwrap(), vb)
                .unwrap();
        let diff = max_abs_diff(&run(&special), &run(&plain));
        if reduces {
            assert!(diff < 1e-12, "{} should equal softmax, differs by {diff}", kind.name());
        } else {
            assert!(diff > 1e-6, "{} at its seed initialisation should differ from softmax", kind.name());
        }
    }
}

/// Every claimed identity holds to f64 precision on random tokens, with every parameter off
/// its initial value (as `workbench verify` runs them).
#[test]
fn gradient_identities_hold_for_every_kind() {
    let expected_claims = |kind: AttentionKind| match kind {
        AttentionKind::Newton | AttentionKind::LightNewton => 4,
        _ => 2,
    };
    for kind in AttentionKind::ALL {
        let (map, layer) = build(&small(kind), DType::F64);
        randomise_matrices(&map, 11, 0.3);
        perturb_all(&map, 12, 0.1);
        let mut rng = StdRng::seed_from_u64(13);
        let x = normal(&mut rng, &[2, 12, 16], 1.0, DType::F64);
        let identities = layer.gradient_identities(&x).unwrap();
        assert_eq!(identities.len(), 2 * expected_claims(kind), "{}", kind.name()); // two blocks
        for identity in &identities {
            let error = relative_error(identity);
            assert!(error < 1e-9, "{}: `{}` has relative error {error}", kind.name(), identity.name);
        }
    }
}

/// The identities are not vacuous: the layer's own branches, with learned (unmatched)
/// `W_V`, `W_O`, are not the gradients of their energies.
#[test]
fn unmatched_branches_are_not_gradients() {
    for kind in [AttentionKind::Softmax, AttentionKind::Linear, AttentionKind::GatedLinear] {
        let (map, block) = build_block(&small(kind), DType::F64);
        randomise_matrices(&map, 14, 0.3);
        let mut rng = StdRng::seed_from_u64(15);
        let x = normal(&mut rng, &[2, 12, 16], 1.0, DType::F64);
        let z = Var::from_tensor(&x).unwrap();
        let identity = GradientIdentity {
            name: "learned W_V, W_O".into(),
            energy: block.attention.energy(z.as_tensor(), &x, false).unwrap().sum_all().unwrap(),
            descent: block.attention.forward(&x, &x, false, Dropout::NONE).unwrap(),
            variable: z.as_tensor().clone(),
        };
        assert!(relative_error(&identity) > 0.1, "{}", kind.name());
    }
}

/// The forget gates of the gated linear attention: `gamma_{t,t} = 1`, `gamma` in `(0, 1]`,
/// `gamma_{t,i} = gamma_{t,j} gamma_{j,i}` for `i <= j <= t` (a product of per-token gates),
/// zero above the diagonal when causal and symmetric otherwise.
#[test]
fn gated_linear_gates_are_products_of_forget_gates() {
    let (map, block) = build_block(&small(AttentionKind::GatedLinear), DType::F64);
    randomise_matrices(&map, 16, 0.5);
    let Attention::GatedLinear(attention) = &block.attention else { panic!("not gated") };
    let mut rng = StdRng::seed_from_u64(17);
    let x = normal(&mut rng, &[1, 6, 16], 1.0, DType::F64);
    let causal: Vec<Vec<f64>> = attention.gamma(&x, true).unwrap().get(0).unwrap().get(1).unwrap().to_vec2().unwrap();
    let full: Vec<Vec<f64>> = attention.gamma(&x, false).unwrap().get(0).unwrap().get(1).unwrap().to_vec2().unwrap();
    for t in 0..6 {
        assert!((causal[t][t] - 1.0).abs() < 1e-12);
        for i in 0..6 {
            assert!((full[t][i] - full[i][t]).abs() < 1e-12);
            if i > t {
                assert_eq!(causal[t][i], 0.0);
                continue;
            }
            assert!(causal[t][i] > 0.0 && causal[t][i] <= 1.0);
            assert!((causal[t][i] - full[t][i]).abs() < 1e-12);
            for j in i..=t {
                assert!((causal[t][i] - causal[t][j] * causal[j][i]).abs() < 1e-12);
            }
        }
    }
    assert!(causal[5][0] < 0.99, "with gate_bias = 3 five steps of decay must show");
}

#[test]
fn bad_configurations_are_refused_with_the_fix() {
    let err = IntrinsicConfig::from_config(&config(&[("d", Value::Int(10)), ("heads", Value::Int(4))])).unwrap_err();
    assert!(err.to_string().contains("not divisible by heads"), "{err}");
    let err =
        IntrinsicConfig::from_config(&config(&[("iterations", Value::Int(6)), ("layers", Value::Int(4))])).unwrap_err();
    assert!(err.to_string().contains("cannot be split over 4 layers"), "{err}");
    let err = IntrinsicConfig::from_config(&kind_config(AttentionKind::Newton, &[("init_std", Value::Float(0.0))]))
        .unwrap_err();
    assert!(err.to_string().contains("newton_ridge > 0"), "{err}");
    let cfg = kind_config(
        AttentionKind::Newton,
        &[("newton_b_form", Value::Str("temperature".into())), ("newton_b_init", Value::Float(0.0))],
    );
    assert!(IntrinsicConfig::from_config(&cfg).unwrap_err().to_string().contains("newton_b_init must be positive"));
    let err = IntrinsicConfig::from_config(&config(&[("attention", Value::Str("newtonian".into()))])).unwrap_err();
    assert!(err.to_string().contains("light_newton"), "{err}");
    // With a ridge, newton accepts a zero init (the inverse of eps I).
    let cfg =
        kind_config(AttentionKind::Newton, &[("init_std", Value::Float(0.0)), ("newton_ridge", Value::Float(1.0))]);
    assert!(IntrinsicConfig::from_config(&cfg).is_ok());
}

/// Energies are per sample and finite; head projections are `[B, H, N, d_h]` with norm
/// `sqrt(d_h)` per head and token.
#[test]
fn diagnostics_have_the_contract_shapes() {
    for kind in AttentionKind::ALL {
        let (map, layer) = build(&small(kind), DType::F32);
        randomise_matrices(&map, 20, 0.3);
        let x = normal(&mut StdRng::seed_from_u64(21), &[3, 5, 16], 1.0, DType::F32);
        let energies = layer.energies(4, 4, &x, &x).unwrap();
        assert_eq!(energies.len(), 1);
        assert_eq!(energies[0].per_sample.dims(), &[3]);
        let values: Vec<f32> = energies[0].per_sample.to_vec1().unwrap();
        assert!(values.iter().all(|v| v.is_finite()), "{}", kind.name());
        let heads = layer.head_projections(1, 4, &x).unwrap().unwrap();
        assert_eq!(heads.dims(), &[3, 2, 5, 8]);
        let norms: Vec<f32> = heads.sqr().unwrap().sum(D::Minus1).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        assert!(norms.iter().all(|n| (n - 8.0).abs() < 1e-3), "{}", kind.name());
    }
}

/// A tiny causal objective: each output must become the mean of the tokens up to it,
/// `y_t = (1/t) sum_{i<=t} x_i`, which needs attention to earlier tokens. AdamW lowers the
/// mean squared error well below its starting value.
fn train_prefix_mean(kind: AttentionKind, steps: usize) -> (f64, f64) {
    let cfg = kind_config(
        kind,
        &[
            ("d", Value::Int(16)),
            ("heads", Value::Int(2)),
            ("layers", Value::Int(1)),
            ("iterations", Value::Int(1)),
            ("ff_ratio", Value::Int(2)),
            ("init_std", Value::Float(0.1)),
        ],
    );
    let (map, layer) = build(&cfg, DType::F32);
    randomise_matrices(&map, 18, 0.1);
    let mut rng = StdRng::seed_from_u64(19);
    let (batch, n, d) = (16, 8, 16);
    let x = normal(&mut rng, &[batch, n, d], 1.0, DType::F32);
    let counts = Tensor::arange(1f32, (n + 1) as f32, &Device::Cpu).unwrap().reshape((1, n, 1)).unwrap();
    let target = x.cumsum(1).unwrap().broadcast_div(&counts).unwrap();
    let loss = || {
        let y = layer.forward(&x, &mut Pass { iterations: 1, causal: true, train: false, observer: None }).unwrap();
        mean_squared_error(&y, &target)
    };
    loss_before_and_after(map.all_vars(), 1e-2, steps, loss)
}

#[test]
fn training_lowers_a_causal_loss() {
    for kind in [AttentionKind::Softmax, AttentionKind::Momentum, AttentionKind::Newton] {
        let (first, last) = train_prefix_mean(kind, 60);
        assert!(last < 0.25 * first, "{}: loss {first} -> {last}", kind.name());
    }
}

/// Self-attention (queries and context one tensor) projects through one packed product
/// `[Q | K | V]`; it gives the values and parameter gradients of the three separate projections
/// (the context a copy of the queries), with biases (the key's left out as inert) and without,
/// causal or not, with attention dropout.
#[test]
fn self_attention_through_one_packed_projection_matches_three_separate_ones() {
    for bias in [true, false] {
        let mut cfg = small(AttentionKind::Softmax);
        cfg.set("bias", Value::Bool(bias));
        let (map, block) = build_block(&cfg, DType::F64);
        perturb_all(&map, 3, 0.2);
        let mut rng = StdRng::seed_from_u64(9);
        let x = normal(&mut rng, &[2, 5, 16], 1.0, DType::F64);
        let weights = normal(&mut rng, &[2, 5, 16], 1.0, DType::F64);
        for causal in [false, true] {
            for dropout in [Dropout::NONE, Dropout::new(0.25, 11)] {
                let attention = attention_of(&block);
                let packed = attention.forward(&x, &x, causal, dropout).unwrap();
                let separate = attention.forward(&x, &x.copy().unwrap(), causal, dropout).unwrap();
                let label = format!("bias={bias} causal={causal} dropout={}", dropout.is_active());
                assert!(max_abs_diff(&packed, &separate) < 1e-12, "{label}: values differ");
                let grads = |y: &Tensor| (y * &weights).unwrap().sum_all().unwrap().backward().unwrap();
                let (g_packed, g_separate) = (grads(&packed), grads(&separate));
                let mut compared = 0;
                for (name, var) in named_vars(&map).into_iter().filter(|(name, _)| name.contains("attn.")) {
                    let (a, b) = (g_packed.get(&var), g_separate.get(&var));
                    match (a, b) {
                        (Some(a), Some(b)) => {
                            assert!(max_abs_diff(a, b) < 1e-10, "{label}: gradient of {name}");
                            compared += 1;
                        }
                        (None, None) => {}
                        _ => panic!("{label}: {name} has a gradient on one side only"),
                    }
                }
                // The query-key and output projections at least (a renamed parameter or a lost
                // gradient must not leave nothing compared).
                assert!(compared >= 2, "{label}: {compared} attention gradients compared");
            }
        }
    }
}
