use super::*;
use crate::model::PreconditionerKind;
use crate::phi::phi;
use crate::preconditioner::Preconditioner;
use plugin_api::candle::{DType, Device, Module, Shape, Tensor, Var, D};
use plugin_api::candle_nn::var_builder::SimpleBackend;
use plugin_api::candle_nn::{self, Init, VarBuilder, VarMap};
use plugin_api::ops::{rms_norm, softmax, weighted_cross_entropy};
use plugin_api::{Config, GradientIdentity, Layer, Pass, Value};
use plugin_testkit::{
    gradient_sizes, max_abs, perturb, random_projection_gradients, relative_error, scalar, text, train,
};
use std::sync::{Arc, Mutex};

fn config(pairs: &[(&str, Value)]) -> Config {
    plugin_testkit::config(&params(), pairs)
}

fn int(v: i64) -> Value {
    Value::Int(v)
}

/// A small configuration: d = 16, 2 heads, 2 blocks over 2 iterations, plus `pairs`.
pub(crate) fn small(pairs: &[(&str, Value)]) -> Config {
    let mut all = vec![
        ("d", int(16)),
        ("heads", int(2)),
        ("layers", int(2)),
        ("iterations", int(2)),
        ("mlp_ratio", Value::Float(2.0)),
        ("precond_rank", int(2)),
        ("mlp_precond_rank", int(3)),
    ];
    all.extend(pairs.iter().cloned());
    config(&all)
}

/// Builds the layer on the CPU, its parameters in a fresh `VarMap`.
pub(crate) fn build(cfg: &Config, dtype: DType) -> (VarMap, Cem) {
    plugin_testkit::build(dtype, |vb| Cem::new(&CemConfig::from_config(cfg).unwrap(), vb))
}

// ---------------------------------------------------------------------------------------------
// Parameter counts (notes-cem.md §2.3, §3.3, §5.2)
// ---------------------------------------------------------------------------------------------

/// A VarBuilder backend that records every parameter's name and size and returns a
/// zero-stride zero tensor of the requested shape (no memory for the paper-size layers).
#[derive(Clone, Default)]
struct ShapeRecorder(Arc<Mutex<Vec<(String, usize)>>>);

impl SimpleBackend for ShapeRecorder {
    fn get(&self, s: Shape, name: &str, _h: Init, dtype: DType, dev: &Device) -> plugin_api::candle::Result<Tensor> {
        self.0.lock().unwrap().push((name.to_string(), s.elem_count()));
        Tensor::zeros((), dtype, dev)?.broadcast_as(s)
    }
    fn get_unchecked(&self, name: &str, _dtype: DType, _dev: &Device) -> plugin_api::candle::Result<Tensor> {
        Err(plugin_api::candle::Error::Msg(format!("{name}: only shapes are recorded")))
    }
    fn contains_tensor(&self, _name: &str) -> bool {
        false
    }
}

/// Parameter sizes of the CEM layer `cfg`, by name.
fn parameter_sizes(cfg: &Config) -> Vec<(String, usize)> {
    let recorder = ShapeRecorder::default();
    let vb = VarBuilder::from_backend(Box::new(recorder.clone()), DType::F32, Device::Cpu);
    Cem::new(&CemConfig::from_config(cfg).unwrap(), vb).unwrap();
    let sizes = recorder.0.lock().unwrap().clone();
    sizes
}

/// Seed 002 Table 1 shapes (d, layers = blocks, heads, MLP width) with the paper's CEM choices.
fn paper_shape(d: i64, layers: i64, heads: i64, preconditioner: &str) -> Config {
    config(&[
        ("d", int(d)),
        ("layers", int(layers)),
        ("iterations", int(layers)),
        ("heads", int(heads)),
        ("mlp_ratio", Value::Float(8.0 / 3.0)),
        ("preconditioner", text(preconditioner)),
        ("precond_rank", int(4)),
        ("mlp_precond_rank", int(16)),
        ("kq_diagonal", text("shared")),
    ])
}

const VOCAB: usize = 32_000;

