//! Random test inputs that are the same on every run: candle's own `Tensor::randn` draws from
//! the CPU's global generator, which cannot be seeded. Each test thread (libtest runs every
//! test on its own) starts from the same seed, so a test sees the same values whatever order
//! or company it runs in.

use plugin_api::candle::{Device, FloatDType, Result, Shape, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::cell::RefCell;

/// The seed every test thread starts from.
const SEED: u64 = 0x7e57_da7a;

thread_local! {
    static DRAWS: RefCell<StdRng> = RefCell::new(StdRng::seed_from_u64(SEED));
}

/// `N(mean, std^2)` values of `shape` on `device`, as `Tensor::randn` makes them, from this
/// thread's seeded generator.
pub fn randn<S: Into<Shape>, T: FloatDType>(mean: T, std: T, shape: S, device: &Device) -> Result<Tensor> {
    let shape = shape.into();
    let (mean, std) = (mean.to_f64(), std.to_f64());
    let values: Vec<f64> = DRAWS.with(|rng| {
        let mut rng = rng.borrow_mut();
        (0..shape.elem_count()).map(|_| mean + std * rng.sample::<f64, _>(rand_distr::StandardNormal)).collect()
    });
    Tensor::from_vec(values, shape, &Device::Cpu)?.to_dtype(T::DTYPE)?.to_device(device)
}

/// A seed for parameters drawn by this thread, taken from its generator.
pub(crate) fn next_seed() -> u64 {
    DRAWS.with(|rng| rng.borrow_mut().random())
}
