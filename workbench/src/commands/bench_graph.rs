//! What one forward pass of the benched model records: its op nodes and their bytes (candle's
//! backward visits every node and gives each a zero-filled gradient, so fewer, fused nodes
//! mean fewer passes over memory), and the matrix-product FLOPs of a training step counted off
//! those nodes (`kernels::flops`), for every layer family alike.

use anyhow::{bail, Result};
use candle_core::Tensor;
use kernels::flops::{forward_products, ProductFlops};
use std::collections::BTreeMap;

/// The recorded graph of one forward pass.
pub struct Graph {
    /// Op nodes (variables left out).
    pub op_nodes: usize,
    /// Bytes of the nodes' tensors, views included.
    pub bytes: usize,
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
        let bytes = by_shape.values().map(|(_, b)| b).sum();
        let mut largest: Vec<_> = by_shape.into_iter().collect();
        largest.sort_by_key(|(_, (_, bytes))| std::cmp::Reverse(*bytes));
        let largest = largest
            .iter()
            .take(4)
            .map(|(dims, (count, bytes))| format!("{dims:?} x{count} {:.0} MB", *bytes as f64 / 1e6))
            .collect();
        Graph { op_nodes: ops.len(), bytes, largest, products: forward_products(loss) }
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
            "graph {} op nodes per step, {:.0} MB of recorded tensors (views included); largest: {}",
            self.op_nodes,
            self.bytes as f64 / 1e6,
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

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

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
