//! The CUDA side of [`super`]: the kernels of `kernels.cu` as candle custom ops, compiled with
//! NVRTC on first use. Only in builds with CUDA (`plugin_api::with_cuda!`).

use super::Along;
use crate::norm::Activation;
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, DeviceRepr, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::cudarc::nvrtc;
use candle_core::cuda_backend::{CudaDType, CudaDevice, WrapErr};
use candle_core::{
    bail, CpuStorage, CudaStorage, CustomOp1, CustomOp2, CustomOp3, DType, Layout, Result, Shape, Tensor, WithDType,
};
use std::sync::OnceLock;

const SOURCE: &str = include_str!("kernels.cu");

/// The module's name on the device: the source's hash is part of it, so plugins built from
/// other versions of the kernels (loaded side by side, or reloaded) never share a module.
fn module_name() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        // FNV-1a: stable across builds and toolchains, unlike std's hasher.
        let hash = SOURCE.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
        format!("workbench-kernels-{hash:016x}")
    })
}

/// The kernels' PTX, compiled on first use in this process.
fn ptx() -> Result<&'static str> {
    static PTX: OnceLock<std::result::Result<String, String>> = OnceLock::new();
    match PTX.get_or_init(|| nvrtc::compile_ptx(SOURCE).map(|p| p.to_src()).map_err(|e| e.to_string())) {
        Ok(ptx) => Ok(ptx),
        Err(e) => bail!("compiling the workbench's CUDA kernels with NVRTC failed: {e}"),
    }
}

/// The entry point of kernel `name` for `dtype` (`kernels.cu` instantiates each for f32 and f64).
fn entry(name: &str, dtype: DType) -> Result<String> {
    match dtype {
        DType::F32 => Ok(format!("{name}_f32")),
        DType::F64 => Ok(format!("{name}_f64")),
        other => bail!("{name}: the CUDA kernels take f32 or f64, got {other:?}"),
    }
}

/// The element types the kernels are built for.
trait GpuReal: CudaDType + DeviceRepr + WithDType {}
impl GpuReal for f32 {}
impl GpuReal for f64 {}

/// `body` with `T` the storage's element type (f32 or f64).
macro_rules! per_dtype {
    ($dtype:expr, $name:expr, |$t:ident| $body:expr) => {
        match $dtype {
            DType::F32 => {
                type $t = f32;
                $body
            }
            DType::F64 => {
                type $t = f64;
                $body
            }
            other => bail!("{}: the CUDA kernels take f32 or f64, got {other:?}", $name),
        }
    };
}

/// The entries of a contiguous tensor, or an error naming `what`.
fn entries<'a, T: GpuReal>(s: &'a CudaStorage, l: &Layout, what: &str) -> Result<CudaView<'a, T>> {
    match l.contiguous_offsets() {
        Some((start, end)) => Ok(s.as_cuda_slice::<T>()?.slice(start..end)),
        None => bail!("{what} must be contiguous for the CUDA kernels"),
    }
}

/// `(rows, n)`: the shape as rows of its last dimension.
fn rows(shape: &Shape) -> (usize, usize) {
    let n = shape.dims().last().copied().unwrap_or(1).max(1);
    (shape.elem_count() / n, n)
}

/// One warp per row, eight rows per block.
fn per_row(rows: usize) -> LaunchConfig {
    LaunchConfig { grid_dim: (rows.div_ceil(8) as u32, 1, 1), block_dim: (32, 8, 1), shared_mem_bytes: 0 }
}

/// One thread per column of `mats` matrices of `n` columns.
fn per_column(columns: usize) -> LaunchConfig {
    LaunchConfig { grid_dim: (columns.div_ceil(128) as u32, 1, 1), block_dim: (128, 1, 1), shared_mem_bytes: 0 }
}

fn cpu_refused(name: &str) -> Result<(CpuStorage, Shape)> {
    bail!("{name} runs on CUDA devices only")
}

/// The normalisation: `(x, gain) -> y`. Without a gain (`gain` false) the op is applied to
/// `(x, x)`: the second operand stands in for the gain and is never read.
#[derive(Debug, Clone, Copy)]
struct Norm {
    eps: f64,
    act: Activation,
    centre: bool,
    gain: bool,
}

