//! The task contract: data, embedding, head, loss and evaluation metrics.

use crate::error::Result;
use candle_core::{Device, Tensor};
use candle_nn::VarBuilder;
use std::collections::BTreeMap;

/// A metric a task reports.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricSpec {
    /// Name as stored (`cell_acc`, `board_acc`, `ppl`, ...).
    pub name: String,
    /// Whether larger values are better (accuracy) or worse (loss, perplexity).
    pub higher_is_better: bool,
}

impl MetricSpec {
    /// A metric where larger is better.
    pub fn higher(name: &str) -> Self {
        MetricSpec { name: name.into(), higher_is_better: true }
    }
    /// A metric where smaller is better.
    pub fn lower(name: &str) -> Self {
        MetricSpec { name: name.into(), higher_is_better: false }
    }
}

/// Static facts about a configured task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskInfo {
    /// Tokens per example `N`.
    pub seq_len: usize,
    /// Whether the layer must run causally.
    pub causal: bool,
    /// Metrics reported by [`TaskModel::evaluate`]; the first is the headline metric.
    pub metrics: Vec<MetricSpec>,
    /// Number of training examples (for epochs in progress displays); `None` if unbounded.
    pub train_examples: Option<usize>,
    /// Number of evaluation examples.
    pub eval_examples: usize,
}

/// What a configured task needs, known from its configuration alone (no data made or read),
/// so the host can estimate a run's memory before the run is stored. Declared with
/// [`crate::Declaration::with_footprint`], whose function also builds the task's model into
/// the `VarBuilder` it is given (the host's counts parameters there without allocating them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    /// Tokens per example `N` (as [`TaskInfo::seq_len`] will say).
    pub seq_len: usize,
    /// Bytes the task's training and evaluation data hold in memory (an upper bound where
    /// only the data can tell).
    pub data_bytes: u64,
}

/// Where a task reports how far the preparation of its data has come, so the host can show
/// the progress of a long generation or read (`puzzles 2400000/10000000`).
#[derive(Clone, Copy)]
pub struct Progress<'a>(&'a (dyn Fn(&str, u64, u64) + Sync));

impl<'a> Progress<'a> {
    /// Progress reported to `report(what, done, total)`.
    pub fn new(report: &'a (dyn Fn(&str, u64, u64) + Sync)) -> Self {
        Progress(report)
    }

    /// Progress that nobody follows.
    pub fn ignored() -> Progress<'static> {
        Progress(&|_, _, _| {})
    }

    /// `done` of `total` units of `what` (e.g. "training puzzles") are ready.
    pub fn report(&self, what: &str, done: u64, total: u64) {
        (self.0)(what, done, total)
    }
}

/// One batch of examples, already on the device.
pub struct Batch {
    /// Model inputs (token ids, pixels...), first dimension the batch.
    pub inputs: Tensor,
    /// Targets (class ids, token ids...), first dimension the batch.
    pub targets: Tensor,
    /// Optional mask of positions that count in the loss (1.0) or not (0.0), first
    /// dimension the batch.
    pub mask: Option<Tensor>,
    /// Number of examples.
    pub size: usize,
}

/// Sums and counts of metrics over one or more batches, so that averages over an evaluation
/// set are exact whatever the batch sizes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricTally(pub BTreeMap<String, (f64, f64)>);

impl MetricTally {
    /// Adds `sum` over `count` items to metric `name`.
    pub fn add(&mut self, name: &str, sum: f64, count: f64) {
        let e = self.0.entry(name.to_string()).or_insert((0.0, 0.0));
        e.0 += sum;
        e.1 += count;
    }

    /// Adds every metric of `other`.
    pub fn merge(&mut self, other: &MetricTally) {
        for (name, (s, c)) in &other.0 {
            self.add(name, *s, *c);
        }
    }

    /// The mean of each metric (`sum / count`), skipping metrics with no items.
    pub fn means(&self) -> BTreeMap<String, f64> {
        self.0.iter().filter(|(_, (_, c))| *c > 0.0).map(|(n, (s, c))| (n.clone(), s / c)).collect()
    }
}

