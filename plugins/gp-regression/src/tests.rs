use crate::data::{GpTask, Setting};
use crate::model::RmsePass;
use crate::params;
use datasets::gp::{GpDraw, Stream};
use plugin_api::candle::{DType, Device, Tensor, D};
use plugin_api::candle_nn::{Init, VarBuilder};
use plugin_api::{Batch, Config, MetricTally, Task, Value};
use plugin_testkit::{build_task_model, evaluate_all, param_count, task_gradient_sizes, text, train_on_task};

const CPU: &Device = &Device::Cpu;

fn config(pairs: &[(&str, Value)]) -> Config {
    plugin_testkit::config(&params(), pairs)
}

/// One function at 256 training and 128 test points, 16 points per example.
fn small_fit(extra: &[(&str, Value)]) -> Config {
    let mut pairs =
        vec![("train_points", Value::Int(256)), ("test_points", Value::Int(128)), ("points", Value::Int(16))];
    pairs.extend(extra.iter().cloned());
    config(&pairs)
}

/// Functions of 12 context and 8 query points; 10 held-out functions.
fn small_in_context(extra: &[(&str, Value)]) -> Config {
    let mut pairs = vec![
        ("setting", text("in_context")),
        ("context_points", Value::Int(12)),
        ("query_points", Value::Int(8)),
        ("eval_functions", Value::Int(10)),
    ];
    pairs.extend(extra.iter().cloned());
    config(&pairs)
}

fn identity(h: &Tensor, _: &Batch) -> Tensor {
    h.clone()
}

fn vec3(t: &Tensor) -> Vec<Vec<Vec<f32>>> {
    t.to_vec3().unwrap()
}

fn f32s(values: &[f64]) -> Vec<f32> {
    values.iter().map(|&v| v as f32).collect()
}

/// Root mean square of `values`.
fn rms(values: impl IntoIterator<Item = f64>) -> f64 {
    let (sum, count) = values.into_iter().fold((0.0, 0.0), |(s, c), v| (s + v * v, c + 1.0));
    (sum / count).sqrt()
}

#[test]
fn info_describes_both_settings() {
    let info = GpTask::new(&small_fit(&[]), 0).unwrap().info().unwrap();
    assert_eq!((info.seq_len, info.causal), (16, false));
    assert_eq!(info.metrics.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(), ["rmse", "train_rmse", "loss"]);
    assert!(info.metrics.iter().all(|m| !m.higher_is_better));
    assert_eq!((info.train_examples, info.eval_examples), (Some(16), 24));

    let info = GpTask::new(&small_in_context(&[]), 0).unwrap().info().unwrap();
    assert_eq!(info.seq_len, 20);
    assert_eq!(info.metrics.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(), ["rmse", "loss"]);
    assert_eq!((info.train_examples, info.eval_examples), (None, 10));

    let pool = small_in_context(&[("train_functions", Value::Int(4)), ("causal", Value::Bool(true))]);
    let info = GpTask::new(&pool, 0).unwrap().info().unwrap();
    assert!(info.causal);
    assert_eq!(info.metrics.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(), ["rmse", "train_rmse", "loss"]);
    assert_eq!((info.train_examples, info.eval_examples), (Some(4), 14));
}

/// The index of the training point whose input is `x`.
fn find_point(draw: &GpDraw, x: &[f32]) -> usize {
    (0..draw.len()).find(|&i| f32s(draw.input(i)) == x).expect("a token that is not a point of the set")
}

/// Training tokens are training points with their own targets, and an epoch visits each
/// training point exactly once.
#[test]
fn fit_training_batches_visit_every_training_point_once_per_epoch() {
    let task = GpTask::new(&small_fit(&[]), 3).unwrap();
    let train = &task.fit_data().unwrap().train;
    let mut visits = vec![0; 256];
    for step in 0..4 {
        // 4 examples of 16 points: 64 points per step, 4 steps per epoch.
        let batch = task.train_batch(step, 4, CPU).unwrap();
        assert_eq!((batch.inputs.dims(), batch.targets.dims(), batch.size), (&[4, 16, 10][..], &[4, 16, 2][..], 4));
        let mask: Vec<Vec<f32>> = batch.mask.as_ref().unwrap().to_vec2().unwrap();
        for (e, (inputs, targets)) in vec3(&batch.inputs).iter().zip(vec3(&batch.targets)).enumerate() {
            for (t, (x, target)) in inputs.iter().zip(targets).enumerate() {
                let i = find_point(train, x);
                assert_eq!(target, [train.targets[i] as f32, 1.0], "example {e} token {t}");
                assert_eq!(mask[e][t], 1.0);
                visits[i] += 1;
            }
        }
    }
    assert!(visits.iter().all(|&v| v == 1), "{visits:?}");
    // The next epoch visits them in another order.
    assert_ne!(vec3(&task.train_batch(0, 4, CPU).unwrap().inputs), vec3(&task.train_batch(4, 4, CPU).unwrap().inputs));
}

