//! MHA2nd's exact form (`newton = full`, Eq. 21) against a direct f64 evaluation, its
//! relation to the Taylor form MHA2nd1st (Eq. 22-24), and `verify`'s claims for both.

use crate::attention::Attention;
use crate::block::Block;
use crate::config::{params, IntrinsicConfig};
use crate::dropout::Dropout;
use crate::model::Intrinsic;
use nalgebra::{DMatrix, DVector};
use plugin_api::candle::{DType, Tensor};
use plugin_api::candle_nn::VarMap;
use plugin_api::{Config, Layer, Pass, Value};
use plugin_testkit::{gradient_sizes, named_vars, perturb_seeded, relative_error};
use rand::rngs::StdRng;
use rand::SeedableRng;

fn newton_config(form: &str, pairs: &[(&str, Value)]) -> Config {
    let mut all = vec![("attention", Value::Str("newton".into())), ("newton", Value::Str(form.into()))];
    all.extend(pairs.iter().cloned());
    plugin_testkit::config(&params(), &all)
}

fn small(form: &str) -> Config {
    newton_config(
        form,
        &[
            ("d", Value::Int(16)),
            ("heads", Value::Int(2)),
            ("layers", Value::Int(2)),
            ("iterations", Value::Int(4)),
            ("ff_ratio", Value::Int(2)),
        ],
    )
}

fn build_block(cfg: &Config) -> (VarMap, Block) {
    plugin_testkit::build(DType::F64, |vb| Block::new(&IntrinsicConfig::from_config(cfg).unwrap(), vb))
}

fn build(cfg: &Config, dtype: DType) -> (VarMap, Intrinsic) {
    plugin_testkit::build(dtype, |vb| Intrinsic::new(&IntrinsicConfig::from_config(cfg).unwrap(), vb))
}

fn normal(seed: u64, shape: &[usize], std: f64) -> Tensor {
    plugin_testkit::normal(shape, std, &mut StdRng::seed_from_u64(seed))
}

/// Weight matrices from `N(0, std^2)`, then every parameter perturbed, both seeded.
fn randomise(map: &VarMap, seed: u64, std: f64) {
    let mut rng = StdRng::seed_from_u64(seed);
    for (_, var) in named_vars(map) {
        if var.rank() == 2 {
            var.set(&plugin_testkit::normal(var.dims(), std, &mut rng).to_dtype(var.dtype()).unwrap()).unwrap();
        }
    }
    perturb_seeded(map, 0.02, &mut rng);
}

/// Sets every parameter of `to` to its value in `from` (same names).
fn copy_parameters(from: &VarMap, to: &VarMap) {
    let values: std::collections::HashMap<_, _> = named_vars(from).into_iter().collect();
    for (name, var) in named_vars(to) {
        var.set(values[&name].as_tensor()).unwrap();
    }
}

fn set(map: &VarMap, name: &str, value: &Tensor) {
    map.data().lock().unwrap()[name].set(value).unwrap();
}

fn branch(block: &Block, x: &Tensor, causal: bool) -> Vec<f64> {
    let Attention::Newton(a) = &block.attention else { panic!("not newton") };
    a.forward(x, x, causal, Dropout::NONE).unwrap().flatten_all().unwrap().to_vec1().unwrap()
}