/// A configured task: owns its data set (generated from the run's seed or read from files).
pub trait Task: Send {
    /// Shape and metrics of the task.
    fn info(&self) -> Result<TaskInfo>;

    /// The training batch for optimisation step `step`. It must depend only on the run seed
    /// and `step`, so that a resumed run sees the same batches as an uninterrupted one.
    fn train_batch(&self, step: u64, batch_size: usize, device: &Device) -> Result<Batch>;

    /// The fixed evaluation set, in batches of at most `batch_size`, truncated to at most
    /// `max_examples` examples.
    fn eval_batches(&self, batch_size: usize, max_examples: usize, device: &Device) -> Result<Vec<Batch>>;

    /// Builds the embedding and the head, creating their parameters from `vb`, for a layer
    /// of width `width`.
    fn build_model(&self, vb: VarBuilder, width: usize) -> Result<Box<dyn TaskModel>>;
}

/// The trainable part of a task: embedding, head, loss and metrics.
pub trait TaskModel: Send + Sync {
    /// Embeds a batch into tokens `[B, N, width]`. `train` enables training-only behaviour
    /// (augmentation, dropout).
    fn embed(&self, batch: &Batch, train: bool) -> Result<Tensor>;

    /// The scalar training loss of the layer output `h` (`[B, N, width]`): a mean over the
    /// batch's examples, or over the positions its mask selects.
    fn loss(&self, h: &Tensor, batch: &Batch) -> Result<Tensor>;

    /// The total weight of `batch` in [`TaskModel::loss`]'s mean, so that the losses of the
    /// parts of a split batch combine into the loss of the whole (data-parallel training:
    /// `sum_i w_i L_i / sum_i w_i`). The default fits the two forms `loss` documents: the
    /// mask's sum when the batch has a mask, the number of examples otherwise. A task whose
    /// loss weighs examples otherwise overrides it.
    fn loss_weight(&self, batch: &Batch) -> Result<f64> {
        match &batch.mask {
            Some(mask) => Ok(mask.to_dtype(candle_core::DType::F64)?.sum_all()?.to_scalar::<f64>()?),
            None => Ok(batch.size as f64),
        }
    }

    /// Metric sums of the layer output `h` on `batch` (for [`TaskInfo::metrics`]); `loss`
    /// should be included so evaluation loss is reported too.
    fn evaluate(&self, h: &Tensor, batch: &Batch) -> Result<MetricTally>;

    /// Metric sums of an evaluation that runs the layer more than once on `batch`, as
    /// iterative decoding does (MaskGIT's: predict, keep the most confident predictions,
    /// predict again). `layer` is one forward pass of the host's layer, at the evaluation's
    /// depth: embedded tokens `[B, N, width]` in, the layer's output out. `None` (the
    /// default): the host evaluates one pass with [`TaskModel::evaluate`].
    fn evaluate_decoding(&self, _batch: &Batch, _layer: LayerPass<'_>) -> Option<Result<MetricTally>> {
        None
    }
}

/// One forward pass of the layer, handed to [`TaskModel::evaluate_decoding`].
pub type LayerPass<'a> = &'a mut dyn FnMut(&Tensor) -> Result<Tensor>;

impl<M: TaskModel + ?Sized> TaskModel for Box<M> {
    fn embed(&self, batch: &Batch, train: bool) -> Result<Tensor> {
        (**self).embed(batch, train)
    }
    fn loss(&self, h: &Tensor, batch: &Batch) -> Result<Tensor> {
        (**self).loss(h, batch)
    }
    fn loss_weight(&self, batch: &Batch) -> Result<f64> {
        (**self).loss_weight(batch)
    }
    fn evaluate(&self, h: &Tensor, batch: &Batch) -> Result<MetricTally> {
        (**self).evaluate(h, batch)
    }
    fn evaluate_decoding(&self, batch: &Batch, layer: LayerPass<'_>) -> Option<Result<MetricTally>> {
        (**self).evaluate_decoding(batch, layer)
    }
}
