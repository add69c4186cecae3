//! Dropout masks for the fused ops, drawn entry for entry as `plugin_api::ops::seeded_dropout`
//! draws them: a `StdRng` (ChaCha12) seeded by `seed_from_u64(seed)`, one `f64` per entry in
//! row-major order, the entry dropped when the draw is below the rate, kept entries scaled by
//! `1 / (1 - rate)` rounded to f32 (as that function's f32 mask holds it). A fused op with a
//! mask therefore computes what the composition with `seeded_dropout` computes, and a run
//! keeps its masks whichever path it takes.
//!
//! Why not draw in `seeded_dropout`'s one sequential pass: the work may be split over threads.
//! ChaCha can seek, so each chunk of blocks starts its draws at its own offset of the same
//! stream (two 32-bit words per `f64`), and the draws are taken in bulk, 64 bits each, as
//! `f64` draws take them.

use crate::real::Real;
use crate::strided::for_each_chunk;
use rand::Rng;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha12Rng;

/// A drawn mask: one flag per entry, in blocks of `block` entries.
pub(crate) struct DropMask {
    keep: Vec<bool>,
    block: usize,
    /// `1 / (1 - rate)` as `seeded_dropout` scales kept entries.
    scale: f64,
}

impl DropMask {
    /// The mask of `blocks * block` entries at `rate` (in `[0, 1)`) from `seed`.
    pub fn draw(blocks: usize, block: usize, rate: f64, seed: u64) -> Self {
        let mut keep = vec![false; blocks * block];
        // `random::<f64>() < rate` as integers: the draw is `(x >> 11) 2^-53` for a 64-bit `x`,
        // exactly below `rate` when `x >> 11` is below `rate 2^53` rounded up.
        let dropped_below = (rate * (1u64 << 53) as f64).ceil() as u64;
        for_each_chunk(
            &mut keep,
            block,
            #[inline(always)]
            |first_block, flags: &mut [bool]| {
                let mut rng = ChaCha12Rng::seed_from_u64(seed);
                rng.set_word_pos(2 * (first_block * block) as u128);
                let mut words = [0u64; 256];
                for flags in flags.chunks_mut(words.len()) {
                    let words = &mut words[..flags.len()];
                    rng.fill(words);
                    for (flag, &x) in flags.iter_mut().zip(words.iter()) {
                        *flag = (x >> 11) >= dropped_below;
                    }
                }
            },
        );
        DropMask { keep, block, scale: (1.0 / (1.0 - rate)) as f32 as f64 }
    }

    /// Whether the mask has `blocks` blocks of `block` entries.
    pub fn covers(&self, blocks: usize, block: usize) -> bool {
        self.block == block && self.keep.len() == blocks * block
    }

    /// `x` (block `index`'s entries) with the mask applied: dropped entries 0, kept ones
    /// scaled.
    #[inline(always)]
    pub fn apply<T: Real>(&self, index: usize, x: &mut [T]) {
        let scale = T::c(self.scale);
        let flags = &self.keep[index * self.block..(index + 1) * self.block];
        for (x, &kept) in x.iter_mut().zip(flags) {
            *x = if kept { *x * scale } else { T::zero() };
        }
    }

    /// `out = x` with the mask of block `index` applied.
    #[inline(always)]
    pub fn apply_into<T: Real>(&self, index: usize, x: &[T], out: &mut [T]) {
        out.copy_from_slice(x);
        self.apply(index, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    /// Block by block (and in chunks over the pool for the largest), the mask is the one
    /// `seeded_dropout` draws in one stream.
    #[test]
    fn blocks_draw_the_masks_of_seeded_dropout() {
        for (blocks, block, rate, seed) in
            [(6, 49, 0.3, 7u64), (4, 3, 0.5, 11), (5, 37, 0.1, u64::MAX), (40, 1000, 0.2, 3)]
        {
            let ones = Tensor::ones(blocks * block, candle_core::DType::F32, &Device::Cpu).unwrap();
            let expected: Vec<f32> = plugin_api::ops::seeded_dropout(&ones, rate, seed).unwrap().to_vec1().unwrap();
            let mask = DropMask::draw(blocks, block, rate, seed);
            let mut got = vec![1f32; blocks * block];
            for (index, chunk) in got.chunks_mut(block).enumerate() {
                mask.apply(index, chunk);
            }
            assert_eq!(got, expected, "{blocks} blocks of {block} at rate {rate}");
            assert!(got.contains(&0.0) && got.iter().any(|&v| v > 1.0), "rate {rate} drops some and keeps some");
        }
    }
}
