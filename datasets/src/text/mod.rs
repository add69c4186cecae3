//! Text for language modelling: a generated corpus, a file loader, tokenizers and a fixed
//! train/evaluation split.
//!
//! # The generated corpus
//!
//! [`generate_text`] writes English-like text from a seeded probabilistic grammar with a
//! small lexicon ([`grammar`] lists every word), so a model can learn something real without
//! any download. The rules, with `n` and `m` grammatical numbers (singular or plural):
//!
//! ```text
//! Paragraph          -> Sentence{2..6} "\n"
//! Sentence           -> Subject(n) VerbPhrase(n) ("." | "!")
//! Subject(n)         -> NounPhrase(n) [RelativeClause] [PrepositionalPhrase] [Parenthesis]
//! NounPhrase(n)      -> Determiner(n) [Adjective] Noun(n)            ("a" -> "an" before a vowel)
//! RelativeClause     -> "that" NounPhrase(m) TransitiveVerb(m)
//! PrepositionalPhrase-> Preposition NounPhrase(any)
//! Parenthesis        -> "(" ( "which" NounPhrase(m) [Parenthesis] TransitiveVerb(m)
//!                           | PrepositionalPhrase ) ")"                 (at most two deep)
//! VerbPhrase(n)      -> [Adverb] IntransitiveVerb(n)
//!                     | [Adverb] TransitiveVerb(n) NounPhrase(any)
//!                     | Copula(n) Adjective
//!                     | SayingVerb(n) "," '"' Sentence '"'            (top level only)
//! ```
//!
//! What a model can learn from it, from easy to hard: spelling of the ~120 words, spacing and
//! capitals after a full stop; local agreement (`these` + plural noun, `an` + vowel); the
//! subject's number carried across a relative clause, a prepositional phrase and nested
//! parentheses (often eight or more tokens, with nouns of the other number in between) to its
//! verb; and matching brackets and quotation marks. The text depends only on the seed, and a
//! shorter request is a prefix of a longer one.
//!
//! # Files, tokens and the split
//!
//! [`read_text_file`] reads any file as bytes (refusing a missing or empty one).
//! [`TokenizedCorpus::new`] cuts the text at `1 - eval_fraction` of its bytes (moved forward
//! to the next character boundary), trains the tokenizer on the training part only, encodes
//! both parts and refuses a text too short for one sequence in each. [`Tokenizer::Bytes`]
//! uses the 256 byte values as tokens; [`Tokenizer::Bpe`] is a byte-level BPE (HuggingFace
//! `tokenizers`, GPT-2 pre-tokenisation without an added prefix space, the 256 byte symbols
//! always in the vocabulary) trained on the training text, so every byte sequence encodes
//! and decodes back exactly. BPE needs UTF-8 text.

pub mod grammar;
mod tokenizer;

pub use grammar::generate_text;
pub use tokenizer::{BpeTokenizer, Tokenizer, TokenizerKind};

use std::path::Path;

/// What went wrong while reading, tokenising or splitting a text. Every message names the
/// source and the fix.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    /// The file does not exist.
    #[error(
        "text file `{path}` does not exist; check the path (relative paths are resolved from the current directory) or use corpus=generated"
    )]
    NotFound {
        /// The path as given.
        path: String,
    },
    /// The file could not be read.
    #[error("could not read text file `{path}`: {error}; check that it is a readable file")]
    Io {
        /// The path as given.
        path: String,
        /// The underlying error.
        #[source]
        error: std::io::Error,
    },
    /// The file holds no bytes.
    #[error("text file `{path}` is empty; give a file with text in it or use corpus=generated")]
    Empty {
        /// The path as given.
        path: String,
    },
    /// The BPE tokenizer was asked to read bytes that are not UTF-8.
    #[error(
        "{source_name} is not UTF-8 text (invalid byte at offset {offset}); the BPE tokenizer needs UTF-8, use tokenizer=bytes for arbitrary bytes"
    )]
    NotUtf8 {
        /// The path or source name.
        source_name: String,
        /// Offset of the first invalid byte.
        offset: usize,
    },
    /// One of the two parts of the split holds fewer than `seq_len + 1` tokens.
    #[error(
        "{source_name} is too short: its {bytes} bytes give {train_tokens} training and {eval_tokens} evaluation tokens, but one sequence of seq_len = {seq_len} needs {} tokens in each part; use a longer text (about {suggested_bytes} bytes or more), a smaller seq_len, or an eval_fraction nearer 0.5",
        seq_len + 1
    )]
    TooShort {
        /// The path or source name.
        source_name: String,
        /// Length of the whole text in bytes.
        bytes: usize,
        /// Tokens in the training part.
        train_tokens: usize,
        /// Tokens in the evaluation part.
        eval_tokens: usize,
        /// Tokens per example.
        seq_len: usize,
        /// A length that would be enough at the observed bytes per token.
        suggested_bytes: usize,
    },
    /// The tokenizer library failed.
    #[error("the {kind} tokenizer failed on {source_name}: {message}")]
    Tokenizer {
        /// Which tokenizer.
        kind: &'static str,
        /// The path or source name.
        source_name: String,
        /// The library's message.
        message: String,
    },
    /// A token id outside the vocabulary was decoded.
    #[error("token id {id} is outside the vocabulary of {vocab_size} tokens")]
    UnknownToken {
        /// The id.
        id: u32,
        /// Size of the vocabulary.
        vocab_size: usize,
    },
}