/// MHA2nd (Eq. 21) for every query, head by head, in f64 with nalgebra:
/// `sum_h W_{O,h} W_{V,h} M_h (I - c_h sum_i p d d^T)^-1 (q_h - k^_h)`, `M_h` the Moore-Penrose
/// pseudo-inverse of `W_{Q,h}` (Eq. 20), Euclidean scores with the learned `T_h`.
#[test]
fn full_form_matches_a_direct_evaluation_of_eq_21() {
    let (d, heads, n) = (8usize, 2usize, 5usize);
    let dh = d / heads;
    let cfg = newton_config(
        "full",
        &[("d", Value::Int(d as i64)), ("heads", Value::Int(heads as i64)), ("bias", Value::Bool(false))],
    );
    let (map, block) = build_block(&cfg);
    randomise(&map, 6, 0.5);
    // A coefficient large enough that C^-1 differs clearly from its Taylor expansion.
    set(&map, "attn.b_scale", &Tensor::new(&[0.3f64, -0.2], &plugin_api::candle::Device::Cpu).unwrap());
    let get = |name: &str| -> Vec<f64> {
        map.data().lock().unwrap()[name].as_tensor().flatten_all().unwrap().to_vec1().unwrap()
    };
    let (wq, wk, wv, wo) = (get("attn.q.weight"), get("attn.k.weight"), get("attn.v.weight"), get("attn.o.weight"));
    let (temperature, c) = (get("attn.temperature"), get("attn.b_scale"));
    let head_rows = |w: &[f64], h: usize| DMatrix::from_fn(dh, d, |r, col| w[col * d + h * dh + r]);
    let x = normal(8, &[1, n, d], 1.0);
    let xs: Vec<f64> = x.flatten_all().unwrap().to_vec1().unwrap();
    let token = |i: usize| DVector::from_column_slice(&xs[i * d..(i + 1) * d]);
    let mut largest_taylor_gap = 0.0f64;
    for causal in [false, true] {
        let got = branch(&block, &x, causal);
        for t in 0..n {
            let (mut expected, mut taylor) = (DVector::<f64>::zeros(d), DVector::<f64>::zeros(d));
            for h in 0..heads {
                let (w_q, w_k, w_v) = (head_rows(&wq, h), head_rows(&wk, h), head_rows(&wv, h));
                let w_o = DMatrix::from_fn(d, dh, |r, col| wo[(h * dh + col) * d + r]);
                let seen = if causal { t + 1 } else { n };
                let q = &w_q * token(t);
                let keys: Vec<_> = (0..seen).map(|i| &w_k * token(i)).collect();
                let scores: Vec<f64> = keys.iter().map(|k| -(&q - k).norm_squared() / (2.0 * temperature[h])).collect();
                let top = scores.iter().cloned().fold(f64::MIN, f64::max);
                let sum: f64 = scores.iter().map(|s| (s - top).exp()).sum();
                let p: Vec<f64> = scores.iter().map(|s| (s - top).exp() / sum).collect();
                let mean_key = keys.iter().zip(&p).fold(DVector::zeros(dh), |acc, (k, pi)| acc + k * *pi);
                let u = &q - &mean_key;
                // S = sum_i p_i d_i d_i^T with d_i = k_i - k^ (Eq. 19-21).
                let s = keys.iter().zip(&p).fold(DMatrix::zeros(dh, dh), |acc, (k, pi)| {
                    let dev = k - &mean_key;
                    acc + &dev * dev.transpose() * *pi
                });
                let c_matrix = DMatrix::identity(dh, dh) - &s * c[h];
                let newton = c_matrix.try_inverse().unwrap() * &u;
                let m_h = w_q.clone().pseudo_inverse(1e-12).unwrap();
                expected += &w_o * (&w_v * (&m_h * newton));
                taylor += &w_o * (&w_v * (&m_h * (&u + &s * &u * c[h])));
            }
            for col in 0..d {
                let diff = (got[t * d + col] - expected[col]).abs();
                assert!(diff < 1e-9 * (1.0 + expected[col].abs()), "causal={causal} t={t} c={col}: {diff}");
                largest_taylor_gap = largest_taylor_gap.max((expected[col] - taylor[col]).abs());
            }
        }
    }
    assert!(largest_taylor_gap > 1e-6, "the test must tell the full form from the Taylor form");
}

