//! `workbench sweep`, `workbench sweeps` and `workbench queue`.

use crate::executor::Executor;
use crate::exit_code::{self, refused};
use crate::experiment_file::Experiment;
use crate::host::PluginHost;
use crate::ops;
use crate::ops::grid::plan;
use crate::queue::QueueRunner;
use crate::store::{Claims, MetricSummary, RunRecord, RunStatus, ServerConnections, Store, StoreOutage, SweepRecord};
use crate::train::launch::say_above;
use crate::wording::count;
use anyhow::{anyhow, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

/// How often a foreground queue runner looks for free slots.
const POLL: Duration = Duration::from_millis(500);

/// What a sweep command was given.
pub struct SweepArgs<'a> {
    /// Comma-separated layers given with --layer (else the files', else the default).
    pub layers: Option<&'a str>,
    pub task: Option<&'a str>,
    /// Experiment files, composed in order before the axes.
    pub configs: &'a [PathBuf],
    pub axes: &'a [String],
    pub name: Option<&'a str>,
    pub jobs: usize,
    /// Whether `jobs` was given (`--jobs`) rather than the default.
    pub jobs_chosen: bool,
    pub detach: bool,
    /// Plan and check the grid, print it, queue nothing.
    pub dry_run: bool,
    pub executor: &'a Executor,
    /// JSON lines on stdout instead of messages and a progress bar (see `Report`).
    pub json: bool,
}

/// Plans the grid (every bad point reported), queues it as one sweep, then (unless detached)
/// runs the queue until the sweep is done.
pub async fn sweep(store: &Store, host: &PluginHost, dirs: &[PathBuf], args: SweepArgs<'_>) -> Result<i32> {
    host.refuse_plugin_names(args.axes).map_err(refused)?;
    let experiment = Experiment::load(args.configs).map_err(refused)?;
    let spec = experiment.sweep_spec(args.layers, args.task, args.axes).map_err(refused)?;
    args.executor.check(store).map_err(refused)?;
    let points = plan(host, &spec).map_err(refused)?;
    let name = args.name.map(str::to_string).or(experiment.name.clone()).unwrap_or_else(|| spec.default_name());
    let runs = ops::launch::new_runs_of(host, points.iter().map(|p| &p.config)).map_err(refused)?;
    args.executor.check_runs(&runs).map_err(refused)?;
    ops::launch::check_starting_points(store, &runs).await.map_err(refused)?;
    if args.dry_run {
        if args.json {
            let runs = points.iter().map(|p| PlannedRun { layer: &p.layer, overrides: &p.overrides }).collect();
            Report::Planned { name: &name, runs }.print();
        } else {
            println!("sweep {name}: {} (a dry run: nothing was queued)", count(points.len(), "run"));
            for (n, point) in points.iter().enumerate() {
                println!("  {:>4}  {} {}", n + 1, point.layer, point.overrides.join(" "));
            }
        }
        return Ok(0);
    }
    let queued = ops::launch::queue_sweep(store, &name, &spec, &runs).await?;
    if args.json {
        let runs = queued.runs.iter().zip(&points);
        Report::Queued {
            sweep: queued.sweep,
            name: &name,
            runs: runs
                .map(|(&run, p)| QueuedRun { run, point: PlannedRun { layer: &p.layer, overrides: &p.overrides } })
                .collect(),
        }
        .print();
    } else {
        tracing::info!("sweep {} ({name}): {} queued", queued.sweep, count(queued.runs.len(), "run"));
        for (id, point) in queued.runs.iter().zip(&points) {
            tracing::info!("  run {id}: {} {}", point.layer, point.overrides.join(" "));
        }
    }
    // A detached sweep's runs start with whatever `workbench queue --jobs` says later.
    if !args.detach && !args.json {
        let on_cpu_by_default = points.iter().all(|p| {
            p.config.train.usize("threads").ok() == Some(0) && p.config.train.str("device").ok() == Some("cpu")
        });
        // What `threads=0` resolves to in a worker: one shard per core.
        let cores = crate::train::parallel::shard_count(0, usize::MAX, true);
        // More than one worker already (one per CUDA device), or workers the user chose.
        let workers_chosen = args.jobs_chosen || args.jobs > 1 || !matches!(args.executor, Executor::Local);
        if let Some(hint) = per_core_hint(points.len(), on_cpu_by_default, workers_chosen, cores) {
            tracing::info!("{hint}");
        }
    }
    if args.detach {
        if !args.json {
            tracing::info!("the queue lives in {}: `workbench queue` (or the TUI) starts them", store.location());
        }
        return Ok(0);
    }
    run_until_done(store, dirs, args.jobs, args.executor, Claims::mine(store), Some(&queued.runs), args.json).await
}