/// The whole model's count as notes-cem.md §5.2 counts it: the layer's blocks without the
/// ALiBi scalars (which the notes ignore; 2K per block here), plus what the task holds: the
/// 32,000 x d embedding, the untied 32,000 x d LM head and the final RMSNorm gain.
fn model_count(sizes: &[(String, usize)], d: usize) -> usize {
    let blocks: usize = sizes.iter().filter(|(n, _)| !n.contains("alibi")).map(|(_, s)| s).sum();
    blocks + 2 * VOCAB * d + d
}

/// Sum of the sizes of block 0's parameters under `prefix` (`attn` or `mlp`) without the
/// RMSNorm gain and the ALiBi scalars: the notes' "CEM attn / layer" and "CEM MLP / layer".
fn sublayer_count(sizes: &[(String, usize)], prefix: &str) -> usize {
    let prefix = format!("block0.{prefix}.");
    sizes
        .iter()
        .filter(|(n, _)| n.starts_with(&prefix) && !n.ends_with(".norm") && !n.contains("alibi"))
        .map(|(_, s)| s)
        .sum()
}

fn millions(count: usize, decimals: usize) -> String {
    format!("{:.*}", decimals, count as f64 / 1e6)
}

/// notes-cem.md §5.2, "Full CEM" and the per-layer columns, for every Table 1 size (shared KQ
/// diagonal, D+LR preconditioners with R = 4 / 16, MLP width 8/3 d).
#[test]
fn paper_parameter_counts_every_size() {
    // (d, layers, heads, Full CEM, CEM attn / layer, CEM MLP / layer)
    let rows = [
        (672, 8, 8, "70.08", "0.952", "2.431"),
        (672, 12, 12, "83.91", "0.976", "2.431"),
        (768, 12, 12, "102.38", "1.263", "3.171"),
        (864, 12, 12, "122.48", "1.587", "4.010"),
    ];
    for (d, layers, heads, full, attn, mlp) in rows {
        let sizes = parameter_sizes(&paper_shape(d, layers, heads, "diagonal_low_rank"));
        let d = d as usize;
        assert_eq!(millions(model_count(&sizes, d), 2), full, "full CEM at d = {d}, {layers} layers");
        assert_eq!(millions(sublayer_count(&sizes, "attn"), 3), attn, "attention per layer at d = {d}");
        assert_eq!(millions(sublayer_count(&sizes, "mlp"), 3), mlp, "MLP per layer at d = {d}");
    }
}

/// The 86M shape (d = 672, 8 blocks, 8 heads, D_m = 1792) for each preconditioner row, exactly.
/// The notes' table gives the D+LR row (70.08M; 0.952M attention and 2.431M MLP per layer);
/// the other rows follow the notes' costs: tied attention 2 D^2 + shared diagonal D, tied MLP
/// 2 D D_m, preconditioners K D (1 + 2R) / D (1 + 2R) with D+LR and K D / D diagonal-only.
#[test]
fn paper_parameter_counts_86m_per_preconditioner() {
    let (d, k, dm, blocks) = (672usize, 8usize, 1792usize, 8usize);
    let tied_attention = 2 * d * d + d;
    let tied_mlp = 2 * d * dm;
    let norms = 2 * d;
    let rows = [
        ("none", 0, 0, "69.52"),
        ("diagonal", k * d, d, "69.57"),
        ("diagonal_low_rank", k * d * (1 + 2 * 4), d * (1 + 2 * 16), "70.08"),
    ];
    for (preconditioner, attn_precond, mlp_precond, rounded) in rows {
        let sizes = parameter_sizes(&paper_shape(d as i64, blocks as i64, k as i64, preconditioner));
        assert_eq!(sublayer_count(&sizes, "attn"), tied_attention + attn_precond, "{preconditioner}: attention");
        assert_eq!(sublayer_count(&sizes, "mlp"), tied_mlp + mlp_precond, "{preconditioner}: MLP");
        let expected = blocks * (tied_attention + attn_precond + tied_mlp + mlp_precond + norms) + 2 * VOCAB * d + d;
        assert_eq!(model_count(&sizes, d), expected, "{preconditioner}: whole model");
        assert_eq!(millions(expected, 2), rounded, "{preconditioner}: whole model in millions");
        let alibi: usize = sizes.iter().filter(|(n, _)| n.contains("alibi")).map(|(_, s)| s).sum();
        assert_eq!(alibi, blocks * 2 * k, "one self and one cross bias per head and block");
    }
    // The MLP keeps two thirds of a gated MLP's weights, attention half of MHA's (§2.3).
    assert_eq!(3 * tied_mlp, 2 * (3 * d * dm));
    assert_eq!(2 * (tied_attention - d), 4 * d * d);
}

