//! The matrix-product FLOPs `bench` reads off a model's recorded graph (`kernels::flops`)
//! against the products written out by hand from the papers' equations, for the two layers
//! whose shapes are simplest to write out, fused and composed alike.

use crate::common;

use candle_core::{DType, Device};
use kernels::flops::forward_products;
use plugin_api::{Config, Pass, PluginKind, Value};
use workbench::host::PluginHost;
use workbench::params::Params;

const BATCH: usize = 2;

/// The products of one forward pass of `layer` on Sudoku's 81 tokens, counted off the graph
/// (the embedding's own products taken away).
fn counted(host: &PluginHost, layer: &str, options: &[(&str, Value)]) -> (u64, Config) {
    let mut cfg = Config::defaults(&host.get(layer, PluginKind::Layer).unwrap().declaration.params);
    for (key, value) in options {
        cfg.set(key, value.clone());
    }
    let mut task_cfg = Config::defaults(&host.get("sudoku", PluginKind::Task).unwrap().declaration.params);
    task_cfg.set("train_puzzles", Value::Int(4));
    task_cfg.set("eval_puzzles", Value::Int(1));
    let params = Params::new(0);
    let vb = params.var_builder(DType::F32, &Device::Cpu);
    let task = host.build_task("sudoku", &task_cfg, 0).unwrap();
    let layer_obj = host.build_layer(layer, &cfg, vb.pp("layer")).unwrap();
    let model = task.build_model(vb.pp("task"), layer_obj.width()).unwrap();
    let batch = task.train_batch(0, BATCH, &Device::Cpu).unwrap();
    let x0 = model.embed(&batch, true).unwrap();
    let h = layer_obj.forward(&x0, &mut Pass::new(cfg.usize("iterations").unwrap())).unwrap();
    let loss = model.loss(&h, &batch).unwrap();
    let (layer_flops, embedding) = (forward_products(&h).flops, forward_products(&x0).flops);
    assert!(forward_products(&loss).flops > layer_flops, "{layer}: the task's output head adds products");
    (layer_flops - embedding, cfg)
}

/// Per iteration on `B N` tokens of width `d`, with `H` heads of width `p = d / H` and the
/// feedforward width `M`: Hyper-SET's projections `X W` and `O W^T` (seed 000 Eq. 7-9), the
/// feedforward `X D` and `ReLU(U) D^T` (Eq. 5), the step network's output Linear from `d` to
/// `2d` and its time MLP on one sinusoid, `time_dim -> d -> d` (Eq. 12), and the attention's scores and product (`2 B H N N p` each; `2 B H N p p`
/// each for the linear attention's `Phi(K)^T Phi(V)` and `Phi(Q) (K^T V)`). The Transformer's
/// `Q`, `K`, `V`, `O` and its two MLP matrices instead of the projections and feedforward.
fn written_out(layer: &str, cfg: &Config) -> u64 {
    let d = cfg.usize("d").unwrap() as u64;
    let h = cfg.usize("heads").unwrap() as u64;
    let iterations = cfg.usize("iterations").unwrap() as u64;
    let m = cfg.usize("ff_ratio").unwrap() as u64 * d;
    let (b, n) = (BATCH as u64, 81);
    let (p, tokens) = (d / h, b * n);
    let attention = match cfg.str("attention") {
        Ok("linear") => 2 * 2 * b * h * n * p * p,
        _ => 2 * 2 * b * h * n * n * p,
    };
    let per_iteration = match layer {
        "hyperset" => {
            let time_dim = cfg.usize("time_dim").unwrap() as u64;
            2 * tokens * (2 * d * d + 2 * d * m + 2 * d * d) + 2 * (time_dim * d + d * d) + attention
        }
        "transformer" => 2 * tokens * (4 * d * d + 2 * d * m) + attention,
        other => panic!("no products written out for {other}"),
    };
    iterations * per_iteration
}

fn int(v: i64) -> Value {
    Value::Int(v)
}

fn choice(v: &str) -> Value {
    Value::Str(v.into())
}

#[test]
fn the_counted_products_are_the_papers_for_hyperset_and_the_transformer() {
    let host = common::load_plugins("product-flops", &["hyperset", "transformer", "sudoku"]);
    let small = [("d", int(16)), ("heads", int(2)), ("iterations", int(3))];
    for (layer, extra) in [
        ("hyperset", vec![("time_dim", int(8))]),
        ("hyperset", vec![("time_dim", int(8)), ("kernels", choice("composed"))]),
        ("hyperset", vec![("time_dim", int(8)), ("attention", choice("linear"))]),
        ("transformer", vec![]),
        ("transformer", vec![("kernels", choice("composed"))]),
    ] {
        let options: Vec<_> = small.iter().cloned().chain(extra.clone()).collect();
        let (got, cfg) = counted(&host, layer, &options);
        assert_eq!(got, written_out(layer, &cfg), "{layer} with {extra:?}");
    }
}