impl Norm {
    /// The kernels' activation code (`kernels.cu`: 0 identity, 1 ReLU).
    fn act_code(&self) -> i32 {
        i32::from(self.act == Activation::Relu)
    }

    /// Runs `norm_forward` (`inputs` x, gain; `outputs` 1) or `norm_backward` (x, gain, dy;
    /// `outputs` 2 with a gain: `[dx, du x^]` stacked, the input's gradient and the rows whose
    /// sum is the gain's; 1 without: `dx`) over the rows of `shape`.
    fn launch<T: GpuReal>(
        &self,
        kernel: &str,
        dev: &CudaDevice,
        shape: &Shape,
        inputs: &[&CudaView<'_, T>],
        outputs: usize,
    ) -> Result<CudaStorage> {
        let (rows, n) = rows(shape);
        // SAFETY: every entry is written by the kernel below.
        let out = unsafe { dev.alloc::<T>(outputs * rows * n)? };
        if rows > 0 {
            let func = dev.get_or_load_custom_func(&entry(kernel, T::DTYPE)?, module_name(), ptx()?)?;
            let (rows_arg, n_arg, eps, act, centre, gain) = (
                rows as i64,
                n as i32,
                T::from_f64(self.eps),
                self.act_code(),
                i32::from(self.centre),
                i32::from(self.gain),
            );
            let mut b = func.builder();
            for input in inputs {
                b.arg(*input);
            }
            b.arg(&out).arg(&rows_arg).arg(&n_arg).arg(&eps).arg(&act).arg(&centre).arg(&gain);
            // SAFETY: the arguments match the kernel's signature; the sizes are the tensors'.
            unsafe { b.launch(per_row(rows)) }.w()?;
        }
        Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
    }
}

impl CustomOp2 for Norm {
    fn name(&self) -> &'static str {
        "cuda-norm"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        cpu_refused(self.name())
    }

    fn cuda_fwd(&self, x: &CudaStorage, lx: &Layout, g: &CudaStorage, lg: &Layout) -> Result<(CudaStorage, Shape)> {
        let y = per_dtype!(x.dtype(), self.name(), |T| {
            let (xs, gs) = (entries::<T>(x, lx, "x")?, entries::<T>(g, lg, "the gain")?);
            self.launch::<T>("norm_forward", x.device(), lx.shape(), &[&xs, &gs], 1)?
        });
        Ok((y, lx.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, g: &Tensor, _y: &Tensor, dy: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let out = x.apply_op3_no_bwd(g, &dy.contiguous()?, &NormBackward(*self))?;
        if !self.gain {
            return Ok((Some(out), None));
        }
        let gain_grad = out.get(1)?.reshape(((), g.elem_count()))?.sum(0)?;
        Ok((Some(out.get(0)?), Some(gain_grad)))
    }
}

/// The normalisation's backward: `(x, gain, dy) -> [dx, du x^]`, or `dx` without a gain.
struct NormBackward(Norm);

impl CustomOp3 for NormBackward {
    fn name(&self) -> &'static str {
        "cuda-norm-backward"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        cpu_refused(self.name())
    }

    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        lx: &Layout,
        g: &CudaStorage,
        lg: &Layout,
        dy: &CudaStorage,
        ldy: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let out = per_dtype!(x.dtype(), self.name(), |T| {
            let (xs, gs) = (entries::<T>(x, lx, "x")?, entries::<T>(g, lg, "the gain")?);
            let dys = entries::<T>(dy, ldy, "the gradient")?;
            self.0.launch::<T>("norm_backward", x.device(), lx.shape(), &[&xs, &gs, &dys], 1 + usize::from(self.0.gain))?
        });
        if !self.0.gain {
            return Ok((out, lx.shape().clone()));
        }
        let mut dims = vec![2];
        dims.extend_from_slice(lx.dims());
        Ok((out, Shape::from(dims)))
    }
}

/// `(rows, n)` for a row softmax, or `(matrices, m, n)` for a column softmax.
fn softmax_extent(shape: &Shape, along: Along) -> (usize, usize, usize) {
    let (rows, n) = rows(shape);
    match along {
        Along::Rows => (rows, 1, n),
        Along::Columns => {
            let m = shape.dims().iter().rev().nth(1).copied().unwrap_or(1).max(1);
            (rows / m, m, n)
        }
    }
}

