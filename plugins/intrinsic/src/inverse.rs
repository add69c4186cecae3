//! A differentiable inverse of small square matrices (candle has none).
//!
//! The value `X0 = A^-1` is computed outside the graph (nalgebra's LU on the host, in f64),
//! then one Newton-Schulz step is taken in the graph: `X = X0 (2I - A X0)`. Since `A X0 = I`
//! the value is unchanged (up to rounding, which the step squares), and since `X0` is a
//! constant the derivative is `dX = -X0 dA X0`, the exact derivative of the inverse. So the
//! result is exact in value and in first derivative on every device, built from matmuls.

use nalgebra::DMatrix;
use plugin_api::candle::{DType, Device, Tensor};
use plugin_api::{PluginError, Result};

/// The inverse of each `[n, n]` matrix of `a` (`[..., n, n]`), differentiable in `a`.
/// Errors if one is singular.
pub fn inverse(a: &Tensor) -> Result<Tensor> {
    let dims = a.dims();
    let n = *dims.last().ok_or_else(|| PluginError::Other("inverse of a scalar".into()))?;
    if dims.len() < 2 || dims[dims.len() - 2] != n {
        return Err(PluginError::Other(format!("inverse needs square matrices, got shape {dims:?}")));
    }
    let values: Vec<f64> = a.detach().to_device(&Device::Cpu)?.to_dtype(DType::F64)?.flatten_all()?.to_vec1()?;
    let mut inverses = Vec::with_capacity(values.len());
    for (index, block) in values.chunks(n * n).enumerate() {
        let inv = DMatrix::from_row_slice(n, n, block)
            .try_inverse()
            .ok_or_else(|| PluginError::Other(format!("matrix {index} of the batch is singular")))?;
        // nalgebra stores columns first; the transpose's storage is the row-major inverse.
        inverses.extend_from_slice(inv.transpose().as_slice());
    }
    let x0 = Tensor::from_vec(inverses, a.shape(), &Device::Cpu)?.to_dtype(a.dtype())?.to_device(a.device())?;
    let twice_identity = (Tensor::eye(n, a.dtype(), a.device())? * 2.0)?;
    let residual = twice_identity.broadcast_sub(&a.matmul(&x0)?)?;
    Ok(x0.matmul(&residual)?)
}
