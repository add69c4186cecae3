//! The parameter names of the published Hyper-SET and Transformer Sudoku models (the
//! authors' `sudoku/models.py`), and where each lands in this project's model.
//!
//! PyTorch's `nn.Linear(i, o).weight` is `[o, i]` and computes `x W^T`; the plugins keep
//! `[i, o]` matrices used as `x W`, hence the transposes. The step network's Linears are
//! candle `Linear`s, `[o, i]` as in PyTorch.

use super::source::Tensors;
use super::{Layout, Slot, Transform};
use anyhow::{bail, Result};
use std::collections::BTreeSet;

/// PyTorch's default `nn.RMSNorm` epsilon for float32 inputs (`torch.finfo(torch.float32).eps`),
/// which the published models were trained with.
pub const TORCH_RMS_EPS: f32 = f32::EPSILON;

/// Dropout on the published models' token + position embedding.
pub const EMBEDDING_DROPOUT: f64 = 0.1;

/// The layout of a published Sudoku model of `layer`, if there is one.
pub fn layout(layer: &str, task: &str) -> Option<Layout> {
    match (layer, task) {
        ("hyperset", "sudoku") => Some(Layout { slots: hyperset_slots, options: hyperset_options }),
        ("transformer", "sudoku") => Some(Layout { slots: transformer_slots, options: transformer_options }),
        _ => None,
    }
}

/// The pairs [`layout`] knows, for error messages.
pub const KNOWN: &str = "--layer hyperset --task sudoku, --layer transformer --task sudoku";

/// Embedding and head, shared by both models.
fn task_slots() -> Vec<Slot> {
    vec![
        Slot::new("tok_emb.weight", "task.tokens", Transform::AsIs),
        Slot::new("pos_emb", "task.positions", Transform::DropLeadingOne),
        Slot::new("ln_f.weight", "task.head_norm", Transform::AsIs),
        Slot::new("head.weight", "task.head", Transform::Transpose),
    ]
}

/// Seed 000's recurrent blocks (Eq. 9, 11) and the step network of Eq. 12, shared by all
/// blocks: `time_mlp.0` = (sinusoid, Linear, GELU, Linear), `time_mlp.1` = (GELU, Linear).
fn hyperset_slots(blocks: usize) -> Vec<Slot> {
    let mut slots = task_slots();
    for b in 0..blocks {
        let (from, to) = (format!("blocks.{b}"), format!("layer.block{b}"));
        slots.push(Slot::new(&format!("{from}.attn.qkv.weight"), &format!("{to}.w"), Transform::Transpose));
        slots.push(Slot::new(&format!("{from}.attn.ln1.weight"), &format!("{to}.attn_norm"), Transform::AsIs));
        slots.push(Slot::new(&format!("{from}.mlp.weight"), &format!("{to}.d_ff"), Transform::Transpose));
        slots.push(Slot::new(&format!("{from}.ln2.weight"), &format!("{to}.ff_norm"), Transform::AsIs));
    }
    for (from, to) in [("time_mlp.0.1", "time_in"), ("time_mlp.0.3", "time_out"), ("time_mlp.1.1", "out")] {
        for part in ["weight", "bias"] {
            slots.push(Slot::new(&format!("{from}.{part}"), &format!("layer.step.{to}.{part}"), Transform::AsIs));
        }
    }
    slots
}

/// Pre-norm Transformer blocks, iterated like Hyper-SET's.
fn transformer_slots(blocks: usize) -> Vec<Slot> {
    let mut slots = task_slots();
    for b in 0..blocks {
        let (from, to) = (format!("blocks.{b}"), format!("layer.block{b}"));
        let mut slot = |source: &str, target: &str, transform| {
            slots.push(Slot::new(&format!("{from}.{source}"), &format!("{to}.{target}"), transform))
        };
        slot("ln1.weight", "attn_norm", Transform::AsIs);
        slot("attn.query.weight", "w_q", Transform::Transpose);
        slot("attn.key.weight", "w_k", Transform::Transpose);
        slot("attn.value.weight", "w_v", Transform::Transpose);
        slot("attn.proj.weight", "w_o", Transform::Transpose);
        slot("ln2.weight", "mlp_norm", Transform::AsIs);
        slot("mlp.0.weight", "w_up", Transform::Transpose);
        slot("mlp.2.weight", "w_down", Transform::Transpose);
    }
    slots
}

