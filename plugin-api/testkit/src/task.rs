//! Task models: built on a fresh `VarMap`, evaluated and trained with a layer (or nothing)
//! between the embedding and the head, as the host's training loop runs them.

use plugin_api::candle::{DType, Device, Tensor, Var};
use plugin_api::candle_nn::VarMap;
use plugin_api::{Batch, MetricTally, Task, TaskModel};

/// The task's model of width `width` on the CPU in f32, its parameters in a fresh `VarMap`.
pub fn build_task_model(task: &dyn Task, width: usize) -> (VarMap, Box<dyn TaskModel>) {
    crate::build(DType::F32, |vb| task.build_model(vb, width))
}

/// The metrics of `model` over `batches` (evaluation mode), with `layer` applied between the
/// embedding and the head, merged as the host merges them.
pub fn evaluate_all(
    model: &dyn TaskModel,
    batches: &[Batch],
    layer: impl Fn(&Tensor, &Batch) -> Tensor,
) -> MetricTally {
    let mut tally = MetricTally::default();
    for batch in batches {
        let h = layer(&model.embed(batch, false).unwrap(), batch);
        tally.merge(&model.evaluate(&h, batch).unwrap());
    }
    tally
}

/// The gradient size of every parameter of the task's model (width `width`, from
/// `build_task_model`), by name, for the loss of training batch 0 of `batch_size` examples with
/// `layer` between the embedding and the head: the task side of "every parameter receives a
/// gradient" (`layer` stands in for a layer plugin; one that mixes tokens reaches a `[CLS]` head).
pub fn task_gradient_sizes(
    task: &dyn Task,
    width: usize,
    batch_size: usize,
    layer: impl Fn(&Tensor) -> Tensor,
) -> Vec<(String, f64)> {
    let (map, model) = build_task_model(task, width);
    let batch = task.train_batch(0, batch_size, &Device::Cpu).unwrap();
    let h = layer(&model.embed(&batch, true).unwrap());
    crate::gradient_sizes(&map, &model.loss(&h, &batch).unwrap().backward().unwrap())
}

/// Trains `vars` (embedding, `layer` and head) with `steps` AdamW steps at `lr` on the task's
/// training batches of `batch_size`, batch `s` at step `s`, the loss taken after `layer`.
pub fn train_on_task(
    task: &dyn Task,
    model: &dyn TaskModel,
    layer: impl Fn(&Tensor, &Batch) -> Tensor,
    vars: Vec<Var>,
    lr: f64,
    steps: usize,
    batch_size: usize,
) {
    crate::train(vars, lr, steps, |step| {
        let batch = task.train_batch(step as u64, batch_size, &Device::Cpu).unwrap();
        model.loss(&layer(&model.embed(&batch, true).unwrap(), &batch), &batch).unwrap()
    });
}
