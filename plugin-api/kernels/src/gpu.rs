//! The normalisation and softmax ops on a CUDA device, each one kernel forward and one
//! backward (`gpu/kernels.cu`, launched by `gpu/cuda.rs`), where candle's composition launches
//! a kernel per element-wise op and adds a gradient per node: RMSNorm (seed 000 Eq. 7 and 11's
//! `RMSNorm`), LayerNorm (its centred form), optionally followed by ReLU, the row softmax and
//! the column softmax (the two halves of the bi-softmax, Eq. 7 and 9). The formulas are those
//! of the CPU ops (`norm.rs`, `softmax.rs`). The kernels' source is tested on the CPU under an
//! emulation of CUDA (`tests_emulated.rs`), the ops on a device (`tests_cuda.rs`).
//!
//! Unfinished: the ops run only with `WORKBENCH_CUDA_KERNELS=1`
//! (`plugin_api::CUDA_KERNELS_SWITCH`) until they have been checked on a GPU
//! (`workbench/bench/cuda-check.sh` runs their tests and benches there).
//!
//! The kernels are compiled once per process with NVRTC, which a CUDA build already needs
//! (`vendor/README.md`), so building with `--features cuda` needs no step of its own. Without
//! CUDA [`serves`] is false and the layers never reach this module.

use crate::norm::Activation;
use candle_core::{DType, Result, Tensor};

/// Whether the CUDA ops serve `t`: f32 or f64 on a CUDA device, in a build with CUDA, with the
/// ops switched on.
pub fn serves(t: &Tensor) -> bool {
    plugin_api::CUDA
        && t.device().is_cuda()
        && matches!(t.dtype(), DType::F32 | DType::F64)
        && plugin_api::cuda_kernels_switched_on()
}

/// Whether the normalisation kernel applies `act` itself (the others run after it, composed).
pub fn serves_activation(act: Activation) -> bool {
    matches!(act, Activation::Identity | Activation::Relu)
}

/// Which dimension a softmax normalises: the last (rows) or the one before it (columns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Along {
    Rows,
    Columns,
}

/// `act((x - mean) / sqrt(mean((x - mean)^2) + eps) * gain)` over the last dimension, the mean
/// taken only when `centre` (LayerNorm without its bias), `act` one [`serves_activation`] takes.
pub fn norm(x: &Tensor, gain: Option<&Tensor>, eps: f64, act: Activation, centre: bool) -> Result<Tensor> {
    if !serves_activation(act) {
        candle_core::bail!("the CUDA normalisation applies no {act:?}: apply it after the normalisation")
    }
    let gain = gain.map(Tensor::contiguous).transpose()?;
    imp::norm(&x.contiguous()?, gain.as_ref(), eps, act, centre)
}

/// Softmax of `x` along its rows (the last dimension) or its columns (the one before).
pub fn softmax(x: &Tensor, along: Along) -> Result<Tensor> {
    if along == Along::Columns && x.rank() < 2 {
        candle_core::bail!("softmax along columns needs a tensor of rank >= 2, got shape {:?}", x.dims())
    }
    imp::softmax(&x.contiguous()?, along)
}

plugin_api::with_cuda! {
    mod cuda;
    use cuda as imp;
}

plugin_api::without_cuda! {
    /// In a build without CUDA no tensor lives on a CUDA device, so [`serves`] is false and
    /// these are never called; they refuse rather than assume.
    mod imp {
        use super::{Activation, Along};
        use candle_core::{bail, Result, Tensor};

        pub fn norm(_: &Tensor, _: Option<&Tensor>, _: f64, _: Activation, _: bool) -> Result<Tensor> {
            bail!("the CUDA kernels need a build with the `cuda` feature")
        }

        pub fn softmax(_: &Tensor, _: Along) -> Result<Tensor> {
            bail!("the CUDA kernels need a build with the `cuda` feature")
        }
    }
}
