//! The worker: trains one stored run in its own process, so that a crashing plugin can never
//! take down the process that launched it.
//!
//! Loop: AdamW with a cosine schedule and warm-up, global gradient clipping, evaluation
//! every `eval_every` steps at the training depth and at the extra depths of
//! `eval_depths`, a safetensors checkpoint at each evaluation, metrics written to the store in
//! batched transactions by a thread of their own that rides out store outages
//! ([`super::outbox`]), per-iteration diagnostics of the first evaluation batch at each depth
//! ([`crate::diagnostics`], from the states of the evaluation's own forward pass). A non-finite
//! loss stops the run as `diverged`; SIGINT / SIGTERM stop it as `interrupted` after saving
//! what it has.

use super::background::Background;
use super::checkpoint;
use super::evaluation::{self, DepthReport};
use super::events::Event;
use super::optim::{clip_scale, global_grad_norm, AdamW, AdamWConfig};
use super::outbox::{with_retries, Outbox};
use super::parallel::{self, ShardWaiting};
use super::schedule::cosine_with_warmup;
use super::system;
use crate::host::PluginHost;
use crate::params::Params;
use crate::run_config::{RunConfig, TrainSettings};
use crate::store::{Lease, MetricDirection, RunStatus, Store, LEASE};
use anyhow::{anyhow, Context, Result};
use candle_core::DType;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The files of run `id`, relative to the artifacts directory: `runs/<id>/`. Artifact rows
/// record paths relative to that directory, so a store stays valid when every node mounts the
/// directory at another place.
pub fn run_files(id: i64) -> PathBuf {
    Path::new("runs").join(id.to_string())
}

/// The checkpoint of run `id`, relative to the artifacts directory.
pub fn checkpoint_file(id: i64) -> PathBuf {
    run_files(id).join("checkpoint.safetensors")
}

/// Where the checkpoint of run `id` lives: `runs/<id>/checkpoint.safetensors` in the store's
/// artifacts directory (next to an SQLite file unless another is given).
pub fn checkpoint_path(store: &Store, id: i64) -> Result<PathBuf> {
    Ok(store.artifacts_dir()?.join(checkpoint_file(id)))
}

/// Run `id`'s checkpoint file, if it has one.
pub fn existing_checkpoint(store: &Store, id: i64) -> Result<Option<PathBuf>> {
    let path = checkpoint_path(store, id)?;
    Ok(path.is_file().then_some(path))
}

/// How a training loop ended.
enum Outcome {
    Finished,
    Diverged(String),
    /// Stopped at this step, with a checkpoint.
    Interrupted(u64),
    /// The lease was lost: stopped without writing anything more.
    Abandoned,
}

/// Why the training loop should stop: `stop` (signal or stop request: checkpoint and end) or
/// `lost` (the lease: end without writing).
#[derive(Clone, Copy)]
struct StopFlags<'a> {
    stop: &'a AtomicBool,
    lost: &'a AtomicBool,
}

/// Opens the store for the worker of run `run_id`: one connection, closed while the run
/// trains (its heartbeat and writer share another), so that a cluster's workers stay within
/// the server's connection limit. A server that does not take the connection yet (restarting,
/// or at that limit until other workers end) is waited for as an outage is, saying so on
/// stderr, the job's log.
pub async fn connect(location: &crate::store::StoreLocation, run_id: i64) -> Result<Store> {
    let (waiting, role) = ("the worker waits to start the run", format!("run {run_id} start and end"));
    with_retries(waiting, || Store::connect_occasional(location, &role), |line| log_line(run_id, &line)).await
}

/// Who started a worker, which decides when it may start its run.
#[derive(Debug, Default)]
pub struct StartedBy {
    /// The process on this host whose claim the worker starts the run under
    /// ([`Store::mark_running_claimed`]).
    pub claimed_by: Option<u32>,
    /// The token of the Slurm submission whose job runs the worker
    /// ([`Store::mark_running_in_job`]).
    pub submission: Option<String>,
}