// ---------------------------------------------------------------------------------------------
// Shapes, gradients, causality
// ---------------------------------------------------------------------------------------------

/// An odd sequence length (N = 7) through every output of the layer.
#[test]
fn odd_length_shapes() {
    let cfg = small(&[("attn_steps", int(2)), ("mlp_steps", int(3))]);
    let (_, layer) = build(&cfg, DType::F32);
    let x = plugin_testkit::randn(0f32, 1.0, (3, 7, 16), &Device::Cpu).unwrap();
    let mut pass = Pass::new(2);
    pass.causal = true;
    let y = layer.forward(&x, &mut pass).unwrap();
    assert_eq!(y.dims(), &[3, 7, 16]);
    let energies = layer.energies(1, 2, &y, &x).unwrap();
    let names: Vec<_> = energies.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "attention",
            "attention/step1",
            "attention/step2",
            "feedforward",
            "feedforward/step1",
            "feedforward/step2",
            "feedforward/step3"
        ]
    );
    for e in &energies {
        assert_eq!(e.per_sample.dims(), &[3], "{}", e.name);
        assert!(max_abs(&e.per_sample).is_finite(), "{}", e.name);
    }
    let heads = layer.head_projections(2, 2, &y).unwrap().unwrap();
    assert_eq!(heads.dims(), &[3, 2, 7, 8]);
    // CEM-MLP only: no attention energies, no heads.
    let (_, mlp_only) = build(&small(&[("attention", Value::Bool(false)), ("heads", int(3))]), DType::F32);
    assert_eq!(mlp_only.forward(&x, &mut Pass::new(2)).unwrap().dims(), &[3, 7, 16]);
    let names: Vec<_> = mlp_only.energies(0, 2, &x, &x).unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names, ["feedforward", "feedforward/step1", "feedforward/step2"]);
    assert!(mlp_only.head_projections(0, 2, &x).unwrap().is_none());
}

/// The energies are evaluated with the masking of the most recent forward pass: causal
/// after a causal pass (and before any pass), over all tokens after a bidirectional one.
#[test]
fn energies_follow_the_masking_of_the_last_pass() {
    let (_, layer) = build(&small(&[]), DType::F64);
    let x = plugin_testkit::randn(0f64, 1.0, (2, 5, 16), &Device::Cpu).unwrap();
    let attention_energy = |layer: &Cem| layer.energies(0, 2, &x, &x).unwrap().remove(0).per_sample;
    let before_any_pass = attention_energy(&layer);
    let run = |causal: bool| {
        let mut pass = Pass::new(2);
        pass.causal = causal;
        layer.forward(&x, &mut pass).unwrap();
        attention_energy(&layer)
    };
    let bidirectional = run(false);
    let causal = run(true);
    assert!(max_abs(&(&causal - &before_any_pass).unwrap()) == 0.0);
    assert!(max_abs(&(&causal - &bidirectional).unwrap()) > 1e-3);
}

/// The gradient size of every parameter, by name, for random tokens and a random weighting of
/// the outputs of a causal or bidirectional pass.
fn probe_gradients(map: &VarMap, layer: &Cem, causal: bool) -> Vec<(String, f64)> {
    let x = plugin_testkit::randn(0f32, 1.0, (2, 5, 16), &Device::Cpu).unwrap();
    let mut pass = Pass::new(2);
    pass.causal = causal;
    let y = layer.forward(&x, &mut pass).unwrap();
    gradient_sizes(map, &random_projection_gradients(&y))
}

