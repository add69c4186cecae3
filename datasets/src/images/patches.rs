//! Cutting images into patches and putting them back together.
//!
//! The patch layout is the one of `einops.rearrange('c (h p1) (w p2) -> (h w) (p1 p2 c)')`
//! in seed 000's code: patches row by row, and within a patch the pixels row by row with
//! the channels of each pixel together.

/// Appends the `patches²` patches of a `channels × side × side` image (channel-major bytes)
/// to `out`, pixel values scaled to [0, 1]: `patches² × (channels · (side/patches)²)` values.
pub fn patchify(image: &[u8], channels: usize, side: usize, patches: usize, out: &mut Vec<f32>) {
    let p = side / patches;
    for py in 0..patches {
        for px in 0..patches {
            for y in py * p..(py + 1) * p {
                for x in px * p..(px + 1) * p {
                    for c in 0..channels {
                        out.push(image[(c * side + y) * side + x] as f32 / 255.0);
                    }
                }
            }
        }
    }
}

/// The inverse of [`patchify`]: a channel-major `channels × side × side` image of values
/// from `patches²` patch vectors laid out as [`patchify`] writes them.
pub fn unpatchify(values: &[f32], channels: usize, side: usize, patches: usize) -> Vec<f32> {
    let p = side / patches;
    let mut image = vec![0f32; channels * side * side];
    let mut k = 0;
    for py in 0..patches {
        for px in 0..patches {
            for y in py * p..(py + 1) * p {
                for x in px * p..(px + 1) * p {
                    for c in 0..channels {
                        image[(c * side + y) * side + x] = values[k];
                        k += 1;
                    }
                }
            }
        }
    }
    image
}
