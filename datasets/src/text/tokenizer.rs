//! Byte tokens and byte-level BPE trained on a corpus.

use super::TextError;
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{DecoderWrapper, Model, NormalizerWrapper, PostProcessorWrapper, TokenizerBuilder, TokenizerImpl};

/// Which tokenizer to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerKind {
    /// One token per byte (vocabulary 256).
    Bytes,
    /// Byte-level BPE with at most `vocab_size` tokens (at least the 256 byte symbols).
    Bpe {
        /// Largest vocabulary the training may reach.
        vocab_size: usize,
    },
}

/// A tokenizer: bytes to token ids and back.
pub enum Tokenizer {
    /// Token id = byte value.
    Bytes,
    /// Byte-level BPE trained on a corpus.
    Bpe(Box<BpeTokenizer>),
}

/// Bytes of text handed to the BPE library per call when encoding.
const ENCODE_PIECE_BYTES: usize = 1 << 20;

type ByteLevelBpe = TokenizerImpl<BPE, NormalizerWrapper, ByteLevel, PostProcessorWrapper, DecoderWrapper>;

/// A byte-level BPE tokenizer and the number of bytes each of its tokens stands for.
pub struct BpeTokenizer {
    inner: ByteLevelBpe,
    token_bytes: Vec<u32>,
}

fn tokenizer_error(source_name: &str, e: impl std::fmt::Display) -> TextError {
    TextError::Tokenizer { kind: "BPE", source_name: source_name.to_string(), message: e.to_string() }
}

fn as_utf8<'t>(text: &'t [u8], source_name: &str) -> Result<&'t str, TextError> {
    std::str::from_utf8(text)
        .map_err(|e| TextError::NotUtf8 { source_name: source_name.to_string(), offset: e.valid_up_to() })
}

/// The longest piece of text the BPE trainer counts merges in. The trainer's cost grows with
/// the square of a word's length, and a text without spaces or line breaks is one word: a
/// 1 MB line of letters took minutes; cut into 4 KiB pieces, 16 MB take a second. Lines
/// shorter than this (any ordinary text) are unaffected; a merge never spans two pieces.
const MAX_PIECE: usize = 4096;

/// The lines of `text` cut into pieces of at most `max` bytes (at a character boundary).
fn training_pieces(text: &str, max: usize) -> impl Iterator<Item = &str> {
    text.split_inclusive('\n').flat_map(move |line| {
        let mut rest = line;
        std::iter::from_fn(move || {
            if rest.is_empty() {
                return None;
            }
            let mut end = rest.len().min(max);
            while !rest.is_char_boundary(end) {
                end -= 1;
            }
            let (piece, tail) = rest.split_at(end);
            rest = tail;
            Some(piece)
        })
    })
}

/// Refuses text that is not UTF-8 (what a BPE needs), naming the first bad byte.
pub(super) fn check_utf8(text: &[u8], source_name: &str) -> Result<(), TextError> {
    as_utf8(text, source_name).map(|_| ())
}

impl BpeTokenizer {
    /// Trains a BPE of at most `vocab_size` tokens on `text` (split into lines for counting;
    /// merges never cross the GPT-2 pre-tokeniser's word boundaries). Deterministic: ties
    /// between equally frequent pairs are broken by the pair's ids.
    pub fn train(text: &[u8], vocab_size: usize, source_name: &str) -> Result<Self, TextError> {
        let text = as_utf8(text, source_name)?;
        // No prefix space, so decoding gives back exactly the bytes that were encoded.
        let byte_level = ByteLevel::default().add_prefix_space(false);
        let mut inner: ByteLevelBpe = TokenizerBuilder::new()
            .with_model(BPE::default())
            .with_pre_tokenizer(Some(byte_level))
            .with_decoder(Some(DecoderWrapper::ByteLevel(byte_level)))
            .build()
            .map_err(|e| tokenizer_error(source_name, e))?;
        let mut trainer = BpeTrainerBuilder::new()
            .show_progress(false)
            .vocab_size(vocab_size)
            .min_frequency(2)
            .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
            .build();
        inner.train(&mut trainer, training_pieces(text, MAX_PIECE)).map_err(|e| tokenizer_error(source_name, e))?;
        // Each vocabulary entry is spelt in the byte-level alphabet: one character per byte.
        let model = inner.get_model();
        let token_bytes = (0..model.get_vocab_size() as u32)
            .map(|id| model.id_to_token(id).map(|t| t.chars().count() as u32).unwrap_or(0))
            .collect();
        Ok(BpeTokenizer { inner, token_bytes })
    }
}

impl Tokenizer {
    /// Builds a tokenizer of `kind`; a BPE is trained on `train_text` (named `source_name`
    /// in errors).
    pub fn train(kind: TokenizerKind, train_text: &[u8], source_name: &str) -> Result<Self, TextError> {
        match kind {
            TokenizerKind::Bytes => Ok(Tokenizer::Bytes),
            TokenizerKind::Bpe { vocab_size } => {
                Ok(Tokenizer::Bpe(Box::new(BpeTokenizer::train(train_text, vocab_size, source_name)?)))
            }
        }
    }

    /// Number of token ids (ids run `0..vocab_size`).
    pub fn vocab_size(&self) -> usize {
        match self {
            Tokenizer::Bytes => 256,
            Tokenizer::Bpe(bpe) => bpe.token_bytes.len(),
        }
    }

