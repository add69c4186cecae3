//! Dropout masks for the fused ops: the flags of `plugin_api::ops::dropout_flags`, the one
//! dropout stream of the workbench, kept entries scaled by `1 / (1 - rate)` rounded to f32 (as
//! `seeded_dropout`'s f32 mask holds it). A fused op with a mask therefore computes what the
//! composition with `seeded_dropout` computes, and a run keeps its masks whichever path it
//! takes. The work may be split over threads: each chunk of blocks draws its flags from its
//! own offset of the stream.

use crate::real::Real;
use crate::strided::for_each_chunk;
use plugin_api::ops::dropout_flags;

/// A drawn mask: one flag per entry, in blocks of `block` entries.
pub(crate) struct DropMask {
    keep: Vec<bool>,
    block: usize,
    /// `1 / (1 - rate)` as `seeded_dropout` scales kept entries.
    scale: f64,
}

impl DropMask {
    /// The bytes of its entries.
    pub fn bytes(&self) -> usize {
        self.keep.len() * size_of::<bool>()
    }

    /// The mask of `blocks * block` entries at `rate` (in `[0, 1)`) from `seed`.
    pub fn draw(blocks: usize, block: usize, rate: f64, seed: u64) -> Self {
        let mut keep = vec![false; blocks * block];
        for_each_chunk(
            &mut keep,
            block,
            #[inline(always)]
            |first_block, flags: &mut [bool]| dropout_flags(seed, rate, first_block * block, flags),
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
        for (x, &kept) in x.iter_mut().zip(self.flags(index)) {
            *x = if kept { *x * scale } else { T::zero() };
        }
    }

    /// `out = x` with the mask of block `index` applied, in one pass.
    #[inline(always)]
    pub fn apply_into<T: Real>(&self, index: usize, x: &[T], out: &mut [T]) {
        let scale = T::c(self.scale);
        for ((out, &x), &kept) in out.iter_mut().zip(x).zip(self.flags(index)) {
            *out = if kept { x * scale } else { T::zero() };
        }
    }

    fn flags(&self, index: usize) -> &[bool] {
        &self.keep[index * self.block..(index + 1) * self.block]
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
            let mut copied = vec![f32::NAN; blocks * block];
            for (index, out) in copied.chunks_mut(block).enumerate() {
                mask.apply_into(index, &vec![1f32; block], out);
            }
            assert_eq!(copied, expected, "apply_into, {blocks} blocks of {block} at rate {rate}");
            assert!(got.contains(&0.0) && got.iter().any(|&v| v > 1.0), "rate {rate} drops some and keeps some");
        }
    }
}