/// The evaluation set is the test points in order, then the training points, each token with
/// its own observation and the training flag of its set.
#[test]
fn fit_evaluation_lists_test_then_training_points() {
    let task = GpTask::new(&small_fit(&[]), 0).unwrap();
    let data = task.fit_data().unwrap();
    let batches = task.eval_batches(5, 1000, CPU).unwrap();
    assert_eq!(batches.iter().map(|b| b.size).collect::<Vec<_>>(), [5, 5, 5, 5, 4]);
    let inputs: Vec<Vec<Vec<f32>>> = batches.iter().flat_map(|b| vec3(&b.inputs)).collect();
    let targets: Vec<Vec<Vec<f32>>> = batches.iter().flat_map(|b| vec3(&b.targets)).collect();
    assert_eq!((inputs.len(), targets.len()), (24, 24));
    for (k, (inputs, targets)) in inputs.iter().zip(&targets).enumerate() {
        let (draw, first, flag) = if k < 8 { (&data.test, k * 16, 0.0) } else { (&data.train, (k - 8) * 16, 1.0) };
        for t in 0..16 {
            assert_eq!(inputs[t], f32s(draw.input(first + t)), "example {k} token {t}");
            assert_eq!(targets[t], [draw.targets[first + t] as f32, flag]);
        }
    }
    let truncated = task.eval_batches(64, 10, CPU).unwrap();
    assert_eq!(truncated.len(), 1);
    let flags: Vec<f32> = vec3(&truncated[0].targets).iter().map(|example| example[0][1]).collect();
    assert_eq!(flags, [0., 0., 0., 0., 0., 0., 0., 0., 1., 1.]);
}

/// Context tokens carry `(x, y, 1)` and are not scored; query tokens carry `(x, 0, 0)`, are
/// scored, and their targets are the function's observations there.
#[test]
fn in_context_queries_are_masked_and_aligned_with_their_targets() {
    let task = GpTask::new(&small_in_context(&[]), 1).unwrap();
    let batch = &task.eval_batches(4, 4, CPU).unwrap()[0];
    assert_eq!((batch.inputs.dims(), batch.targets.dims()), (&[4, 20, 12][..], &[4, 20, 2][..]));
    let mask: Vec<Vec<f32>> = batch.mask.as_ref().unwrap().to_vec2().unwrap();
    for (e, (inputs, targets)) in vec3(&batch.inputs).iter().zip(vec3(&batch.targets)).enumerate() {
        let draw = task.function(Stream::Eval, e as u64).unwrap();
        for t in 0..20 {
            let y = draw.targets[t] as f32;
            let x = f32s(draw.input(t));
            assert_eq!(inputs[t][..10], x[..], "example {e} token {t}");
            if t < 12 {
                assert_eq!((inputs[t][10], inputs[t][11], mask[e][t]), (y, 1.0, 0.0), "context token {t}");
            } else {
                assert_eq!((inputs[t][10], inputs[t][11], mask[e][t]), (0.0, 0.0, 1.0), "query token {t}");
                assert!(!inputs.iter().flatten().any(|&v| v == y), "query target {y} leaked into the inputs");
            }
            assert_eq!(targets[t], [y, 0.0]);
        }
    }
    let train = task.train_batch(0, 3, CPU).unwrap();
    assert_eq!(train.inputs.dims(), &[3, 20, 12]);
    assert!(vec3(&train.targets).iter().flatten().all(|target| target[1] == 1.0));
}

#[test]
fn training_batches_depend_only_on_seed_and_step() {
    for cfg in [small_fit(&[]), small_in_context(&[])] {
        let task = GpTask::new(&cfg, 7).unwrap();
        let batch = |task: &GpTask, step| vec3(&task.train_batch(step, 3, CPU).unwrap().inputs);
        let first = batch(&task, 2);
        assert_eq!(first, batch(&task, 2));
        // A task rebuilt from the same configuration (a resumed run) draws the same batch.
        assert_eq!(first, batch(&GpTask::new(&cfg, 7).unwrap(), 2));
        assert_ne!(first, batch(&task, 3));
        assert_ne!(first, batch(&GpTask::new(&cfg, 8).unwrap(), 2));
    }
    // The functions depend on data_seed, not on the run seed.
    let data = |run_seed, data_seed| {
        GpTask::new(&small_fit(&[("data_seed", Value::Int(data_seed))]), run_seed).unwrap().fit_data().unwrap().clone()
    };
    assert_eq!(data(1, 5), data(2, 5));
    assert_ne!(data(1, 5).train.targets, data(1, 6).train.targets);
}