/// A CPU worker splits each batch over every core (`threads=0`) and the queue runs one worker
/// at a time; for a sweep of several runs, one single-thread worker per core finishes sooner
/// (measured in the README's "Sweeps and the queue": partly the training step, partly the parts of a
/// run that use one core, such as its start and the optimiser step). Said, not imposed:
/// `threads` is part of each run's configuration and changes its sums' order. `None` when
/// the workers are chosen (`--jobs`, another executor) or several already (one per CUDA
/// device), when the runs set `threads` or a device, or when there is one run or one core.
fn per_core_hint(runs: usize, on_cpu_by_default: bool, workers_chosen: bool, cores: usize) -> Option<String> {
    if workers_chosen || !on_cpu_by_default || runs < 2 || cores < 2 {
        return None;
    }
    Some(format!(
        "{runs} runs one at a time, each over {cores} cores; `threads=1 --jobs {}` runs one per core instead, \
         usually sooner for a sweep on a CPU (README: Sweeps and the queue)",
        cores.min(runs)
    ))
}

/// Says so when the PostgreSQL server has no connections left for every run this runner may
/// start at once (at most `jobs` of the queued `runs` it starts).
fn warn_if_the_server_is_crowded(
    server: &ServerConnections,
    runs: &[RunRecord],
    jobs: usize,
    claims: &Claims,
    only: Option<&[i64]>,
) {
    let waiting = runs
        .iter()
        .filter(|r| r.status == RunStatus::Queued && !r.held && claims.cover(r))
        .filter(|r| only.is_none_or(|ids| ids.contains(&r.id)))
        .count();
    if let Some(warning) = server.crowded(waiting.min(jobs) as u64) {
        tracing::warn!("{warning}");
    }
}