/// Launches the softmax kernel `name` (rows or columns) on `inputs` (the tensors it reads,
/// of `shape`) into `output`.
fn launch_softmax<T: GpuReal>(
    dev: &CudaDevice,
    name: &str,
    along: Along,
    shape: &Shape,
    inputs: &[&CudaView<'_, T>],
    output: &CudaSlice<T>,
) -> Result<()> {
    let (outer, m, n) = softmax_extent(shape, along);
    if outer == 0 {
        return Ok(());
    }
    let func = dev.get_or_load_custom_func(&entry(name, T::DTYPE)?, module_name(), ptx()?)?;
    let (outer_arg, m_arg, n_arg) = (outer as i64, m as i32, n as i32);
    let mut b = func.builder();
    for input in inputs {
        b.arg(*input);
    }
    b.arg(output).arg(&outer_arg);
    let config = match along {
        Along::Rows => per_row(outer),
        Along::Columns => {
            b.arg(&m_arg);
            per_column(outer * n)
        }
    };
    b.arg(&n_arg);
    // SAFETY: the arguments match the kernel's signature; the sizes are the tensors'.
    unsafe { b.launch(config) }.w()?;
    Ok(())
}

fn kernel_name(along: Along, backward: bool) -> &'static str {
    match (along, backward) {
        (Along::Rows, false) => "softmax_rows",
        (Along::Rows, true) => "softmax_rows_backward",
        (Along::Columns, false) => "softmax_columns",
        (Along::Columns, true) => "softmax_columns_backward",
    }
}

/// Softmax along rows or columns: `x -> y`.
struct Softmax(Along);

impl CustomOp1 for Softmax {
    fn name(&self) -> &'static str {
        "cuda-softmax"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        cpu_refused(self.name())
    }

    fn cuda_fwd(&self, x: &CudaStorage, lx: &Layout) -> Result<(CudaStorage, Shape)> {
        let dev = x.device();
        let y = per_dtype!(x.dtype(), self.name(), |T| {
            let xs = entries::<T>(x, lx, "x")?;
            // SAFETY: every entry is written by the kernel.
            let y = unsafe { dev.alloc::<T>(lx.shape().elem_count())? };
            launch_softmax::<T>(dev, kernel_name(self.0, false), self.0, lx.shape(), &[&xs], &y)?;
            CudaStorage::wrap_cuda_slice(y, dev.clone())
        });
        Ok((y, lx.shape().clone()))
    }

    fn bwd(&self, _x: &Tensor, y: &Tensor, dy: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(y.apply_op2_no_bwd(&dy.contiguous()?, &SoftmaxBackward(self.0))?))
    }
}

/// The softmax's backward: `(y, dy) -> y (dy - sum(y dy))` along the same dimension.
struct SoftmaxBackward(Along);

impl CustomOp2 for SoftmaxBackward {
    fn name(&self) -> &'static str {
        "cuda-softmax-backward"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        cpu_refused(self.name())
    }

    fn cuda_fwd(&self, y: &CudaStorage, ly: &Layout, dy: &CudaStorage, ldy: &Layout) -> Result<(CudaStorage, Shape)> {
        let dev = y.device();
        let dx = per_dtype!(y.dtype(), self.name(), |T| {
            let (ys, dys) = (entries::<T>(y, ly, "the softmax")?, entries::<T>(dy, ldy, "the gradient")?);
            // SAFETY: every entry is written by the kernel.
            let dx = unsafe { dev.alloc::<T>(ly.shape().elem_count())? };
            launch_softmax::<T>(dev, kernel_name(self.0, true), self.0, ly.shape(), &[&ys, &dys], &dx)?;
            CudaStorage::wrap_cuda_slice(dx, dev.clone())
        });
        Ok((dx, ly.shape().clone()))
    }
}

pub fn norm(x: &Tensor, gain: Option<&Tensor>, eps: f64, act: Activation, centre: bool) -> Result<Tensor> {
    let op = Norm { eps, act, centre, gain: gain.is_some() };
    x.apply_op2(gain.unwrap_or(x), op)
}

pub fn softmax(x: &Tensor, along: Along) -> Result<Tensor> {
    x.apply_op1(Softmax(along))
}
