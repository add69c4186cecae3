use crate::*;
use plugin_api::candle::{DType, Device, Tensor, Var};
use plugin_api::candle_nn::{Init, VarBuilder};
use plugin_api::{GradientIdentity, ParamSpec, Value};

fn schema() -> Vec<ParamSpec> {
    vec![
        ParamSpec::int("d", 8, 1, 64, "width"),
        ParamSpec::float("rate", 0.5, 0.0, 1.0, "a rate"),
        ParamSpec::choice("kind", "a", &["a", "b"], "a choice"),
    ]
}

#[test]
fn configurations_start_from_the_defaults() {
    let cfg = config(&schema(), &[("d", Value::Int(100)), ("kind", text("b"))]);
    assert_eq!(cfg.i64("d").unwrap(), 100, "values are set unchecked, for the validator to refuse");
    assert_eq!(cfg.str("kind").unwrap(), "b");
    assert_eq!(cfg.f64("rate").unwrap(), 0.5);
    let cfg = config_from_text(&schema(), &[("d", "12"), ("rate", "0.25")]);
    assert_eq!((cfg.i64("d").unwrap(), cfg.f64("rate").unwrap(), cfg.str("kind").unwrap()), (12, 0.25, "a"));
}

#[test]
#[should_panic(expected = "no option width")]
fn an_unknown_option_in_text_is_refused() {
    config_from_text(&schema(), &[("width", "12")]);
}

#[test]
#[should_panic(expected = "d=twelve")]
fn an_unparsable_value_in_text_is_refused() {
    config_from_text(&schema(), &[("d", "twelve")]);
}

/// Two parameters, `a` of 6 and `b` of 4 entries, drawn by `vb` in the given order.
fn two_parameters(vb: &VarBuilder, b_first: bool) -> (Tensor, Tensor) {
    let init = Init::Randn { mean: 0.0, stdev: 1.0 };
    if b_first {
        let b = vb.get_with_hints(4, "b", init).unwrap();
        (vb.get_with_hints((2, 3), "a", init).unwrap(), b)
    } else {
        (vb.get_with_hints((2, 3), "a", init).unwrap(), vb.get_with_hints(4, "b", init).unwrap())
    }
}

fn values(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}

#[test]
fn seeded_vars_depend_on_the_seed_and_the_name_only() {
    let first = SeededVars::new(3);
    let (a, b) = two_parameters(&first.var_builder(), false);
    let reordered = SeededVars::new(3);
    let (a2, b2) = two_parameters(&reordered.var_builder(), true);
    assert_eq!((values(&a), values(&b)), (values(&a2), values(&b2)));
    let (a3, _) = two_parameters(&SeededVars::new(4).var_builder(), false);
    assert_ne!(values(&a), values(&a3), "another seed, other values");
    assert_ne!(values(&a)[..4], values(&b)[..], "another name, other values");
    // Asking again returns the same parameter; `all` lists them by name.
    let again = first.var_builder().get_with_hints((2, 3), "a", Init::Const(7.0)).unwrap();
    assert_eq!(values(&again), values(&a));
    assert_eq!(first.all().iter().map(|v| v.elem_count()).collect::<Vec<_>>(), [6, 4]);
    let constant = first.var_builder().get_with_hints(3, "c", Init::Const(0.5)).unwrap();
    assert_eq!(values(&constant), [0.5; 3]);
    let uniform = first.var_builder().get_with_hints(50, "u", Init::Uniform { lo: -0.1, up: 0.1 }).unwrap();
    assert!(values(&uniform).iter().all(|v| (-0.1..0.1).contains(v)));
}

#[test]
fn build_counts_and_lists_the_parameters() {
    let (map, (a, _)) = build(DType::F32, |vb| Ok::<_, String>(two_parameters(&vb, true)));
    assert_eq!(param_count(&map), 10);
    let names: Vec<String> = named_vars(&map).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(a.dims(), &[2, 3]);
}

#[test]
fn perturbing_moves_every_parameter() {
    let start = |seed| -> Vec<Vec<f64>> {
        let (map, _) = build(DType::F64, |vb| Ok::<_, String>(two_parameters(&vb, false)));
        for (_, var) in named_vars(&map) {
            var.set(&Tensor::zeros(var.shape(), DType::F64, &Device::Cpu).unwrap()).unwrap();
        }
        perturb_seeded(&map, 0.1, &mut rng(seed));
        named_vars(&map).into_iter().map(|(_, v)| v.as_tensor().flatten_all().unwrap().to_vec1().unwrap()).collect()
    };
    let (first, again, other) = (start(1), start(1), start(2));
    assert_eq!(first, again);
    assert_ne!(first, other);
    assert!(first.iter().flatten().all(|v| *v != 0.0 && v.abs() < 1.0));

    let (map, _) = build(DType::F32, |vb| Ok::<_, String>(two_parameters(&vb, false)));
    let before: Vec<Tensor> = named_vars(&map).into_iter().map(|(_, v)| v.as_tensor().copy().unwrap()).collect();
    perturb(&map, 0.1);
    for ((name, var), old) in named_vars(&map).into_iter().zip(before) {
        let moved = max_abs_diff(var.as_tensor(), &old);
        assert!(moved > 0.0 && moved < 1.0, "{name} moved by {moved}");
    }
}

