use super::*;
use plugin_api::candle::{DType, Device, Tensor};
use plugin_api::candle_nn::{VarBuilder, VarMap};
use plugin_api::{Config, Layer, Pass, Value};

fn build(pairs: &[(&str, Value)]) -> (VarMap, Transformer) {
    let mut cfg = Config::defaults(&params());
    for (k, v) in pairs {
        cfg.set(k, v.clone());
    }
    let map = VarMap::new();
    let vb = VarBuilder::from_varmap(&map, DType::F32, &Device::Cpu);
    let layer = Transformer::new(&TransformerConfig::from_config(&cfg).unwrap(), vb).unwrap();
    (map, layer)
}

fn count(map: &VarMap) -> usize {
    map.all_vars().iter().map(|v| v.elem_count()).sum()
}

#[test]
fn parameter_counts() {
    let d = 32;
    let (map, _) = build(&[("d", Value::Int(d)), ("heads", Value::Int(4))]);
    let d = d as usize;
    assert_eq!(count(&map), 4 * d * d + 2 * d * 4 * d + 2 * d);
    let (map, _) = build(&[("d", Value::Int(d as i64)), ("heads", Value::Int(4)), ("shared_qkv", Value::Bool(true))]);
    assert_eq!(count(&map), 2 * d * d + 2 * d * 4 * d + 2 * d);
}

#[test]
fn every_parameter_receives_a_gradient() {
    for shared in [false, true] {
        let (map, layer) = build(&[
            ("d", Value::Int(16)),
            ("heads", Value::Int(2)),
            ("layers", Value::Int(2)),
            ("iterations", Value::Int(4)),
            ("shared_qkv", Value::Bool(shared)),
        ]);
        let x = Tensor::randn(0f32, 1.0, (2, 5, 16), &Device::Cpu).unwrap();
        let y = layer.forward(&x, &mut Pass::new(4)).unwrap();
        let grads = y.sqr().unwrap().sum_all().unwrap().backward().unwrap();
        for (name, var) in map.data().lock().unwrap().iter() {
            let g =
                grads.get(var.as_tensor()).expect(name).abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(g > 0.0, "{name} (shared_qkv={shared}) received no gradient");
        }
    }
}

/// With a causal mask, changing a later token leaves earlier outputs unchanged.
#[test]
fn causal_pass_does_not_look_ahead() {
    let (_, layer) = build(&[("d", Value::Int(16)), ("heads", Value::Int(2))]);
    let x = Tensor::randn(0f32, 1.0, (1, 6, 16), &Device::Cpu).unwrap();
    let mut x2 = x.to_vec3::<f32>().unwrap();
    x2[0][5][0] += 3.0;
    let x2 = Tensor::new(x2, &Device::Cpu).unwrap();
    let run = |x: &Tensor| {
        let mut pass = Pass::new(2);
        pass.causal = true;
        layer.forward(x, &mut pass).unwrap().narrow(1, 0, 5).unwrap()
    };
    let diff = (run(&x) - run(&x2)).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
    assert!(diff < 1e-6, "earlier tokens changed by {diff}");
}
