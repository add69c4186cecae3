use super::*;
use crate::model::Variant;
use crate::verify::{compression_total, derived_mssa, orthonormal_bases};
use plugin_api::candle::{DType, Device, Tensor, D};
use plugin_api::candle_nn::VarMap;
use plugin_api::{Config, Layer, Pass, Value};
use plugin_testkit::{
    gradient_sizes, loss_before_and_after, mean_squared_error, param_count, perturb, random_projection_gradients,
    relative_error, scalar, sequence_mean,
};

fn config(pairs: &[(&str, Value)]) -> Config {
    plugin_testkit::config(&params(), pairs)
}

fn small(variant: &str) -> Config {
    config(&[
        ("d", Value::Int(16)),
        ("heads", Value::Int(2)),
        ("iterations", Value::Int(2)),
        ("variant", Value::Str(variant.into())),
    ])
}

fn build(cfg: &Config, dtype: DType) -> (VarMap, Crate) {
    plugin_testkit::build(dtype, |vb| Crate::new(&CrateConfig::from_config(cfg).unwrap(), vb))
}

/// Per layer: `LN + U + W_o + b_o + LN + D = 3d^2 + 5d` (CRATE), `2d^2 + 4d` (CRATE-T).
#[test]
fn parameter_count_formula() {
    for (variant, per_layer) in [("crate", 3 * 32 * 32 + 5 * 32), ("crate_t", 2 * 32 * 32 + 4 * 32)] {
        for layers in [1, 3] {
            let cfg = config(&[
                ("d", Value::Int(32)),
                ("heads", Value::Int(4)),
                ("iterations", Value::Int(6)),
                ("layers", Value::Int(layers)),
                ("variant", Value::Str(variant.into())),
            ]);
            let (map, _) = build(&cfg, DType::F32);
            assert_eq!(param_count(&map), layers as usize * per_layer, "{variant}, {layers} layers");
            assert_eq!(CrateConfig::from_config(&cfg).unwrap().parameters_per_layer(), per_layer);
        }
    }
}

/// The seeds' image classifier around the layer (notes-hyperset.md §8, [CODE] `ic/models.py`):
/// patch embedding Linear(f, d) with bias, a [CLS] token, and a LayerNorm + Linear head.
fn classifier_share(d: usize, patch_features: usize, classes: usize) -> usize {
    (patch_features * d + d) + d + (2 * d) + (d * classes + classes)
}

/// Published CRATE / CRATE-T sizes (seed 000 Table 1, 2, 16, 21), in millions to the printed
/// precision: ImageNet (f = 588, 1000 classes) and CIFAR (f = 48, 10 / 100 classes).
#[test]
fn paper_configurations_reproduce_published_parameter_counts() {
    // (variant, d, heads, layers, patch features, classes, published, decimals)
    let cases = [
        ("crate", 384, 6, 1, 588, 1000, 1.06, 2),    // Table 16
        ("crate_t", 384, 6, 1, 588, 1000, 0.91, 2),  // Table 16
        ("crate", 768, 12, 1, 588, 1000, 3.00, 2),   // Table 1
        ("crate_t", 896, 14, 1, 588, 1000, 3.04, 2), // Table 1
        ("crate", 512, 8, 12, 588, 1000, 10.28, 2),  // Table 2, 12 distinct layers
        ("crate", 1152, 12, 1, 48, 10, 4.1, 1),      // Table 21, CIFAR-10
        ("crate", 1152, 12, 1, 48, 100, 4.2, 1),     // Table 21, CIFAR-100
    ];
    for (variant, d, heads, layers, features, classes, published, decimals) in cases {
        let cfg = config(&[
            ("d", Value::Int(d as i64)),
            ("heads", Value::Int(heads)),
            ("iterations", Value::Int(12)),
            ("layers", Value::Int(layers)),
            ("variant", Value::Str(variant.into())),
        ]);
        let per_layer = CrateConfig::from_config(&cfg).unwrap().parameters_per_layer();
        let total = layers as usize * per_layer + classifier_share(d, features, classes);
        let scale = 10f64.powi(decimals);
        let millions = (total as f64 / 1e6 * scale).round() / scale;
        assert_eq!(millions, published, "{variant} d={d}: {total} parameters");
    }
    // One full build at the smallest paper size confirms the formula against the VarMap.
    let cfg = config(&[("d", Value::Int(384)), ("heads", Value::Int(6)), ("iterations", Value::Int(12))]);
    let (map, _) = build(&cfg, DType::F32);
    assert_eq!(param_count(&map), 3 * 384 * 384 + 5 * 384);
    assert_eq!(param_count(&map) + classifier_share(384, 588, 1000), 1_056_616);
}