/// Starts queued runs as slots free up until `only` (or the queue of the runs `claims`
/// covers) has no queued or running run left. Ctrl-C stops the runner; workers go on and the
/// queue stays in runs.db.
pub async fn run_until_done(
    store: &Store,
    dirs: &[PathBuf],
    jobs: usize,
    executor: &Executor,
    claims: Claims,
    only: Option<&[i64]>,
    json: bool,
) -> Result<i32> {
    if jobs == 0 {
        return Err(refused(anyhow!("--jobs must be at least 1")));
    }
    executor.check(store).map_err(refused)?;
    let server = store.server_connections().await?;
    // The runs are read once, for what needs them: the server's room, and `queue`'s checks.
    let runs = match (&server, only) {
        (None, Some(_)) => Vec::new(),
        _ => store.list_runs().await?,
    };
    if let Some(server) = &server {
        warn_if_the_server_is_crowded(server, &runs, jobs, &claims, only);
    }
    if only.is_none() {
        // `queue`: the runs were stored by other commands, with other options maybe; this
        // runner's options are asked about before it submits any of them.
        let queued = runs.iter().filter(|run| run.status == RunStatus::Queued && claims.cover(run));
        executor.check_jobs(queued.map(|run| run.device.as_str())).map_err(refused)?;
        if let Some(others) = ops::runs::others_queued(&runs, &claims) {
            tracing::info!("{others}");
        }
    }
    let runner = QueueRunner::new(store.clone(), dirs.to_vec(), jobs)
        .with_executor(executor.clone())
        .with_claims(claims.clone());
    let bar = if json { ProgressBar::hidden() } else { ProgressBar::new(0) };
    bar.set_style(
        ProgressStyle::with_template("[{bar:30}] {pos}/{len} runs done  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let mut interrupted = Box::pin(tokio::signal::ctrl_c());
    let mut waiting = None;
    let mut out_of_reach = StoreOutage::default();
    let mut followed = BTreeSet::new();
    // Runs seen waiting or running: each is told once when it ends.
    let mut seen_active = BTreeSet::new();
    // Runs told as started, by this runner or by another one (the TUI's, a second `queue`)
    // on the same store, so that no run ends without having been seen to start.
    let mut told_started = BTreeSet::new();
    loop {
        let pass = async { Ok::<_, anyhow::Error>((runner.tick().await?, store.list_runs().await?)) }.await;
        // Above the bar when it is drawn, on stderr in any case (a hidden bar prints nothing).
        let say = |line: String| bar.suspend(|| tracing::warn!("{line}"));
        let (started, runs) = match out_of_reach.pass(pass, say)? {
            Some((started, runs)) => (started, Some(runs)),
            None => {
                bar.set_message("the run store is out of reach; runs go on, the queue waits");
                (Vec::new(), None)
            }
        };
        if let Some(news) = runner.waiting_news(&mut waiting) {
            match json {
                true => Report::Waiting { reason: waiting.as_deref() }.print(),
                false => say(news),
            }
        }
        if let Some(runs) = runs {
            // A run whose worker may take it back still counts.
            let in_scope = |r: &&RunRecord| only.is_none_or(|ids| ids.contains(&r.id));
            let coming_back = Executor::may_be_taken_back(runs.iter().filter(in_scope));
            let is_active = |r: &RunRecord| !r.status.is_terminal() || coming_back.contains(&r.id);
            // The whole queue: the runs this runner has seen waiting or running, so that runs
            // which ended before it started neither count in its progress nor set its exit code.
            if only.is_none() {
                followed.extend(runs.iter().filter(|r| is_active(r) && claims.cover(r)).map(|r| r.id));
            }
            let mine: Vec<_> =
                runs.iter().filter(in_scope).filter(|r| only.is_some() || followed.contains(&r.id)).collect();
            let (active, ended): (Vec<&&RunRecord>, Vec<_>) = mine.iter().partition(|r| is_active(r));
            seen_active.extend(active.iter().map(|r| r.id));
            let elsewhere = |r: &RunRecord| match json {
                true => Report::Started { run: r.id, job: None, elsewhere: true }.print(),
                false => say_above(&bar, format!("run {} started by another queue runner", r.id)),
            };
            // This pass's own starts are not another runner's, even one that has ended already.
            told_started.extend(started.iter().map(|start| start.run));
            let newly_ended: Vec<&&RunRecord> = ended.into_iter().filter(|r| seen_active.remove(&r.id)).collect();
            let summaries = ended_summaries(store, &newly_ended, json).await;
            for r in newly_ended {
                if r.started_at.is_some() && told_started.insert(r.id) {
                    elsewhere(r);
                }
                if !json {
                    let of_run = summaries.get(&r.id).map_or(&[][..], Vec::as_slice);
                    say_above(&bar, ops::ended::ended_line(r, of_run));
                }
            }
            // After the ends this pass saw: a run starts in a slot one of them left.
            for start in &started {
                match json {
                    true => Report::Started { run: start.run, job: start.job.as_deref(), elsewhere: false }.print(),
                    false => say_above(&bar, start.news()),
                }
            }
            for r in active.iter().filter(|r| r.status == RunStatus::Running) {
                if told_started.insert(r.id) {
                    elsewhere(r);
                }
            }
            let done = mine.len() - active.len();
            let held = active.iter().filter(|r| r.status == RunStatus::Queued && r.held).count();
            bar.set_length(mine.len() as u64);
            bar.set_position(done as u64);
            let running = active.iter().filter(|r| r.status == RunStatus::Running).count();
            bar.set_message(format!("{running} running, {} queued ({held} paused)", active.len() - running));
            if active.is_empty() || active.len() == held {
                bar.finish_and_clear();
                let code = exit_code::of_runs(mine.iter().map(|r| r.status), held);
                if json {
                    let runs = mine.iter().map(|r| EndedRun { run: r.id, status: r.status.to_string() }).collect();
                    Report::Ended { runs, paused: held, exit_code: code }.print();
                    return Ok(code);
                }
                let failed = mine.iter().filter(|r| r.status != RunStatus::Finished && r.status.is_terminal()).count();
                tracing::info!(
                    "{done} of {} runs ended ({failed} not finished){}",
                    mine.len(),
                    if held > 0 { format!("; {held} paused") } else { String::new() }
                );
                return Ok(code);
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = &mut interrupted => {
                bar.finish_and_clear();
                if json {
                    Report::Stopped { exit_code: exit_code::INTERRUPTED }.print();
                    return Ok(exit_code::INTERRUPTED);
                }
                tracing::info!("queue runner stopped; running workers go on, queued runs wait in {} (`workbench queue` continues)", store.location());
                return Ok(exit_code::INTERRUPTED);
            }
        }
    }
}

/// The metric summaries of the finished runs among `ended`, for their best headline value
/// in the line that tells their end (none for `--json`, whose events carry statuses only). A
/// store that does not answer now leaves the lines without it: the next pass says why.
async fn ended_summaries(store: &Store, ended: &[&&RunRecord], json: bool) -> BTreeMap<i64, Vec<MetricSummary>> {
    let finished: BTreeSet<i64> = ended.iter().filter(|r| r.status == RunStatus::Finished).map(|r| r.id).collect();
    let mut by_run: BTreeMap<i64, Vec<MetricSummary>> = BTreeMap::new();
    if json || finished.is_empty() {
        return by_run;
    }
    for summary in store.metric_summaries_of(&finished).await.unwrap_or_default() {
        by_run.entry(summary.run_id).or_default().push(summary);
    }
    by_run
}

/// What `sweep --json` and `queue --json` print: one JSON object per line, told apart by
/// `event` (README, "Machine-readable output").
#[derive(serde::Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
enum Report<'a> {
    /// `--dry-run`: the runs the sweep would queue, in order; nothing was stored.
    Planned { name: &'a str, runs: Vec<PlannedRun<'a>> },
    /// The sweep's runs are in the queue.
    Queued { sweep: i64, name: &'a str, runs: Vec<QueuedRun<'a>> },
    /// A worker started a run, or its Slurm `job` was submitted; `elsewhere` when another
    /// queue runner on the same store (the TUI's, another `queue`) started it.
    Started {
        run: i64,
        #[serde(skip_serializing_if = "Option::is_none")]
        job: Option<&'a str>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        elsewhere: bool,
    },
    /// The runner starts nothing for now (`reason`: no Slurm controller answers, or Slurm
    /// takes no more jobs under a submit limit, in words), or, with `reason` null, goes on.
    Waiting { reason: Option<&'a str> },
    /// Every run ended (or waits paused); `exit_code` is the process's.
    Ended { runs: Vec<EndedRun>, paused: usize, exit_code: i32 },
    /// Ctrl-C stopped the runner; workers go on.
    Stopped { exit_code: i32 },
}

/// A point of the grid: the layer and the keys set for it.
#[derive(serde::Serialize)]
struct PlannedRun<'a> {
    layer: &'a str,
    overrides: &'a [String],
}

#[derive(serde::Serialize)]
struct QueuedRun<'a> {
    run: i64,
    #[serde(flatten)]
    point: PlannedRun<'a>,
}

#[derive(serde::Serialize)]
struct EndedRun {
    run: i64,
    status: String,
}

impl Report<'_> {
    /// One line on stdout, flushed at once (a script reads it as it comes).
    fn print(&self) {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", serde_json::to_string(self).unwrap_or_default()).and_then(|()| out.flush());
    }
}