    /// The token ids of `text` (named `source_name` in errors).
    pub fn encode(&self, text: &[u8], source_name: &str) -> Result<Vec<u32>, TextError> {
        match self {
            Tokenizer::Bytes => Ok(text.iter().map(|&b| b as u32).collect()),
            Tokenizer::Bpe(bpe) => {
                // Whole lines in pieces of about a megabyte: the library's per-token
                // bookkeeping (strings, offsets) then stays small however long the text is.
                let text = as_utf8(text, source_name)?;
                let mut ids = Vec::with_capacity(text.len() / 3);
                let mut piece_start = 0;
                for (at, _) in text.match_indices('\n').chain(std::iter::once((text.len(), ""))) {
                    let piece_end = (at + 1).min(text.len());
                    if piece_end - piece_start >= ENCODE_PIECE_BYTES || piece_end == text.len() {
                        let piece = &text[piece_start..piece_end];
                        let encoding = bpe.inner.encode(piece, false).map_err(|e| tokenizer_error(source_name, e))?;
                        ids.extend_from_slice(encoding.get_ids());
                        piece_start = piece_end;
                    }
                }
                Ok(ids)
            }
        }
    }

    /// The bytes that token ids `ids` stand for.
    pub fn decode(&self, ids: &[u32]) -> Result<Vec<u8>, TextError> {
        let vocab_size = self.vocab_size();
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= vocab_size) {
            return Err(TextError::UnknownToken { id, vocab_size });
        }
        match self {
            Tokenizer::Bytes => Ok(ids.iter().map(|&id| id as u8).collect()),
            Tokenizer::Bpe(bpe) => {
                bpe.inner.decode(ids, false).map(String::into_bytes).map_err(|e| tokenizer_error("token ids", e))
            }
        }
    }

    /// How many bytes of text each token id stands for (1 for every byte token), indexed by
    /// id: the denominators of bits per byte.
    pub fn token_bytes(&self) -> Vec<u32> {
        match self {
            Tokenizer::Bytes => vec![1; 256],
            Tokenizer::Bpe(bpe) => bpe.token_bytes.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::generate_text;

    #[test]
    fn bpe_round_trips_and_compresses() {
        let train = generate_text(5, 30_000);
        let bpe = Tokenizer::train(TokenizerKind::Bpe { vocab_size: 400 }, train.as_bytes(), "generated").unwrap();
        assert_eq!(bpe.vocab_size(), 400);
        // Text the tokenizer never saw, with characters outside the training alphabet.
        let unseen = "The owls (which a child sees) sing! Ünïcödé ✓ tabs\tand  spaces\n\n";
        for text in [unseen, &generate_text(6, 2_000)] {
            let ids = bpe.encode(text.as_bytes(), "test").unwrap();
            assert_eq!(bpe.decode(&ids).unwrap(), text.as_bytes());
            let lengths = bpe.token_bytes();
            assert_eq!(ids.iter().map(|&id| lengths[id as usize] as usize).sum::<usize>(), text.len());
        }
        let sample = generate_text(6, 2_000);
        let ids = bpe.encode(sample.as_bytes(), "test").unwrap();
        assert!(ids.len() * 2 < sample.len(), "{} tokens for {} bytes", ids.len(), sample.len());
    }

    /// Texts longer than one encoding piece are encoded piece by piece, still exactly.
    #[test]
    fn bpe_encodes_long_texts_in_pieces() {
        let train = generate_text(9, 20_000);
        let bpe = Tokenizer::train(TokenizerKind::Bpe { vocab_size: 300 }, train.as_bytes(), "generated").unwrap();
        let long = generate_text(10, ENCODE_PIECE_BYTES + ENCODE_PIECE_BYTES / 4);
        let ids = bpe.encode(long.as_bytes(), "long").unwrap();
        assert_eq!(bpe.decode(&ids).unwrap(), long.as_bytes());
        let lengths = bpe.token_bytes();
        assert_eq!(ids.iter().map(|&id| lengths[id as usize] as usize).sum::<usize>(), long.len());
    }

    /// A line without spaces is one word to the trainer, whose cost grows with the square of
    /// a word's length: cut into pieces, a 1 MB one is learnt at once (it took minutes).
    #[test]
    fn bpe_trains_on_a_long_line_without_spaces() {
        let text: Vec<u8> = (0..1usize << 20).map(|i| b"abcdefghij"[(i * 7919 + i / 13) % 10]).collect();
        let (done, finished) = std::sync::mpsc::channel();
        let sample = text.clone();
        std::thread::spawn(move || {
            let _ =
                done.send(Tokenizer::train(TokenizerKind::Bpe { vocab_size: 300 }, &sample, "one line").map(|_| ()));
        });
        let trained = finished.recv_timeout(std::time::Duration::from_secs(120)).expect("training ends");
        trained.unwrap();
    }

    #[test]
    fn bpe_training_is_deterministic() {
        let train = generate_text(7, 20_000);
        let kind = TokenizerKind::Bpe { vocab_size: 320 };
        let a = Tokenizer::train(kind, train.as_bytes(), "generated").unwrap();
        let b = Tokenizer::train(kind, train.as_bytes(), "generated").unwrap();
        let sample = generate_text(8, 3_000);
        assert_eq!(a.encode(sample.as_bytes(), "t").unwrap(), b.encode(sample.as_bytes(), "t").unwrap());
        assert_eq!(a.token_bytes(), b.token_bytes());
    }

    #[test]
    fn byte_tokens_are_the_bytes() {
        let bytes = [0u8, 10, 200, 255];
        let ids = Tokenizer::Bytes.encode(&bytes, "t").unwrap();
        assert_eq!(ids, vec![0, 10, 200, 255]);
        assert_eq!(Tokenizer::Bytes.decode(&ids).unwrap(), bytes);
        assert!(matches!(Tokenizer::Bytes.decode(&[256]), Err(TextError::UnknownToken { id: 256, .. })));
    }
}
