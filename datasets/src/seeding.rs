//! Seeded randomness shared by the data sets and the task plugins: every random draw of a
//! data set or a training batch comes from an RNG seeded by mixing the run's seed with the
//! index of what is drawn (an image, a puzzle, a step), so item `i` is the same whatever
//! else is drawn and in whatever order.
//!
//! The mix is the SplitMix64 finaliser (Steele, Lea and Flood 2014): a cheap bijection under
//! which neighbouring inputs give unrelated outputs. Changing it changes every generated
//! data set and every training batch; a test pins its values.

/// The SplitMix64 finaliser of `z`.
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The seed of item `index` (a puzzle, a training step) under `seed`; mixing twice keeps
/// `(seed, index)` and `(index, seed)` apart.
pub fn item_seed(seed: u64, index: u64) -> u64 {
    splitmix64(splitmix64(seed) ^ index)
}

/// The seed of item `index` of stream `stream` (a split, a purpose tag) under `seed`.
pub fn mix_seed(seed: u64, stream: u64, index: u64) -> u64 {
    splitmix64(item_seed(seed, stream) ^ index)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values every generated data set and training batch depends on.
    #[test]
    fn mixes_are_pinned() {
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(splitmix64(1), 0x910A_2DEC_8902_5CC1);
        assert_eq!(item_seed(7, 3), 0x6BAA_7868_1A99_F995);
        assert_eq!(mix_seed(9, 2, 5), 0xF5E6_BD06_4FFF_AECE);
        assert_ne!(item_seed(1, 2), item_seed(2, 1));
    }
}
