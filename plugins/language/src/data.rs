//! The corpus of a run, its split and its batches of shifted windows.

use crate::model::{LanguageModel, ModelOptions, Positions};
use datasets::seeding::item_seed;
use datasets::text::{generate_text, read_text_file, TokenizedCorpus, TokenizerKind};
use plugin_api::candle::{Device, Tensor};
use plugin_api::candle_nn::VarBuilder;
use plugin_api::{config_error, Batch, Config, Footprint, MetricSpec, PluginError, Result, Task, TaskInfo, TaskModel};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;

/// The tokenized corpus and everything needed to batch it and build the model.
pub struct LanguageData {
    corpus: TokenizedCorpus,
    token_bytes: Vec<u32>,
    seq_len: usize,
    seed: u64,
    options: ModelOptions,
}

/// Where the text comes from, as configured.
enum Source<'c> {
    Generated { seed: u64, bytes: usize },
    File(&'c str),
}

impl<'c> Source<'c> {
    /// Reads the source choice and refuses `path` without `corpus=file` and the reverse.
    fn from_config(cfg: &'c Config) -> Result<Self> {
        let path = cfg.str("path")?.trim();
        match (cfg.str("corpus")?, path.is_empty()) {
            ("file", true) => {
                Err(config_error("corpus=file needs path=FILE, the text file to model; or use corpus=generated"))
            }
            ("file", false) => Ok(Source::File(path)),
            (_, false) => Err(config_error(format!(
                "path={path} is set but corpus=generated; add corpus=file to model that file, or drop path"
            ))),
            (_, true) => {
                Ok(Source::Generated { seed: cfg.i64("corpus_seed")? as u64, bytes: cfg.usize("corpus_bytes")? })
            }
        }
    }

    /// Bytes of text, an upper bound known without reading it (a gzip file's size times the
    /// largest expansion `datasets::files` accepts).
    fn size_bound(&self) -> u64 {
        match self {
            Source::Generated { bytes, .. } => *bytes as u64,
            Source::File(path) => {
                let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
                match path.ends_with(".gz") {
                    true => size.saturating_mul(datasets::files::MAX_GZIP_RATIO).min(datasets::files::MAX_BYTES),
                    false => size,
                }
            }
        }
    }

    /// The text and its name for messages.
    fn text(&self) -> Result<(Vec<u8>, String)> {
        match self {
            Source::Generated { seed, bytes } => Ok((
                generate_text(*seed, *bytes).into_bytes(),
                format!("the generated corpus (corpus_bytes = {bytes})"),
            )),
            Source::File(path) => {
                let text = read_text_file(Path::new(path)).map_err(|e| PluginError::Data(e.to_string()))?;
                Ok((text, format!("text file `{path}`")))
            }
        }
    }
}

fn tokenizer_kind(cfg: &Config) -> Result<TokenizerKind> {
    match cfg.str("tokenizer")? {
        "bytes" => Ok(TokenizerKind::Bytes),
        "bpe" => Ok(TokenizerKind::Bpe { vocab_size: cfg.usize("vocab_size")? }),
        other => Err(config_error(format!("tokenizer `{other}` is not one of bytes | bpe"))),
    }
}

fn model_options(cfg: &Config) -> Result<ModelOptions> {
    let positions = match cfg.str("positions")? {
        "learned" => Positions::Learned,
        "sinusoidal" => Positions::Sinusoidal,
        other => return Err(config_error(format!("positions `{other}` is not one of learned | sinusoidal"))),
    };
    Ok(ModelOptions { positions, tie_embeddings: cfg.bool("tie_embeddings")?, init_std: cfg.f64("init_std")? })
}

/// Reads or generates the text, splits it and trains the tokenizer.
fn tokenized_corpus(cfg: &Config) -> Result<TokenizedCorpus> {
    let (text, name) = Source::from_config(cfg)?.text()?;
    TokenizedCorpus::new(&text, &name, tokenizer_kind(cfg)?, cfg.f64("eval_fraction")?, cfg.usize("seq_len")?)
        .map_err(|e| PluginError::Data(e.to_string()))
}

impl LanguageData {
    /// The task of a run with seed `seed` (which draws the training batches only).
    pub fn new(cfg: &Config, seed: u64) -> Result<Self> {
        Ok(Self::from_corpus(tokenized_corpus(cfg)?, cfg.usize("seq_len")?, seed, model_options(cfg)?))
    }

