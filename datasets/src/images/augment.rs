//! Random crop with zero padding and random horizontal flip, the standard augmentation of
//! CIFAR training images (seed 000's code: "random-crop(pad 4) + flip", notes-hyperset.md §3.2).

use rand::Rng;

/// Crop a `height × width` window at a random offset out of the image padded with `padding`
/// zero pixels on every side, then mirror it left-right with probability 1/2 if `flip`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CropFlip {
    /// Zero border added before cropping; 0 disables the crop.
    pub padding: usize,
    /// Whether to flip horizontally (with probability 1/2).
    pub flip: bool,
}

impl CropFlip {
    /// Whether this augmentation can change an image at all.
    pub fn is_identity(&self) -> bool {
        self.padding == 0 && !self.flip
    }

    /// One augmented copy of `image` (channel-major, `channels × height × width` bytes). The
    /// offsets and the flip are drawn from `rng`: the same RNG state gives the same result.
    pub fn apply<R: Rng + ?Sized>(
        &self,
        image: &[u8],
        channels: usize,
        height: usize,
        width: usize,
        rng: &mut R,
    ) -> Vec<u8> {
        debug_assert_eq!(image.len(), channels * height * width);
        let p = self.padding as i64;
        let (dy, dx) = (rng.random_range(-p..=p) as isize, rng.random_range(-p..=p) as isize);
        let flipped = self.flip && rng.random_bool(0.5);
        let mut out = vec![0u8; image.len()];
        for c in 0..channels {
            for y in 0..height {
                let sy = y as isize + dy;
                if sy < 0 || sy >= height as isize {
                    continue;
                }
                let src = &image[(c * height + sy as usize) * width..][..width];
                let dst = &mut out[(c * height + y) * width..][..width];
                for (x, value) in dst.iter_mut().enumerate() {
                    // Crop then mirror: output column x shows cropped column (width - 1 - x).
                    let cx = if flipped { width - 1 - x } else { x };
                    let sx = cx as isize + dx;
                    if (0..width as isize).contains(&sx) {
                        *value = src[sx as usize];
                    }
                }
            }
        }
        out
    }
}