/// What a sweep's queued runs are waiting for, when some wait for more than a free slot:
/// ` (2 paused, 3 submitted to Slurm)`, else nothing.
fn queued_aside(sweep: &SweepRecord) -> String {
    let mut parts = Vec::new();
    if sweep.held > 0 {
        parts.push(format!("{} paused", sweep.held));
    }
    if sweep.submitted > 0 {
        parts.push(format!("{} submitted to Slurm", sweep.submitted));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

/// `workbench sweeps`: one line per sweep with its runs by status.
pub async fn list(store: &Store, json: bool) -> Result<i32> {
    let sweeps = store.sweeps().await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&sweeps)?);
        return Ok(0);
    }
    if sweeps.is_empty() {
        println!("no sweeps yet: `workbench sweep --layer L --task T key=a,b ...` makes one");
        return Ok(0);
    }
    for s in sweeps {
        let counts: Vec<String> = s.counts.iter().map(|(k, v)| format!("{v} {k}")).collect();
        println!("sweep {:>3}  {}  [{}]{}", s.id, s.name, counts.join(", "), queued_aside(&s));
    }
    Ok(0)
}

/// `workbench sweeps show N`: the sweep as declared (layers, task, grid), its runs by status,
/// the command that queues it again, and its runs with the keys that differ between them.
pub async fn show(store: &Store, id: i64, json: bool) -> Result<i32> {
    let sweep = store.sweep(id).await?;
    let runs = store.sweep_runs(id).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "sweep": sweep, "runs": runs }))?);
        return Ok(0);
    }
    println!("sweep {}: {}", sweep.id, sweep.name);
    let age = crate::ops::elapsed::format_duration(crate::ops::elapsed::now() - sweep.created_at);
    // The sweep's runs were stored by one command: its first run says whose.
    let by = runs.first().and_then(|r| r.created_by.as_deref()).map(|user| format!(" by {user}")).unwrap_or_default();
    println!("created:  {age} ago{by}");
    let spec = serde_json::from_value::<ops::grid::Spec>(sweep.spec.clone()).ok();
    match &spec {
        Some(spec) => {
            println!("layers:   {}", spec.layers.join(", "));
            println!("task:     {}", spec.task);
            let axes: Vec<String> = spec.axes.iter().map(|a| format!("{}={}", a.key, a.values.join(","))).collect();
            println!("grid:     {}", axes.join(" "));
            println!("again:    {}", command_of(spec, &sweep.name));
        }
        // A sweep stored by another version of the workbench: its declaration as stored.
        None => println!("spec:     {}", sweep.spec),
    }
    let counts: Vec<String> = sweep.counts.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let counts = if counts.is_empty() { "none".to_string() } else { counts.join(", ") };
    println!("runs:     {counts}{}", queued_aside(&sweep));
    if !runs.is_empty() {
        println!();
        let swept = spec.as_ref().map_or_else(Vec::new, |spec| swept_columns(spec, &runs));
        super::runs::print_table(store, &runs, &swept).await?;
    }
    Ok(0)
}

