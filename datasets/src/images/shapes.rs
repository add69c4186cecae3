//! A generated 32×32 RGB data set of ten shape classes, the default image task's data.
//!
//! Each image shows one shape of its class on a textured background:
//!
//! | id | class    | shape (in its own frame, radius 1)                          |
//! |----|----------|-------------------------------------------------------------|
//! | 0  | disk     | filled circle                                               |
//! | 1  | square   | filled square                                               |
//! | 2  | triangle | filled equilateral triangle                                 |
//! | 3  | plus     | two crossed bars                                            |
//! | 4  | ring     | annulus                                                     |
//! | 5  | stripes  | a square of three parallel bars, background between them    |
//! | 6  | star     | five-pointed star                                           |
//! | 7  | crescent | a disk with an off-centre disk cut out                      |
//! | 8  | frame    | square outline                                              |
//! | 9  | ellipse  | filled ellipse with axes 2:1                                |
//!
//! What varies from image to image, all drawn from the image's own RNG:
//!
//! * **placement**: radius 6-12 pixels, independent stretch of each axis by 0.85-1.15 (so a
//!   disk never becomes as flat as an ellipse), any rotation, centre anywhere that keeps
//!   most of the shape inside the image;
//! * **colour**: a random foreground colour at RGB distance at least 0.45 from the mean
//!   background colour (colour says nothing about the class);
//! * **background**: a flat colour, a linear gradient, low-contrast waves (which can look
//!   like the stripes class) or blotches, between two nearby colours;
//! * **clutter**: with probability 1/2 a short thin line of another random colour under the
//!   shape;
//! * **noise**: Gaussian pixel noise with a standard deviation drawn from 0-0.08.
//!
//! Shapes are anti-aliased with 2×2 samples per pixel. Small stars, crescents and rings are
//! genuinely hard to tell apart at 32×32, so the set is learnable but not trivial.
//!
//! The class of image `i` is `i % 10`, so every block of ten consecutive images holds each
//! class once and a split of `n` images is balanced to within one image per class.
//! Image `i` of a split is drawn from a ChaCha8 RNG seeded from `(seed, split, i)` only:
//! the first `n` images of a larger request equal a request for `n`, whatever the thread
//! count. (ChaCha8 rather than `StdRng`, whose algorithm may change between rand releases.)

use super::ImageSet;
use crate::seeding::mix_seed;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};
use rayon::prelude::*;
use std::f32::consts::{FRAC_PI_2, PI, TAU};

/// Side of a generated image in pixels.
pub const SIDE: usize = 32;
/// Number of classes.
pub const CLASSES: usize = 10;
/// The class names, by class id.
pub const CLASS_NAMES: [&str; CLASSES] =
    ["disk", "square", "triangle", "plus", "ring", "stripes", "star", "crescent", "frame", "ellipse"];

/// Which split an image belongs to: the two draw from unrelated RNG streams, so changing
/// the size of one leaves the other unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// Training images.
    Train,
    /// Test images.
    Test,
}

/// `count` images of `split`, reproducible from `seed` (see the module docs).
pub fn generate(seed: u64, split: Split, count: usize) -> ImageSet {
    let images: Vec<Vec<u8>> = (0..count)
        .into_par_iter()
        .map(|index| {
            let mut rng = ChaCha8Rng::seed_from_u64(image_seed(seed, split, index as u64));
            draw(class_of(index), &mut rng)
        })
        .collect();
    ImageSet {
        channels: 3,
        height: SIDE,
        width: SIDE,
        classes: CLASSES,
        pixels: images.concat(),
        labels: (0..count).map(|i| class_of(i) as u16).collect(),
    }
}

/// The class of image `index` of any split.
pub fn class_of(index: usize) -> usize {
    index % CLASSES
}

/// The RNG seed of image `index` of `split`.
fn image_seed(seed: u64, split: Split, index: u64) -> u64 {
    let split_tag = match split {
        Split::Train => 1,
        Split::Test => 2,
    };
    mix_seed(seed, split_tag, index)
}

type Rgb = [f32; 3];