/// With a pool of three training functions every training example is one of them.
#[test]
fn in_context_training_functions_come_from_the_pool() {
    let task = GpTask::new(&small_in_context(&[("train_functions", Value::Int(3))]), 0).unwrap();
    let pool: Vec<Vec<f32>> = (0..3).map(|k| f32s(task.function(Stream::Train, k).unwrap().input(0))).collect();
    let mut used = [false; 3];
    for step in 0..4 {
        for example in vec3(&task.train_batch(step, 4, CPU).unwrap().inputs) {
            let k = pool.iter().position(|x| example[0][..10] == x[..]).expect("a function outside the pool");
            used[k] = true;
        }
    }
    assert_eq!(used, [true; 3]);
}

#[test]
fn embedding_and_head_parameter_counts() {
    let d = 24;
    let (map, _) = build_task_model(&GpTask::new(&small_fit(&[]), 0).unwrap(), d);
    assert_eq!(param_count(&map), 10 * d + d + d + 1);
    let (map, _) = build_task_model(&GpTask::new(&small_in_context(&[]), 0).unwrap(), d);
    assert_eq!(param_count(&map), 12 * d + d + d + 1);
    let (map, _) = build_task_model(&GpTask::new(&small_fit(&[("input_dim", Value::Int(3))]), 0).unwrap(), d);
    assert_eq!(param_count(&map), 3 * d + d + d + 1);
}

#[test]
fn every_parameter_receives_a_gradient() {
    for cfg in [small_fit(&[]), small_in_context(&[])] {
        let task = GpTask::new(&cfg, 0).unwrap();
        for (name, g) in task_gradient_sizes(&task, 16, 4, |h| h.sin().unwrap()) {
            assert!(g > 0.0, "{name} received no gradient");
        }
    }
}

/// The loss is the mean squared error over the scored tokens only.
#[test]
fn the_loss_counts_scored_tokens_only() {
    let task = GpTask::new(&small_in_context(&[]), 0).unwrap();
    let (map, model) = build_task_model(&task, 8);
    // A zero head predicts 0 everywhere, so the loss is the mean square of the query targets.
    let head = map.data().lock().unwrap().get("head.weight").unwrap().clone();
    head.set(&Tensor::zeros((8, 1), DType::F32, CPU).unwrap()).unwrap();
    let batch = task.train_batch(0, 5, CPU).unwrap();
    let loss: f32 = model.loss(&model.embed(&batch, true).unwrap(), &batch).unwrap().to_scalar().unwrap();
    let queries: Vec<f64> =
        vec3(&batch.targets).iter().flat_map(|example| example[12..].iter().map(|t| t[0] as f64)).collect();
    assert_eq!(queries.len(), 5 * 8);
    assert!((loss as f64 - rms(queries).powi(2)).abs() < 1e-5, "loss {loss}");
}

/// Over several batches `rmse` and `train_rmse` are exactly the RMSE of the whole held-out
/// and training sets, `loss` is `rmse^2`, and a second pass reports the same values.
#[test]
fn rmse_merges_exactly_across_batches() {
    let task = GpTask::new(&small_fit(&[]), 0).unwrap();
    let (map, model) = build_task_model(&task, 16);
    let head = map.data().lock().unwrap().get("head.weight").unwrap().clone();
    head.set(&Tensor::zeros((16, 1), DType::F32, CPU).unwrap()).unwrap();
    let batches = task.eval_batches(5, 1000, CPU).unwrap();
    let means = evaluate_all(&*model, &batches, identity).means();
    // The zero predictor's RMSE is the root mean square of the observations.
    let data = task.fit_data().unwrap();
    assert!((means["rmse"] - rms(data.test.targets.iter().copied())).abs() < 1e-5, "{means:?}");
    assert!((means["train_rmse"] - rms(data.train.targets.iter().copied())).abs() < 1e-5, "{means:?}");
    assert!((means["loss"] - means["rmse"].powi(2)).abs() < 1e-9);
    // A trained-looking (non-zero) model: per-batch metrics merge into the whole set's.
    head.set(&Tensor::full(0.3f32, (16, 1), CPU).unwrap()).unwrap();
    let layer = |h: &Tensor, _: &Batch| h.tanh().unwrap();
    let split = evaluate_all(&*model, &batches, layer).means();
    let whole = evaluate_all(&*model, &task.eval_batches(24, 24, CPU).unwrap(), layer).means();
    let again = evaluate_all(&*model, &batches, layer).means();
    for name in ["rmse", "train_rmse", "loss"] {
        assert!((split[name] - whole[name]).abs() < 1e-6, "{name}: {} vs {}", split[name], whole[name]);
        assert!((again[name] - split[name]).abs() < 1e-12, "{name} changed between passes");
    }
    assert!((split["rmse"] - means["rmse"]).abs() > 1e-3, "the metric ignores the predictions");
}

