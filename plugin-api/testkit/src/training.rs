//! Short training runs: the tests that show a layer or a task model can learn at all.

use plugin_api::candle::{Tensor, Var};
use plugin_api::candle_nn::{AdamW, Optimizer, ParamsAdamW};

/// `steps` steps of AdamW at learning rate `lr` without weight decay (the optimiser of every
/// training test) on `loss(step)`.
pub fn train(vars: Vec<Var>, lr: f64, steps: usize, mut loss: impl FnMut(usize) -> Tensor) {
    let mut optimiser = AdamW::new(vars, ParamsAdamW { lr, weight_decay: 0.0, ..Default::default() }).unwrap();
    for step in 0..steps {
        optimiser.backward_step(&loss(step)).unwrap();
    }
}

/// The value of a fixed objective before and after `train`ing on it for `steps` steps: the
/// "trains on a toy objective" tests compare the two.
pub fn loss_before_and_after(vars: Vec<Var>, lr: f64, steps: usize, loss: impl Fn() -> Tensor) -> (f64, f64) {
    let before = crate::scalar(&loss());
    train(vars, lr, steps, |_| loss());
    (before, crate::scalar(&loss()))
}

/// The mean of `(y - target)^2` over all entries: the toy objectives' loss.
pub fn mean_squared_error(y: &Tensor, target: &Tensor) -> Tensor {
    (y - target).unwrap().sqr().unwrap().mean_all().unwrap()
}

/// The toy objectives' target: every token of `x` `[B, N, d]` replaced by the mean of its
/// sequence, which a layer can only reach by mixing tokens.
pub fn sequence_mean(x: &Tensor) -> Tensor {
    x.mean_keepdim(1).unwrap().broadcast_as(x.shape()).unwrap().contiguous().unwrap()
}