/// A column per key the sweep gives more than one value, holding each run's value (`-`
/// where its plugin has no such key): the grid's dimensions, beside the layer column.
fn swept_columns(spec: &ops::grid::Spec, runs: &[RunRecord]) -> Vec<super::runs::ExtraColumn> {
    let configs: Vec<_> = runs.iter().map(|r| crate::run_config::qualified_config(&r.config)).collect();
    spec.axes
        .iter()
        .filter(|axis| axis.values.len() > 1)
        .map(|axis| {
            let value = |config: &std::collections::BTreeMap<String, String>| {
                config
                    .iter()
                    .find(|(k, _)| ops::filter::names_key(k, &axis.key))
                    .map_or_else(|| "-".to_string(), |(_, v)| v.clone())
            };
            super::runs::ExtraColumn { title: axis.key.clone(), values: configs.iter().map(value).collect() }
        })
        .collect()
}

/// The `workbench sweep` command line that queues `spec` again as a new sweep, each
/// argument quoted for a POSIX shell where it needs it.
fn command_of(spec: &ops::grid::Spec, name: &str) -> String {
    let mut words = vec![
        "workbench".to_string(),
        "sweep".into(),
        "--layer".into(),
        spec.layers.join(","),
        "--task".into(),
        spec.task.clone(),
    ];
    words.extend(spec.axes.iter().map(|a| format!("{}={}", a.key, a.values.join(","))));
    if name != spec.default_name() {
        words.extend(["--name".to_string(), name.to_string()]);
    }
    words.iter().map(|w| shell_word(w)).collect::<Vec<_>>().join(" ")
}

/// `word` as one POSIX shell word: as it is when it holds only characters the shell leaves
/// alone, else in single quotes.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_.,:=/+@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Pauses or resumes the queued runs of a sweep.
pub async fn hold_sweep(store: &Store, sweep: i64, held: bool) -> Result<i32> {
    let done = ops::runs::hold_sweep(store, sweep, held).await?;
    tracing::info!("{}", done.describe());
    if let Some(note) = ops::runs::whose_released_sweep(store, &done, &Claims::mine(store)).await? {
        tracing::info!("{note}");
    }
    Ok(0)
}