#[test]
fn rmse_shares_telescope() {
    let ids: Vec<_> = (0..3).map(|_| Tensor::zeros(1, DType::U32, CPU).unwrap().id()).collect();
    let mut pass = RmsePass::default();
    let mut tally = MetricTally::default();
    for (id, (squares, count)) in ids.iter().zip([(4.0, 4.0), (1.0, 4.0), (27.0, 8.0)]) {
        let (share, train_share) = pass.add(*id, (squares, count), (1.0, 1.0));
        tally.add("rmse", share, count);
        tally.add("train_rmse", train_share, 1.0);
    }
    let means = tally.means();
    assert!((means["rmse"] - (32.0f64 / 16.0).sqrt()).abs() < 1e-12);
    assert!((means["train_rmse"] - 1.0).abs() < 1e-12);
    // The first batch again starts a new pass.
    assert_eq!(pass.add(ids[0], (9.0, 1.0), (0.0, 0.0)), (3.0, 0.0));
}

fn refusal(cfg: &Config) -> String {
    GpTask::validate(cfg).expect_err("the configuration should be refused").to_string()
}

#[test]
fn the_validator_refuses_bad_configurations_with_the_fix() {
    assert!(GpTask::validate(&config(&[])).is_ok());
    let e = refusal(&config(&[("period", Value::Float(3.0))]));
    assert!(e.contains("period=3") && e.contains("kernel=periodic"), "{e}");
    assert!(GpTask::validate(&config(&[("kernel", text("periodic")), ("period", Value::Float(3.0))])).is_ok());
    let e = refusal(&config(&[("matern_nu", text("2.5"))]));
    assert!(e.contains("kernel=matern"), "{e}");
    let e = refusal(&config(&[("context_points", Value::Int(8))]));
    assert!(e.contains("setting=in_context"), "{e}");
    let e = refusal(&small_in_context(&[("points", Value::Int(8))]));
    assert!(e.contains("setting=fit"), "{e}");
    let e = refusal(&small_fit(&[("train_points", Value::Int(250))]));
    assert!(e.contains("train_points=250") && e.contains("train_points=240 or 256"), "{e}");
    let e = refusal(&small_fit(&[("test_points", Value::Int(10))]));
    assert!(e.contains("test_points=16"), "{e}");
    let e = refusal(&config(&[("train_points", Value::Int(8192))]));
    assert!(e.contains("9216") && e.contains("fewer points"), "{e}");
    let task = GpTask::new(&config(&[("kernel", text("nonstationary")), ("nonstationary", text("warped"))]), 0);
    assert!(matches!(task.unwrap().options().setting, Setting::Fit { points: 32, .. }));
}

/// A small per-token MLP `h + W2 gelu(W1 h + b1)` between embedding and head.
struct TinyMlp {
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
}

impl TinyMlp {
    fn new(vb: VarBuilder, width: usize, hidden: usize) -> Self {
        let init = |fan_in: usize| Init::Randn { mean: 0.0, stdev: 1.0 / (fan_in as f64).sqrt() };
        TinyMlp {
            w1: vb.get_with_hints((width, hidden), "w1", init(width)).unwrap(),
            b1: vb.get_with_hints(hidden, "b1", Init::Const(0.0)).unwrap(),
            w2: vb.get_with_hints((hidden, width), "w2", init(hidden)).unwrap(),
        }
    }

    fn forward(&self, h: &Tensor) -> Tensor {
        let hidden = h.broadcast_matmul(&self.w1).unwrap().broadcast_add(&self.b1).unwrap().gelu().unwrap();
        (h + hidden.broadcast_matmul(&self.w2).unwrap()).unwrap()
    }
}

