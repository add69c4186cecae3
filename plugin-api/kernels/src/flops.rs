//! The matrix-product FLOPs of a recorded forward graph, read off its op nodes: candle's
//! products from their operands' shapes, the fused ops of this crate from their own count
//! (`product_flops`, a method the vendored candle adds to its custom-op traits), which each op
//! keeps equal to what its composition of candle products would do (`tests.rs` checks every
//! one against its composition). A training step is then counted as three forward passes, the
//! usual convention for model FLOPs: the backward's two products per forward product, and no
//! recomputation.
//!
//! Counting the graph instead of a formula per layer gives every layer family a figure, and a
//! new plugin one without writing anything.

use candle_core::op::Op;
use candle_core::Tensor;
use std::collections::BTreeSet;

/// The products of one forward pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProductFlops {
    /// Floating-point operations, two per multiply-add.
    pub flops: u64,
    /// Op nodes that do matrix products (candle's `matmul` or a fused op with products).
    pub nodes: usize,
    /// Ops with products this count does not know how to count (convolutions), by name.
    pub uncounted: BTreeSet<&'static str>,
}

impl ProductFlops {
    /// Model FLOPs of one training step: the forward, and two products in the backward for
    /// each of its products.
    pub fn training_step(&self) -> u64 {
        3 * self.flops
    }
}

/// The matrix-product FLOPs of the forward pass that recorded `root`, over the op nodes its
/// backward would visit.
pub fn forward_products(root: &Tensor) -> ProductFlops {
    let mut count = ProductFlops::default();
    for node in root.sorted_nodes() {
        let flops = match node.op() {
            Some(Op::Matmul(a, _)) => product(a.shape(), node.shape()),
            Some(Op::CustomOp1(a, op)) => op.product_flops(a.shape(), node.shape()),
            Some(Op::CustomOp2(a, b, op)) => op.product_flops(a.shape(), b.shape(), node.shape()),
            Some(Op::CustomOp3(a, b, c, op)) => op.product_flops(a.shape(), b.shape(), c.shape(), node.shape()),
            Some(Op::Conv1D { .. } | Op::ConvTranspose1D { .. }) => {
                count.uncounted.insert("conv1d");
                0
            }
            Some(Op::Conv2D { .. } | Op::ConvTranspose2D { .. }) => {
                count.uncounted.insert("conv2d");
                0
            }
            _ => 0,
        };
        if flops > 0 {
            count.flops += flops;
            count.nodes += 1;
        }
    }
    count
}

/// FLOPs of the product of a left operand `a` (`[..., m, k]`) giving `res` (`[..., m, n]`):
/// two per multiply-add, `k` per output entry.
pub(crate) fn product(a: &candle_core::Shape, res: &candle_core::Shape) -> u64 {
    2 * res.elem_count() as u64 * a.dims().last().copied().unwrap_or(0) as u64
}

/// FLOPs of `products` per-head products over all token pairs for an attention op whose
/// output is `res` (`[B, N, W]`, the heads merged): each is `2 B N N W`, whatever the number
/// of heads (`H` heads of width `p = W / H`: `2 B H N N p`). Causal ops count the whole square,
/// as the composition's products compute it.
pub(crate) fn token_pair_products(res: &candle_core::Shape, products: u64) -> u64 {
    match res.dims() {
        &[b, n, w] => products * 2 * (b * n * n * w) as u64,
        _ => 0,
    }
}
