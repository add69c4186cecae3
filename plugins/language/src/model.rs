//! Embedding, head, loss and metrics of causal language modelling.
//!
//! - Embedding: `x_i = s * E[token_i] + P[i]` with a learnable token table `E` (`[V, d]`) and
//!   either a learnable position table `P` (`[N, d]`, `s = 1`) or the fixed sinusoids of
//!   Vaswani et al. (2017, §3.5), `P[i, 2k] = sin(i / 10000^(2k/d))`,
//!   `P[i, 2k+1] = cos(i / 10000^(2k/d))`, with the token scale `s = sqrt(d)` of their §3.4
//!   so tokens are not drowned by the unit-amplitude sinusoids.
//! - Head: `logits = RMSNorm(h) W` with `W` `[d, V]`, or `W = E^T` with `tie_embeddings`.
//! - Loss: the mean cross-entropy over all `B * N` target tokens, in nats.
//!
//! # Metrics and how they merge
//!
//! The host sums each metric's `(sum, count)` over the evaluation batches and reports
//! `sum / count`. `loss` is `(total nats, tokens)`, `bpb` is `(total nats / ln 2, bytes the
//! target tokens stand for)` (for byte tokens exactly `loss / ln 2`), `acc` is `(correct,
//! tokens)`: all exact whatever the batching.
//!
//! Perplexity is not a mean, `exp(mean loss) != mean of exp(batch loss)`, so each batch's
//! `ppl` entry is a telescoping share: after batches `1..k` of a pass with running totals
//! `nats_k` and `tokens_k`, batch `k` reports the sum `exp(nats_k / tokens_k) * tokens_k`
//! minus what batches `1..k-1` reported, over its own tokens. The merged tally then holds
//! exactly `exp(total nats / total tokens) * total tokens` over all tokens, and its mean is
//! `exp(loss)` of the whole evaluation set. This relies on the host evaluating one pass's
//! batches in order and merging them; a pass starts over when a batch of the current pass
//! (recognised by its target tensor) comes back, as when the host evaluates again.

use kernels::weighted_cross_entropy;
use plugin_api::candle::{DType, Device, Tensor, TensorId, D};
use plugin_api::candle_nn::{ops::log_softmax, Init, VarBuilder};
use plugin_api::{Batch, MetricTally, PluginError, Result, TaskModel};
use std::collections::HashSet;
use std::f64::consts::LN_2;
use std::sync::Mutex;

/// Which positional embedding to add to the tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Positions {
    /// A learnable `[N, d]` table.
    Learned,
    /// Fixed sinusoids (Vaswani et al. 2017, §3.5).
    Sinusoidal,
}

/// The configurable parts of the model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelOptions {
    /// Positional embedding.
    pub positions: Positions,
    /// Output projection = token embedding transposed.
    pub tie_embeddings: bool,
    /// Standard deviation of the normal init of embeddings and head.
    pub init_std: f64,
}

/// Token and position embedding, RMSNorm + linear head, and the running perplexity pass.
pub struct LanguageModel {
    tokens: Tensor,
    token_scale: f64,
    positions: Tensor,
    head_norm: Tensor,
    head: Option<Tensor>,
    token_bytes: Vec<f64>,
    perplexity: Mutex<PerplexityPass>,
}

/// The fixed sinusoidal table `[n, d]`: `sin(i w_k)` in column `2k`, `cos(i w_k)` in column
/// `2k + 1`, with `w_k = 10000^(-2k/d)` (Vaswani et al. 2017, §3.5).
pub fn sinusoidal_positions(n: usize, d: usize, dtype: DType, device: &Device) -> Result<Tensor> {
    let mut values = Vec::with_capacity(n * d);
    for i in 0..n {
        for j in 0..d {
            let k = (j / 2) as f64;
            let angle = i as f64 * 10_000f64.powf(-2.0 * k / d as f64);
            values.push(if j % 2 == 0 { angle.sin() } else { angle.cos() } as f32);
        }
    }
    Ok(Tensor::from_vec(values, (n, d), device)?.to_dtype(dtype)?)
}