#[test]
fn forward_keeps_the_shape_for_odd_token_counts() {
    for variant in ["crate", "crate_t"] {
        let (_, layer) = build(&small(variant), DType::F32);
        for n in [1, 7] {
            let x = plugin_testkit::randn(0f32, 1.0, (3, n, 16), &Device::Cpu).unwrap();
            let y = layer.forward(&x, &mut Pass::new(3)).unwrap();
            assert_eq!(y.dims(), &[3, n, 16]);
            assert!(scalar(&y.abs().unwrap()).is_finite());
            // The state after the ISTA step is a non-negative code.
            assert!(plugin_testkit::entries(&y).iter().all(|&v| v >= 0.0));
        }
    }
}

#[test]
fn variants_differ() {
    let x = plugin_testkit::randn(0f32, 1.0, (2, 5, 16), &Device::Cpu).unwrap();
    let (_, crate_layer) = build(&small("crate"), DType::F32);
    let (_, crate_t) = build(&small("crate_t"), DType::F32);
    let a = crate_layer.forward(&x, &mut Pass::new(2)).unwrap();
    let b = crate_t.forward(&x, &mut Pass::new(2)).unwrap();
    assert!(scalar(&(a - b).unwrap().abs().unwrap()) > 1e-3);
}

#[test]
fn every_parameter_receives_a_gradient() {
    for variant in ["crate", "crate_t"] {
        let mut cfg = small(variant);
        cfg.set("layers", Value::Int(2));
        cfg.set("iterations", Value::Int(4));
        let (map, layer) = build(&cfg, DType::F32);
        let x = plugin_testkit::randn(0f32, 1.0, (2, 5, 16), &Device::Cpu).unwrap();
        let y = layer.forward(&x, &mut Pass::new(4)).unwrap();
        let sizes = gradient_sizes(&map, &random_projection_gradients(&y));
        let expected = if variant == "crate" { 2 * 8 } else { 2 * 6 };
        assert_eq!(sizes.len(), expected);
        for (name, g) in sizes {
            assert!(g > 0.0, "{name} ({variant}) received no gradient");
        }
    }
}

/// With a causal mask, changing a later token leaves earlier outputs unchanged; without it,
/// they change.
#[test]
fn causal_pass_does_not_look_ahead() {
    let (_, layer) = build(&small("crate"), DType::F32);
    assert!(layer.supports_causal());
    let x = plugin_testkit::randn(0f32, 1.0, (1, 6, 16), &Device::Cpu).unwrap();
    let mut changed = x.to_vec3::<f32>().unwrap();
    changed[0][5][0] += 3.0;
    let changed = Tensor::new(changed, &Device::Cpu).unwrap();
    let run = |x: &Tensor, causal: bool| {
        let mut pass = Pass::new(2);
        pass.causal = causal;
        layer.forward(x, &mut pass).unwrap().narrow(1, 0, 5).unwrap()
    };
    let diff = |causal: bool| scalar(&(run(&x, causal) - run(&changed, causal)).unwrap().abs().unwrap());
    assert!(diff(true) < 1e-6, "earlier tokens changed by {}", diff(true));
    assert!(diff(false) > 1e-4, "the non-causal pass should see the change");
}

