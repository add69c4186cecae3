//! A stand-in layer for the task plugins' learning tests.

use plugin_api::candle::{Tensor, D};
use plugin_api::candle_nn::{Init, VarBuilder};

/// One block of single-head self-attention and a ReLU feedforward, each with a residual:
/// `h = y + relu(y W1) W2` with `y = x + softmax(q k^T / sqrt(d)) v`. A task plugin cannot
/// depend on a layer plugin, so its learning tests put this between embedding and head: it
/// mixes tokens, which a task whose head reads one token (or needs context) requires.
pub struct TinyBlock {
    query: Tensor,
    key: Tensor,
    value: Tensor,
    up: Tensor,
    down: Tensor,
}

impl TinyBlock {
    /// A block of width `width` whose weights are drawn from `N(0, 1 / fan_in)` by `vb`
    /// (named `query`, `key`, `value`, `up`, `down`).
    pub fn new(vb: &VarBuilder, width: usize) -> Self {
        let get = |shape: (usize, usize), name: &str| {
            let init = Init::Randn { mean: 0.0, stdev: 1.0 / (shape.0 as f64).sqrt() };
            vb.get_with_hints(shape, name, init).unwrap()
        };
        TinyBlock {
            query: get((width, width), "query"),
            key: get((width, width), "key"),
            value: get((width, width), "value"),
            up: get((width, 2 * width), "up"),
            down: get((2 * width, width), "down"),
        }
    }

    /// The block applied to tokens `x` of shape `[B, N, width]`.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let project = |w: &Tensor| x.broadcast_matmul(w).unwrap();
        let (q, k, v) = (project(&self.query), project(&self.key), project(&self.value));
        let scale = 1.0 / (x.dim(2).unwrap() as f64).sqrt();
        let scores = (q.matmul(&k.transpose(1, 2).unwrap()).unwrap() * scale).unwrap();
        let attention = plugin_api::ops::softmax(&scores, D::Minus1).unwrap();
        let y = (x + attention.matmul(&v).unwrap()).unwrap();
        let hidden = y.broadcast_matmul(&self.up).unwrap().relu().unwrap();
        (&y + hidden.broadcast_matmul(&self.down).unwrap()).unwrap()
    }
}
