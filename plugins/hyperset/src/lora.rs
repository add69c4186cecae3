//! Depth-wise LoRA (seed 000, §5.5 and Appendix G.2; Table 5).
//!
//! Every iteration `t` of a block gets its own low-rank deltas on the shared weights:
//! `W_t = W + s A_t B_t` and `D_t = D + s A'_t B'_t`, with `A in R^{d x r}`,
//! `B in R^{r x d}` (`R^{r x M}` for `D`), both initialised `N(0, 0.02^2)` and trained with
//! the base weights from scratch; `s` is the scaling factor (4 in the paper). The effective
//! weights replace `W` and `D` everywhere in the iteration, in the projections and in their
//! transposes (notes-hyperset.md §2.3). Applying them to both `W` and `D` reproduces
//! Table 5's counts: `+24,576 r` at `d = M = 512` and 12 iterations.
//!
//! Iterations beyond the trained depth (test-time extrapolation) are not covered by the
//! seeds (UNSURE); they reuse the block's last adapter.

use plugin_api::candle::Tensor;
use plugin_api::candle_nn::{Init, VarBuilder};
use plugin_api::Result;

/// Standard deviation of the `N(0, 0.02^2)` initialisation of `A` and `B` (Appendix G.2).
pub const LORA_INIT_STD: f64 = 0.02;

/// One low-rank delta `s A B` on a `[rows, cols]` weight.
struct LowRank {
    a: Tensor,
    b: Tensor,
}

impl LowRank {
    fn new(rows: usize, cols: usize, rank: usize, vb: VarBuilder) -> Result<Self> {
        let init = Init::Randn { mean: 0.0, stdev: LORA_INIT_STD };
        Ok(LowRank { a: vb.get_with_hints((rows, rank), "a", init)?, b: vb.get_with_hints((rank, cols), "b", init)? })
    }

    /// `base + scale A B`.
    fn apply(&self, base: &Tensor, scale: f64) -> Result<Tensor> {
        Ok(base.add(&(self.a.matmul(&self.b)? * scale)?)?)
    }
}

/// The adapters of one block: one pair (on `W` and on `D`) per iteration the block runs.
pub struct DepthwiseLora {
    on_w: Vec<LowRank>,
    on_d: Vec<LowRank>,
    scale: f64,
}

impl DepthwiseLora {
    /// Adapters of rank `rank` for `iterations` iterations on `W` (`[d, d]`) and `D`
    /// (`[d, ff_width]`), named `lora{t}.w.{a,b}` and `lora{t}.d.{a,b}` (`t` from 1).
    pub fn new(d: usize, ff_width: usize, rank: usize, iterations: usize, scale: f64, vb: VarBuilder) -> Result<Self> {
        let mut on_w = Vec::with_capacity(iterations);
        let mut on_d = Vec::with_capacity(iterations);
        for t in 1..=iterations {
            let vb = vb.pp(format!("lora{t}"));
            on_w.push(LowRank::new(d, d, rank, vb.pp("w"))?);
            on_d.push(LowRank::new(d, ff_width, rank, vb.pp("d"))?);
        }
        Ok(DepthwiseLora { on_w, on_d, scale })
    }

    /// `(W_t, D_t)` for the block's iteration `t` (1-based; later iterations reuse the last adapter).
    pub fn apply(&self, t: usize, w: &Tensor, d_ff: &Tensor) -> Result<(Tensor, Tensor)> {
        let i = t.clamp(1, self.on_w.len()) - 1;
        Ok((self.on_w[i].apply(w, self.scale)?, self.on_d[i].apply(d_ff, self.scale)?))
    }
}
