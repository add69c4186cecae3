//! Data-parallel training steps on the CPU: a batch split into shards along its first axis,
//! each shard's forward and backward on its own thread, the gradients summed.
//!
//! Why not leave the cores to each op (candle's and the kernels' own threading)? At the
//! model sizes of this workbench most ops are too small to split well: element-wise ops and
//! candle's backward bookkeeping run on one thread, and every split op pays a hand-off.
//! Shards keep every core busy for the whole step. The training processes therefore run each
//! op on one thread (`RAYON_NUM_THREADS=1`, set at start unless the user sets it) and the
//! trainer's `threads` option says how many shards run at once.
//!
//! The result is the gradient of the whole batch's loss: shard `i`'s loss `L_i` enters as
//! `w_i L_i / sum_j w_j` with `w_i` its [`TaskModel::loss_weight`], and the shards' gradients
//! are added in shard order, so a run is deterministic for a given `threads`.

use crate::host::Plugged;
use anyhow::{anyhow, Result};
use candle_core::backprop::GradStore;
use candle_core::{DType, Tensor};
use plugin_api::{Batch, Layer, MetricTally, Pass, StateObserver, TaskModel};

/// The number of shards for `requested` threads (0: one per core) on a batch of `batch_size`
/// examples: at most one shard per example, and one on devices other than the CPU.
pub fn shard_count(requested: usize, batch_size: usize, on_cpu: bool) -> usize {
    shards_over(requested, batch_size, on_cpu, usable_cores())
}

/// [`shard_count`] where `cores` cores may be used (another machine's: a Slurm job's).
pub fn shards_over(requested: usize, batch_size: usize, on_cpu: bool, cores: usize) -> usize {
    if !on_cpu {
        return 1;
    }
    let threads = match requested {
        0 => cores,
        n => n,
    };
    threads.clamp(1, batch_size.max(1))
}

/// The cores this process may use: those the operating system gives it, and inside a Slurm
/// job no more than Slurm allotted (`SLURM_CPUS_ON_NODE`): a cluster that does not bind jobs
/// to their CPUs would otherwise let a one-CPU job spread over the whole node, slowing the
/// jobs beside it.
pub fn usable_cores() -> usize {
    let os = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    cores_within(os, std::env::var("SLURM_CPUS_ON_NODE").ok().as_deref())
}

/// [`usable_cores`] for `os` cores and Slurm's count, if any (ignored unless a positive number).
fn cores_within(os: usize, slurm_cpus: Option<&str>) -> usize {
    let allotted = slurm_cpus.and_then(|n| n.trim().parse::<usize>().ok()).filter(|&n| n > 0);
    allotted.map_or(os, |n| n.min(os)).max(1)
}

/// `batch` cut into `shards` consecutive parts of near-equal size (sizes differ by at most 1).
pub fn split_batch(batch: &Batch, shards: usize) -> Result<Vec<Batch>> {
    let shards = shards.clamp(1, batch.size.max(1));
    let mut parts = Vec::with_capacity(shards);
    let mut start = 0;
    for i in 0..shards {
        let len = batch.size / shards + usize::from(i < batch.size % shards);
        let cut = |t: &Tensor| -> Result<Tensor> {
            if t.dims().first() != Some(&batch.size) {
                return Err(anyhow!(
                    "a batch tensor of shape {:?} does not have the batch ({}) as its first dimension; \
                     the task must put the batch first (or train with threads=1)",
                    t.dims(),
                    batch.size
                ));
            }
            Ok(t.narrow(0, start, len)?)
        };
        parts.push(Batch {
            inputs: cut(&batch.inputs)?,
            targets: cut(&batch.targets)?,
            mask: batch.mask.as_ref().map(cut).transpose()?,
            size: len,
        });
        start += len;
    }
    Ok(parts)
}

/// The model's loss on `batch` after `iterations` layer iterations.
pub fn forward_loss(
    layer: &Plugged<dyn Layer>,
    model: &Plugged<dyn TaskModel>,
    batch: &Batch,
    iterations: usize,
    causal: bool,
) -> Result<Tensor> {
    let x0 = model.embed(batch, true).map_err(|e| anyhow!("embedding: {e}"))?;
    let mut pass = Pass { iterations, causal, train: true, observer: None };
    let h = layer.forward(&x0, &mut pass).map_err(|e| anyhow!("layer: {e}"))?;
    model.loss(&h, batch).map_err(|e| anyhow!("loss: {e}"))
}

/// One shard's part of a step: its loss value, its weight, the gradients of its weighted
/// share `w_i / total` of the loss, and how long its forward and backward took.
struct ShardResult {
    loss: f64,
    weight: f64,
    grads: GradStore,
    seconds: f64,
}

/// A step's loss and gradients over the whole batch, with each shard's time.
pub struct StepGradients {
    pub loss: f64,
    pub grads: GradStore,
    /// Seconds of each shard's forward and backward, in shard order.
    pub shard_seconds: Vec<f64>,
}

