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
    if let Some(library) = missing_cuda_library() {
        bail!(
            "device `{spec}` needs {library}, which this machine does not have (or LD_LIBRARY_PATH does not reach); \
             train with device=cpu, or on a machine with a GPU and the CUDA runtime"
        );
    }
    Device::new_cuda(ordinal).map_err(|e| {
        anyhow::anyhow!(
            "device `{spec}` is not available ({e}); this machine has {} CUDA device(s): pick one of them or train with device=cpu",
            cuda_device_count()
        )
    })
}

#[cfg(not(feature = "cuda"))]
fn cuda(_ordinal: usize, spec: &str) -> Result<Device> {
    bail!("device `{spec}` needs CUDA, but this workbench was built without it; rebuild with `cargo build --release --features cuda`")
}

/// The first CUDA library that candle opens when a device is first used and that cannot be
/// found, named for a person. The build loads them at run time (vendor/README.md), and opening
/// a missing one panics inside cudarc, so they are looked for first, once per process.
#[cfg(feature = "cuda")]
fn missing_cuda_library() -> Option<&'static str> {
    static MISSING: std::sync::OnceLock<Option<&'static str>> = std::sync::OnceLock::new();
    *MISSING.get_or_init(probe_cuda_libraries)
}

#[cfg(feature = "cuda")]
fn probe_cuda_libraries() -> Option<&'static str> {
    use candle_core::cuda_backend::cudarc;
    // SAFETY: each check only opens (and closes) the library, as using the device would.
    let present: [(bool, &'static str); 5] = unsafe {
        [
            (cudarc::driver::sys::is_culib_present(), "the NVIDIA driver (libcuda.so.1)"),
            (cudarc::cublas::sys::is_culib_present(), "cuBLAS (libcublas.so)"),
            (cudarc::cublaslt::sys::is_culib_present(), "cuBLASLt (libcublasLt.so)"),
            (cudarc::curand::sys::is_culib_present(), "cuRAND (libcurand.so)"),
            (cudarc::nvrtc::sys::is_culib_present(), "NVRTC (libnvrtc.so)"),
        ]
    };
    present.iter().find(|(found, _)| !found).map(|(_, name)| *name)
}

/// CUDA devices this build can use: none without the `cuda` feature, the driver or the CUDA
/// libraries.
pub fn cuda_device_count() -> usize {
    #[cfg(feature = "cuda")]
    {
        if missing_cuda_library().is_some() {
            return 0;
        }
        candle_core::cuda_backend::cudarc::driver::CudaContext::device_count().map_or(0, |n| n.max(0) as usize)
    }
    #[cfg(not(feature = "cuda"))]
    {
        0
    }
}

/// The lowest CUDA ordinal below `devices` that none of `busy` (device strings of other
/// runs: `cpu`, `cuda`, `cuda:K`) uses; a bare `cuda` counts as ordinal 0, as [`parse`] opens it.
pub fn free_cuda_ordinal(devices: usize, busy: &[String]) -> Option<usize> {
    let used: Vec<usize> = busy
        .iter()
        .filter_map(|d| match d.trim().strip_prefix("cuda") {
            Some("") => Some(0),
            Some(rest) => rest.strip_prefix(':').and_then(|k| k.parse().ok()),
            None => None,
        })
        .collect();
    (0..devices).find(|k| !used.contains(k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_free_ordinal_skips_busy_devices() {
        let busy = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(free_cuda_ordinal(2, &busy(&[])), Some(0));
        assert_eq!(free_cuda_ordinal(2, &busy(&["cpu", "cuda:0"])), Some(1));
        assert_eq!(free_cuda_ordinal(3, &busy(&["cuda", "cuda:2"])), Some(1));
        assert_eq!(free_cuda_ordinal(2, &busy(&["cuda:0", "cuda:1"])), None);
        assert_eq!(free_cuda_ordinal(0, &busy(&[])), None);
    }

    #[test]
    fn without_cuda_there_are_no_devices() {
        if cfg!(not(feature = "cuda")) {
            assert_eq!(cuda_device_count(), 0);
        }
    }
}
