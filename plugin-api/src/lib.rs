//! The contract between the workbench host and its plugins.
//!
//! A plugin is a `cdylib` crate that depends on this crate and exports one entry symbol with
//! [`export_plugin!`]. It declares its kind (layer or task), name, version, hyperparameter
//! schema and constructor in a [`Declaration`]:
//!
//! - a **layer** ([`Layer`]) owns its parameters (created from the candle-nn `VarBuilder` it
//!   is built with) and its iteration loop on tokens `[B, N, d]`; it takes the number of
//!   iterations per pass (evaluation may run more than training) and exposes its energies
//!   and per-head projections so the host can record per-iteration diagnostics;
//! - a **task** ([`Task`], [`TaskModel`]) owns data, embedding, head, loss and metrics.
//!
//! A configuration stored before a key was added lacks it; the declaration fills in its
//! default before the plugin's validator or constructors run ([`Declaration::complete`]), so
//! plugins read every key of their schema and need no fallbacks of their own.
//!
//! Rust has no stable ABI, so host and plugin must be built by the same rustc with the same
//! candle and features: both sides carry a [`FINGERPRINT`] and the host refuses a mismatch.
//! Every call into a plugin is wrapped in a panic guard ([`guard`]).
//!
//! Plugins must use the system allocator (declare no `#[global_allocator]`): tensors made in
//! a plugin are freed by the host.
//!
//! # A minimal layer plugin
//!
//! A layer that descends the energy `E(X) = 1/2 ||X||^2` with a learned step (its update is
//! `X <- X - a * X`):
//!
//! ```
//! use plugin_api::{candle_nn::VarBuilder, export_plugin, Config, Declaration, Layer, ParamSpec, Pass, Result};
//! use plugin_api::candle::Tensor;
//!
//! struct Shrink { width: usize, iterations: usize, step: Tensor }
//!
//! impl Layer for Shrink {
//!     fn width(&self) -> usize { self.width }
//!     fn train_iterations(&self) -> usize { self.iterations }
//!     fn forward(&self, x0: &Tensor, pass: &mut Pass<'_>) -> Result<Tensor> {
//!         let mut x = x0.clone();
//!         pass.observe(0, &x)?;
//!         for t in 1..=pass.iterations {
//!             x = (&x - x.broadcast_mul(&self.step)?)?; // gradient step on 1/2 ||X||^2
//!             pass.observe(t, &x)?;
//!         }
//!         Ok(x)
//!     }
//! }
//!
//! fn declare() -> Result<Declaration> {
//!     let params = vec![
//!         ParamSpec::int("d", 64, 1, 4096, "token width"),
//!         ParamSpec::int("iterations", 4, 1, 256, "recurrent depth L"),
//!     ];
//!     Ok(Declaration::layer("shrink", "0.1.0", "gradient descent on 1/2 ||X||^2", params,
//!         |cfg: &Config, vb: VarBuilder| {
//!             let step = vb.get_with_hints(1, "step", plugin_api::candle_nn::Init::Const(0.1))?;
//!             Ok(Shrink { width: cfg.usize("d")?, iterations: cfg.usize("iterations")?, step })
//!         }))
//! }
//!
//! export_plugin!(declare);
//! # fn main() {}
//! ```

#![warn(missing_docs)]

pub mod blas;
pub mod error;
mod export;
pub mod isa;
pub mod layer;
pub mod ops;
pub mod schema;
pub mod task;

pub use candle_core as candle;
pub use candle_nn;
pub use error::{config_error, PluginError, Result};
pub use export::{
    guard, Declaration, PluginEntry, PluginKind, CANDLE_VERSION, ENTRY_MAGIC, ENTRY_SYMBOL, FINGERPRINT, FINGERPRINT_C,
};
pub use layer::{
    check_heads_and_layers, BlockSchedule, BlockStack, DescentCheck, Energy, GradientIdentity, Layer, Pass,
    StateObserver,
};
pub use schema::{Config, ParamKind, ParamSpec, Value};
pub use task::{Batch, Footprint, LayerPass, MetricSpec, MetricTally, Progress, Task, TaskInfo, TaskModel};

/// Whether this build has CUDA: plugin-api's `cuda` feature, which turns on candle's and which
/// every plugin shares through this crate.
pub const CUDA: bool = cfg!(feature = "cuda");

/// The setting that switches on the kernels crate's CUDA normalisations and softmaxes. They are
/// unfinished (built and tested against candle's composition, not yet run on a GPU), so a CUDA
/// device runs the composition unless this is set to `1`.
pub const CUDA_KERNELS_SWITCH: &str = "WORKBENCH_CUDA_KERNELS";

/// Whether [`CUDA_KERNELS_SWITCH`] is set to `1` in this process (read once).
pub fn cuda_kernels_switched_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var(CUDA_KERNELS_SWITCH).is_ok_and(|v| v == "1"))
}

/// The items inside, in a build with CUDA only. Crates built on plugin-api (the kernels) follow
/// its `cuda` feature this way, without a feature of their own that every build command (the
/// host's plugin rebuilds too) would have to name.
#[cfg(feature = "cuda")]
#[macro_export]
macro_rules! with_cuda {
    ($($item:item)*) => { $($item)* };
}

/// See the other [`with_cuda`]: in a build without CUDA the items are left out.
#[cfg(not(feature = "cuda"))]
#[macro_export]
macro_rules! with_cuda {
    ($($item:item)*) => {};
}

/// The items inside, in a build without CUDA only: the counterpart of [`with_cuda`].
#[cfg(not(feature = "cuda"))]
#[macro_export]
macro_rules! without_cuda {
    ($($item:item)*) => { $($item)* };
}

/// See the other [`without_cuda`]: in a build with CUDA the items are left out.
#[cfg(feature = "cuda")]
#[macro_export]
macro_rules! without_cuda {
    ($($item:item)*) => {};
}

#[cfg(test)]
mod tests {
    /// The fingerprint names candle's version; it must be the version actually locked.
    #[test]
    fn candle_version_matches_lockfile() {
        let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock")).unwrap();
        let expected = format!("name = \"candle-core\"\nversion = \"{}\"", super::CANDLE_VERSION);
        assert!(lock.contains(&expected), "Cargo.lock does not lock candle-core {}", super::CANDLE_VERSION);
        assert!(super::FINGERPRINT.contains("rustc "));
    }

    /// The fingerprint hashes the patched candle's sources (their patches change the custom
    /// ops' traits, which cross the boundary): the build found them, and the hash is not that of
    /// an empty folder (FNV-1a's starting value).
    #[test]
    fn the_fingerprint_covers_the_vendored_candle_source() {
        let (_, after) = super::FINGERPRINT.split_once("(source ").expect(super::FINGERPRINT);
        let hash = &after[..12];
        assert!(hash.chars().all(|c| c.is_ascii_hexdigit()), "{}", super::FINGERPRINT);
        assert_ne!(hash, "9ce484222325", "no vendored candle source was hashed: {}", super::FINGERPRINT);
    }
}