#[test]
fn bad_configurations_are_refused_with_the_fix() {
    let err =
        CrateConfig::from_config(&config(&[("d", Value::Int(10)), ("heads", Value::Int(4))])).unwrap_err().to_string();
    assert!(err.contains("not divisible by heads"), "{err}");
    let err = CrateConfig::from_config(&config(&[("iterations", Value::Int(6)), ("layers", Value::Int(4))]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot be split over 4 layers"), "{err}");
}

/// The ISTA direction is exactly minus the LASSO gradient (f64, parameters perturbed).
#[test]
fn ista_step_is_a_projected_lasso_gradient_step() {
    for variant in ["crate", "crate_t"] {
        let mut cfg = small(variant);
        cfg.set("layers", Value::Int(2));
        let (map, layer) = build(&cfg, DType::F64);
        perturb(&map, 0.1);
        let x = plugin_testkit::randn(0f64, 1.0, (2, 7, 16), &Device::Cpu).unwrap();
        let identities = layer.gradient_identities(&x).unwrap();
        assert_eq!(identities.len(), 2);
        for identity in &identities {
            let error = relative_error(identity);
            assert!(error < 1e-10, "{}: relative error {error}", identity.name);
        }
        // A wrong claim is caught: the direction without the lambda term.
        let mut wrong = layer.gradient_identities(&x).unwrap().remove(0);
        wrong.descent = (wrong.descent + 0.1).unwrap();
        assert!(relative_error(&wrong) > 1e-3);
    }
}

/// What holds of the MSSA derivation, and what does not (see `verify`), on random tokens with
/// the `workbench verify` setting (d = 128, 4 heads, 12 tokens, parameters perturbed).
#[test]
fn mssa_descends_the_compression_only_in_the_derived_form() {
    let (map, layer) = build(&config(&[]), DType::F64);
    perturb(&map, 0.1);
    let x = plugin_testkit::randn(0f64, 1.0, (2, 12, 128), &Device::Cpu).unwrap();
    let eps = 0.5;
    let block_u = map.data().lock().unwrap().get("block0.u").unwrap().as_tensor().clone();
    let bases = orthonormal_bases(&block_u).unwrap();
    let gram = bases.t().unwrap().matmul(&bases).unwrap();
    let identity = Tensor::eye(128, DType::F64, &Device::Cpu).unwrap();
    assert!(scalar(&(gram - identity).unwrap().abs().unwrap()) < 1e-8, "QR gives orthonormal bases");

    let before = compression_total(&x, &bases, 4, eps).unwrap();
    let mssa = derived_mssa(&x, &bases, 4).unwrap();
    for step in [1e-3, 1e-2, 1e-1] {
        // The plugin's claim: the derived step (1 - s) Z + s MSSA(Z|U) lowers R^c.
        for check in layer.descent_checks(&x, step).unwrap() {
            assert!(check.after < check.before, "{}: {} -> {}", check.name, check.before, check.after);
        }
        // Not claimed: the residual form Z + s MSSA raises R^c, even on orthonormal bases ...
        let residual = (&x + (&mssa * step).unwrap()).unwrap();
        assert!(compression_total(&residual, &bases, 4, eps).unwrap() > before, "residual step, s = {step}");
        // ... the derived step on the raw (non-orthonormal) U raises it ...
        let raw_before = compression_total(&x, &block_u, 4, eps).unwrap();
        let raw_mssa = derived_mssa(&x, &block_u, 4).unwrap();
        let raw_after = ((&x * (1.0 - step)).unwrap() + (raw_mssa * step).unwrap()).unwrap();
        assert!(compression_total(&raw_after, &block_u, 4, eps).unwrap() > raw_before, "raw U, s = {step}");
        // ... and the shrink alone lowers it more than the derived step does.
        let derived = ((&x * (1.0 - step)).unwrap() + (&mssa * step).unwrap()).unwrap();
        let shrink = (&x * (1.0 - step)).unwrap();
        assert!(
            compression_total(&shrink, &bases, 4, eps).unwrap() < compression_total(&derived, &bases, 4, eps).unwrap(),
            "shrink vs derived, s = {step}"
        );
    }
}

#[test]
fn energies_and_head_projections_are_per_sample() {
    let mut cfg = small("crate_t");
    cfg.set("layers", Value::Int(2));
    let (_, layer) = build(&cfg, DType::F32);
    let x = plugin_testkit::randn(0f32, 1.0, (3, 5, 16), &Device::Cpu).unwrap().relu().unwrap();
    let energies = layer.energies(2, 2, &x, &x).unwrap();
    let names: Vec<_> = energies.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["compression", "expansion", "sparsity", "total"]);
    for e in &energies {
        assert_eq!(e.per_sample.dims(), &[3]);
        assert!(scalar(&e.per_sample).is_finite());
    }
    let sum = ((&energies[0].per_sample + &energies[1].per_sample).unwrap() + &energies[2].per_sample).unwrap();
    assert!(scalar(&(sum - &energies[3].per_sample).unwrap().abs().unwrap()) < 1e-4);
    // Coding rates are positive, so the expansion energy -R(X) is negative.
    assert!(plugin_testkit::entries(&energies[0].per_sample).iter().all(|&e| e > 0.0));
    assert!(plugin_testkit::entries(&energies[1].per_sample).iter().all(|&e| e < 0.0));
    let heads = layer.head_projections(2, 2, &x).unwrap().unwrap();
    assert_eq!(heads.dims(), &[3, 2, 5, 8]);
    let norms = heads.sqr().unwrap().sum(D::Minus1).unwrap().sqrt().unwrap();
    let expected = (8f64).sqrt();
    for v in norms.flatten_all().unwrap().to_vec1::<f32>().unwrap() {
        assert!((v as f64 - expected).abs() < 1e-2, "head projection norm {v}");
    }
}

/// A few AdamW steps on a toy objective (every token should become the non-negative part of
/// the token average, which needs the attention) lower the loss.
#[test]
fn trains_on_a_toy_objective() {
    for variant in ["crate", "crate_t"] {
        let (map, layer) = build(&small(variant), DType::F32);
        let x = plugin_testkit::randn(0f32, 1.0, (8, 5, 16), &Device::Cpu).unwrap();
        let target = sequence_mean(&x).relu().unwrap();
        let loss = || mean_squared_error(&layer.forward(&x, &mut Pass::new(2)).unwrap(), &target);
        let (initial, last) = loss_before_and_after(map.all_vars(), 1e-2, 150, loss);
        // Measured: about 0.40 -> 0.01-0.03 in 150 steps.
        assert!(last < 0.25 * initial, "{variant}: loss {initial} -> {last}");
    }
}

/// Variant parsing keeps the two names apart.
#[test]
fn variant_names() {
    assert_eq!(CrateConfig::from_config(&small("crate")).unwrap().variant, Variant::Crate);
    assert_eq!(CrateConfig::from_config(&small("crate_t")).unwrap().variant, Variant::CrateT);
}

/// MSSA through the fused attention op (query = key = value = `X U`) equals its composition
/// (split heads, scores, softmax, product, merge), values and the gradients of `U`, `W_o`
/// and the tokens, causal or not.
#[test]
fn fused_mssa_matches_the_composition() {
    use crate::block::{merge_heads, subspace_self_attention, CrateBlock};
    use plugin_api::candle::Var;
    use plugin_api::candle_nn::VarBuilder;
    for variant in ["crate", "crate_t"] {
        let mut cfg = small(variant);
        cfg.set("heads", Value::Int(4));
        cfg.set("init_std", Value::Float(0.3));
        let crate_cfg = CrateConfig::from_config(&cfg).unwrap();
        let map = VarMap::new();
        let block = CrateBlock::new(&crate_cfg, VarBuilder::from_varmap(&map, DType::F64, &Device::Cpu)).unwrap();
        let u = block.subspaces().clone();
        let w_o = map.data().lock().unwrap().get("w_o").map(|v| v.as_tensor().clone());
        let b_o = map.data().lock().unwrap().get("b_o").map(|v| v.as_tensor().clone());
        let x = Var::from_tensor(&plugin_testkit::randn(0f64, 1.0, (2, 7, 16), &Device::Cpu).unwrap()).unwrap();
        let r = plugin_testkit::randn(0f64, 1.0, (2, 7, 16), &Device::Cpu).unwrap();
        for causal in [false, true] {
            let fused = block.mssa(x.as_tensor(), causal).unwrap();
            let (heads, head_dim) = block.heads();
            let projected = crate::block::split_heads(&x.as_tensor().broadcast_matmul(&u).unwrap(), heads, head_dim);
            let merged = merge_heads(&subspace_self_attention(&projected.unwrap(), causal).unwrap()).unwrap();
            let composed = match (&w_o, &b_o) {
                (Some(w), Some(b)) => merged.broadcast_matmul(w).unwrap().broadcast_add(b).unwrap(),
                _ => merged.broadcast_matmul(&u).unwrap(),
            };
            let label = format!("{variant} causal={causal}");
            let rel = plugin_testkit::relative_max_diff;
            assert!(rel(&fused, &composed) <= 1e-10, "{label}: output {:e}", rel(&fused, &composed));
            let g_f = (&fused * &r).unwrap().sum_all().unwrap().backward().unwrap();
            let g_c = (&composed * &r).unwrap().sum_all().unwrap().backward().unwrap();
            let mut wrt = vec![("x", x.as_tensor().clone()), ("u", u.clone())];
            wrt.extend(w_o.clone().map(|w| ("w_o", w)));
            for (name, t) in wrt {
                let (a, b) = (g_f.get(&t).unwrap(), g_c.get(&t).unwrap());
                assert!(rel(a, b) <= 1e-10, "{label}: gradient of {name} {:e}", rel(a, b));
            }
        }
    }
}