/// The bytes of the file at `path`, refusing a missing or empty file.
pub fn read_text_file(path: &Path) -> Result<Vec<u8>, TextError> {
    let shown = path.display().to_string();
    let bytes = crate::files::read_regular(path).map_err(|error| match error.kind() {
        std::io::ErrorKind::NotFound => TextError::NotFound { path: shown.clone() },
        _ => TextError::Io { path: shown.clone(), error },
    })?;
    if bytes.is_empty() {
        return Err(TextError::Empty { path: shown });
    }
    Ok(bytes)
}

/// Where the evaluation part starts: byte `floor(len * (1 - eval_fraction))`, moved forward
/// past UTF-8 continuation bytes (at most three, the longest tail of a character) so no
/// character of a UTF-8 text is cut.
pub fn split_point(text: &[u8], eval_fraction: f64) -> usize {
    let mut at = ((text.len() as f64) * (1.0 - eval_fraction)).floor() as usize;
    at = at.min(text.len());
    let mut steps = 0;
    while at < text.len() && steps < 3 && (text[at] & 0b1100_0000) == 0b1000_0000 {
        at += 1;
        steps += 1;
    }
    at
}

/// A text cut into a training and an evaluation part, both encoded by a tokenizer trained on
/// the training part.
pub struct TokenizedCorpus {
    /// The tokenizer (trained on the training part).
    pub tokenizer: Tokenizer,
    /// Token ids of the training part.
    pub train: Vec<u32>,
    /// Token ids of the evaluation part.
    pub eval: Vec<u32>,
    /// Bytes in the training part.
    pub train_bytes: usize,
    /// Bytes in the evaluation part.
    pub eval_bytes: usize,
}

impl TokenizedCorpus {
    /// Splits `text` (named `source_name` in errors) at [`split_point`], trains a tokenizer
    /// of `kind` on the first part and encodes both; each part must hold `seq_len + 1`
    /// tokens (one example and its shifted targets).
    pub fn new(
        text: &[u8],
        source_name: &str,
        kind: TokenizerKind,
        eval_fraction: f64,
        seq_len: usize,
    ) -> Result<Self, TextError> {
        let split = split_point(text, eval_fraction);
        let (train_text, eval_text) = text.split_at(split);
        let tokenizer = Tokenizer::train(kind, train_text, source_name)?;
        let train = tokenizer.encode(train_text, source_name)?;
        let eval = tokenizer.encode(eval_text, source_name)?;
        if train.len() <= seq_len || eval.len() <= seq_len {
            let bytes_per_token = text.len() as f64 / (train.len() + eval.len()).max(1) as f64;
            let smaller_part = eval_fraction.min(1.0 - eval_fraction);
            let suggested_bytes = ((seq_len + 1) as f64 * bytes_per_token / smaller_part).ceil() as usize + 4;
            return Err(TextError::TooShort {
                source_name: source_name.to_string(),
                bytes: text.len(),
                train_tokens: train.len(),
                eval_tokens: eval.len(),
                seq_len,
                suggested_bytes,
            });
        }
        Ok(TokenizedCorpus { tokenizer, train, eval, train_bytes: train_text.len(), eval_bytes: eval_text.len() })
    }