/// MHA2nd1st is MHA2nd's first-order expansion in the coefficient `c_h` (Eq. 22): on the same
/// parameters, the two branches differ by `c^2 S^2 u + O(c^3)`, so halving `c` divides the
/// difference by about 4, and the difference is small against the branch.
#[test]
fn taylor_form_is_the_first_order_expansion_of_the_full_form() {
    let (full_map, full) = build_block(&small("full"));
    randomise(&full_map, 9, 0.3);
    let (taylor_map, taylor) = build_block(&small("taylor"));
    copy_parameters(&full_map, &taylor_map);
    let x = normal(10, &[2, 6, 16], 1.0);
    let gap = |c: f64| -> (f64, f64) {
        let value = Tensor::new(&[c, 0.5 * c], &plugin_api::candle::Device::Cpu).unwrap();
        set(&full_map, "attn.b_scale", &value);
        set(&taylor_map, "attn.b_scale", &value);
        let (a, b) = (branch(&full, &x, true), branch(&taylor, &x, true));
        let diff = a.iter().zip(&b).map(|(a, b)| (a - b).abs()).fold(0.0, plugin_testkit::larger);
        (diff, a.iter().map(|v| v.abs()).fold(0.0, plugin_testkit::larger))
    };
    let mut previous = gap(0.01).0;
    for c in [0.005, 0.0025, 0.00125] {
        let (diff, scale) = gap(c);
        let ratio = previous / diff;
        assert!((3.5..4.5).contains(&ratio), "c = {c}: difference ratio {ratio} (expected ~4 for O(c^2))");
        assert!(diff < 1e-2 * scale, "c = {c}: difference {diff} against branch size {scale}");
        previous = diff;
    }
    // The two forms compute `u` in other orders (the Taylor form as one op).
    let (diff, scale) = gap(0.0);
    assert!(diff < 1e-12 * scale, "at c = 0 both forms are u: difference {diff} against branch size {scale}");
}

/// With `newton = taylor` (the default) the layer is unchanged: the option's default reads
/// as before and the two forms differ once `c_h` is not zero.
#[test]
fn taylor_is_the_default_form() {
    let cfg = plugin_testkit::config(&params(), &[("attention", Value::Str("newton".into()))]);
    assert_eq!(IntrinsicConfig::from_config(&cfg).unwrap().newton_form, crate::config::NewtonForm::Taylor);
    let err = IntrinsicConfig::from_config(&newton_config("exact", &[])).unwrap_err().to_string();
    assert!(err.contains("taylor | full"), "{err}");
}

/// `verify`'s descent checks for both forms: a small per-head Newton move lowers `F`, on the
/// full context and causally, and the reversed move raises it (so the check can fail).
#[test]
fn newton_descent_checks_hold_and_reject_the_reversed_step() {
    for form in ["full", "taylor"] {
        let (map, layer) = build(&small(form), DType::F64);
        randomise(&map, 11, 0.3);
        let x = normal(12, &[2, 8, 16], 1.0);
        for step in [1e-3, 1e-2] {
            let checks = layer.descent_checks(&x, step).unwrap();
            assert_eq!(checks.len(), 2, "{form}");
            for c in &checks {
                assert!(c.name.contains(form), "{}", c.name);
                assert!(c.after < c.before, "{form}: {} rose {} -> {}", c.name, c.before, c.after);
            }
            for c in layer.descent_checks(&x, -step).unwrap() {
                assert!(c.after > c.before, "{form}: reversed, {} did not rise", c.name);
            }
        }
    }
    let (_, softmax) = build(&plugin_testkit::config(&params(), &[]), DType::F64);
    assert!(softmax.descent_checks(&normal(1, &[1, 4, 128], 1.0), 1e-3).unwrap().is_empty());
}

/// The full form's gradient identities (Eq. 16, 19 and the Newton system of Eq. 21) hold in
/// f64, and every parameter receives a gradient through the per-query inverses.
#[test]
fn full_form_identities_hold_and_every_parameter_learns() {
    let (map, layer) = build(&small("full"), DType::F64);
    randomise(&map, 13, 0.3);
    let identities = layer.gradient_identities(&normal(14, &[2, 12, 16], 1.0)).unwrap();
    assert_eq!(identities.len(), 2 * 2 * 3, "two blocks, two scopes, three claims");
    for identity in &identities {
        let error = relative_error(identity);
        assert!(error < 1e-9, "`{}` has relative error {error}", identity.name);
    }
    let (map, layer) = build(&small("full"), DType::F32);
    randomise(&map, 15, 0.3);
    let x = normal(16, &[2, 5, 16], 1.0).to_dtype(DType::F32).unwrap();
    let r = normal(17, &[2, 5, 16], 1.0).to_dtype(DType::F32).unwrap();
    let mut pass = Pass::new(4);
    pass.causal = true;
    let grads = (layer.forward(&x, &mut pass).unwrap() * r).unwrap().sum_all().unwrap().backward().unwrap();
    let sizes = gradient_sizes(&map, &grads);
    assert!(!sizes.is_empty());
    for (name, g) in sizes {
        assert!(g > 0.0 && g.is_finite(), "parameter {name}: gradient {g}");
    }
}