/// Runs the worker for `run_id`; `resume` continues from the run's checkpoint. A worker that a
/// process on this host started under its claim starts the run only while that claim holds; a
/// Slurm job's worker only if the run is its job's or has no job yet and was not submitted
/// again since (see [`StartedBy`]).
///
/// The worker holds the run's lease while it trains (a heartbeat on its background thread,
/// see `Heartbeat`). It stops at its next step, with a checkpoint, on SIGINT or SIGTERM or when
/// a stop is requested through the store. A run marked interrupted while this worker was
/// frozen or cut off from the store is taken back when the store answers again, unless it was
/// resumed, requeued or deleted meanwhile: then the lease is lost and the worker ends without
/// writing to the run.
pub async fn run(store: &Store, host: &PluginHost, run_id: i64, resume: bool, started_by: &StartedBy) -> Result<()> {
    let signals = StopSignals::install()?;
    let record = store.run(run_id).await?;
    if let Some(damage) = &record.damage {
        anyhow::bail!("run {run_id} cannot be trained: {damage}; its data can still be read, exported or deleted");
    }
    let config = RunConfig::from_json(&record.config)?;
    let pid = std::process::id();
    if let Some(job) = restarted_by_scheduler(&record) {
        // Slurm requeued this run's job (preemption, node failure, `scontrol requeue`, a time
        // limit): the worker it stopped recorded the run interrupted, and this one continues it.
        store.take_back_for_job(run_id, pid, &job).await?;
    }
    match (started_by.claimed_by, slurm_job()) {
        (Some(runner), _) => store.mark_running_claimed(run_id, pid, runner).await?,
        (None, Some(job)) => store.mark_running_in_job(run_id, pid, &job, started_by.submission.as_deref()).await?,
        (None, None) => store.mark_running(run_id, pid).await?,
    }
    let stop = signals.stop.clone();
    let background = Background::start(store, run_id)?;
    let heartbeat = Heartbeat::start(&background, run_id, pid, stop.clone());
    record_builds(store, host, run_id, &config).await?;
    let checkpoint = checkpoint_file(run_id).to_string_lossy().into_owned();
    let outbox = Outbox::start(&background, run_id, checkpoint, heartbeat.lost.clone());
    let mut log = RunLog { outbox: &outbox, run_id };
    let flags = StopFlags { stop: &stop, lost: &heartbeat.lost };
    // A Slurm job always starts its worker with `--resume` (a requeued job must continue);
    // only a run that started before has an attempt to resume or restart.
    let resume = resume && record.started_at.is_some();
    let result = match config.evaluates {
        // A run of `workbench eval`: scored, not trained; run again whole if its job is.
        Some(source) => {
            super::scoring::evaluate_checkpoint(store, host, run_id, source, &config).await.map(|()| Outcome::Finished)
        }
        None => train(store, host, run_id, &config, resume, flags, &mut log).await,
    };
    let lost = || {
        let message = format!(
            "run {run_id} is no longer this worker's (while this worker could not renew its lease, the run \
             was resumed, requeued or deleted); stopped without writing to it"
        );
        log_line(run_id, &message);
        anyhow::anyhow!(message)
    };
    if heartbeat.lost() {
        heartbeat.finish().await;
        return Err(lost());
    }
    let requeue = signals.requeue_at_time_limit(&result, &record);
    let mut cause = None;
    let (mut status, mut error) = match &result {
        Ok(Outcome::Interrupted(step)) if signals.time_limit_near() => {
            let (message, requeued) = time_limit_end(run_id, *step, &requeue);
            cause = requeued;
            (RunStatus::Interrupted, Some(message))
        }
        Ok(Outcome::Finished) => (RunStatus::Finished, None),
        Ok(Outcome::Diverged(why)) => (RunStatus::Diverged, Some(why.clone())),
        Ok(Outcome::Abandoned) => unreachable!("an abandoned run has lost its lease"),
        Ok(Outcome::Interrupted(step)) => (
            RunStatus::Interrupted,
            Some(format!(
                "stopped at step {step} (a signal or a stop request), with a checkpoint; \
                 `workbench resume {run_id}` continues it"
            )),
        ),
        Err(e) => (RunStatus::Failed, Some(format!("{e:#}"))),
    };
    if let Some(e) = &error {
        log.line(format!("{status}: {e}"));
    }
    // Everything the run recorded is written before its final status, the lease held
    // meanwhile (the store may be out of reach for a while: the run is taken back or lost
    // when it answers).
    let written = outbox.close().await;
    // One last renewal, so that a run resumed or requeued since the last heartbeat is not
    // given this worker's end.
    if heartbeat.finish().await || matches!(store.heartbeat(run_id, pid).await, Ok(Lease::Lost)) {
        return Err(lost());
    }
    match written {
        Ok(()) => {
            let finish = || store.finish_with_cause(run_id, status, error.as_deref(), cause.as_deref());
            with_retries("the worker waits to record the run's end", finish, |line| log_line(run_id, &line)).await?;
            if let (Ok(job), true) = (&requeue, signals.time_limit_near()) {
                requeue_job(store, run_id, job).await?;
            }
        }
        Err(unwritten) => {
            log_line(run_id, &unwritten);
            if status != RunStatus::Failed {
                status = RunStatus::Failed;
                error =
                    Some(format!("{unwritten}; its checkpoint is on disk: `workbench resume {run_id}` continues it"));
            }
            store.finish(run_id, status, error.as_deref()).await?;
        }
    }
    Event::Finished { status: status.to_string(), error }.emit();
    Ok(())
}