impl LanguageModel {
    /// The model for tokens of a `vocab_size` vocabulary, windows of `seq_len`, width `width`;
    /// `token_bytes[id]` is the number of bytes token `id` stands for.
    pub fn new(
        vb: VarBuilder,
        width: usize,
        vocab_size: usize,
        seq_len: usize,
        options: &ModelOptions,
        token_bytes: &[u32],
    ) -> Result<Self> {
        if token_bytes.len() != vocab_size {
            return Err(PluginError::Other(format!(
                "{} token lengths for a vocabulary of {vocab_size}",
                token_bytes.len()
            )));
        }
        let init = Init::Randn { mean: 0.0, stdev: options.init_std };
        let tokens = vb.get_with_hints((vocab_size, width), "tokens", init)?;
        let (positions, token_scale) = match options.positions {
            Positions::Learned => (vb.get_with_hints((seq_len, width), "positions", init)?, 1.0),
            Positions::Sinusoidal => {
                (sinusoidal_positions(seq_len, width, vb.dtype(), vb.device())?, (width as f64).sqrt())
            }
        };
        let head = match options.tie_embeddings {
            true => None,
            false => Some(vb.get_with_hints((width, vocab_size), "head", init)?),
        };
        Ok(LanguageModel {
            tokens,
            token_scale,
            positions,
            head_norm: vb.get_with_hints(width, "head_norm", Init::Const(1.0))?,
            head,
            token_bytes: token_bytes.iter().map(|&b| b as f64).collect(),
            perplexity: Mutex::new(PerplexityPass::default()),
        })
    }

    /// Next-token logits `[B * N, V]` of the layer output `h` (`[B, N, d]`).
    fn logits(&self, h: &Tensor) -> Result<Tensor> {
        let (b, n, _) = h.dims3()?;
        // The fused ops (plugin-api/kernels): one pass each, forward and backward; the tied
        // head multiplies by the token table's transpose with its gradient in the table's layout.
        let normed = kernels::rms_norm(h, Some(&self.head_norm), 1e-6)?;
        let logits = match &self.head {
            Some(head) => kernels::linear(&normed, head, None)?,
            None => kernels::linear_transposed(&normed, &self.tokens, None)?,
        };
        Ok(logits.reshape((b * n, ()))?)
    }
}

impl TaskModel for LanguageModel {
    fn embed(&self, batch: &Batch, _train: bool) -> Result<Tensor> {
        let (b, n) = batch.inputs.dims2()?;
        let max_len = self.positions.dim(0)?;
        if n > max_len {
            return Err(PluginError::Other(format!("a batch of {n} tokens per example exceeds seq_len = {max_len}")));
        }
        let ids = batch.inputs.flatten_all()?;
        let tokens = self.tokens.index_select(&ids, 0)?.reshape((b, n, ()))?;
        let tokens = if self.token_scale == 1.0 { tokens } else { (tokens * self.token_scale)? };
        Ok(tokens.broadcast_add(&self.positions.narrow(0, 0, n)?)?)
    }

    fn loss(&self, h: &Tensor, batch: &Batch) -> Result<Tensor> {
        Ok(weighted_cross_entropy(&self.logits(h)?, &batch.targets.flatten_all()?, None)?)
    }

    fn evaluate(&self, h: &Tensor, batch: &Batch) -> Result<MetricTally> {
        let logits = self.logits(h)?;
        let targets = batch.targets.flatten_all()?;
        let nll: Vec<f32> =
            log_softmax(&logits, D::Minus1)?.gather(&targets.unsqueeze(1)?, 1)?.neg()?.flatten_all()?.to_vec1()?;
        let predicted: Vec<u32> = logits.argmax(D::Minus1)?.to_vec1()?;
        let targets: Vec<u32> = targets.to_vec1()?;
        let nats: f64 = nll.iter().map(|&x| x as f64).sum();
        let tokens = targets.len() as f64;
        let bytes: f64 = targets.iter().map(|&t| self.token_bytes[t as usize]).sum();
        let correct = predicted.iter().zip(&targets).filter(|(p, t)| p == t).count() as f64;
        let ppl_share = self
            .perplexity
            .lock()
            .map_err(|_| PluginError::Other("the perplexity totals were poisoned by a panic".into()))?
            .add(batch.targets.id(), nats, tokens);
        let mut tally = MetricTally::default();
        tally.add("loss", nats, tokens);
        tally.add("bpb", nats / LN_2, bytes);
        tally.add("ppl", ppl_share, tokens);
        tally.add("acc", correct, tokens);
        Ok(tally)
    }
}

/// Running totals of the evaluation pass in progress (see the module docs).
#[derive(Default)]
pub struct PerplexityPass {
    seen: HashSet<TensorId>,
    nats: f64,
    tokens: f64,
    reported: f64,
}

impl PerplexityPass {
    /// Adds a batch (`nats` over `tokens`) and returns its `ppl` sum: the growth of
    /// `exp(mean nats) * tokens` over the pass so far. A batch already seen starts a new pass.
    pub fn add(&mut self, batch: TensorId, nats: f64, tokens: f64) -> f64 {
        if !self.seen.insert(batch) {
            *self = PerplexityPass::default();
            self.seen.insert(batch);
        }
        self.nats += nats;
        self.tokens += tokens;
        let total = if self.tokens > 0.0 { (self.nats / self.tokens).exp() * self.tokens } else { 0.0 };
        let share = total - self.reported;
        self.reported = total;
        share
    }
}
