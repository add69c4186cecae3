//! Choosing the compute device.

use anyhow::{bail, Result};
use candle_core::Device;

/// Parses `cpu`, `cuda` or `cuda:K` into a device. CUDA needs a build with `--features cuda`.
pub fn parse(spec: &str) -> Result<Device> {
    let spec = spec.trim();
    if spec == "cpu" {
        return Ok(Device::Cpu);
    }
    let ordinal = match spec.strip_prefix("cuda") {
        Some("") => 0,
        Some(rest) => match rest.strip_prefix(':').and_then(|k| k.parse::<usize>().ok()) {
            Some(k) => k,
            None => bail!("device `{spec}` is not valid; use cpu, cuda or cuda:K"),
        },
        None => bail!("device `{spec}` is not valid; use cpu, cuda or cuda:K"),
    };
    cuda(ordinal, spec)
}

#[cfg(feature = "cuda")]
fn cuda(ordinal: usize, spec: &str) -> Result<Device> {
    Device::new_cuda(ordinal).map_err(|e| anyhow::anyhow!("device `{spec}` is not available: {e}"))
}

#[cfg(not(feature = "cuda"))]
fn cuda(_ordinal: usize, spec: &str) -> Result<Device> {
    bail!("device `{spec}` needs CUDA, but this workbench was built without it; rebuild with `cargo build --release --features cuda`")
}