/// The signals that stop a worker at its next step, with a checkpoint: SIGINT and SIGTERM,
/// and in a Slurm job SIGUSR1, the warning that the job's time limit nears (the batch
/// script's `--signal`), after which the worker requeues its job to continue the run.
/// Installed first thing, so that no signal meets the default action (which ends the process
/// without a checkpoint).
struct StopSignals {
    stop: Arc<AtomicBool>,
    time_limit: Arc<AtomicBool>,
    job: Option<String>,
}

impl StopSignals {
    fn install() -> Result<StopSignals> {
        let stop = Arc::new(AtomicBool::new(false));
        let time_limit = Arc::new(AtomicBool::new(false));
        let job = std::env::var("SLURM_JOB_ID").ok().filter(|j| !j.is_empty());
        let register = |signal, flag: &Arc<AtomicBool>| {
            signal_hook::flag::register(signal, flag.clone()).context("cannot install the signal handler")
        };
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            register(signal, &stop)?;
        }
        if job.is_some() {
            register(signal_hook::consts::SIGUSR1, &time_limit)?;
            register(signal_hook::consts::SIGUSR1, &stop)?;
        }
        Ok(StopSignals { stop, time_limit, job })
    }

    fn time_limit_near(&self) -> bool {
        self.time_limit.load(Ordering::Relaxed)
    }

    /// After the time limit's warning stopped the run: the job to requeue (this worker's), or
    /// why it is not requeued. Only the run's own batch job is (a local worker in an
    /// interactive allocation is not), and only after the run trained in it: a job warned
    /// before its first step (a warning as long as the time limit) would start again only to
    /// be warned again.
    fn requeue_at_time_limit(&self, result: &Result<Outcome>, run: &crate::store::RunRecord) -> Result<String, String> {
        let Some(job) = self.job.clone().filter(|job| run.supervision.job_id.as_ref() == Some(job)) else {
            return Err("this worker is not the run's Slurm batch job".into());
        };
        match result {
            Ok(Outcome::Interrupted(step)) if *step > run.last_step => Ok(job),
            _ => Err("no step was taken in this job: is `--slurm signal` as long as the time limit?".into()),
        }
    }
}

/// The run's error, and its cause if the job is requeued, when the time limit's warning
/// stopped it at `step`.
fn time_limit_end(run_id: i64, step: u64, requeue: &Result<String, String>) -> (String, Option<String>) {
    match requeue {
        Ok(job) => (
            format!(
                "stopped at step {step}, with a checkpoint, as its Slurm job {job}'s time limit neared; the job is \
                 requeued and continues the run when it starts again"
            ),
            Some(format!("{} (slurm job {job})", crate::store::TIME_LIMIT_REQUEUED)),
        ),
        Err(why) => (
            format!(
                "stopped at step {step}, with a checkpoint, as its Slurm job's time limit neared; not requeued \
                 ({why}); `workbench resume {run_id}` continues it"
            ),
            None,
        ),
    }
}

/// Requeues this worker's Slurm job once the run's end is recorded; if Slurm refuses, says
/// so in the run's log and cause (the run stays interrupted, to be resumed by hand).
async fn requeue_job(store: &Store, run_id: i64, job: &str) -> Result<()> {
    let Err(e) = crate::executor::slurm::requeue(job) else { return Ok(()) };
    let line = format!(
        "the time limit neared, but requeueing Slurm job {job} failed: {e:#}; `workbench resume {run_id}` \
         continues the run"
    );
    log_line(run_id, &line);
    store.append_logs(run_id, std::slice::from_ref(&line)).await?;
    store.record_cause(run_id, &format!("time limit near; requeueing job {job} failed")).await?;
    Ok(())
}