#[test]
fn normal_draws_have_the_requested_spread() {
    let t = normal(&[100, 100], 0.5, &mut rng(0));
    assert_eq!((t.dims(), t.dtype()), (&[100, 100][..], DType::F64));
    let mean = scalar(&t) / 1e4;
    let std = (scalar(&t.sqr().unwrap()) / 1e4).sqrt();
    assert!(mean.abs() < 0.02 && (std - 0.5).abs() < 0.02, "mean {mean}, std {std}");
}

#[test]
fn differences_and_sums() {
    let a = Tensor::new(&[1f32, -4.0, 2.0], &Device::Cpu).unwrap();
    let b = Tensor::new(&[1f32, -3.0, 2.5], &Device::Cpu).unwrap();
    assert_eq!(scalar(&a), -1.0);
    assert_eq!(max_abs(&a), 4.0);
    assert_eq!(max_abs_diff(&a, &b), 1.0);
    assert_eq!(relative_max_diff(&a, &b), 1.0 / 3.0);
    assert_eq!(max_abs_diff(&a, &a), 0.0);
}

/// `E = 1/2 ||z||^2` has gradient `z`: `-z` is exact, `z` has error 2, `-z/2` has error 1/2.
#[test]
fn relative_error_measures_a_claimed_descent() {
    let z = Var::new(&[3f64, -1.0, 2.0], &Device::Cpu).unwrap();
    let identity = GradientIdentity {
        name: "E = |z|^2 / 2".into(),
        energy: (z.as_tensor().sqr().unwrap().sum_all().unwrap() * 0.5).unwrap(),
        descent: z.as_tensor().neg().unwrap(),
        variable: z.as_tensor().clone(),
    };
    assert!(relative_error(&identity) < 1e-15);
    assert!((relative_error_of(&identity, z.as_tensor()) - 2.0).abs() < 1e-15);
    assert!((relative_error_of(&identity, &(identity.descent.clone() * 0.5).unwrap()) - 0.5).abs() < 1e-15);
}

#[test]
fn gradient_sizes_show_a_parameter_that_is_cut_off() {
    let (map, (a, _)) = build(DType::F32, |vb| Ok::<_, String>(two_parameters(&vb, false)));
    let grads = random_projection_gradients(&a.sqr().unwrap());
    let sizes = gradient_sizes(&map, &grads);
    assert_eq!(sizes.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    assert!(sizes[0].1 > 0.0, "a is used");
    assert_eq!(sizes[1].1, 0.0, "b is not used");
}

#[test]
fn training_lowers_a_fixed_objective() {
    let (map, a) = build(DType::F32, |vb| vb.get_with_hints(5, "a", Init::Const(0.0)));
    let target = Tensor::new(&[1f32, 2.0, -1.0, 0.5, 3.0], &Device::Cpu).unwrap();
    let (before, after) = loss_before_and_after(map.all_vars(), 0.1, 100, || mean_squared_error(&a, &target));
    assert!((before - 3.05).abs() < 1e-6, "the mean of the squared targets, not {before}");
    assert!(after < 0.05 * before, "{before} -> {after}");
}

#[test]
fn the_tiny_block_mixes_tokens() {
    let vars = SeededVars::new(1);
    let block = TinyBlock::new(&vars.var_builder().pp("layer"), 8);
    assert_eq!(vars.all().len(), 5);
    let x = crate::randn(0f32, 1.0, (2, 3, 8), &Device::Cpu).unwrap();
    let y = block.forward(&x);
    assert_eq!(y.dims(), &[2, 3, 8]);
    let mut changed = x.to_vec3::<f32>().unwrap();
    changed[0][2][0] += 1.0;
    let changed = block.forward(&Tensor::new(changed, &Device::Cpu).unwrap());
    let first_token = |t: &Tensor| t.narrow(1, 0, 1).unwrap();
    assert!(max_abs_diff(&first_token(&y), &first_token(&changed)) > 1e-4, "token 0 does not see token 2");
}

#[test]
fn the_sequence_mean_replaces_each_token_by_its_sequence_average() {
    let x = Tensor::new(&[[[1f32, 2.0], [3.0, 6.0]], [[0.0, 0.0], [2.0, -2.0]]], &Device::Cpu).unwrap();
    let target: Vec<Vec<Vec<f32>>> = sequence_mean(&x).to_vec3().unwrap();
    assert_eq!(target, [[[2.0, 4.0], [2.0, 4.0]], [[1.0, -1.0], [1.0, -1.0]]]);
    assert_eq!(scalar(&mean_squared_error(&x, &x)), 0.0);
}

/// A NaN anywhere in a tensor makes its measures NaN, so no tolerance passes it: candle's own
/// `max` keeps only a leading NaN.
#[test]
fn a_nan_anywhere_fails_every_tolerance() {
    for at in 0..3 {
        let mut entries = [1.0f64, -2.0, 0.5];
        entries[at] = f64::NAN;
        let t = Tensor::new(&entries, &Device::Cpu).unwrap();
        let zeros = t.zeros_like().unwrap();
        let measures = [
            max_abs(&t),
            max_abs_diff(&t, &zeros),
            relative_max_diff(&t, &zeros),
            relative_max_diff(&zeros, &t),
            entries.iter().copied().fold(0.0, larger),
        ];
        assert!(measures.iter().all(|m| m.is_nan()), "NaN at {at}: {measures:?}");
    }
    let t = Tensor::new(&[1.0f32, -2.0, 0.5], &Device::Cpu).unwrap();
    assert_eq!(max_abs(&t), 2.0);
    assert_eq!([0.5, 3.0, 1.0].into_iter().fold(0.0, larger), 3.0);
}
