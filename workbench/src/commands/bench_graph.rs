//! What one forward pass of the benched model records: its op nodes and their bytes (candle's
//! backward visits every node and gives each a zero-filled gradient, so fewer, fused nodes
//! mean fewer passes over memory), and the matrix-product FLOPs of a training step counted off
//! those nodes (`kernels::flops`), for every layer family alike.

use anyhow::{bail, Result};
use candle_core::op::Op;
use candle_core::Tensor;
use kernels::flops::{forward_products, ProductFlops};
use std::collections::BTreeMap;

/// The recorded graph of one forward pass.
pub struct Graph {
    /// Op nodes (variables left out).
    pub op_nodes: usize,
    /// Bytes of the nodes' tensors, views included, and of what fused ops keep inside
    /// themselves for the backward.
    pub bytes: usize,
    /// The part of `bytes` kept inside fused ops (an attention's weights, say).
    pub kept_in_ops: usize,
    /// The four shapes holding the most bytes: `[dims] xCOUNT MB`.
    pub largest: Vec<String>,
    /// The matrix products of the forward pass.
    pub products: ProductFlops,
}

impl Graph {
    /// Reads the graph that recorded `loss`.
    pub fn of(loss: &Tensor) -> Self {
        let nodes = loss.sorted_nodes();
        let ops: Vec<_> = nodes.iter().filter(|t| !t.is_variable()).collect();
        let mut by_shape: BTreeMap<Vec<usize>, (usize, usize)> = BTreeMap::new();
        for t in &ops {
            let entry = by_shape.entry(t.dims().to_vec()).or_default();
            entry.0 += 1;
            entry.1 += t.elem_count() * t.dtype().size_in_bytes();
        }
        let kept_in_ops = ops.iter().map(|t| kept_in_op(t)).sum::<usize>();
        let bytes = by_shape.values().map(|(_, b)| b).sum::<usize>() + kept_in_ops;
        let mut largest: Vec<_> = by_shape.into_iter().collect();
        largest.sort_by_key(|(_, (_, bytes))| std::cmp::Reverse(*bytes));
        let largest = largest
            .iter()
            .take(4)
            .map(|(dims, (count, bytes))| format!("{dims:?} x{count} {:.0} MB", *bytes as f64 / 1e6))
            .collect();
        Graph { op_nodes: ops.len(), bytes, kept_in_ops, largest, products: forward_products(loss) }
    }

    /// Model FLOPs of one training step: three times the forward's products.
    pub fn step_flops(&self) -> u64 {
        self.products.training_step()
    }

    /// Refuses `--peak` for a graph without a counted product: its step's GFLOP/s, and so its
    /// share of the product peak, would read 0 whatever the step did. `model` names the layer
    /// and task in the message.
    pub fn check_peak_readable(&self, model: &str) -> Result<()> {
        if self.step_flops() == 0 {
            bail!(
                "--peak reads the step's GFLOP/s against the product peak, and no matrix product of {model} was counted in its graph: drop --peak"
            );
        }
        Ok(())
    }

    /// The report line on the nodes.
    pub fn nodes_line(&self) -> String {
        format!(
            "graph {} op nodes per step, {:.0} MB of recorded tensors (views included; {:.0} MB of them kept inside fused ops); largest: {}",
            self.op_nodes,
            self.bytes as f64 / 1e6,
            self.kept_in_ops as f64 / 1e6,
            self.largest.join(", ")
        )
    }

    /// The report line on the achieved FLOP rate at `step_s` seconds a step.
    pub fn flops_line(&self, step_s: f64) -> String {
        let uncounted = match self.products.uncounted.is_empty() {
            true => String::new(),
            false => {
                let names: Vec<_> = self.products.uncounted.iter().copied().collect();
                format!("; not counted: {}", names.join(", "))
            }
        };
        format!(
            "achieved {:.1} GFLOP/s ({:.2} GFLOP per step: the {} matrix products of the forward, x3{uncounted})",
            self.step_flops() as f64 / step_s / 1e9,
            self.step_flops() as f64 / 1e9,
            self.products.nodes
        )
    }
}

/// The bytes a fused op (a custom op) keeps inside itself for the backward.
fn kept_in_op(node: &Tensor) -> usize {
    match node.op() {
        Some(Op::CustomOp1(_, op)) => op.kept_bytes(),
        Some(Op::CustomOp2(_, _, op)) => op.kept_bytes(),
        Some(Op::CustomOp3(_, _, _, op)) => op.kept_bytes(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    #[test]
    fn the_recorded_bytes_count_what_fused_ops_keep_inside_themselves() -> Result<()> {
        // Hyper-SET's feedforward as one op keeps its hidden units `x D`, [5, 8] f32, inside.
        let x = Var::ones((5, 4), candle_core::DType::F32, &Device::Cpu)?;
        let d = Var::ones((4, 8), candle_core::DType::F32, &Device::Cpu)?;
        let y = kernels::normed_feedforward(x.as_tensor(), d.as_tensor(), None, 1e-6, kernels::Activation::Relu)?;
        let loss = y.sum_all()?;
        let graph = Graph::of(&loss);
        assert_eq!(graph.kept_in_ops, 5 * 8 * 4);
        // The op's result [5, 4] and the sum's nodes, f32, and the kept units.
        let nodes: usize = loss.sorted_nodes().iter().filter(|t| !t.is_variable()).map(|t| t.elem_count() * 4).sum();
        assert!(nodes >= 5 * 4 * 4);
        assert_eq!(graph.bytes, nodes + 5 * 8 * 4);
        assert!(
            graph.nodes_line().contains("(views included; 0 MB of them kept inside fused ops)"),
            "{}",
            graph.nodes_line()
        );
        Ok(())
    }

    #[test]
    fn the_peak_is_refused_only_for_a_graph_without_products() -> Result<()> {
        let x = Var::ones((4, 3), candle_core::DType::F32, &Device::Cpu)?;
        let element_wise = Graph::of(&(x.as_tensor() * 2.0)?.exp()?.sum_all()?);
        assert_eq!(element_wise.step_flops(), 0);
        let message = element_wise.check_peak_readable("`mlp` on `toy`").unwrap_err().to_string();
        assert!(
            message.contains("no matrix product of `mlp` on `toy`") && message.contains("drop --peak"),
            "{message}"
        );
        let product = Graph::of(&x.as_tensor().matmul(&x.as_tensor().t()?)?.sum_all()?);
        // [4, 3] x [3, 4]: 48 multiply-adds, 96 FLOPs forward, three times that a step.
        assert_eq!(product.step_flops(), 3 * 96);
        product.check_peak_readable("`mlp` on `toy`")?;
        Ok(())
    }
}