/// This worker's Slurm job, if the worker is that job's restart of its own interrupted run.
fn restarted_by_scheduler(record: &crate::store::RunRecord) -> Option<String> {
    let job = slurm_job()?;
    (record.status == RunStatus::Interrupted && record.supervision.job_id.as_ref() == Some(&job)).then_some(job)
}

/// The Slurm job this worker runs in, if any.
fn slurm_job() -> Option<String> {
    std::env::var("SLURM_JOB_ID").ok().filter(|job| !job.trim().is_empty())
}

/// How soon a failed heartbeat is tried again.
const HEARTBEAT_RETRY: Duration = Duration::from_secs(1);

/// The worker's lease: a task on the [`Background`] thread renews it every [`LEASE`]
/// heartbeat, whatever the training thread is doing (a long step blocks the runtime it runs
/// on). A stop request read there sets the stop flag; a lost lease sets it too and is
/// reported by [`Heartbeat::finish`].
struct Heartbeat {
    done: Arc<AtomicBool>,
    lost: Arc<AtomicBool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Heartbeat {
    fn start(background: &Background, run_id: i64, pid: u32, stop: Arc<AtomicBool>) -> Heartbeat {
        let done = Arc::new(AtomicBool::new(false));
        let lost = Arc::new(AtomicBool::new(false));
        let (done_flag, lost_flag, shared) = (done.clone(), lost.clone(), background.store());
        let task = background.spawn(async move {
            let mut next = Instant::now();
            while !done_flag.load(Ordering::Relaxed) {
                if Instant::now() >= next {
                    next = Instant::now() + LEASE.heartbeat;
                    // The shared connection is opened at the first beat, and again at the
                    // next while opening fails, as a beat that fails is tried again.
                    let beat = match shared.get().await {
                        Ok(store) => store.heartbeat(run_id, pid).await.map(|lease| (lease, store)),
                        Err(e) => Err(e),
                    };
                    match beat {
                        Ok((Lease::Held, _)) => {}
                        Ok((Lease::StopRequested, _)) => stop.store(true, Ordering::Relaxed),
                        Ok((Lease::Reclaimed, store)) => {
                            let line = "the store had marked this run interrupted while this worker could not \
                                        reach it (its lease expired); nobody resumed it meanwhile, so it runs on";
                            log_line(run_id, line);
                            // In the run's log too; the writer's lines are numbered apart.
                            let _ = store.append_logs(run_id, &[line.to_string()]).await;
                        }
                        Ok((Lease::Lost, _)) => {
                            lost_flag.store(true, Ordering::Relaxed);
                            stop.store(true, Ordering::Relaxed);
                            break;
                        }
                        // A passing failure (the server restarting): tried again within a
                        // second, so that the lease is renewed as soon as the store answers.
                        Err(e) => {
                            log_line(run_id, &format!("heartbeat failed: {e}"));
                            next = Instant::now() + HEARTBEAT_RETRY.min(LEASE.heartbeat);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Heartbeat { done, lost, task: Some(task) }
    }

    /// Whether the lease was lost.
    fn lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }

    /// Stops the heartbeats; returns whether the lease was lost.
    async fn finish(mut self) -> bool {
        self.done.store(true, Ordering::Relaxed);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.lost.load(Ordering::Relaxed)
    }
}

/// What runs a CPU run's kernels, for the end of its log's training line: a run's last bits
/// depend on both, and a run on a cluster may have met another node's
/// (`WORKBENCH_KERNELS_ISA`, `WORKBENCH_BLAS`).
fn cpu_kernels() -> String {
    let products = match plugin_api::blas::in_use() {
        Some(blas) => format!("{} ({})", blas.name(), plugin_api::blas::BLAS_VARIABLE),
        None => "gemm".to_string(),
    };
    format!("; CPU kernels in {} instructions, matrix products on {products}", plugin_api::isa::kernels_isa().name())
}

/// A log line on stderr that never panics (the process following the worker may be gone).
pub(super) fn log_line(run_id: i64, line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "[run {run_id}] {line}");
}

/// Records the builds of the libraries this worker actually loaded: a run queued before a
/// plugin was rebuilt runs the newer library, and its record must say so (`None`, shown as
/// `?`, when the sources are newer than every library built from them).
pub(crate) async fn record_builds(store: &Store, host: &PluginHost, run_id: i64, config: &RunConfig) -> Result<()> {
    let build = |name: &str, kind| host.get(name, kind).ok().and_then(crate::host::build_of);
    let layer = build(&config.layer, plugin_api::PluginKind::Layer);
    let task = build(&config.task, plugin_api::PluginKind::Task);
    store.set_builds(run_id, layer.as_deref(), task.as_deref()).await?;
    Ok(())
}

/// Log lines go to stderr and, through the outbox, to the run's log in the store.
struct RunLog<'a> {
    outbox: &'a Outbox,
    run_id: i64,
}

impl RunLog<'_> {
    fn line(&mut self, line: String) {
        log_line(self.run_id, &line);
        self.outbox.push_log(line);
    }
}

/// Builds the task, reporting a data preparation that takes more than a moment at most once a
/// second: as a `preparing` event for the process following the worker, and as a log line in
/// the store (the TUI's Live screen shows it).
fn prepare_task(
    store: &Store,
    host: &PluginHost,
    run_id: i64,
    config: &RunConfig,
    seed: u64,
) -> Result<crate::host::Plugged<dyn plugin_api::Task>> {
    const EVERY: Duration = Duration::from_secs(1);
    let started = Instant::now();
    let last = std::sync::Mutex::new(started);
    let runtime = tokio::runtime::Handle::current();
    let multi_thread = runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread;
    let report = |what: &str, done: u64, total: u64| {
        let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
        // Nothing for a preparation that ends within a second; then each second and the end.
        if last.elapsed() < EVERY && (done < total || *last == started) {
            return;
        }
        *last = Instant::now();
        Event::Preparing { what: what.to_string(), done, total }.emit();
        let line = format!("preparing the data: {what} {done}/{total}");
        log_line(run_id, &line);
        if multi_thread {
            let _ = runtime.block_on(store.append_logs(run_id, &[line]));
        }
    };
    let build =
        || host.build_task_reporting(&config.task, &config.task_config, seed, plugin_api::Progress::new(&report));
    // The preparation blocks this thread; block_in_place lets the runtime go on elsewhere and
    // the report reach the store from here (the command line's runtime has several threads).
    match multi_thread {
        true => tokio::task::block_in_place(build),
        false => build(),
    }
}

/// A sample of the system metrics ([`system`]) at `step`.
/// Stores a system sample, with the shards' waiting since the previous one (then reset).
fn push_system(outbox: &Outbox, sampler: &mut system::Sampler, waiting: &mut ShardWaiting, step: u64, wall: f64) {
    for (name, value) in sampler.sample() {
        outbox.push(step, system::SPLIT, name, value, wall);
    }
    if !waiting.is_empty() {
        outbox.push(step, system::SPLIT, system::SHARD_WAIT, waiting.share() * 100.0, wall);
        *waiting = ShardWaiting::default();
    }
}

/// The examples an evaluation scores, and the run log's line when fewer than requested: the
/// task's set is smaller than `eval_examples`, which then scores the whole set.
fn eval_examples_note(requested: usize, available: usize, scored: usize) -> Option<String> {
    (requested > available)
        .then(|| format!("eval_examples={requested} but the evaluation set holds {available}: scoring all {scored}"))
}

async fn train(
    store: &Store,
    host: &PluginHost,
    run_id: i64,
    config: &RunConfig,
    resume: bool,
    flags: StopFlags<'_>,
    log: &mut RunLog<'_>,
) -> Result<Outcome> {
    let s = config.settings()?;
    let device = crate::device::parse(&s.device)?;
    let task = prepare_task(store, host, run_id, config, s.seed)?;
    let info = task.info().map_err(|e| anyhow!("task `{}`: {e}", config.task))?;
    let params = Params::new(s.seed);
    let vb = params.var_builder(DType::F32, &device);
    let layer = host.build_layer(&config.layer, &config.layer_config, vb.pp("layer"))?;
    let model = task.build_model(vb.pp("task"), layer.width()).map_err(|e| anyhow!("task `{}`: {e}", config.task))?;
    if info.causal && !layer.supports_causal() {
        anyhow::bail!(
            "layer `{}` cannot run causally, which task `{}` needs; pick a causal layer",
            config.layer,
            config.task
        );
    }
    s.sphere.check(&*layer, &device)?;
    store.set_param_count(run_id, params.count() as u64).await?;
    // Evaluation batches spread over all the threads; training batches over at most one
    // thread per example.
    let threads = parallel::shard_count(s.threads, usize::MAX, device.is_cpu());
    let shards = threads.min(s.batch_size);
    store.set_metric_specs(run_id, &MetricDirection::of_task(&info)).await?;
    let adam = AdamWConfig { beta1: s.beta1, beta2: s.beta2, eps: 1e-8, weight_decay: s.weight_decay };
    let mut opt = AdamW::new(params.vars(), adam)?;
    let ckpt = checkpoint_path(store, run_id)?;
    let mut step = 0;
    if resume && ckpt.is_file() {
        step = checkpoint::load(&ckpt, &mut opt, &device)?;
        log.line(format!("resuming from the checkpoint at step {step}"));
    } else if resume {
        log.line("no checkpoint: restarting from step 0".into());
    }
    // A fine-tuning run starts from another run's parameters, unless it resumed from its own.
    if let (0, Some(source)) = (step, s.init_from) {
        let from = checkpoint_path(store, source)?;
        let saved = checkpoint::load_parameters(&from, &opt, &device)
            .with_context(|| format!("init_from={source}: the parameters of run {source} cannot start this run"))?;
        log.line(format!("starting from the parameters of run {source}'s checkpoint (its step {saved})"));
    }
    // Rows after the restart point belong to the lost attempt and are replaced.
    store.delete_metrics_after(run_id, step).await?;
    // A resumed run's clock goes on from the time its kept rows reach.
    let trained = if step > 0 { store.trained_seconds(run_id).await? } else { 0.0 };
    let eval_batches = task
        .eval_batches(s.eval_batch, s.eval_examples, &device)
        .map_err(|e| anyhow!("task `{}`: {e}", config.task))?;
    let depths = eval_depths(layer.train_iterations(), &s.eval_depths);
    let eval_examples: usize = eval_batches.iter().map(|b| b.size).sum();
    if let Some(note) = eval_examples_note(s.eval_examples, info.eval_examples, eval_examples) {
        log.line(note);
    }
    // Said once, at the start: a resumed run's log has it already.
    if let Some(note) = super::schedule::warmup_note(s.steps, s.warmup, s.lr, s.min_lr).filter(|_| step == 0) {
        log.line(note);
    }
    Event::Started {
        run: run_id,
        total_steps: s.steps,
        start_step: step,
        params: params.count() as u64,
        layer: config.layer.clone(),
        task: config.task.clone(),
    }
    .emit();
    log.line(format!(
        "training {} on {} ({} parameters) from step {step} to {}, {}{}",
        config.layer,
        config.task,
        params.count(),
        s.steps,
        match shards {
            1 => "one thread".to_string(),
            n => format!("batches split over {n} threads"),
        },
        if device.is_cpu() { cpu_kernels() } else { String::new() }
    ));

    let outbox = log.outbox;
    let started = Instant::now();
    let clock = || trained + started.elapsed().as_secs_f64();
    let mut sampler = system::Sampler::new(&s.device);
    let mut waiting = ShardWaiting::default();
    let vars: Vec<_> = opt.slots.iter().map(|slot| slot.var.as_tensor().clone()).collect();
    while step < s.steps {
        if flags.lost.load(Ordering::Relaxed) {
            return Ok(Outcome::Abandoned);
        }
        if let Some(unwritten) = outbox.failed() {
            anyhow::bail!("{unwritten}; stopped at step {step}");
        }
        if flags.stop.load(Ordering::Relaxed) {
            push_system(outbox, &mut sampler, &mut waiting, step, clock());
            outbox.progress(step);
            save_checkpoint(outbox, &s, &ckpt, &opt, step)?;
            return Ok(Outcome::Interrupted(step));
        }
        let t0 = Instant::now();
        let lr = cosine_with_warmup(step, s.steps, s.warmup, s.lr, s.min_lr);
        let batch =
            task.train_batch(step, s.batch_size, &device).map_err(|e| anyhow!("task `{}`: {e}", config.task))?;
        let parallel::StepGradients { loss: loss_value, grads, shard_seconds } =
            parallel::loss_and_grads(&layer, &model, &batch, layer.train_iterations(), info.causal, shards, &vars)?;
        if shards > 1 {
            waiting.add(&shard_seconds);
        }
        let wall = clock();
        if !loss_value.is_finite() {
            outbox.push(step + 1, "train", "loss", loss_value, wall);
            push_system(outbox, &mut sampler, &mut waiting, step + 1, wall);
            outbox.progress(step);
            return Ok(Outcome::Diverged(format!(
                "the training loss became {loss_value} at step {}; lower lr or grad_clip",
                step + 1
            )));
        }
        let norm = global_grad_norm(&grads, vars.iter().cloned())?;
        opt.step(&grads, lr, clip_scale(norm, s.grad_clip))?;
        step += 1;
        let rate = batch.size as f64 / t0.elapsed().as_secs_f64();
        outbox.push(step, "train", "loss", loss_value, wall);
        outbox.push(step, "train", "lr", lr, wall);
        outbox.push(step, "train", "grad_norm", norm, wall);
        outbox.push(step, "train", "samples_per_s", rate, wall);
        Event::Step { step, loss: loss_value, lr, grad_norm: norm, samples_per_s: rate }.emit();
        if sampler.due() {
            push_system(outbox, &mut sampler, &mut waiting, step, wall);
        }
        if step % s.eval_every == 0 || step == s.steps {
            let mut diagnostics = Vec::new();
            let (eval_layer, eval_model) = evaluation::frozen_model(host, &params, config, &task, &device)?;
            let reports = evaluation::evaluate_depths(
                &eval_layer,
                &eval_model,
                &eval_batches,
                &depths,
                layer.train_iterations(),
                info.causal,
                threads,
                step,
                s.sphere,
            )?;
            for report in reports {
                let scored = match report {
                    DepthReport::Scored(scored) => scored,
                    DepthReport::Skipped(line) => {
                        log.line(line);
                        continue;
                    }
                };
                let wall = clock();
                for (name, value) in &scored.means {
                    outbox.push(step, &scored.split, name, *value, wall);
                }
                log.line(scored.log_line(step, eval_examples));
                Event::Eval { step, iterations: scored.iterations, metrics: scored.means }.emit();
                diagnostics.extend(scored.diagnostics);
                for note in scored.notes {
                    log.line(note);
                }
            }
            let wall = clock();
            outbox.push(step, system::SPLIT, system::EVAL_EXAMPLES, eval_examples as f64, wall);
            outbox.push_diagnostics(diagnostics);
            outbox.progress(step);
            // The rows the checkpoint covers are written before it: a worker killed after
            // it loses none of them (unless the store is out of reach just then).
            outbox.sync().await;
            save_checkpoint(outbox, &s, &ckpt, &opt, step)?;
        }
        outbox.progress(step);
    }
    push_system(outbox, &mut sampler, &mut waiting, step, clock());
    outbox.progress(step);
    Ok(Outcome::Finished)
}

/// Writes the checkpoint of `step` (unless checkpoints are off); the outbox records it.
fn save_checkpoint(outbox: &Outbox, s: &TrainSettings, path: &Path, opt: &AdamW, step: u64) -> Result<()> {
    if !s.checkpoint {
        return Ok(());
    }
    checkpoint::save(path, opt, step)?;
    outbox.checkpoint(step);
    Ok(())
}

/// The training depth first, then each extra multiple, rounded, without repeats.
pub fn eval_depths(train_iterations: usize, multiples: &[f64]) -> Vec<usize> {
    let mut depths = vec![train_iterations];
    for m in multiples {
        let d = ((train_iterations as f64) * m).round().max(1.0) as usize;
        if !depths.contains(&d) {
            depths.push(d);
        }
    }
    depths
}

#[cfg(test)]
mod tests {
    use super::eval_examples_note;

    #[test]
    fn a_capped_evaluation_set_is_said_once_with_the_numbers() {
        assert_eq!(
            eval_examples_note(1000, 360, 360).as_deref(),
            Some("eval_examples=1000 but the evaluation set holds 360: scoring all 360")
        );
        // Fewer requested than held: the count is recorded with each evaluation, no note.
        assert_eq!(eval_examples_note(256, 360, 256), None);
        assert_eq!(eval_examples_note(360, 360, 360), None);
    }
}
