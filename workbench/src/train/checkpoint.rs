//! Checkpoints: parameters, AdamW moments and the step, in one safetensors file.

use super::optim::AdamW;
use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::path::Path;

const STEP_KEY: &str = "meta.step";
const ADAM_T_KEY: &str = "meta.adam_t";

/// Writes the state after `step` completed steps to `path` (atomically: a temporary file is
/// renamed over the old checkpoint, so a crash never leaves a torn file).
pub fn save(path: &Path, opt: &AdamW, step: u64) -> Result<()> {
    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    for slot in &opt.slots {
        tensors.insert(format!("param.{}", slot.name), slot.var.as_tensor().clone());
        tensors.insert(format!("adam_m.{}", slot.name), slot.m.as_tensor().clone());
        tensors.insert(format!("adam_v.{}", slot.name), slot.v.as_tensor().clone());
    }
    tensors.insert(STEP_KEY.into(), Tensor::new(&[step as f64], &Device::Cpu)?);
    tensors.insert(ADAM_T_KEY.into(), Tensor::new(&[opt.t as f64], &Device::Cpu)?);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create checkpoint directory {}", dir.display()))?;
    }
    let tmp = path.with_extension("safetensors.tmp");
    candle_core::safetensors::save(&tensors, &tmp)
        .with_context(|| format!("cannot write checkpoint {}", tmp.display()))?;
    // On the disk before it replaces the last one, so that a node that loses power, or a
    // file server that restarts, never leaves the run with neither.
    match std::fs::File::open(&tmp).and_then(|file| file.sync_all()) {
        Ok(()) => {}
        // A file system that cannot flush a file (some FUSE mounts) keeps what it keeps.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOTSUP)) => {}
        Err(e) => return Err(e).with_context(|| format!("cannot flush checkpoint {} to disk", tmp.display())),
    }
    std::fs::rename(&tmp, path).with_context(|| format!("cannot move checkpoint into place at {}", path.display()))?;
    if let Some(dir) = path.parent() {
        // The rename itself, kept where the file system allows a directory to be flushed.
        let _ = std::fs::File::open(dir).and_then(|dir| dir.sync_all());
    }
    Ok(())
}

/// Sets the parameters of `opt` (not its moments, nor its step count) from the checkpoint at
/// `path`, another run's: where a fine-tuning run starts. Returns the step it was saved at.
pub fn load_parameters(path: &Path, opt: &AdamW, device: &Device) -> Result<u64> {
    let tensors = candle_core::safetensors::load(path, device)
        .with_context(|| format!("cannot read checkpoint {}", path.display()))?;
    for slot in &opt.slots {
        let key = format!("param.{}", slot.name);
        set_checked(path, &tensors, &key, &slot.var)?;
    }
    step_of(path, &tensors, STEP_KEY)
}

/// The scalar `key` of a checkpoint's tensors.
fn step_of(path: &Path, tensors: &HashMap<String, Tensor>, key: &str) -> Result<u64> {
    let t = tensors.get(key).with_context(|| format!("checkpoint {} lacks `{key}`", path.display()))?;
    Ok(t.to_dtype(DType::F64)?.to_vec1::<f64>()?.first().copied().unwrap_or(0.0) as u64)
}

/// Sets `var` to the checkpoint's tensor `key`, refusing a missing one or another shape.
fn set_checked(path: &Path, tensors: &HashMap<String, Tensor>, key: &str, var: &candle_core::Var) -> Result<()> {
    let Some(saved) = tensors.get(key) else {
        bail!("checkpoint {} has no `{key}`: it was made by a different model configuration", path.display())
    };
    if saved.shape() != var.shape() {
        bail!(
            "checkpoint {}: `{key}` has shape {:?}, the model expects {:?}",
            path.display(),
            saved.shape(),
            var.shape()
        );
    }
    var.set(&saved.to_dtype(var.dtype())?)?;
    Ok(())
}

/// Restores parameters and optimiser state from `path`; returns the step it was saved at.
pub fn load(path: &Path, opt: &mut AdamW, device: &Device) -> Result<u64> {
    let tensors = candle_core::safetensors::load(path, device)
        .with_context(|| format!("cannot read checkpoint {}", path.display()))?;
    let step = step_of(path, &tensors, STEP_KEY)?;
    opt.t = step_of(path, &tensors, ADAM_T_KEY)?;
    for slot in &opt.slots {
        for (prefix, var) in [("param", &slot.var), ("adam_m", &slot.m), ("adam_v", &slot.v)] {
            set_checked(path, &tensors, &format!("{prefix}.{}", slot.name), var)?;
        }
    }
    Ok(step)
}