/// The attention step by the fused op (`kernels::tied_attention`, what `update` runs where it
/// applies) against the same step composed from `head_outputs` (scores, diagonal and ALiBi
/// terms, mask, softmax, product): values and the gradient of every parameter and of the
/// input, with every parameter moved off its initialisation (the diagonal and the ALiBi biases
/// start at 0), causal or not, with and without the diagonal and ALiBi.
#[test]
fn the_fused_attention_step_matches_its_composition() {
    let variants = [
        small(&[]),
        small(&[("kq_diagonal", text("none")), ("alibi", Value::Bool(false))]),
        small(&[("preconditioner", text("diagonal")), ("attn_scale", text("head"))]),
    ];
    for (i, cfg) in variants.iter().enumerate() {
        let (map, layer) = build(cfg, DType::F64);
        perturb(&map, 0.3);
        let attention = layer.blocks()[0].attention().unwrap();
        for causal in [false, true] {
            let h = Var::from_tensor(&plugin_testkit::randn(0f64, 1.0, (2, 7, 16), &Device::Cpu).unwrap()).unwrap();
            let ctx = attention.context(h.as_tensor(), causal).unwrap();
            let u = attention.normalise(&(h.as_tensor() * 1.3).unwrap()).unwrap();
            let fused = attention.update(&ctx, &u).unwrap();
            let composed = ctx.through_heads.apply(&attention.head_outputs(&ctx, &u).unwrap().1).unwrap();
            let label = format!("variant {i} causal={causal}");
            let mut vars = plugin_testkit::named_vars(&map);
            vars.push(("input".to_string(), h));
            let compared = plugin_testkit::assert_same_gradients(&label, &fused, &composed, &vars, 1e-10);
            assert!(compared >= 5, "{label}: only {compared} gradients compared");
        }
    }
}

/// Once `V` of the low-rank preconditioners has moved off 0, every parameter of every variant
/// receives a gradient: no op on the path is forward-only.
#[test]
fn every_parameter_receives_a_gradient() {
    let variants = [
        small(&[]),
        small(&[("kq_diagonal", text("per_head")), ("diag_value", Value::Bool(true)), ("attn_scale", text("head"))]),
        small(&[("preconditioner", text("diagonal")), ("alibi", Value::Bool(false))]),
        small(&[("attention", Value::Bool(false))]),
    ];
    for (i, cfg) in variants.iter().enumerate() {
        let (map, layer) = build(cfg, DType::F32);
        perturb(&map, 0.05);
        let grads = probe_gradients(&map, &layer, true);
        assert!(grads.len() >= 6, "variant {i}: only {} parameters", grads.len());
        for (name, g) in grads {
            assert!(g > 0.0, "variant {i}: parameter {name} received no gradient");
        }
    }
}

/// Appendix D.4's LoRA-style initialisation: `V = 0`, so `P` starts at `diag(softplus(1))` and
/// `U` gets no gradient at the very first step (every other parameter does).
#[test]
fn preconditioner_initialisation() {
    let (map, layer) = build(&small(&[]), DType::F32);
    let attention = layer.blocks()[0].attention().unwrap();
    let p = attention.preconditioner().matrices(DType::F32, &Device::Cpu).unwrap();
    let softplus_one = (1.0 + 1f64.exp()).ln();
    let expected = (Tensor::eye(16, DType::F32, &Device::Cpu).unwrap() * softplus_one).unwrap();
    for k in 0..2 {
        assert!(max_abs(&(p.get(k).unwrap() - &expected).unwrap()) < 1e-6);
    }
    for (name, g) in probe_gradients(&map, &layer, true) {
        if name.ends_with("precond_u") {
            assert_eq!(g, 0.0, "{name}: U cannot move while V = 0");
        } else {
            assert!(g > 0.0, "{name} received no gradient at initialisation");
        }
    }
}

/// With the causal mask, changing the last token leaves every earlier output unchanged;
/// without it, earlier outputs change.
#[test]
fn causal_pass_does_not_look_ahead() {
    let (map, layer) =
        build(&small(&[("kq_diagonal", text("per_head")), ("diag_value", Value::Bool(true))]), DType::F32);
    perturb(&map, 0.05);
    let x = plugin_testkit::randn(0f32, 1.0, (2, 7, 16), &Device::Cpu).unwrap();
    let mut changed = x.to_vec3::<f32>().unwrap();
    for sample in changed.iter_mut() {
        for v in sample[6].iter_mut() {
            *v += 2.0;
        }
    }
    let changed = Tensor::new(changed, &Device::Cpu).unwrap();
    let earlier_change = |causal: bool| {
        let run = |x: &Tensor| {
            let mut pass = Pass::new(2);
            pass.causal = causal;
            layer.forward(x, &mut pass).unwrap().narrow(1, 0, 6).unwrap()
        };
        max_abs(&(run(&x) - run(&changed)).unwrap())
    };
    let causal = earlier_change(true);
    assert!(causal < 1e-6, "earlier tokens changed by {causal}");
    assert!(earlier_change(false) > 1e-3, "without the mask earlier tokens must see the change");
}

