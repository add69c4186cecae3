//! Reading a checkpoint's tensors: safetensors, or PyTorch's pickled state dicts (`.pth`,
//! `.pt`, `.bin`) through candle's reader (`candle_core::pickle`).

use anyhow::{anyhow, bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use std::collections::BTreeMap;
use std::path::Path;

/// A checkpoint's tensors by name, as f32 on the CPU.
pub type Tensors = BTreeMap<String, Tensor>;

/// Keys under which training scripts often nest the state dict in a `.pth` file.
const NESTED_KEYS: [&str; 3] = ["state_dict", "model", "model_state_dict"];

/// Reads every tensor of `path`, by its extension.
pub fn read(path: &Path) -> Result<Tensors> {
    if !path.is_file() {
        bail!("{} does not exist or is not a file", path.display());
    }
    let extension = path.extension().and_then(|e| e.to_str()).unwrap_or_default().to_ascii_lowercase();
    let tensors: Vec<(String, Tensor)> = match extension.as_str() {
        "safetensors" => candle_core::safetensors::load(path, &Device::Cpu)
            .with_context(|| format!("cannot read {} as safetensors", path.display()))?
            .into_iter()
            .collect(),
        "pth" | "pt" | "bin" => read_pickle(path)?,
        other => bail!(
            "{}: unknown checkpoint format `.{other}`; give a .safetensors file or a PyTorch state dict \
             saved with torch.save (.pth, .pt, .bin)",
            path.display()
        ),
    };
    if tensors.is_empty() {
        bail!("{} holds no tensors", path.display());
    }
    tensors
        .into_iter()
        .map(|(name, t)| {
            let t = t.to_dtype(DType::F32).with_context(|| format!("{}: tensor `{name}`", path.display()))?;
            Ok((name, t))
        })
        .collect()
}

/// The tensors of a pickled state dict, at the top level or under one of [`NESTED_KEYS`].
fn read_pickle(path: &Path) -> Result<Vec<(String, Tensor)>> {
    let read = |key: Option<&str>| {
        candle_core::pickle::read_all_with_key(path, key)
            .map_err(|e| anyhow!("cannot read {} as a PyTorch checkpoint: {e}", path.display()))
    };
    let top = read(None)?;
    if !top.is_empty() {
        return Ok(top);
    }
    for key in NESTED_KEYS {
        if let Ok(nested) = read(Some(key)) {
            if !nested.is_empty() {
                return Ok(nested);
            }
        }
    }
    Ok(Vec::new())
}