    /// The model at `width` built into `vb` and the text's bytes with its token ids, from the
    /// configuration alone (a byte vocabulary is 256 tokens, a BPE's at most `vocab_size`).
    pub fn footprint(cfg: &Config, vb: VarBuilder, width: usize) -> Result<Footprint> {
        let vocab = match tokenizer_kind(cfg)? {
            TokenizerKind::Bytes => 256,
            TokenizerKind::Bpe { vocab_size } => vocab_size,
        };
        let seq_len = cfg.usize("seq_len")?;
        LanguageModel::new(vb, width, vocab, seq_len, &model_options(cfg)?, &vec![1; vocab])?;
        // Each byte is kept once as text and at most once as a 4-byte token id.
        let text = Source::from_config(cfg)?.size_bound();
        Ok(Footprint { seq_len, data_bytes: text.saturating_mul(5) })
    }

    /// Builds the corpus once, so that a missing, empty, non-UTF-8 (for BPE) or too short
    /// text, or a `path` without `corpus=file`, is reported before a run is stored.
    ///
    /// Only what is linear in the text is checked here (a BPE is trained by the worker, see
    /// [`TokenizedCorpus::check`]), so a large corpus is accepted in a moment.
    pub fn validate(cfg: &Config) -> Result<()> {
        model_options(cfg)?;
        let (text, name) = Source::from_config(cfg)?.text().map_err(|e| match e {
            PluginError::Data(message) => config_error(message),
            other => other,
        })?;
        TokenizedCorpus::check(&text, &name, tokenizer_kind(cfg)?, cfg.f64("eval_fraction")?, cfg.usize("seq_len")?)
            .map_err(|e| config_error(e.to_string()))
    }

    /// The task over an already tokenized corpus.
    pub fn from_corpus(corpus: TokenizedCorpus, seq_len: usize, seed: u64, options: ModelOptions) -> Self {
        let token_bytes = corpus.tokenizer.token_bytes();
        LanguageData { corpus, token_bytes, seq_len, seed, options }
    }

    /// The tokens of the two parts.
    #[cfg(test)]
    pub fn corpus(&self) -> &TokenizedCorpus {
        &self.corpus
    }

    /// Start offsets of the evaluation windows: `0, N, 2N, ...` while a window and its
    /// shifted targets fit.
    fn eval_starts(&self) -> impl Iterator<Item = usize> {
        let (count, seq_len) = ((self.corpus.eval.len() - 1) / self.seq_len, self.seq_len);
        (0..count).map(move |k| k * seq_len)
    }
}

/// Windows `tokens[s..s + N]` as inputs and `tokens[s + 1..s + N + 1]` as targets, one row
/// per start offset `s`.
pub fn windows(tokens: &[u32], starts: &[usize], seq_len: usize, device: &Device) -> Result<Batch> {
    let size = starts.len();
    let mut inputs = Vec::with_capacity(size * seq_len);
    let mut targets = Vec::with_capacity(size * seq_len);
    for &start in starts {
        inputs.extend_from_slice(&tokens[start..start + seq_len]);
        targets.extend_from_slice(&tokens[start + 1..start + seq_len + 1]);
    }
    Ok(Batch {
        inputs: Tensor::from_vec(inputs, (size, seq_len), device)?,
        targets: Tensor::from_vec(targets, (size, seq_len), device)?,
        mask: None,
        size,
    })
}

impl Task for LanguageData {
    fn info(&self) -> Result<TaskInfo> {
        Ok(TaskInfo {
            seq_len: self.seq_len,
            causal: true,
            metrics: vec![
                MetricSpec::lower("bpb"),
                MetricSpec::lower("loss"),
                MetricSpec::lower("ppl"),
                MetricSpec::higher("acc"),
            ],
            train_examples: Some((self.corpus.train.len() - 1) / self.seq_len),
            eval_examples: self.eval_starts().count(),
        })
    }

    /// `batch_size` windows starting at offsets drawn uniformly from the training part by a
    /// ChaCha8 RNG seeded from (run seed, step): the batch depends on nothing else.
    fn train_batch(&self, step: u64, batch_size: usize, device: &Device) -> Result<Batch> {
        let last_start = self.corpus.train.len() - self.seq_len - 1;
        let mut rng = ChaCha8Rng::seed_from_u64(item_seed(self.seed, step));
        let starts: Vec<usize> = (0..batch_size).map(|_| rng.random_range(0..=last_start)).collect();
        windows(&self.corpus.train, &starts, self.seq_len, device)
    }

    /// The first `max_examples` non-overlapping windows of the evaluation part.
    fn eval_batches(&self, batch_size: usize, max_examples: usize, device: &Device) -> Result<Vec<Batch>> {
        let starts: Vec<usize> = self.eval_starts().take(max_examples).collect();
        starts.chunks(batch_size.max(1)).map(|chunk| windows(&self.corpus.eval, chunk, self.seq_len, device)).collect()
    }

    fn build_model(&self, vb: VarBuilder, width: usize) -> Result<Box<dyn TaskModel>> {
        let vocab_size = self.corpus.tokenizer.vocab_size();
        Ok(Box::new(LanguageModel::new(vb, width, vocab_size, self.seq_len, &self.options, &self.token_bytes)?))
    }
}