/// Appendix A: with T = 1, P = I, d = 0 (and no ALiBi) a block is a pre-norm Llama block
/// with W^V = W^K, W^O = W^Q and W^d = V^T, written out here independently.
#[test]
fn one_plain_step_is_a_weight_tied_llama_block() {
    let cfg = small(&[
        ("layers", int(1)),
        ("iterations", int(1)),
        ("attn_steps", int(1)),
        ("mlp_steps", int(1)),
        ("preconditioner", text("none")),
        ("kq_diagonal", text("none")),
        ("alibi", Value::Bool(false)),
    ]);
    let (map, layer) = build(&cfg, DType::F64);
    perturb(&map, 0.3);
    let get = |name: &str| map.data().lock().unwrap()[&format!("block0.{name}")].as_tensor().clone();
    let h = plugin_testkit::randn(0f64, 1.0, (2, 5, 16), &Device::Cpu).unwrap();
    let mut pass = Pass::new(1);
    pass.causal = true;
    let y = layer.forward(&h, &mut pass).unwrap();

    let flat = |t: &Tensor, m: &Tensor| t.reshape((10, 16)).unwrap().matmul(m).unwrap().reshape((2, 5, ())).unwrap();
    let heads = |t: Tensor| t.reshape((2, 5, 2, 8)).unwrap().transpose(1, 2).unwrap().contiguous().unwrap();
    let hn = rms_norm(&h, Some(&get("attn.norm")), 1e-6).unwrap();
    let (w_q, w_k) = (get("attn.w_q"), get("attn.w_k"));
    let (q, k) = (heads(flat(&hn, &w_q)), heads(flat(&hn, &w_k)));
    let mask = plugin_api::ops::causal_mask(5, DType::F64, &Device::Cpu).unwrap();
    let scores = (q.matmul(&k.t().unwrap()).unwrap() / 4.0).unwrap().broadcast_add(&mask).unwrap(); // tau = sqrt(16)
    let mixed = softmax(&scores, D::Minus1).unwrap().matmul(&k).unwrap(); // values = keys
    let merged = mixed.transpose(1, 2).unwrap().reshape((10, 16)).unwrap();
    let attended = (&h + merged.matmul(&w_q.t().unwrap()).unwrap().reshape((2, 5, 16)).unwrap()).unwrap(); // W^O = W^Q
    let hm = rms_norm(&attended, Some(&get("mlp.norm")), 1e-6).unwrap();
    let (w, v) = (get("mlp.w"), get("mlp.v"));
    let gated = (flat(&hm, &w) * flat(&hm, &v).silu().unwrap()).unwrap();
    let down = gated.reshape((10, 32)).unwrap().matmul(&v.t().unwrap()).unwrap().reshape((2, 5, 16)).unwrap();
    let expected = (&attended + down).unwrap(); // W^d = V^T
    assert!(max_abs(&(y - expected).unwrap()) < 1e-12);
}

// ---------------------------------------------------------------------------------------------
// Gradient identities (Eq. 2, 8, 14, 15) and the preconditioner / phi building blocks
// ---------------------------------------------------------------------------------------------