/// One image of class `class`, drawn from `rng`: `3 × 32 × 32` bytes, channel-major.
pub fn draw<R: Rng + ?Sized>(class: usize, rng: &mut R) -> Vec<u8> {
    let placement = Placement::random(rng);
    let background = Background::random(rng);
    let base = random_colour(rng);
    let shade: Rgb = std::array::from_fn(|c| (base[c] + rng.random_range(-0.3..0.3)).clamp(0.0, 1.0));
    let mean_background: Rgb = std::array::from_fn(|c| 0.5 * (base[c] + shade[c]));
    let foreground = contrasting_colour(rng, &mean_background);
    let clutter = rng.random_bool(0.5).then(|| Line::random(rng));
    let noise = rng.random_range(0.0..0.08f32);
    let polygon = polygon_of(class);

    // Channel-major like the output: value (c, y, x) at (c * SIDE + y) * SIDE + x.
    let mut image = vec![0f32; 3 * SIDE * SIDE];
    for (pixel, (y, x)) in (0..SIDE).flat_map(|y| (0..SIDE).map(move |x| (y, x))).enumerate() {
        let (px, py) = (x as f32 + 0.5, y as f32 + 0.5);
        let t = background.mix(px, py);
        let mut colour: Rgb = std::array::from_fn(|c| base[c] + (shade[c] - base[c]) * t);
        if let Some(line) = &clutter {
            blend(&mut colour, &line.colour, line.coverage(px, py));
        }
        blend(&mut colour, &foreground, placement.coverage(class, &polygon, px, py));
        for (c, value) in colour.iter().enumerate() {
            image[c * SIDE * SIDE + pixel] = *value;
        }
    }

    let gaussian = Normal::new(0.0, noise).expect("a finite, non-negative standard deviation");
    image.iter().map(|value| ((value + gaussian.sample(rng)).clamp(0.0, 1.0) * 255.0).round() as u8).collect()
}

fn blend(colour: &mut Rgb, over: &Rgb, alpha: f32) {
    if alpha > 0.0 {
        for c in 0..3 {
            colour[c] += (over[c] - colour[c]) * alpha;
        }
    }
}

fn random_colour<R: Rng + ?Sized>(rng: &mut R) -> Rgb {
    std::array::from_fn(|_| rng.random::<f32>())
}

/// A random colour at RGB distance at least 0.45 from `from` (the best of 64 tries if none
/// is that far, which happens only for mid-grey backgrounds with very bad luck).
fn contrasting_colour<R: Rng + ?Sized>(rng: &mut R, from: &Rgb) -> Rgb {
    let distance = |c: &Rgb| (0..3).map(|k| (c[k] - from[k]).powi(2)).sum::<f32>().sqrt();
    let mut best = random_colour(rng);
    for _ in 0..64 {
        if distance(&best) >= 0.45 {
            break;
        }
        let candidate = random_colour(rng);
        if distance(&candidate) > distance(&best) {
            best = candidate;
        }
    }
    best
}

/// Where and how a shape is drawn: pixel coordinates map to the shape's own frame, in which
/// the shape fits the unit disk (up to its corners).
struct Placement {
    centre: (f32, f32),
    radius: f32,
    stretch: (f32, f32),
    cos: f32,
    sin: f32,
}

impl Placement {
    fn random<R: Rng + ?Sized>(rng: &mut R) -> Self {
        let radius = rng.random_range(6.0..12.0f32);
        let margin = 0.75 * radius;
        let side = SIDE as f32;
        let centre = (rng.random_range(margin..side - margin), rng.random_range(margin..side - margin));
        let stretch = (rng.random_range(0.85..1.15f32), rng.random_range(0.85..1.15f32));
        let angle = rng.random_range(0.0..TAU);
        Placement { centre, radius, stretch, cos: angle.cos(), sin: angle.sin() }
    }

    /// The point `(x, y)` of the image in the shape's frame.
    fn to_shape(&self, x: f32, y: f32) -> (f32, f32) {
        let (dx, dy) = (x - self.centre.0, y - self.centre.1);
        let u = (self.cos * dx + self.sin * dy) / (self.radius * self.stretch.0);
        let v = (-self.sin * dx + self.cos * dy) / (self.radius * self.stretch.1);
        (u, v)
    }

    /// The fraction of the pixel centred at `(x, y)` that the shape covers (2×2 samples).
    fn coverage(&self, class: usize, polygon: &[(f32, f32)], x: f32, y: f32) -> f32 {
        // Every shape lies within radius 1.07 of its centre (the square's corners); skip
        // pixels clearly outside.
        let reach = 1.1 * self.radius * self.stretch.0.max(self.stretch.1) + 1.0;
        let (dx, dy) = (x - self.centre.0, y - self.centre.1);
        if dx * dx + dy * dy > reach * reach {
            return 0.0;
        }
        let mut hits = 0;
        for (ox, oy) in [(-0.25, -0.25), (0.25, -0.25), (-0.25, 0.25), (0.25, 0.25)] {
            let (u, v) = self.to_shape(x + ox, y + oy);
            if inside(class, polygon, u, v) {
                hits += 1;
            }
        }
        hits as f32 / 4.0
    }
}

/// The vertices of the polygonal classes (triangle, star) in the shape frame; empty for
/// the others.
fn polygon_of(class: usize) -> Vec<(f32, f32)> {
    let vertex = |angle: f32, r: f32| (r * angle.cos(), r * angle.sin());
    match class {
        2 => (0..3).map(|k| vertex(FRAC_PI_2 + k as f32 * TAU / 3.0, 1.05)).collect(),
        6 => (0..10).map(|k| vertex(FRAC_PI_2 + k as f32 * PI / 5.0, if k % 2 == 0 { 1.0 } else { 0.42 })).collect(),
        _ => Vec::new(),
    }
}

