//! Image quality of reconstructions: PSNR and SSIM, as reported by seed 000 Table 3.
//!
//! Both take channel-major images with values in [0, 1]. SSIM is the one of Wang et al.
//! (2004) as usually implemented: an 11 × 11 Gaussian window with standard deviation 1.5,
//! `C1 = (0.01)²`, `C2 = (0.03)²`, the SSIM map averaged over the positions where the window
//! fits entirely (no padding) and then over the channels.

/// PSNR cap for identical images (where the mean squared error is 0), in dB.
pub const PSNR_CAP: f64 = 100.0;

/// Peak signal-to-noise ratio `10 log10(1 / MSE)` in dB, at most [`PSNR_CAP`].
pub fn psnr(a: &[f32], b: &[f32]) -> f64 {
    let mse = a.iter().zip(b).map(|(&x, &y)| (x as f64 - y as f64).powi(2)).sum::<f64>() / a.len().max(1) as f64;
    if mse <= 10f64.powf(-PSNR_CAP / 10.0) {
        PSNR_CAP
    } else {
        -10.0 * mse.log10()
    }
}

const WINDOW: usize = 11;
const SIGMA: f64 = 1.5;
const C1: f64 = 0.01 * 0.01;
const C2: f64 = 0.03 * 0.03;

fn gaussian_window() -> [f64; WINDOW] {
    let centre = (WINDOW / 2) as f64;
    let mut w: [f64; WINDOW] = std::array::from_fn(|i| (-((i as f64 - centre).powi(2)) / (2.0 * SIGMA * SIGMA)).exp());
    let total: f64 = w.iter().sum();
    w.iter_mut().for_each(|v| *v /= total);
    w
}

/// The Gaussian-weighted local mean of `plane` (`side × side`) at every position where the
/// window fits: `(side - 10)²` values.
fn local_mean(plane: &[f64], side: usize, w: &[f64; WINDOW]) -> Vec<f64> {
    let out_side = side + 1 - WINDOW;
    let mut rows = vec![0f64; side * out_side];
    for y in 0..side {
        for x in 0..out_side {
            rows[y * out_side + x] = (0..WINDOW).map(|k| w[k] * plane[y * side + x + k]).sum();
        }
    }
    let mut out = vec![0f64; out_side * out_side];
    for y in 0..out_side {
        for x in 0..out_side {
            out[y * out_side + x] = (0..WINDOW).map(|k| w[k] * rows[(y + k) * out_side + x]).sum();
        }
    }
    out
}

/// Structural similarity of two `channels × side × side` images (1 for identical images).
/// `side` must be at least 11, the window's size.
pub fn ssim(a: &[f32], b: &[f32], channels: usize, side: usize) -> f64 {
    let w = gaussian_window();
    let plane = side * side;
    let mut total = 0.0;
    for c in 0..channels {
        let x: Vec<f64> = a[c * plane..(c + 1) * plane].iter().map(|&v| v as f64).collect();
        let y: Vec<f64> = b[c * plane..(c + 1) * plane].iter().map(|&v| v as f64).collect();
        let product = |p: &[f64], q: &[f64]| -> Vec<f64> { p.iter().zip(q).map(|(u, v)| u * v).collect() };
        let (mx, my) = (local_mean(&x, side, &w), local_mean(&y, side, &w));
        let (mxx, myy, mxy) = (
            local_mean(&product(&x, &x), side, &w),
            local_mean(&product(&y, &y), side, &w),
            local_mean(&product(&x, &y), side, &w),
        );
        let map_mean = (0..mx.len())
            .map(|i| {
                let (vx, vy, cov) = (mxx[i] - mx[i] * mx[i], myy[i] - my[i] * my[i], mxy[i] - mx[i] * my[i]);
                ((2.0 * mx[i] * my[i] + C1) * (2.0 * cov + C2))
                    / ((mx[i] * mx[i] + my[i] * my[i] + C1) * (vx + vy + C2))
            })
            .sum::<f64>()
            / mx.len() as f64;
        total += map_mean;
    }
    total / channels as f64
}