/// Time the shards' threads spent waiting for a step's slowest shard, summed over steps.
///
/// A step ends when its slowest shard does: the others' threads idle meanwhile. On a
/// machine whose cores' speed varies (a shared VM) this is what synchronous data
/// parallelism loses against one single-thread process per core.
#[derive(Debug, Default, Clone, Copy)]
pub struct ShardWaiting {
    waited: f64,
    spanned: f64,
    steps: usize,
}

impl ShardWaiting {
    /// Adds one step's shard times.
    pub fn add(&mut self, shard_seconds: &[f64]) {
        let Some(slowest) = shard_seconds.iter().copied().reduce(f64::max) else { return };
        let mean = shard_seconds.iter().sum::<f64>() / shard_seconds.len() as f64;
        self.waited += slowest - mean;
        self.spanned += slowest;
        self.steps += 1;
    }

    /// Whether no step has been added.
    pub fn is_empty(&self) -> bool {
        self.steps == 0
    }

    /// The waiting as a share of the shards' threads' time (0 to 1; 0 with one shard).
    pub fn share(&self) -> f64 {
        if self.spanned > 0.0 {
            self.waited / self.spanned
        } else {
            0.0
        }
    }

    /// The slowest shard's mean time per step, in seconds.
    pub fn slowest_mean(&self) -> f64 {
        self.spanned / self.steps.max(1) as f64
    }
}

/// The loss of the whole `batch` and its gradients, the batch split over `shards` threads.
/// A non-finite loss is returned as is (with the gradients of whatever it produced), for the
/// caller to stop the run.
pub fn loss_and_grads(
    layer: &Plugged<dyn Layer>,
    model: &Plugged<dyn TaskModel>,
    batch: &Batch,
    iterations: usize,
    causal: bool,
    shards: usize,
    vars: &[Tensor],
) -> Result<StepGradients> {
    let parts = split_batch(batch, shards)?;
    let weights = parts
        .iter()
        .map(|part| model.loss_weight(part).map_err(|e| anyhow!("loss weight: {e}")))
        .collect::<Result<Vec<f64>>>()?;
    let total: f64 = weights.iter().sum();
    let run_shard = |part: &Batch, weight: f64| -> Result<ShardResult> {
        let started = std::time::Instant::now();
        let loss = forward_loss(layer, model, part, iterations, causal)?;
        let share = if total > 0.0 { weight / total } else { 1.0 / parts.len() as f64 };
        let loss_value = loss.to_dtype(DType::F64)?.to_scalar::<f64>()?;
        let grads = (loss * share)?.backward()?;
        Ok(ShardResult { loss: loss_value, weight: share, grads, seconds: started.elapsed().as_secs_f64() })
    };
    let results: Vec<Result<ShardResult>> = std::thread::scope(|scope| {
        let others: Vec<_> = parts
            .iter()
            .zip(&weights)
            .skip(1)
            .map(|(part, &weight)| scope.spawn(move || run_shard(part, weight)))
            .collect();
        let mut results = vec![run_shard(&parts[0], weights[0])];
        results.extend(others.into_iter().map(|handle| {
            handle.join().unwrap_or_else(|_| Err(anyhow!("a training thread panicked outside the plugins' guards")))
        }));
        results
    });
    let mut results = results.into_iter().collect::<Result<Vec<_>>>()?.into_iter();
    let first = results.next().ok_or_else(|| anyhow!("an empty batch has no loss"))?;
    let mut loss = first.loss * first.weight;
    let mut grads = first.grads;
    let mut shard_seconds = vec![first.seconds];
    for shard in results {
        loss += shard.loss * shard.weight;
        shard_seconds.push(shard.seconds);
        for var in vars {
            if let Some(g) = shard.grads.get(var) {
                let sum = match grads.get(var) {
                    Some(acc) => (acc + g)?,
                    None => g.clone(),
                };
                grads.insert(var, sum);
            }
        }
    }
    Ok(StepGradients { loss, grads, shard_seconds })
}