/// On `verify`'s setting (default sizes, parameters perturbed by 0.1) the full form's checks
/// hold at steps 1e-3 and 1e-2 and are not made at 0.1, where its full-context move was
/// measured to raise `F`; the Taylor form is checked at every step.
#[test]
fn full_form_checks_are_made_for_small_steps_only() {
    for form in ["taylor", "full"] {
        let (map, layer) = build(&newton_config(form, &[]), DType::F64);
        perturb_seeded(&map, 0.1, &mut StdRng::seed_from_u64(5));
        let x = normal(6, &[2, 12, 128], 1.0);
        for step in [1e-3, 1e-2, 1e-1] {
            let checks = layer.descent_checks(&x, step).unwrap();
            let expected = if form == "full" && step > 1e-2 { 0 } else { 2 };
            assert_eq!(checks.len(), expected, "{form} at {step}");
            for c in checks {
                assert!(c.after < c.before, "{form} at {step}: {} rose", c.name);
            }
        }
    }
}

/// MHA2nd1st's branch as it trains (the direction as one op, `W_{V,h} M_h` and `W_O` as one
/// map) against the seed's composition term by term: values, the gradient of every parameter
/// and of the input, both b-term forms, with and without biases, causal or not.
#[test]
fn the_fused_newton_branch_matches_its_composition() {
    let variants = [
        vec![],
        vec![("newton_b_form", Value::Str("temperature".into())), ("newton_b_init", Value::Float(3.0))],
        vec![("bias", Value::Bool(false)), ("newton_ridge", Value::Float(0.1))],
    ];
    for (v, pairs) in variants.iter().enumerate() {
        let mut pairs = pairs.clone();
        pairs.extend([("d", Value::Int(16)), ("heads", Value::Int(2)), ("layers", Value::Int(1))]);
        let (map, block) = build_block(&newton_config("taylor", &pairs));
        randomise(&map, 40 + v as u64, 0.4);
        // A b-term large enough to weigh in every gradient.
        let b_name = if v == 1 { "b_temperature" } else { "b_scale" };
        let b_value = if v == 1 { 2.0 } else { 0.5 };
        let names: Vec<String> = named_vars(&map).into_iter().map(|(n, _)| n).collect();
        let b_full = names.iter().find(|n| n.ends_with(b_name)).expect("the b-term coefficient");
        set(&map, b_full, &(Tensor::ones(2, DType::F64, &plugin_api::candle::Device::Cpu).unwrap() * b_value).unwrap());
        let Attention::Newton(a) = &block.attention else { panic!("not newton") };
        for causal in [false, true] {
            let x = plugin_api::candle::Var::from_tensor(&normal(50 + v as u64, &[2, 7, 16], 1.0)).unwrap();
            let fused = a.forward(x.as_tensor(), x.as_tensor(), causal, Dropout::NONE).unwrap();
            let composed = a.composed_forward(x.as_tensor(), x.as_tensor(), causal, Dropout::NONE).unwrap();
            let mut vars = named_vars(&map);
            vars.push(("input".to_string(), x));
            let label = format!("variant {v} causal={causal}");
            let compared = plugin_testkit::assert_same_gradients(&label, &fused, &composed, &vars, 1e-10);
            // The attention's own parameters and the input; the block's others are not on the branch.
            let on_branch = vars.iter().filter(|(n, _)| n.starts_with("attn.") || n == "input").count();
            assert_eq!(compared, on_branch, "{label}: every parameter of the branch and the input have a gradient");
        }
    }
}