/// The number of blocks (`blocks.<b>.*`) in the checkpoint.
pub fn block_count(tensors: &Tensors) -> usize {
    let indices: BTreeSet<usize> =
        tensors.keys().filter_map(|k| k.strip_prefix("blocks.")?.split('.').next()?.parse().ok()).collect();
    indices.len()
}

/// A tensor's dimension `dim`, or an error naming the tensor the checkpoint lacks.
fn dim(tensors: &Tensors, name: &str, dim: usize) -> Result<usize> {
    match tensors.get(name) {
        Some(t) => Ok(t.dims().get(dim).copied().unwrap_or(0)),
        None => bail!("the checkpoint has no `{name}`, which the published Sudoku models have"),
    }
}

/// `ratio` such that `width = ratio * d`, or an error.
fn ratio(width: usize, d: usize, name: &str) -> Result<usize> {
    if d == 0 || !width.is_multiple_of(d) {
        bail!("`{name}` is {width} wide, not a multiple of the token width {d}: not a published Sudoku model");
    }
    Ok(width / d)
}

/// Options the published models fix: their RMSNorm epsilon and embedding dropout.
fn trained_with() -> Vec<String> {
    vec![
        format!("layer.norm_eps={TORCH_RMS_EPS:e}"),
        format!("task.norm_eps={TORCH_RMS_EPS:e}"),
        format!("task.dropout={EMBEDDING_DROPOUT}"),
    ]
}

/// The Hyper-SET options read off the shapes (all but the depth), and the published model's
/// structure: bi-softmax attention, ReLU feedforward, the plain step network on `X0`.
fn hyperset_options(tensors: &Tensors) -> Result<Vec<String>> {
    let d = dim(tensors, "tok_emb.weight", 1)?;
    let head_dim = dim(tensors, "blocks.0.attn.ln1.weight", 0)?;
    let heads = ratio(d, head_dim, "tok_emb.weight")?;
    let ff_ratio = ratio(dim(tensors, "blocks.0.mlp.weight", 0)?, d, "blocks.0.mlp.weight")?;
    let time_dim = dim(tensors, "time_mlp.0.1.weight", 1)?;
    let mut options = vec![
        format!("layer.d={d}"),
        format!("layer.heads={heads}"),
        format!("layer.ff_ratio={ff_ratio}"),
        format!("layer.layers={}", block_count(tensors)),
        format!("layer.time_dim={time_dim}"),
        "layer.attention=bisoftmax".into(),
        "layer.feedforward=relu".into(),
        "layer.step_sizes=learned".into(),
        "layer.step_net=plain".into(),
        "layer.step_cond=x0".into(),
        "layer.norm_gain=true".into(),
        "layer.qkv_gains=false".into(),
        "layer.lora_rank=0".into(),
        "task.positions=cell".into(),
    ];
    options.extend(trained_with());
    Ok(options)
}

/// The Transformer options read off the shapes; the number of heads is not in the weights
/// (`heads=` on the command line when it differs from the default).
fn transformer_options(tensors: &Tensors) -> Result<Vec<String>> {
    let d = dim(tensors, "tok_emb.weight", 1)?;
    let ff_ratio = ratio(dim(tensors, "blocks.0.mlp.0.weight", 0)?, d, "blocks.0.mlp.0.weight")?;
    let mut options = vec![
        format!("layer.d={d}"),
        format!("layer.ff_ratio={ff_ratio}"),
        format!("layer.layers={}", block_count(tensors)),
        "layer.shared_qkv=false".into(),
        "layer.attention_sign=standard".into(),
        "task.positions=cell".into(),
    ];
    options.extend(trained_with());
    Ok(options)
}
