//! The CUDA kernels' source (`gpu/kernels.cu`) run on the CPU under `gpu/emulation.hpp`, against
//! autograd of candle's composition: what each kernel computes, forward and backward, checked on
//! every machine (CI has no GPU) with the launch shapes of `gpu/cuda.rs`. The host C++ compiler
//! (`CXX`, else `c++`; C++20) builds `gpu/emulated_driver.cpp` once per test.

use super::tests::{composed_layer_norm, normal, relative_error};
use super::*;
use candle_core::{Device, Var};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The driver, built into a fresh temporary folder that is removed with it.
struct Driver {
    dir: PathBuf,
}

impl Driver {
    /// `tag` names the test, so that tests running side by side have folders of their own.
    fn build(tag: &str) -> Driver {
        let dir = std::env::temp_dir().join(format!("workbench-kernels-emulated-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/gpu/emulated_driver.cpp");
        let compiler = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
        let out = Command::new(&compiler)
            .args(["-std=c++20", "-O1", "-pthread", "-o"])
            .arg(dir.join("driver"))
            .arg(&source)
            .output()
            .unwrap_or_else(|e| panic!("cannot run the C++ compiler `{compiler}` (set CXX to one): {e}"));
        assert!(out.status.success(), "compiling {}:\n{}", source.display(), String::from_utf8_lossy(&out.stderr));
        Driver { dir }
    }

    /// Runs `kernel` for `dtype` ("f32" or "f64") with `sizes`, feeding `inputs` in order.
    fn run(&self, kernel: &str, dtype: &str, sizes: &[String], inputs: &[&Tensor]) -> Vec<f64> {
        let mut child = Command::new(self.dir.join("driver"))
            .arg(kernel)
            .arg(dtype)
            .args(sizes)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut bytes = Vec::new();
        for t in inputs {
            for v in t.flatten_all().unwrap().to_vec1::<f64>().unwrap() {
                bytes.extend_from_slice(&v.to_le_bytes());
            }
        }
        child.stdin.take().unwrap().write_all(&bytes).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{kernel} {sizes:?}: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn tensor(values: Vec<f64>, shape: &[usize]) -> Tensor {
    Tensor::from_vec(values, shape, &Device::Cpu).unwrap()
}

/// The bound for f64 (the CPU ops' own) and for f32 against the f64 reference.
fn bound(dtype: &str) -> f64 {
    if dtype == "f64" {
        1e-6
    } else {
        1e-5
    }
}

/// The composed normalisation and its gradients under `sum(y * dy)`: `(y, dx, dg)`.
fn norm_reference(x: &Tensor, g: &Tensor, dy: &Tensor, eps: f64, relu: bool, centre: bool) -> [Tensor; 3] {
    let (xv, gv) = (Var::from_tensor(x).unwrap(), Var::from_tensor(g).unwrap());
    let zeros = Tensor::zeros(g.dims(), DType::F64, &Device::Cpu).unwrap();
    let mut y = match centre {
        true => composed_layer_norm(xv.as_tensor(), gv.as_tensor(), &zeros, eps),
        false => ops::rms_norm(xv.as_tensor(), Some(gv.as_tensor()), eps).unwrap(),
    };
    if relu {
        y = y.relu().unwrap();
    }
    let grads = (&y * dy).unwrap().sum_all().unwrap().backward().unwrap();
    [y, grads.get(xv.as_tensor()).unwrap().clone(), grads.get(gv.as_tensor()).unwrap().clone()]
}

#[test]
fn the_cuda_normalisation_kernels_compute_the_composition() {
    let driver = Driver::build("norm");
    let cases = [(1, 1), (3, 7), (19, 45), (10, 100), (2, 33), (9, 32)];
    for (c, &(rows, n)) in cases.iter().enumerate() {
        for (relu, centre, gain, dtype) in [
            (false, false, true, "f64"),
            (true, false, true, "f64"),
            (false, true, true, "f64"),
            (true, true, true, "f32"),
            (true, false, false, "f64"),
            (false, true, false, "f32"),
        ] {
            if centre && n == 1 {
                continue; // a centred row of one entry is zero
            }
            let seed = 10 * c as u64;
            let (x, g, dy) =
                (normal(&[rows, n], 1.0, seed), normal(&[n], 1.0, seed + 1), normal(&[rows, n], 1.0, seed + 2));
            let eps = 1e-5;
            let label = format!("norm rows={rows} n={n} relu={relu} centre={centre} gain={gain} {dtype}");
            let flags = [relu, centre, gain].map(|f| u8::from(f).to_string());
            let sizes = [&[rows.to_string(), n.to_string(), eps.to_string()][..], &flags].concat();
            // Without a gain the kernels are still handed `g` and must not read it: the reference
            // then has a gain of ones.
            let reference_gain = if gain { g.clone() } else { g.ones_like().unwrap() };
            let [y, dx, dg] = norm_reference(&x, &reference_gain, &dy, eps, relu, centre);
            let y_kernel = tensor(driver.run("norm_forward", dtype, &sizes, &[&x, &g]), &[rows, n]);
            let err = relative_error(&y_kernel, &y);
            assert!(err <= bound(dtype), "{label}: forward relative error {err:e}");
            let outputs = 1 + usize::from(gain);
            let out = tensor(driver.run("norm_backward", dtype, &sizes, &[&x, &g, &dy]), &[outputs, rows, n]);
            let err = relative_error(&out.get(0).unwrap(), &dx);
            assert!(err <= bound(dtype), "{label}: input gradient relative error {err:e}");
            if gain {
                let err = relative_error(&out.get(1).unwrap().sum(0).unwrap(), &dg);
                assert!(err <= bound(dtype), "{label}: gain gradient relative error {err:e}");
            }
        }
    }
}

#[test]
fn the_cuda_softmax_kernels_compute_the_composition() {
    let driver = Driver::build("softmax");
    // (matrices, m, n): one entry, rows shorter and longer than a warp, more rows than a block.
    let cases = [(1, 1, 1), (2, 3, 7), (1, 81, 81), (3, 5, 100), (1, 70, 33), (2, 9, 140)];
    for (c, &(mats, m, n)) in cases.iter().enumerate() {
        for (dim, rows_or_columns) in [(D::Minus1, "rows"), (D::Minus2, "columns")] {
            for dtype in ["f64", "f32"] {
                let seed = 100 + 10 * c as u64;
                let (x, dy) = (normal(&[mats, m, n], 2.0, seed), normal(&[mats, m, n], 1.0, seed + 1));
                let xv = Var::from_tensor(&x).unwrap();
                let y = ops::softmax(xv.as_tensor(), dim).unwrap();
                let dx =
                    (&y * &dy).unwrap().sum_all().unwrap().backward().unwrap().get(xv.as_tensor()).unwrap().clone();
                let sizes: Vec<String> = match rows_or_columns {
                    "rows" => vec![(mats * m).to_string(), n.to_string()],
                    _ => vec![mats.to_string(), m.to_string(), n.to_string()],
                };
                let label = format!("softmax along {rows_or_columns} {mats}x{m}x{n} {dtype}");
                let kernel = format!("softmax_{rows_or_columns}");
                let y_kernel = tensor(driver.run(&kernel, dtype, &sizes, &[&x]), &[mats, m, n]);
                let err = relative_error(&y_kernel, &y);
                assert!(err <= bound(dtype), "{label}: forward relative error {err:e}");
                // The backward takes the softmax itself, as the op's backward hands it over.
                let dx_kernel =
                    tensor(driver.run(&format!("{kernel}_backward"), dtype, &sizes, &[&y, &dy]), &[mats, m, n]);
                let err = relative_error(&dx_kernel, &dx);
                assert!(err <= bound(dtype), "{label}: gradient relative error {err:e}");
            }
        }
    }
}