/// Cancels a sweep: queued runs become interrupted, running ones are stopped; a sweep with
/// runs other users stored only with `yes` (they are named, and nothing is stopped, without).
pub async fn cancel_sweep(store: &Store, sweep: i64, yes: bool) -> Result<i32> {
    let grace = crate::train::stop::DEFAULT_GRACE;
    store.sweep(sweep).await?;
    let open: Vec<RunRecord> = store.sweep_runs(sweep).await?.into_iter().filter(ops::runs::cancellable).collect();
    if let (Some(others), false) = (ops::runs::stored_by_others(&open), yes) {
        return Err(refused(anyhow!(
            "sweep {sweep}: {others}: add --yes to stop other users' runs too; nothing was stopped"
        )));
    }
    let cancelled = ops::runs::cancel_sweep(store, sweep, grace).await?;
    if cancelled.is_empty() {
        tracing::info!("sweep {sweep}: no queued or running run left, nothing to cancel");
    }
    for (id, cancelled) in cancelled {
        tracing::info!("{}", cancelled.describe(id, grace));
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::{per_core_hint, queued_aside};
    use crate::store::SweepRecord;

    #[test]
    fn a_sweep_line_says_what_its_queued_runs_wait_for() {
        let sweep = |held, submitted| SweepRecord {
            id: 1,
            name: "lr".into(),
            spec: serde_json::json!({}),
            created_at: 0.0,
            counts: [("queued".to_string(), 5)].into(),
            held,
            submitted,
        };
        assert_eq!(queued_aside(&sweep(0, 0)), "");
        assert_eq!(queued_aside(&sweep(2, 0)), " (2 paused)");
        assert_eq!(queued_aside(&sweep(2, 3)), " (2 paused, 3 submitted to Slurm)");
        assert_eq!(queued_aside(&sweep(0, 3)), " (3 submitted to Slurm)");
    }

    #[test]
    fn a_start_event_names_the_slurm_job_only_when_there_is_one() {
        use super::Report;
        let submitted = serde_json::to_string(&Report::Started { run: 3, job: Some("12"), elsewhere: false }).unwrap();
        assert_eq!(submitted, r#"{"event":"started","run":3,"job":"12"}"#);
        let local = serde_json::to_string(&Report::Started { run: 3, job: None, elsewhere: false }).unwrap();
        assert_eq!(local, r#"{"event":"started","run":3}"#);
        let other = serde_json::to_string(&Report::Started { run: 3, job: None, elsewhere: true }).unwrap();
        assert_eq!(other, r#"{"event":"started","run":3,"elsewhere":true}"#);
    }

    #[test]
    fn a_sweep_is_written_back_as_the_command_that_queues_it() {
        use crate::ops::grid::{Axis, Spec};
        let spec = Spec {
            layers: vec!["hyperset".into(), "transformer".into()],
            task: "sudoku".into(),
            axes: vec![
                Axis { key: "iterations".into(), values: vec!["4".into(), "8".into()] },
                Axis { key: "train_csv".into(), values: vec!["my data/it's.csv".into()] },
            ],
        };
        assert_eq!(
            super::command_of(&spec, &spec.default_name()),
            "workbench sweep --layer hyperset,transformer --task sudoku iterations=4,8 \
             'train_csv=my data/it'\\''s.csv'"
        );
        assert!(super::command_of(&spec, "depth").ends_with(" --name depth"));
    }

    #[test]
    fn the_per_core_hint_names_the_workers_it_would_run() {
        let hint = per_core_hint(4, true, false, 2).expect("a default CPU sweep of 4 runs on 2 cores");
        assert!(hint.starts_with("4 runs one at a time, each over 2 cores"), "{hint}");
        assert!(hint.contains("`threads=1 --jobs 2`"), "{hint}");
        // Never more workers than runs.
        assert!(per_core_hint(3, true, false, 16).unwrap().contains("--jobs 3"));
    }

    #[test]
    fn the_per_core_hint_stays_quiet_when_the_user_chose_or_it_cannot_help() {
        assert_eq!(per_core_hint(4, true, true, 2), None, "--jobs given");
        assert_eq!(per_core_hint(4, false, false, 2), None, "threads or device set");
        assert_eq!(per_core_hint(1, true, false, 2), None, "one run");
        assert_eq!(per_core_hint(4, true, false, 1), None, "one core");
    }
}