    /// The refusals of [`TokenizedCorpus::new`] that can be found in time linear in the text,
    /// before a run is stored: for bytes, all of them; for BPE, text that is not UTF-8 and
    /// parts too short even at one token per byte (BPE tokens are never shorter). Training a
    /// BPE on a large corpus takes the worker a while, so it is left to the worker.
    pub fn check(
        text: &[u8],
        source_name: &str,
        kind: TokenizerKind,
        eval_fraction: f64,
        seq_len: usize,
    ) -> Result<(), TextError> {
        if let TokenizerKind::Bpe { .. } = kind {
            tokenizer::check_utf8(text, source_name)?;
        }
        TokenizedCorpus::new(text, source_name, TokenizerKind::Bytes, eval_fraction, seq_len).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file `name` with `contents` in a fresh folder, removed when the returned guard drops.
    fn temp_file(name: &str, contents: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::Builder::new().prefix("datasets-text-").tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, contents).unwrap();
        (dir, path)
    }

    #[test]
    fn missing_and_empty_files_are_refused_with_the_path() {
        let missing = std::env::temp_dir().join("datasets-text-no-such-file.txt");
        let e = read_text_file(&missing).unwrap_err().to_string();
        assert!(
            e.contains("does not exist") && e.contains("no-such-file.txt") && e.contains("corpus=generated"),
            "{e}"
        );
        let (_dir, empty) = temp_file("empty.txt", b"");
        let e = read_text_file(&empty).unwrap_err().to_string();
        assert!(e.contains("is empty") && e.contains("empty.txt"), "{e}");
    }

    #[test]
    fn short_text_is_refused_and_names_the_fix() {
        let (_dir, path) = temp_file("short.txt", b"just a few words here\n");
        let bytes = read_text_file(&path).unwrap();
        let name = format!("`{}`", path.display());
        let e = TokenizedCorpus::new(&bytes, &name, TokenizerKind::Bytes, 0.1, 16).err().unwrap();
        let message = e.to_string();
        assert!(message.contains("short.txt") && message.contains("seq_len = 16"), "{message}");
        assert!(matches!(e, TextError::TooShort { train_tokens: 19, eval_tokens: 3, .. }), "{message}");
        let TextError::TooShort { suggested_bytes, .. } = e else { unreachable!() };
        let longer: Vec<u8> = bytes.iter().copied().cycle().take(suggested_bytes).collect();
        assert!(TokenizedCorpus::new(&longer, &name, TokenizerKind::Bytes, 0.1, 16).is_ok());
    }

    #[test]
    fn any_bytes_load_and_split_with_the_byte_tokenizer() {
        let bytes: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
        let (_dir, path) = temp_file("binary.bin", &bytes);
        let read = read_text_file(&path).unwrap();
        let corpus = TokenizedCorpus::new(&read, "binary", TokenizerKind::Bytes, 0.2, 64).unwrap();
        assert_eq!(corpus.train.len() + corpus.eval.len(), 5000);
        // Byte 4000 is 0xA0, a UTF-8 continuation byte: the cut moves forward at most three
        // bytes (the longest tail of a UTF-8 character), here to 4003.
        assert_eq!(corpus.train_bytes, 4003);
        let all: Vec<u32> = corpus.train.iter().chain(&corpus.eval).copied().collect();
        assert_eq!(all, bytes.iter().map(|&b| b as u32).collect::<Vec<_>>());
        assert_eq!(corpus.tokenizer.decode(&corpus.eval).unwrap(), &bytes[4003..]);
        assert!(matches!(
            TokenizedCorpus::new(&read, "binary", TokenizerKind::Bpe { vocab_size: 300 }, 0.2, 64),
            Err(TextError::NotUtf8 { .. })
        ));
    }

    #[test]
    fn the_split_never_cuts_a_character() {
        let text = "é".repeat(10);
        for fraction in [0.05, 0.1, 0.15, 0.25, 0.5] {
            let at = split_point(text.as_bytes(), fraction);
            assert!(text.is_char_boundary(at), "{fraction} -> {at}");
        }
    }
}
