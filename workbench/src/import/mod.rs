//! Importing published PyTorch weights: which tensor of the checkpoint fills which parameter
//! of the project's model ([`Layout`], one per published model), with every name and shape
//! checked. `ops::import` builds the model, fills it and stores the run.

pub mod published_sudoku;
pub mod source;

use crate::params::Params;
use anyhow::{bail, Result};
use candle_core::Tensor;
use source::Tensors;
use std::collections::{BTreeMap, BTreeSet};

/// How a checkpoint tensor becomes the parameter's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transform {
    AsIs,
    /// A 2-D matrix transposed (PyTorch's `Linear` weight `[out, in]` to `[in, out]`).
    Transpose,
    /// A leading dimension of size 1 removed (`pos_emb [1, N, d]` to `[N, d]`).
    DropLeadingOne,
}

/// One checkpoint tensor and the parameter it fills.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub source: String,
    pub target: String,
    pub transform: Transform,
}

impl Slot {
    pub fn new(source: &str, target: &str, transform: Transform) -> Self {
        Slot { source: source.into(), target: target.into(), transform }
    }
}

/// A published model's names: its slots for a number of blocks, and the run options read off
/// its tensors (sizes) or fixed by it (structure, epsilon, dropout), as `key=value` overrides.
#[derive(Clone, Copy)]
pub struct Layout {
    pub slots: fn(blocks: usize) -> Vec<Slot>,
    pub options: fn(&Tensors) -> Result<Vec<String>>,
}

impl Transform {
    fn apply(self, t: &Tensor) -> Result<Tensor> {
        Ok(match self {
            Transform::AsIs => t.clone(),
            Transform::Transpose if t.rank() == 2 => t.t()?.contiguous()?,
            Transform::Transpose => bail!("expected a matrix, found shape {:?}", t.dims()),
            Transform::DropLeadingOne if t.dims().first() == Some(&1) => t.squeeze(0)?,
            Transform::DropLeadingOne => bail!("expected a leading dimension of 1, found shape {:?}", t.dims()),
        })
    }
}

/// Sets every parameter of `params` from the checkpoint through `slots`. Refused, naming
/// them, when the checkpoint holds a tensor no slot takes, lacks a tensor a slot needs, a
/// parameter is left without a slot (the configuration built a different model), or a shape
/// differs. Returns the number of values set.
pub fn fill(params: &Params, tensors: &Tensors, slots: &[Slot]) -> Result<usize> {
    let by_source: BTreeMap<&str, &Slot> = slots.iter().map(|s| (s.source.as_str(), s)).collect();
    let unknown: Vec<&String> = tensors.keys().filter(|k| !by_source.contains_key(k.as_str())).collect();
    if !unknown.is_empty() {
        bail!(
            "the checkpoint holds tensors the published layout does not have: {} (a different model, or \
             extra state saved beside the weights)",
            list(unknown.iter().map(|s| s.as_str()))
        );
    }
    let missing: Vec<&Slot> = slots.iter().filter(|s| !tensors.contains_key(&s.source)).collect();
    if !missing.is_empty() {
        bail!(
            "the checkpoint lacks {} (for {})",
            list(missing.iter().map(|s| s.source.as_str())),
            list(missing.iter().map(|s| s.target.as_str()))
        );
    }
    let vars: BTreeMap<String, candle_core::Var> = params.vars().into_iter().collect();
    let targets: BTreeSet<&str> = slots.iter().map(|s| s.target.as_str()).collect();
    let unfilled: Vec<&str> = vars.keys().map(|k| k.as_str()).filter(|k| !targets.contains(k)).collect();
    if !unfilled.is_empty() {
        bail!(
            "the configured model has parameters the checkpoint does not fill: {}; an option makes a different \
             model than the published one (leave the layer's structure options at what the import sets)",
            list(unfilled.iter().copied())
        );
    }
    let mut set = 0;
    for slot in slots {
        let Some(var) = vars.get(&slot.target) else {
            bail!("the configured model has no parameter `{}` for `{}`", slot.target, slot.source);
        };
        let value =
            slot.transform.apply(&tensors[&slot.source]).map_err(|e| anyhow::anyhow!("`{}`: {e}", slot.source))?;
        if value.dims() != var.dims() {
            bail!(
                "`{}` has shape {:?}, which gives {:?} for `{}`, but the configured model has {:?}: give the \
                 options the checkpoint was trained with (e.g. iterations, heads)",
                slot.source,
                tensors[&slot.source].dims(),
                value.dims(),
                slot.target,
                var.dims()
            );
        }
        var.set(&value.to_dtype(var.dtype())?)?;
        set += value.elem_count();
    }
    Ok(set)
}

/// At most eight names, then how many more.
fn list<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.collect();
    let shown: Vec<String> = names.iter().take(8).map(|n| format!("`{n}`")).collect();
    match names.len() {
        n if n > 8 => format!("{} and {} more", shown.join(", "), n - 8),
        _ => shown.join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};
    use candle_nn::Init;

    fn params_with(shapes: &[(&str, (usize, usize))]) -> Params {
        let params = Params::new(0);
        let vb = params.var_builder(DType::F32, &Device::Cpu);
        for (name, shape) in shapes {
            vb.get_with_hints(*shape, name, Init::Const(0.0)).unwrap();
        }
        params
    }

    fn tensors(entries: &[(&str, Vec<f32>, (usize, usize))]) -> Tensors {
        entries
            .iter()
            .map(|(n, v, s)| (n.to_string(), Tensor::from_vec(v.clone(), *s, &Device::Cpu).unwrap()))
            .collect()
    }

    #[test]
    fn a_transposed_matrix_lands_transposed() -> Result<()> {
        let params = params_with(&[("layer.w", (2, 3))]);
        let source = tensors(&[("qkv.weight", vec![1., 2., 3., 4., 5., 6.], (3, 2))]);
        let n = fill(&params, &source, &[Slot::new("qkv.weight", "layer.w", Transform::Transpose)])?;
        assert_eq!(n, 6);
        let value: Vec<Vec<f32>> = params.vars()[0].1.as_tensor().to_vec2()?;
        assert_eq!(value, vec![vec![1., 3., 5.], vec![2., 4., 6.]]);
        Ok(())
    }

    #[test]
    fn unknown_missing_unfilled_and_misshapen_tensors_are_named() {
        let slots = [Slot::new("a", "layer.a", Transform::AsIs)];
        let params = params_with(&[("layer.a", (1, 2))]);
        let extra = tensors(&[("a", vec![1., 2.], (1, 2)), ("b", vec![1.], (1, 1))]);
        assert!(fill(&params, &extra, &slots).unwrap_err().to_string().contains("`b`"));
        let empty = Tensors::new();
        assert!(fill(&params, &empty, &slots).unwrap_err().to_string().contains("lacks `a` (for `layer.a`)"));
        let more = params_with(&[("layer.a", (1, 2)), ("layer.z", (1, 1))]);
        let right = tensors(&[("a", vec![1., 2.], (1, 2))]);
        assert!(fill(&more, &right, &slots).unwrap_err().to_string().contains("`layer.z`"));
        let wide = tensors(&[("a", vec![1., 2., 3.], (1, 3))]);
        let error = fill(&params, &wide, &slots).unwrap_err().to_string();
        assert!(error.contains("[1, 3]") && error.contains("[1, 2]"), "{error}");
    }
}