/// Whether `(u, v)` of the shape frame lies inside a shape of class `class`.
fn inside(class: usize, polygon: &[(f32, f32)], u: f32, v: f32) -> bool {
    let r2 = u * u + v * v;
    let (au, av) = (u.abs(), v.abs());
    match class {
        0 => r2 < 0.85 * 0.85,
        1 => au < 0.75 && av < 0.75,
        2 | 6 => in_polygon(polygon, u, v),
        3 => (au < 0.28 && av < 0.95) || (av < 0.28 && au < 0.95),
        4 => r2 > 0.55 * 0.55 && r2 < 0.95 * 0.95,
        // Five bands of width 0.34 across the square; bands 0, 2 and 4 are filled.
        5 => au < 0.85 && av < 0.85 && ((v + 0.85) / 0.34).floor() as i32 % 2 == 0,
        7 => r2 < 0.9 * 0.9 && (u - 0.4).powi(2) + v * v > 0.75 * 0.75,
        8 => {
            let m = au.max(av);
            m > 0.55 && m < 0.85
        }
        9 => (u / 0.95).powi(2) + (v / 0.5).powi(2) < 1.0,
        _ => false,
    }
}

/// Even-odd point-in-polygon test.
fn in_polygon(polygon: &[(f32, f32)], u: f32, v: f32) -> bool {
    let mut inside = false;
    let mut previous = polygon[polygon.len() - 1];
    for &current in polygon {
        let ((x0, y0), (x1, y1)) = (previous, current);
        if (y0 > v) != (y1 > v) && u < x0 + (v - y0) * (x1 - x0) / (y1 - y0) {
            inside = !inside;
        }
        previous = current;
    }
    inside
}

/// A background texture: how far each pixel goes from the base colour to the shade (0..1).
enum Background {
    Flat,
    Gradient { direction: (f32, f32) },
    Waves { direction: (f32, f32), frequency: f32, phase: f32 },
    Blotches { grid: [[f32; 5]; 5] },
}

impl Background {
    fn random<R: Rng + ?Sized>(rng: &mut R) -> Self {
        let angle = rng.random_range(0.0..TAU);
        let direction = (angle.cos(), angle.sin());
        match rng.random_range(0..4) {
            0 => Background::Flat,
            1 => Background::Gradient { direction },
            2 => Background::Waves {
                direction,
                frequency: rng.random_range(0.3..1.2),
                phase: rng.random_range(0.0..TAU),
            },
            _ => Background::Blotches { grid: std::array::from_fn(|_| std::array::from_fn(|_| rng.random())) },
        }
    }

    fn mix(&self, x: f32, y: f32) -> f32 {
        let half = SIDE as f32 / 2.0;
        match self {
            Background::Flat => 0.0,
            Background::Gradient { direction } => {
                (((x - half) * direction.0 + (y - half) * direction.1) / SIDE as f32 + 0.5).clamp(0.0, 1.0)
            }
            Background::Waves { direction, frequency, phase } => {
                0.5 * (1.0 + (frequency * (x * direction.0 + y * direction.1) + phase).sin())
            }
            Background::Blotches { grid } => {
                let scale = 4.0 / SIDE as f32;
                let (gx, gy) = ((x * scale).min(3.999), (y * scale).min(3.999));
                let (ix, iy) = (gx.floor() as usize, gy.floor() as usize);
                let (fx, fy) = (gx - ix as f32, gy - iy as f32);
                let top = grid[iy][ix] * (1.0 - fx) + grid[iy][ix + 1] * fx;
                let bottom = grid[iy + 1][ix] * (1.0 - fx) + grid[iy + 1][ix + 1] * fx;
                top * (1.0 - fy) + bottom * fy
            }
        }
    }
}

/// A short thin line of clutter.
struct Line {
    start: (f32, f32),
    end: (f32, f32),
    colour: Rgb,
}

impl Line {
    fn random<R: Rng + ?Sized>(rng: &mut R) -> Self {
        let side = SIDE as f32;
        let start = (rng.random_range(0.0..side), rng.random_range(0.0..side));
        let (length, angle) = (rng.random_range(4.0..10.0f32), rng.random_range(0.0..TAU));
        let end = (start.0 + length * angle.cos(), start.1 + length * angle.sin());
        Line { start, end, colour: random_colour(rng) }
    }

    /// About one pixel wide, with soft edges.
    fn coverage(&self, x: f32, y: f32) -> f32 {
        let (dx, dy) = (self.end.0 - self.start.0, self.end.1 - self.start.1);
        let t = (((x - self.start.0) * dx + (y - self.start.1) * dy) / (dx * dx + dy * dy)).clamp(0.0, 1.0);
        let (nx, ny) = (self.start.0 + t * dx - x, self.start.1 + t * dy - y);
        (1.2 - (nx * nx + ny * ny).sqrt()).clamp(0.0, 1.0)
    }
}