/// Every claim of every block holds to 1e-4 (in fact ~1e-15) in f64, at perturbed parameters,
/// across preconditioners, diagonal sharing and placement, scale and ALiBi.
#[test]
fn gradient_identities_hold() {
    let variants = [
        (small(&[]), 5),
        (small(&[("preconditioner", text("none")), ("kq_diagonal", text("none")), ("alibi", Value::Bool(false))]), 3),
        (small(&[("preconditioner", text("diagonal")), ("kq_diagonal", text("per_head"))]), 5),
        (small(&[("kq_diagonal", text("shared")), ("diag_value", Value::Bool(true)), ("attn_scale", text("head"))]), 5),
        (small(&[("kq_diagonal", text("per_head")), ("diag_value", Value::Bool(true)), ("heads", int(4))]), 5),
        (small(&[("attention", Value::Bool(false))]), 2),
    ];
    for (i, (cfg, per_block)) in variants.iter().enumerate() {
        let (map, layer) = build(cfg, DType::F64);
        perturb(&map, 0.1);
        let x = plugin_testkit::randn(0f64, 1.0, (2, 7, 16), &Device::Cpu).unwrap();
        let identities = layer.gradient_identities(&x).unwrap();
        assert_eq!(identities.len(), 2 * per_block, "variant {i}: two blocks");
        for identity in &identities {
            let error = relative_error(identity);
            assert!(error < 1e-10, "variant {i}: {} has relative error {error}", identity.name);
        }
    }
}

/// The identities are not vacuous: with Algorithm 1's scores-only diagonal the update is not
/// the gradient of the full energy (only of the energy with the diagonal term held), and a
/// preconditioned update is not the plain gradient.
#[test]
fn gradient_identities_catch_what_does_not_hold() {
    let (map, layer) = build(&small(&[]), DType::F64);
    perturb(&map, 0.1);
    let attention = layer.blocks()[0].attention().unwrap();
    assert!(attention.diagonal_in_scores_only());
    let x = plugin_testkit::randn(0f64, 1.0, (2, 7, 16), &Device::Cpu).unwrap();
    let ctx = attention.context(&x, true).unwrap();
    let u = attention.normalise(&x).unwrap();
    let claim = |hold: bool, descent: Tensor| {
        let uv = Var::from_tensor(&u).unwrap();
        GradientIdentity {
            name: String::new(),
            energy: attention.energy(&ctx, uv.as_tensor(), hold).unwrap().sum_all().unwrap(),
            descent,
            variable: uv.as_tensor().clone(),
        }
    };
    let plain = attention.gradient_direction(&ctx, &u).unwrap();
    assert!(relative_error(&claim(true, plain.clone())) < 1e-10);
    assert!(relative_error(&claim(false, plain)) > 1e-3, "the diagonal's value term is missing");
    let preconditioned = attention.update(&ctx, &u).unwrap();
    assert!(relative_error(&claim(true, preconditioned)) > 1e-2, "P_k is not the identity");
}

/// The efficient attention form `sum_k P_k W_k^T o_k`, the per-group forms and the dense
/// matrices `P_k` of Eq. 13 agree.
#[test]
fn preconditioner_forms_agree() {
    let dev = Device::Cpu;
    let map = VarMap::new();
    let vb = VarBuilder::from_varmap(&map, DType::F64, &dev);
    let (k, dr, d) = (3usize, 4usize, 12usize);
    let p = Preconditioner::new(PreconditionerKind::DiagonalLowRank, k, d, 2, vb).unwrap();
    perturb(&map, 0.3);
    let dense = p.matrices(DType::F64, &dev).unwrap(); // [K, D, D]
    assert!(max_abs(&(dense.transpose(1, 2).unwrap() - &dense).unwrap()) < 1e-15, "P is symmetric");
    let o = plugin_testkit::randn(0f64, 1.0, (2, k, 5, dr), &dev).unwrap();
    let w = plugin_testkit::randn(0f64, 1.0, (d, k * dr), &dev).unwrap();
    let mut expected = Tensor::zeros((2, 5, d), DType::F64, &dev).unwrap();
    for head in 0..k {
        let w_head = w.narrow(1, head * dr, dr).unwrap(); // [D, D_r]
        let y = o.get_on_dim(1, head).unwrap().broadcast_matmul(&w_head.t().unwrap()).unwrap(); // W_k^T o_k
        let py = y.broadcast_matmul(&dense.get(head).unwrap()).unwrap(); // rows y P_k = (P_k y)^T
        expected = (expected + py).unwrap();
    }
    assert!(max_abs(&(p.apply_through_heads(&o, &w).unwrap() - &expected).unwrap()) < 1e-12);
    let y = plugin_testkit::randn(0f64, 1.0, (2, 5, d), &dev).unwrap();
    let each = p.apply_each(&y).unwrap();
    for head in 0..k {
        let direct = y.broadcast_matmul(&dense.get(head).unwrap()).unwrap();
        assert!(max_abs(&(each.get_on_dim(1, head).unwrap() - direct).unwrap()) < 1e-12);
    }
    let per_group = plugin_testkit::randn(0f64, 1.0, (2, k, 5, d), &dev).unwrap();
    let mut expected = Tensor::zeros((2, 5, d), DType::F64, &dev).unwrap();
    for head in 0..k {
        let py = per_group.get_on_dim(1, head).unwrap().broadcast_matmul(&dense.get(head).unwrap()).unwrap();
        expected = (expected + py).unwrap();
    }
    assert!(max_abs(&(p.apply_sum(&per_group).unwrap() - expected).unwrap()) < 1e-12);

    // The single (MLP) form, G = 1.
    let map = VarMap::new();
    let single = Preconditioner::new(
        PreconditionerKind::DiagonalLowRank,
        1,
        d,
        3,
        VarBuilder::from_varmap(&map, DType::F64, &dev),
    )
    .unwrap();
    perturb(&map, 0.3);
    let dense = single.matrices(DType::F64, &dev).unwrap().get(0).unwrap();
    let direct = y.broadcast_matmul(&dense).unwrap();
    assert!(max_abs(&(single.apply(&y).unwrap() - direct).unwrap()) < 1e-12);
}

