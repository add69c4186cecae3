//! The CUDA ops (`gpu.rs`) against candle's composition on the same device: values and the
//! gradients of every input in f64 (the bound of `tests.rs`), on its odd shapes and views, on
//! rows longer than a warp and more rows than a block, and f32 against f64. Built only with
//! CUDA; they need a CUDA device and `WORKBENCH_CUDA_KERNELS=1`, and fail without either.

use super::tests::{
    bi_softmax_attention_matches_the_composition_on, bi_softmax_matches_the_composition_on, check, composed_layer_norm,
    energy_attention_matches_the_composition_on, input_on, normal, packed_softmax_attention_matches_the_composition_on,
    relative_error, softmax_attention_matches_the_composition_on, SHAPES, VIEWS,
};
use super::*;
use candle_core::{Device, Var};

fn cuda() -> Device {
    Device::new_cuda(0).expect("the CUDA kernel tests need a CUDA device (cuda:0)")
}

/// A variable of `shape` on `device`, plain.
fn var_on(shape: &[usize], std: f64, seed: u64, device: &Device) -> Var {
    Var::from_tensor(&normal(shape, std, seed).to_device(device).unwrap()).unwrap()
}

#[test]
fn the_cuda_ops_serve_f32_and_f64_on_a_cuda_device_only() {
    let dev = cuda();
    let switch = plugin_api::CUDA_KERNELS_SWITCH;
    assert!(plugin_api::cuda_kernels_switched_on(), "the CUDA kernel tests need {switch}=1 (cuda-check.sh sets it)");
    let x = normal(&[2, 3], 1.0, 0);
    assert!(!gpu::serves(&x), "a CPU tensor");
    assert!(gpu::serves(&x.to_device(&dev).unwrap()), "f64 on cuda:0");
    assert!(gpu::serves(&x.to_dtype(DType::F32).unwrap().to_device(&dev).unwrap()), "f32 on cuda:0");
    assert!(!gpu::serves(&x.to_dtype(DType::F16).unwrap().to_device(&dev).unwrap()), "f16 on cuda:0");
}

#[test]
fn cuda_norms_match_the_composition() {
    let dev = cuda();
    let shapes: Vec<&[usize]> = SHAPES.iter().copied().chain([&[3, 1000][..], &[1000, 33], &[2, 5, 64]]).collect();
    for (s, shape) in shapes.iter().enumerate() {
        let len = *shape.last().unwrap();
        for view in VIEWS {
            let label = format!("{shape:?} {view:?}");
            let (xv, x) = input_on(shape, view, s as u64, &dev);
            let gv = var_on(&[len], 1.0, 50 + s as u64, &dev);
            let g = gv.as_tensor().clone();
            check(
                &format!("rms_norm {label}"),
                std::slice::from_ref(&xv),
                std::slice::from_ref(&x),
                |i| rms_norm(&i[0], None, 1e-6).unwrap(),
                |i| ops::rms_norm(&i[0], None, 1e-6).unwrap(),
            );
            for (act, activate) in [
                (Activation::Identity, (|u: Tensor| u) as fn(Tensor) -> Tensor),
                (Activation::Relu, |u: Tensor| u.relu().unwrap()),
                // GELU runs as candle's after the fused norm, so candle's is the reference.
                (Activation::Gelu, |u: Tensor| u.gelu_erf().unwrap()),
            ] {
                check(
                    &format!("{act:?}(rms_norm) with gain {label}"),
                    &[xv.clone(), gv.clone()],
                    &[x.clone(), g.clone()],
                    |i| normed_activation(&i[0], Some(&i[1]), 1e-6, act).unwrap(),
                    |i| activate(ops::rms_norm(&i[0], Some(&i[1]), 1e-6).unwrap()),
                );
            }
            if len > 1 {
                let bv = var_on(&[len], 1.0, 70 + s as u64, &dev);
                check(
                    &format!("layer_norm {label}"),
                    &[xv.clone(), gv.clone(), bv.clone()],
                    &[x.clone(), g.clone(), bv.as_tensor().clone()],
                    |i| layer_norm(&i[0], Some(&i[1]), Some(&i[2]), 1e-5).unwrap(),
                    |i| composed_layer_norm(&i[0], &i[1], &i[2], 1e-5),
                );
            }
        }
    }
}

