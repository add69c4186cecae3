//! A k-means codebook of image patches: the tokenizer of the masked image modelling task.
//!
//! Seed 000 §5.3 (notes-hyperset.md §3.3) tokenizes images with a pretrained VQGAN into a
//! 16 × 16 grid of codes from a 1024-entry codebook. No pretrained tokenizer is available
//! here, so each patch is replaced by the nearest of `K` centroids found by k-means (Lloyd's
//! algorithm) on patches sampled from the training images: a vector quantiser without the
//! learned encoder and decoder. Decoding puts each code's centroid back in place.
//!
//! Fitting is deterministic: the initial centroids are chosen by k-means++ (each next
//! centroid a patch drawn with probability proportional to its squared distance to the
//! nearest centroid so far) with a ChaCha8 RNG of a given seed, and clusters that lose all
//! their patches are re-seeded with the patches farthest from their centroids. Distances are
//! computed with candle matrix products on the CPU.

use plugin_api::candle::{Device, Tensor, D};
use plugin_api::{PluginError, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Patches per distance computation (bounds the `chunk × K` distance matrix).
const CHUNK: usize = 16_384;

/// `K` patch centroids of `features` values each.
#[derive(Clone, Debug, PartialEq)]
pub struct Codebook {
    centroids: Vec<f32>,
    features: usize,
}

impl Codebook {
    /// A codebook with the given centroids (`K × features` values, row-major).
    pub fn from_centroids(centroids: Vec<f32>, features: usize) -> Self {
        Codebook { centroids, features }
    }

    /// Fits `codes` centroids to `points` (`M × features` values) with `iterations` rounds
    /// of Lloyd's algorithm, starting from a k-means++ choice drawn with `seed`.
    pub fn fit(points: &[f32], features: usize, codes: usize, iterations: usize, seed: u64) -> Result<Self> {
        let count = points.len() / features;
        if codes == 0 || count < codes {
            return Err(PluginError::Data(format!(
                "a codebook of {codes} codes needs at least {codes} patches to fit, but there are {count}; \
                 lower codebook or use more training images"
            )));
        }
        let centroids = plus_plus_init(points, features, codes, seed)?;
        let mut book = Codebook { centroids, features };
        for _ in 0..iterations {
            let (assignment, distance) = book.nearest(points)?;
            let mut sums = vec![0f64; codes * features];
            let mut sizes = vec![0usize; codes];
            for (p, &code) in assignment.iter().enumerate() {
                let code = code as usize;
                sizes[code] += 1;
                for (sum, &x) in sums[code * features..][..features].iter_mut().zip(&points[p * features..]) {
                    *sum += x as f64;
                }
            }
            // Empty clusters take the patches worst served by their centroids.
            let mut worst: Vec<usize> = (0..count).collect();
            worst.sort_by(|&a, &b| distance[b].total_cmp(&distance[a]).then(a.cmp(&b)));
            let mut spare = worst.into_iter();
            for code in 0..codes {
                let target = &mut book.centroids[code * features..(code + 1) * features];
                if sizes[code] > 0 {
                    for (c, sum) in target.iter_mut().zip(&sums[code * features..]) {
                        *c = (*sum / sizes[code] as f64) as f32;
                    }
                } else if let Some(p) = spare.next() {
                    target.copy_from_slice(&points[p * features..(p + 1) * features]);
                }
            }
        }
        Ok(book)
    }

    /// Number of codes `K`.
    pub fn size(&self) -> usize {
        self.centroids.len() / self.features
    }

    /// Values per patch.
    pub fn features(&self) -> usize {
        self.features
    }

    /// The centroid of `code`.
    pub fn centroid(&self, code: usize) -> &[f32] {
        &self.centroids[code * self.features..(code + 1) * self.features]
    }

    /// The nearest code of each patch of `points` (`M × features` values).
    pub fn encode(&self, points: &[f32]) -> Result<Vec<u32>> {
        Ok(self.nearest(points)?.0)
    }

    /// The patches of `codes`, centroid after centroid.
    pub fn decode(&self, codes: &[u32]) -> Vec<f32> {
        codes.iter().flat_map(|&c| self.centroid(c as usize).iter().copied()).collect()
    }

    /// Nearest code and squared distance to it of each point.
    fn nearest(&self, points: &[f32]) -> Result<(Vec<u32>, Vec<f32>)> {
        let dev = Device::Cpu;
        let f = self.features;
        let centroids = Tensor::from_slice(&self.centroids, (self.size(), f), &dev)?;
        let centroid_norms = centroids.sqr()?.sum(1)?.unsqueeze(0)?;
        let centroids_t = centroids.t()?.contiguous()?;
        let (mut codes, mut distances) = (Vec::new(), Vec::new());
        for chunk in points.chunks(CHUNK * f) {
            let x = Tensor::from_slice(chunk, (chunk.len() / f, f), &dev)?;
            // ||x - c||^2 = ||x||^2 - 2 x.c + ||c||^2
            let d = (x.matmul(&centroids_t)? * -2.0)?
                .broadcast_add(&centroid_norms)?
                .broadcast_add(&x.sqr()?.sum_keepdim(1)?)?;
            codes.extend(d.argmin(D::Minus1)?.to_vec1::<u32>()?);
            distances.extend(d.min(D::Minus1)?.to_vec1::<f32>()?);
        }
        Ok((codes, distances))
    }
}

/// k-means++ seeding: the first centroid a uniformly drawn point, each next one a point
/// drawn with probability proportional to its squared distance to the nearest centroid so
/// far (uniformly among all points if every point already is a centroid).
fn plus_plus_init(points: &[f32], features: usize, codes: usize, seed: u64) -> Result<Vec<f32>> {
    let count = points.len() / features;
    let x = Tensor::from_slice(points, (count, features), &Device::Cpu)?;
    let squared_distances = |centre: &[f32]| -> Result<Vec<f32>> {
        let c = Tensor::from_slice(centre, (1, features), &Device::Cpu)?;
        Ok(x.broadcast_sub(&c)?.sqr()?.sum(1)?.to_vec1::<f32>()?)
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let point = |i: usize| &points[i * features..(i + 1) * features];
    let first = rng.random_range(0..count);
    let mut centroids = point(first).to_vec();
    let mut nearest = squared_distances(point(first))?;
    for _ in 1..codes {
        let total: f64 = nearest.iter().map(|&d| d as f64).sum();
        let chosen = if total > 0.0 {
            let mut target = rng.random_range(0.0..total);
            let mut chosen = count - 1;
            for (i, &d) in nearest.iter().enumerate() {
                target -= d as f64;
                if target < 0.0 {
                    chosen = i;
                    break;
                }
            }
            chosen
        } else {
            rng.random_range(0..count)
        };
        centroids.extend_from_slice(point(chosen));
        for (best, d) in nearest.iter_mut().zip(squared_distances(point(chosen))?) {
            *best = best.min(d);
        }
    }
    Ok(centroids)
}
