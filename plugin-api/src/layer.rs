//! The layer contract: a recurrent block that owns its parameters and its iteration loop.

use crate::error::Result;
use candle_core::Tensor;

/// Receives the token state after each iteration of a layer's loop.
///
/// The host uses it to record per-iteration diagnostics (energies, effective rank, angles)
/// without the layer knowing what is measured.
pub trait StateObserver {
    /// Called with `t = 0` for the input and `t = 1..=iterations` after each full iteration
    /// (for Hyper-SET: after the attention and the feedforward sub-step).
    fn observe(&mut self, t: usize, x: &Tensor) -> Result<()>;
}

/// How one forward pass should run.
pub struct Pass<'a> {
    /// Number of iterations to run; evaluation may use more than training (extrapolation).
    pub iterations: usize,
    /// Whether token `i` may only see tokens `<= i` (language modelling).
    pub causal: bool,
    /// Optional observer of the state after every iteration.
    pub observer: Option<&'a mut dyn StateObserver>,
}

impl<'a> Pass<'a> {
    /// A plain pass with `iterations` iterations, not causal, unobserved.
    pub fn new(iterations: usize) -> Self {
        Pass { iterations, causal: false, observer: None }
    }

    /// Reports the state after iteration `t` to the observer, if any.
    pub fn observe(&mut self, t: usize, x: &Tensor) -> Result<()> {
        match self.observer.as_mut() {
            Some(o) => o.observe(t, x),
            None => Ok(()),
        }
    }
}

/// A named energy of one iteration state, one value per sample.
pub struct Energy {
    /// Name as shown in plots (`attention`, `feedforward`, ...).
    pub name: String,
    /// Per-sample values, shape `[B]`.
    pub per_sample: Tensor,
}

/// A layer plugin's model: maps tokens `[B, N, d]` to tokens `[B, N, d]`.
///
/// The layer owns its parameters (created from the `VarBuilder` it was built with), its
/// iteration loop (recurrent depth, step sizes) and the definitions of its energies.
pub trait Layer: Send + Sync {
    /// Width `d` of the tokens the layer reads and writes.
    fn width(&self) -> usize;

    /// Number of iterations used in training (the recurrent depth `L`).
    fn train_iterations(&self) -> usize;

    /// Runs `pass.iterations` iterations on the embedded tokens `x0` (`[B, N, d]`), calling
    /// `pass.observe` after each one, and returns the final state.
    fn forward(&self, x0: &Tensor, pass: &mut Pass<'_>) -> Result<Tensor>;

    /// Whether the layer can run with a causal mask ([`Pass::causal`]).
    fn supports_causal(&self) -> bool {
        false
    }

    /// The layer's named energies of the state `x` reached after iteration `t`, per sample.
    /// `x0` is the layer input (some step-size networks condition on it). Layers that define
    /// no energy return an empty list.
    fn energies(&self, _t: usize, _x: &Tensor, _x0: &Tensor) -> Result<Vec<Energy>> {
        Ok(Vec::new())
    }

    /// The normalised per-head projections `[B, H, N, p]` of the state `x` after iteration
    /// `t`, on which effective rank and average angle are measured. `None` if the layer has
    /// no head subspaces.
    fn head_projections(&self, _t: usize, _x: &Tensor) -> Result<Option<Tensor>> {
        Ok(None)
    }
}

impl<L: Layer + ?Sized> Layer for Box<L> {
    fn width(&self) -> usize {
        (**self).width()
    }
    fn train_iterations(&self) -> usize {
        (**self).train_iterations()
    }
    fn forward(&self, x0: &Tensor, pass: &mut Pass<'_>) -> Result<Tensor> {
        (**self).forward(x0, pass)
    }
    fn supports_causal(&self) -> bool {
        (**self).supports_causal()
    }
    fn energies(&self, t: usize, x: &Tensor, x0: &Tensor) -> Result<Vec<Energy>> {
        (**self).energies(t, x, x0)
    }
    fn head_projections(&self, t: usize, x: &Tensor) -> Result<Option<Tensor>> {
        (**self).head_projections(t, x)
    }
}