/// The seed's setting: an MLP fitted to 512 points of an RBF draw predicts the 256 test
/// points far better than the prior mean 0 and than the mean of the training targets.
#[test]
fn a_tiny_mlp_fits_the_function_far_below_chance() {
    let cfg =
        config(&[("train_points", Value::Int(512)), ("test_points", Value::Int(256)), ("points", Value::Int(16))]);
    let task = GpTask::new(&cfg, 0).unwrap();
    let (map, model) = build_task_model(&task, 32);
    let mlp = TinyMlp::new(VarBuilder::from_varmap(&map, DType::F32, CPU).pp("mlp"), 32, 64);
    let layer = |h: &Tensor, _: &Batch| mlp.forward(h);
    train_on_task(&task, &*model, layer, map.all_vars(), 3e-3, 300, 8);
    let metrics = evaluate_all(&*model, &task.eval_batches(64, 1000, CPU).unwrap(), layer).means();
    let data = task.fit_data().unwrap();
    let zero = rms(data.test.targets.iter().copied());
    let train_mean = data.train.targets.iter().sum::<f64>() / 512.0;
    let constant = rms(data.test.targets.iter().map(|y| y - train_mean));
    assert!(metrics["rmse"] < 0.5 * zero.min(constant), "{metrics:?}, prior mean {zero}, training mean {constant}");
    assert!(metrics["train_rmse"] < 0.5 * zero.min(constant), "{metrics:?}");
}

/// Single-head attention of every token over the context tokens (flag feature `c = 1`),
/// then the tiny MLP.
struct TinyAttention {
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mlp: TinyMlp,
}

impl TinyAttention {
    fn new(vb: VarBuilder, width: usize) -> Self {
        let init = Init::Randn { mean: 0.0, stdev: 1.0 / (width as f64).sqrt() };
        TinyAttention {
            query: vb.get_with_hints((width, width), "query", init).unwrap(),
            key: vb.get_with_hints((width, width), "key", init).unwrap(),
            value: vb.get_with_hints((width, width), "value", init).unwrap(),
            mlp: TinyMlp::new(vb.pp("mlp"), width, 2 * width),
        }
    }

    fn forward(&self, h: &Tensor, batch: &Batch) -> Tensor {
        let features = batch.inputs.dim(D::Minus1).unwrap();
        let context = batch.inputs.narrow(2, features - 1, 1).unwrap().squeeze(2).unwrap(); // [B, N]
        let bias = ((context - 1.0).unwrap() * 1e4).unwrap().unsqueeze(1).unwrap(); // 0 on context, -1e4 else
        let q = h.broadcast_matmul(&self.query).unwrap();
        let k = h.broadcast_matmul(&self.key).unwrap();
        let v = h.broadcast_matmul(&self.value).unwrap();
        let scores = (q.matmul(&k.t().unwrap()).unwrap() / (h.dim(2).unwrap() as f64).sqrt()).unwrap();
        let weights = plugin_api::candle_nn::ops::softmax(&scores.broadcast_add(&bias).unwrap(), D::Minus1).unwrap();
        self.mlp.forward(&(h + weights.matmul(&v).unwrap()).unwrap())
    }
}

/// In-context regression: a one-layer attention model trained on fresh functions predicts
/// the queries of held-out functions with half the RMSE of the prior mean 0, and clearly
/// better than the mean of each function's context observations (which already knows the
/// function's offset, a large part of its variance at the default length scale).
#[test]
fn a_tiny_attention_model_regresses_in_context_below_chance() {
    let cfg = config(&[("setting", text("in_context")), ("eval_functions", Value::Int(64))]);
    let task = GpTask::new(&cfg, 0).unwrap();
    let (map, model) = build_task_model(&task, 32);
    let attention = TinyAttention::new(VarBuilder::from_varmap(&map, DType::F32, CPU).pp("attention"), 32);
    let layer = |h: &Tensor, batch: &Batch| attention.forward(h, batch);
    train_on_task(&task, &*model, layer, map.all_vars(), 3e-3, 300, 8);
    let batches = task.eval_batches(64, 64, CPU).unwrap();
    let metrics = evaluate_all(&*model, &batches, layer).means();
    let (mut zero, mut context_mean) = (Vec::new(), Vec::new());
    for k in 0..64 {
        let draw = task.function(Stream::Eval, k).unwrap();
        let mean = draw.targets[..32].iter().sum::<f64>() / 32.0;
        zero.extend(draw.targets[32..].iter().copied());
        context_mean.extend(draw.targets[32..].iter().map(|y| y - mean));
    }
    let (zero, context_mean) = (rms(zero), rms(context_mean));
    let message = format!("{metrics:?}, prior mean {zero}, context mean {context_mean}");
    assert!(metrics["rmse"] < 0.5 * zero, "{message}");
    assert!(metrics["rmse"] < 0.85 * context_mean, "{message}");
}