#[test]
fn cuda_softmax_along_rows_and_columns_matches_the_composition() {
    let dev = cuda();
    let shapes: Vec<&[usize]> = SHAPES.iter().copied().chain([&[2, 300, 40][..], &[3, 1000], &[1000, 33]]).collect();
    for (s, shape) in shapes.iter().enumerate() {
        for view in VIEWS {
            for dim in [D::Minus1, D::Minus2] {
                let (xv, x) = input_on(shape, view, 30 + s as u64, &dev);
                check(
                    &format!("softmax {dim:?} {shape:?} {view:?}"),
                    &[xv],
                    &[x],
                    |i| softmax(&i[0], dim).unwrap(),
                    |i| ops::softmax(&i[0], dim).unwrap(),
                );
            }
        }
    }
    bi_softmax_matches_the_composition_on(&dev);
}

/// The attention ops' cases of `tests.rs` on the device: their composition runs the CUDA
/// normalisation and softmax, the reference candle's composition alone.
#[test]
fn cuda_attentions_match_the_composition() {
    let dev = cuda();
    bi_softmax_attention_matches_the_composition_on(&dev);
    softmax_attention_matches_the_composition_on(&dev);
    packed_softmax_attention_matches_the_composition_on(&dev);
    energy_attention_matches_the_composition_on(&dev);
}

/// f32 on the GPU against the f64 composition: forward values and gradients within 1e-5.
#[test]
fn cuda_f32_matches_f64() {
    let dev = cuda();
    for (s, shape) in [&[4, 81, 81][..], &[3, 1000], &[1000, 33]].into_iter().enumerate() {
        let x64 = normal(shape, 1.0, 900 + s as u64).to_device(&dev).unwrap();
        let r = normal(shape, 1.0, 950 + s as u64).to_device(&dev).unwrap();
        let len = *shape.last().unwrap();
        let g64 = normal(&[len], 1.0, 990 + s as u64).to_device(&dev).unwrap();
        type Op = fn(&Tensor, &Tensor) -> Tensor;
        let ops: [(&str, Op); 4] = [
            ("relu(rms_norm)", |x, g| normed_activation(x, Some(g), 1e-6, Activation::Relu).unwrap()),
            ("layer_norm", |x, g| layer_norm(x, Some(g), None, 1e-5).unwrap()),
            ("softmax rows", |x, _| softmax(x, D::Minus1).unwrap()),
            ("softmax columns", |x, _| softmax(x, D::Minus2).unwrap()),
        ];
        for (name, op) in ops {
            let run = |dtype: DType| {
                let x = Var::from_tensor(&x64.to_dtype(dtype).unwrap()).unwrap();
                let g = Var::from_tensor(&g64.to_dtype(dtype).unwrap()).unwrap();
                let y = op(x.as_tensor(), g.as_tensor());
                let grads = (&y * r.to_dtype(dtype).unwrap()).unwrap().sum_all().unwrap().backward().unwrap();
                let dx = grads.get(x.as_tensor()).unwrap().to_dtype(DType::F64).unwrap();
                (y.to_dtype(DType::F64).unwrap(), dx)
            };
            let ((y32, dx32), (y64, dx64)) = (run(DType::F32), run(DType::F64));
            let (ey, edx) = (relative_error(&y32, &y64), relative_error(&dx32, &dx64));
            assert!(ey <= 1e-5 && edx <= 1e-5, "{name} {shape:?}: f32 against f64: values {ey:e}, gradient {edx:e}");
        }
    }
}
