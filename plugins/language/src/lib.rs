//! Causal language modelling as a task plugin: predict each next token of a text.
//!
//! An example is `seq_len` consecutive tokens of the corpus; its targets are the same window
//! shifted by one token, so `target[i] = input[i + 1]` and the last target is the token after
//! the window. The task declares itself causal: the host runs the layer with a causal mask
//! (token `i` sees tokens `<= i`) and refuses layers that cannot.
//!
//! - **Data** ([`datasets::text`]): a corpus generated offline from a seeded English-like
//!   grammar with long-range agreement and matching brackets (`corpus=generated`, the default),
//!   or any file (`corpus=file path=...`). The text is cut once into a training part and the
//!   last `eval_fraction` for evaluation; the cut and the generated text depend only on
//!   `corpus_seed`, never on the run seed, so every run is scored on the same text.
//! - **Tokens**: the 256 byte values (`tokenizer=bytes`), or a byte-level BPE trained on the
//!   training part with HuggingFace `tokenizers` (`tokenizer=bpe vocab_size=...`).
//! - **Batches**: training windows start at offsets drawn uniformly by a ChaCha8 RNG seeded
//!   from `(run seed, step)` only; evaluation windows tile the evaluation part without overlap
//!   (`stride = seq_len`), so each evaluation token is predicted once.
//! - **Model** (`model.rs`): a learnable token embedding plus learnable or sinusoidal
//!   positions; the head is RMSNorm followed by a linear map to the vocabulary, optionally
//!   tied to the token embedding; the loss is the mean cross-entropy per target token.
//! - **Metrics**: `bpb` (bits per byte, the headline: lower is better and comparable across
//!   tokenizers), `loss` (nats per token), `ppl` (perplexity `exp(loss)`) and `acc` (top-1
//!   next-token accuracy). How `ppl` stays exact across evaluation batches is explained in
//!   `model.rs`.

mod data;
mod model;

use data::LanguageData;
use plugin_api::{export_plugin, Declaration, ParamSpec, Result};

fn params() -> Vec<ParamSpec> {
    vec![
        ParamSpec::choice(
            "corpus",
            "generated",
            &["generated", "file"],
            "text to model: generated offline from a seeded grammar, or the file named by `path`",
        ),
        ParamSpec::text(
            "path",
            "",
            "text file to model with corpus=file (any bytes with tokenizer=bytes; UTF-8 for bpe)",
        ),
        ParamSpec::int("corpus_bytes", 400_000, 1_024, 100_000_000, "size of the generated corpus in bytes"),
        ParamSpec::int(
            "corpus_seed",
            20_240_601,
            0,
            i64::MAX,
            "seed of the generated corpus, shared by all runs so they compare (the run seed only draws batches)",
        ),
        ParamSpec::choice(
            "tokenizer",
            "bytes",
            &["bytes", "bpe"],
            "bytes: one token per byte (vocabulary 256); bpe: byte-level BPE trained on the training text",
        ),
        ParamSpec::int(
            "vocab_size",
            512,
            257,
            65_536,
            "largest BPE vocabulary (tokenizer=bpe; 256 byte symbols + merges)",
        ),
        ParamSpec::int("seq_len", 128, 2, 65_536, "tokens per example N"),
        ParamSpec::float("eval_fraction", 0.1, 0.01, 0.5, "fraction of the text (its end) held out for evaluation"),
        ParamSpec::choice(
            "positions",
            "learned",
            &["learned", "sinusoidal"],
            "positional embedding: a learnable vector per position, or the fixed sinusoids of Vaswani et al. (2017)",
        ),
        ParamSpec::bool("tie_embeddings", false, "use the token embedding (transposed) as the output projection"),
        ParamSpec::float(
            "init_std",
            0.02,
            0.0,
            10.0,
            "standard deviation of the N(0, s^2) init of embeddings and head",
        ),
    ]
}

fn declare() -> Result<Declaration> {
    Ok(Declaration::task(
        "language",
        env!("CARGO_PKG_VERSION"),
        "Causal language modelling: next-token prediction on generated English-like text or a file",
        params(),
        LanguageData::new,
    )
    .with_validator(LanguageData::validate)
    .with_footprint(LanguageData::footprint)
    .needs_causal_layer(|_| true))
}

export_plugin!(declare);

#[cfg(test)]
mod tests;