/// `phi(z) = integral_{-inf}^z SiLU`: `phi(0) = -pi^2/12`, `phi` matches a quadrature of SiLU
/// from -60, and autograd gives `phi' = SiLU`.
#[test]
fn phi_is_the_silu_antiderivative() {
    let silu = |t: f64| t / (1.0 + (-t).exp());
    let points = [-35.0, -12.0, -3.3, -0.7, -1e-3, 0.0, 1e-3, 0.4, 2.5, 9.0, 30.0];
    let z = Var::new(&points, &Device::Cpu).unwrap();
    let values: Vec<f64> = phi(z.as_tensor()).unwrap().to_vec1().unwrap();
    assert!((values[5] + std::f64::consts::PI.powi(2) / 12.0).abs() < 1e-15, "phi(0) = {}", values[5]);
    for (&zi, &value) in points.iter().zip(&values) {
        // composite Simpson rule on [-60, z]
        let n = 200_000;
        let h = (zi + 60.0) / n as f64;
        let sum: f64 = (0..=n)
            .map(|i| silu(-60.0 + i as f64 * h) * if i == 0 || i == n { 1.0 } else { (2 + 2 * (i % 2)) as f64 })
            .sum();
        let quadrature = sum * h / 3.0;
        assert!(
            (value - quadrature).abs() < 1e-9 * (1.0 + quadrature.abs()),
            "phi({zi}) = {value}, quadrature {quadrature}"
        );
    }
    let grads = phi(z.as_tensor()).unwrap().sum_all().unwrap().backward().unwrap();
    let slopes: Vec<f64> = grads.get(z.as_tensor()).unwrap().to_vec1().unwrap();
    for (&zi, &slope) in points.iter().zip(&slopes) {
        assert!((slope - silu(zi)).abs() < 1e-12 * (1.0 + zi.abs()), "phi'({zi}) = {slope}, SiLU = {}", silu(zi));
    }
}

#[test]
fn bad_configurations_are_refused_with_the_fix() {
    let refused = |pairs: &[(&str, Value)], needle: &str| {
        let err = CemConfig::from_config(&config(pairs)).unwrap_err().to_string();
        assert!(err.contains(needle), "{err}");
    };
    refused(&[("d", int(10)), ("heads", int(4))], "not divisible by heads");
    refused(&[("iterations", int(6)), ("layers", int(4))], "cannot be split over 4 layers");
    refused(&[("d", int(8)), ("heads", int(2)), ("mlp_precond_rank", int(16))], "mlp_precond_rank = 16 exceeds d = 8");
    refused(&[("d", int(4)), ("heads", int(2)), ("precond_rank", int(5))], "precond_rank = 5 exceeds d = 4");
    refused(&[("d", int(8)), ("heads", int(2)), ("mlp_ratio", Value::Float(0.01))], "raise mlp_ratio");
    refused(&[("kq_diagonal", text("none")), ("diag_value", Value::Bool(true))], "set kq_diagonal");
    // heads only matter with attention; ranks only with the low-rank preconditioner
    assert!(CemConfig::from_config(&config(&[("d", int(30)), ("heads", int(4)), ("attention", Value::Bool(false))]))
        .is_ok());
    assert!(CemConfig::from_config(&config(&[("d", int(8)), ("heads", int(2)), ("preconditioner", text("diagonal"))]))
        .is_ok());
}