/// Metric sums over the evaluation set at `iterations` layer iterations, its batches spread
/// over `threads` threads; `observer`, if any, sees the states of the first batch's forward
/// pass. The sums are merged in batch order, whatever thread ran a batch.
pub fn evaluate(
    layer: &Plugged<dyn Layer>,
    model: &Plugged<dyn TaskModel>,
    batches: &[Batch],
    iterations: usize,
    causal: bool,
    threads: usize,
    observer: Option<&mut dyn StateObserver>,
) -> Result<MetricTally> {
    let run_batch = |batch: &Batch, mut observer: Option<&mut dyn StateObserver>| -> Result<MetricTally> {
        // The observer sees the first pass only (of several when the task decodes iteratively).
        let mut layer_pass = |x0: &Tensor| -> plugin_api::Result<Tensor> {
            let mut pass = Pass { iterations, causal, train: false, observer: observer.take() };
            layer.forward(&x0.detach(), &mut pass)
        };
        if let Some(tally) = model.evaluate_decoding(batch, &mut layer_pass) {
            return tally.map_err(|e| anyhow!("evaluation at {iterations} iterations: {e}"));
        }
        let x0 = model.embed(batch, false).map_err(|e| anyhow!("embedding: {e}"))?;
        let h = layer_pass(&x0).map_err(|e| anyhow!("layer at {iterations} iterations: {e}"))?;
        model.evaluate(&h, batch).map_err(|e| anyhow!("evaluation: {e}"))
    };
    let Some((first, rest)) = batches.split_first() else {
        return Ok(MetricTally::default());
    };
    let threads = threads.max(1);
    let tallies: Vec<Result<MetricTally>> = std::thread::scope(|scope| {
        // Thread k (k >= 1) takes batches k, k + threads, ... of the whole list; the calling
        // thread takes the first batch (with the observer) and its share of the rest.
        let workers: Vec<_> = (1..threads)
            .map(|k| {
                scope.spawn(move || {
                    (k..batches.len()).step_by(threads).map(|i| (i, run_batch(&batches[i], None))).collect::<Vec<_>>()
                })
            })
            .collect();
        let mut indexed = vec![(0, run_batch(first, observer))];
        indexed.extend((threads..=rest.len()).step_by(threads).map(|i| (i, run_batch(&batches[i], None))));
        for worker in workers {
            match worker.join() {
                Ok(done) => indexed.extend(done),
                Err(_) => indexed.push((usize::MAX, Err(anyhow!("an evaluation thread panicked")))),
            }
        }
        indexed.sort_by_key(|(i, _)| *i);
        indexed.into_iter().map(|(_, tally)| tally).collect()
    });
    let mut tally = MetricTally::default();
    for part in tallies {
        tally.merge(&part?);
    }
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn threads_zero_means_one_shard_per_usable_core_and_at_most_one_per_example() {
        assert_eq!(shards_over(0, 16, true, 4), 4);
        assert_eq!(shards_over(0, 2, true, 8), 2);
        assert_eq!(shards_over(3, 16, true, 1), 3, "asked for: taken as given");
        assert_eq!(shards_over(0, 16, false, 8), 1, "one shard on a GPU");
    }

    #[test]
    fn a_slurm_job_uses_the_cpus_slurm_allotted() {
        assert_eq!(cores_within(16, None), 16, "outside Slurm: every core");
        assert_eq!(cores_within(16, Some("4")), 4);
        assert_eq!(cores_within(2, Some("8")), 2, "never more than the system gives");
        assert_eq!(cores_within(16, Some("")), 16);
        assert_eq!(cores_within(16, Some("0")), 16);
        assert_eq!(cores_within(16, Some("two")), 16);
    }

    fn batch(size: usize) -> Batch {
        let dev = Device::Cpu;
        Batch {
            inputs: Tensor::arange(0u32, (size * 3) as u32, &dev).unwrap().reshape((size, 3)).unwrap(),
            targets: Tensor::arange(0u32, size as u32, &dev).unwrap(),
            mask: Some(Tensor::ones((size, 3), DType::F32, &dev).unwrap()),
            size,
        }
    }

    #[test]
    fn shards_are_consecutive_and_near_equal() {
        let parts = split_batch(&batch(7), 3).unwrap();
        assert_eq!(parts.iter().map(|p| p.size).collect::<Vec<_>>(), [3, 2, 2]);
        let firsts: Vec<u32> = parts.iter().map(|p| p.targets.to_vec1::<u32>().unwrap()[0]).collect();
        assert_eq!(firsts, [0, 3, 5]);
        assert_eq!(parts[2].inputs.to_vec2::<u32>().unwrap(), [[15, 16, 17], [18, 19, 20]]);
        assert_eq!(parts[1].mask.as_ref().unwrap().dims(), [2, 3]);
        // Never more shards than examples.
        assert_eq!(split_batch(&batch(2), 8).unwrap().len(), 2);
    }

    #[test]
    fn a_tensor_without_the_batch_first_is_refused() {
        let mut b = batch(4);
        b.targets = Tensor::zeros(3, DType::U32, &Device::Cpu).unwrap();
        let err = match split_batch(&b, 2) {
            Ok(_) => panic!("a batch with a misplaced batch axis was split"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("first dimension") && err.contains("threads=1"), "{err}");
    }

    #[test]
    fn waiting_is_the_slowest_shard_minus_the_mean() {
        let mut waiting = ShardWaiting::default();
        assert_eq!(waiting.share(), 0.0);
        // One shard never waits.
        waiting.add(&[0.2]);
        assert_eq!(waiting.share(), 0.0);
        // Shards of 0.1 and 0.3 s: the step spans 0.3 s, the mean thread works 0.2 s of it.
        waiting.add(&[0.1, 0.3]);
        assert!((waiting.share() - 0.1 / 0.5).abs() < 1e-12, "{}", waiting.share());
        assert!((waiting.slowest_mean() - 0.25).abs() < 1e-12);
        waiting.add(&[]);
        assert!((waiting.share() - 0.2).abs() < 1e-12);
    }

    #[test]
    fn shard_count_follows_threads_batch_and_device() {
        assert_eq!(shard_count(4, 16, true), 4);
        assert_eq!(shard_count(4, 3, true), 3);
        assert_eq!(shard_count(4, 16, false), 1);
        assert!(shard_count(0, 1024, true) >= 1);
    }
}