// ---------------------------------------------------------------------------------------------
// Training
// ---------------------------------------------------------------------------------------------

/// A toy causal objective: predict the previous token, which only attention looking one step
/// back (ALiBi and the self / cross biases locate it) can do. Embedding, the CEM layer and a
/// linear head train with AdamW for 300 steps; the loss falls from about 2.5 (initial logits)
/// to about 0.25, well below chance (`ln 6 = 1.79`).
#[test]
fn training_reduces_a_causal_loss() {
    let dev = Device::Cpu;
    let (vocab, n, batch, d) = (6usize, 9usize, 24usize, 16usize);
    let cfg = small(&[
        ("layers", int(1)),
        ("iterations", int(1)),
        ("heads", int(4)),
        ("attn_steps", int(2)),
        ("mlp_steps", int(1)),
    ]);
    let map = VarMap::new();
    let vb = VarBuilder::from_varmap(&map, DType::F32, &dev);
    let layer = Cem::new(&CemConfig::from_config(&cfg).unwrap(), vb.pp("layer")).unwrap();
    let embedding = candle_nn::embedding(vocab, d, vb.pp("embed")).unwrap();
    let head = candle_nn::linear_no_bias(d, vocab, vb.pp("head")).unwrap();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    // The loss on the next batch of random tokens.
    let mut next_loss = || -> Tensor {
        let tokens: Vec<u32> = (0..batch * n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state % vocab as u64) as u32
            })
            .collect();
        let ids = Tensor::from_vec(tokens, (batch, n), &dev).unwrap();
        let x = embedding.forward(&ids).unwrap();
        let mut pass = Pass::new(1);
        pass.causal = true;
        let h = layer.forward(&x, &mut pass).unwrap();
        // position i (>= 1) predicts token i - 1
        let logits = head.forward(&h.narrow(1, 1, n - 1).unwrap()).unwrap().reshape((batch * (n - 1), vocab)).unwrap();
        let targets = ids.narrow(1, 0, n - 1).unwrap().flatten_all().unwrap();
        weighted_cross_entropy(&logits, &targets, None).unwrap()
    };
    let start = scalar(&next_loss());
    let mut last = start;
    train(map.all_vars(), 0.02, 300, |_| {
        let loss = next_loss();
        last = scalar(&loss);
        loss
    });
    let chance = (vocab as f64).ln();
    assert!(last < 0.5 * start, "loss fell only from {start} to {last}");
    assert!(last < 0.3 * chance, "loss {last} is not well below chance {chance}: the layer does not look back");
}

/// At initialisation `P_k = P_mlp = softplus(1) I` (`V = 0`) and the RMSNorm gains are 1, so a
/// step moves `x` along a positive multiple of `-d E / d u`, which RMSNorm's Jacobian (a scaled
/// projection) maps to a descent direction for `u`: both energies fall at every recursion step
/// (to first order; the initial steps are small). Not guaranteed once `P` or the gains train.
#[test]
fn recursion_steps_descend_at_initialisation() {
    let cfg = config(&[("d", int(32)), ("heads", int(4)), ("attn_steps", int(4)), ("mlp_steps", int(4))]);
    let (_, layer) = build(&cfg, DType::F64);
    let x = plugin_testkit::randn(0f64, 1.0, (3, 9, 32), &Device::Cpu).unwrap();
    let energies = layer.energies(0, 4, &x, &x).unwrap();
    assert_eq!(energies.len(), 10);
    for sublayer in energies.chunks(5) {
        for pair in sublayer.windows(2) {
            let before: Vec<f64> = pair[0].per_sample.to_vec1().unwrap();
            let after: Vec<f64> = pair[1].per_sample.to_vec1().unwrap();
            for (b, a) in before.iter().zip(&after) {
                assert!(a < b, "{} -> {}: energy rose from {b} to {a}", pair[0].name, pair[1].name);
            }
        }
    }
}
