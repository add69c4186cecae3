//! `workbench runs` and its actions on single runs: show (`--config`: as an experiment file),
//! cancel, pause, requeue, tag, note.

use super::text_table::TextTable;
use crate::exit_code;
use crate::ops;
use crate::store::{MetricRow, MetricSummary, RunRecord, RunStatus, Store};
use crate::train::system;
use anyhow::Result;
use serde_json::json;
use std::collections::BTreeMap;

/// Summary of one metric series: last, min and max values and the step of the last value.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SeriesSummary {
    pub last_step: u64,
    pub last: f64,
    pub min: f64,
    pub max: f64,
    pub points: usize,
}

/// Summaries keyed by `(split, name)`.
pub fn summarise(rows: &[MetricRow]) -> BTreeMap<(String, String), SeriesSummary> {
    let mut out: BTreeMap<(String, String), SeriesSummary> = BTreeMap::new();
    for r in rows {
        let e = out.entry((r.split.clone(), r.name.clone())).or_insert(SeriesSummary {
            last_step: r.step,
            last: r.value,
            min: r.value,
            max: r.value,
            points: 0,
        });
        if r.step >= e.last_step {
            e.last_step = r.step;
            e.last = r.value;
        }
        e.min = e.min.min(r.value);
        e.max = e.max.max(r.value);
        e.points += 1;
    }
    out
}

/// The run's training time, `+` after it while it runs; `clock` is its training clock.
fn duration(r: &RunRecord, clock: Option<f64>) -> String {
    use ops::elapsed::{format_duration, now, training_seconds};
    match training_seconds(r, clock, now()) {
        Some(secs) if r.status.is_terminal() => format_duration(secs),
        Some(secs) => format!("{}+", format_duration(secs)),
        None => "-".into(),
    }
}

/// The last evaluation metrics (training depth, without the loss) as `name value` pairs,
/// from the stored per-metric summaries (ordered by split and name).
fn eval_summary(summaries: &[MetricSummary]) -> String {
    summaries
        .iter()
        .filter(|s| s.split == "eval" && s.name != "loss")
        .map(|s| format!("{} {:.3}", s.name, s.last))
        .collect::<Vec<_>>()
        .join(", ")
}

pub async fn list(store: &Store, as_json: bool, pick: &RunPick, sort: Option<&str>) -> Result<i32> {
    let which = pick.which()?;
    let filter = pick.filter.as_deref();
    let mut runs = ops::export_runs::named(store, &which).await?;
    let any_runs = !runs.is_empty();
    if let Some(filter) = filter {
        runs = ops::filter::select(runs, filter)?;
    }
    let mut runs = pick.keep_last(runs);
    if let Some(key) = sort {
        let summaries = summaries_by_run(store).await?;
        ops::sort::sort_runs(&mut runs, key, &summaries, ops::elapsed::now()).map_err(crate::exit_code::refused)?;
    }
    if as_json {
        println!("{}", serde_json::to_string_pretty(&runs)?);
        return Ok(0);
    }
    if !any_runs {
        match which {
            ops::export_runs::Which::Sweep(id) => println!("sweep {id} has no runs"),
            _ => println!("no runs yet in {} (start one with `workbench train`)", store.location()),
        }
        return Ok(0);
    }
    if runs.is_empty() {
        println!("no run passes the filter `{}`", filter.unwrap_or_default());
        return Ok(0);
    }
    let users: Vec<ExtraColumn> = ExtraColumn::users(&runs).into_iter().collect();
    print_table(store, &runs, &users).await?;
    Ok(0)
}

/// Every run's metric summaries by run id: one read of the summaries kept as metrics are
/// written, not every run's metric rows.
async fn summaries_by_run(store: &Store) -> Result<BTreeMap<i64, Vec<MetricSummary>>> {
    let mut summaries: BTreeMap<i64, Vec<MetricSummary>> = BTreeMap::new();
    for s in store.metric_summaries().await? {
        summaries.entry(s.run_id).or_default().push(s);
    }
    Ok(summaries)
}

/// A column of the runs table besides the fixed ones: its title and one value per run.
pub struct ExtraColumn {
    pub title: String,
    pub values: Vec<String>,
}

impl ExtraColumn {
    /// Who stored each run, when the runs are not all one user's (a store a lab shares).
    pub fn users(runs: &[RunRecord]) -> Option<ExtraColumn> {
        ops::runs::of_several_users(runs).then(|| ExtraColumn {
            title: "user".into(),
            values: runs.iter().map(|r| r.created_by.clone().unwrap_or_else(|| "-".into())).collect(),
        })
    }
}

/// One line per run: id, status, layer, task, the `extra` columns, steps, parameters,
/// training time and the last evaluation.
pub async fn print_table(store: &Store, runs: &[RunRecord], extra: &[ExtraColumn]) -> Result<()> {
    let titles = ["id", "status", "layer", "task"]
        .into_iter()
        .map(String::from)
        .chain(extra.iter().map(|c| c.title.clone()))
        .chain(["steps", "params", "time", "last eval"].map(String::from));
    let numbers = 4..4 + extra.len() + 3;
    let mut table = TextTable::new(titles).right([0].into_iter().chain(numbers));
    let summaries = summaries_by_run(store).await?;
    for (i, r) in runs.iter().enumerate() {
        let steps = match r.total_steps {
            Some(total) => format!("{}/{}", r.last_step, total),
            None => r.last_step.to_string(),
        };
        let params = r.param_count.map(|p| p.to_string()).unwrap_or_else(|| "-".into());
        let of_run = summaries.get(&r.id).map_or(&[][..], Vec::as_slice);
        table.row(
            [r.id.to_string(), r.shown_status().to_string(), r.layer.name.clone(), r.task.name.clone()]
                .into_iter()
                .chain(extra.iter().map(|c| c.values.get(i).cloned().unwrap_or_else(|| "-".into())))
                .chain([steps, params, duration(r, ops::elapsed::clock_of(of_run)), eval_summary(of_run)]),
        );
    }
    table.print();
    Ok(())
}

/// `workbench runs log N [--last K] [--follow]`: the run's log lines on stdout; with
/// `--follow`, those to come too, until the run ends (the exit code is then the run's, as
/// `train` gives it) or Ctrl-C (the run goes on). A closed stdout (`| head`) ends it quietly.
pub async fn log(store: &Store, run: i64, last: Option<usize>, follow: bool) -> Result<i32> {
    use crate::store::{LogTail, StoreOutage};
    use crate::train::launch::RunWatch;
    let (tail, lines) = LogTail::from_last(store, run, last.unwrap_or(usize::MAX)).await?;
    if !print_lines(&lines) || !follow {
        return Ok(exit_code::SUCCESS);
    }
    let outage = StoreOutage::new("the run trains on, and its lines are read once the store answers");
    let mut watch = RunWatch::new(run, tail, outage);
    loop {
        if let Some((record, lines)) = watch.read(store, |line| tracing::warn!("{line}")).await? {
            if !print_lines(&lines) {
                return Ok(exit_code::SUCCESS);
            }
            let ended = record.status.is_terminal() && !RunWatch::may_come_back(&record);
            if ended {
                match &record.error {
                    Some(error) => tracing::info!("run {run} {}: {error}", record.status),
                    None => tracing::info!("run {run} {}", record.status),
                }
                return Ok(exit_code::of_run(record.status));
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_millis(500)) => {}
            _ = tokio::signal::ctrl_c() => {
                tracing::info!("stopped following run {run}; it goes on (`workbench runs cancel {run}` stops it)");
                return Ok(exit_code::INTERRUPTED);
            }
        }
    }
}

/// Prints `lines` on stdout; `false` once nobody reads it any more.
fn print_lines(lines: &[String]) -> bool {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    lines.iter().try_for_each(|line| writeln!(out, "{line}")).and_then(|()| out.flush()).is_ok()
}

/// Where the run's worker runs or ran, and its lease: `process 123 on node7 (local), last
/// heartbeat 2 s ago`, with the scheduler job when there is one.
fn worker_line(r: &crate::store::RunRecord) -> Option<String> {
    let s = &r.supervision;
    let mut parts = Vec::new();
    match (r.worker_pid, &s.host) {
        (Some(pid), Some(host)) => parts.push(format!("process {pid} on {host}")),
        (Some(pid), None) => parts.push(format!("process {pid}")),
        _ => {}
    }
    if let Some(executor) = &s.executor {
        parts.push(match &s.job_id {
            Some(job) => format!("{executor} job {job}"),
            None => executor.clone(),
        });
    }
    if let (Some(at), crate::store::RunStatus::Running) = (s.heartbeat_at, r.status) {
        parts.push(format!("last heartbeat {:.0} s ago", (ops::elapsed::now() - at).max(0.0)));
    }
    if s.stop_requested.is_some() && r.status == crate::store::RunStatus::Running {
        parts.push("stop requested".into());
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// What `runs show` calls the message a run ended with: an interruption is no error.
fn end_label(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Interrupted => "stopped",
        RunStatus::Diverged => "diverged",
        _ => "error",
    }
}

pub async fn show(store: &Store, id: i64, as_json: bool) -> Result<i32> {
    let r = store.run(id).await?;
    let rows = store.metrics(id).await?;
    let summary = summarise(&rows);
    // The training clock, from the rows read anyway.
    let clock = rows.iter().map(|m| m.wall_time).filter(|w| w.is_finite()).reduce(f64::max);
    let logs = store.logs(id, 10).await?;
    if as_json {
        let metrics: Vec<_> =
            summary.iter().map(|((split, name), s)| json!({"split": split, "name": name, "summary": s})).collect();
        println!("{}", serde_json::to_string_pretty(&json!({"run": r, "metrics": metrics, "log": logs}))?);
        return Ok(0);
    }
    // The state the run tables show, where it says more than the stored status (`paused`,
    // `submitted`, `damaged`).
    let shown = r.shown_status();
    let aside = if shown == r.status.as_str() { String::new() } else { format!(" ({shown})") };
    let by = r.created_by.as_deref().map(|user| format!(", stored by {user}")).unwrap_or_default();
    println!("run {}: {}{aside} — {} on {}{by}", r.id, r.status, r.layer.name, r.task.name);
    for line in membership_lines(store, &r).await? {
        println!("{line}");
    }
    if let Some(damage) = &r.damage {
        println!("damaged:  {damage}");
    }
    if let Some(e) = &r.error {
        println!("{:<10}{e}", format!("{}:", end_label(r.status)));
    }
    if let Some(cause) = &r.supervision.cause {
        println!("cause:    {cause}");
    }
    if let Some(line) = worker_line(&r) {
        println!("worker:   {line}");
    }
    let build = |p: &crate::store::PluginRef| p.build.clone().unwrap_or_else(|| "unknown".into());
    println!("layer:    {} {} build {} ({})", r.layer.name, r.layer.version, build(&r.layer), r.layer.fingerprint);
    println!("task:     {} {} build {} ({})", r.task.name, r.task.version, build(&r.task), r.task.fingerprint);
    println!(
        "seed:     {}   device: {}   parameters: {}",
        r.seed,
        r.device,
        r.param_count.map(|p| p.to_string()).unwrap_or("-".into())
    );
    println!(
        "steps:    {}/{}   time: {}   git: {}",
        r.last_step,
        r.total_steps.map(|t| t.to_string()).unwrap_or("-".into()),
        duration(&r, clock),
        r.git_rev.as_deref().unwrap_or("-")
    );
    if let Some(source) = r.config.get("evaluates").and_then(|v| v.as_i64()) {
        println!("evaluates: run {source}'s checkpoint (scored, not trained; `workbench runs diff {source} {}`)", r.id);
    }
    println!("config:");
    if let Some(obj) = r.config.as_object() {
        for section in ["layer_config", "task_config", "train"] {
            if let Some(values) = obj.get(section).and_then(|v| v.as_object()) {
                let prefix = section.trim_end_matches("_config");
                let line: Vec<String> =
                    values.iter().map(|(k, v)| format!("{k}={}", v.to_string().trim_matches('"'))).collect();
                println!("  {prefix}: {}", line.join(" "));
            }
        }
    }
    for line in system_lines(&summary) {
        println!("{line}");
    }
    // System metrics have their lines above; the table is the task's.
    let task_metrics: Vec<_> = summary.iter().filter(|((split, _), _)| split != system::SPLIT).collect();
    if !task_metrics.is_empty() {
        let mut table = TextTable::new(["split", "name", "last step", "last", "min", "max"]).right(2..6);
        for ((split, name), s) in task_metrics {
            let number = |x: f64| format!("{x:.5}");
            table.row([
                split.clone(),
                name.clone(),
                s.last_step.to_string(),
                number(s.last),
                number(s.min),
                number(s.max),
            ]);
        }
        table.print_after("metrics:  ");
    }
    if !logs.is_empty() {
        println!("log:");
        for line in logs {
            println!("  {line}");
        }
    }
    if let Some(script) = batch_script(store, &r) {
        println!("batch script ({}, `sbatch` it to submit again):", script.display());
        for line in std::fs::read_to_string(&script).unwrap_or_default().lines() {
            println!("  {line}");
        }
    }
    Ok(0)
}

/// The `sweep:`, `tags:` and `notes:` lines of `runs show`: what the run belongs to and what
/// was written about it, each only when there is something to say.
async fn membership_lines(store: &Store, r: &RunRecord) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    if let Some(sweep) = r.sweep {
        let record = store.sweep(sweep.id).await?;
        let runs: u64 = record.counts.values().sum();
        lines.push(format!(
            "sweep:    {} {} (point {} of {}; `workbench sweeps show {}`)",
            sweep.id,
            record.name,
            sweep.index + 1,
            runs,
            sweep.id
        ));
    }
    if !r.tags.is_empty() {
        lines.push(format!("tags:     {}", r.tags.join(", ")));
    }
    let mut notes = r.notes.lines().filter(|l| !l.trim().is_empty());
    if let Some(first) = notes.next() {
        lines.push(format!("notes:    {first}"));
        lines.extend(notes.map(|l| format!("          {l}")));
    }
    Ok(lines)
}

/// The `eval:` and `system:` lines of `runs show`: the examples each evaluation scored, the
/// worker's peak memory, and its last CPU, memory, threads, shard waiting and GPU sample.
pub fn system_lines(summary: &BTreeMap<(String, String), SeriesSummary>) -> Vec<String> {
    let get = |name: &str| summary.get(&(system::SPLIT.to_string(), name.to_string()));
    let mut lines = Vec::new();
    if let Some(s) = get(system::EVAL_EXAMPLES) {
        let examples = if s.min == s.max { format!("{:.0}", s.last) } else { format!("{:.0} to {:.0}", s.min, s.max) };
        lines.push(format!("eval:     {examples} examples per evaluation"));
    }
    let mut last = Vec::new();
    if let Some(s) = get(system::CPU) {
        last.push(format!("CPU {:.0} %", s.last));
    }
    if let Some(s) = get(system::RSS) {
        let huge = get(system::HUGE_PAGES).filter(|h| h.last > 0.0);
        let on_huge = huge.map(|h| format!(" ({} on huge pages)", system::format_bytes(h.last))).unwrap_or_default();
        last.push(format!("resident {}{on_huge}", system::format_bytes(s.last)));
    }
    if let Some(s) = get(system::THREADS) {
        last.push(format!("{:.0} threads", s.last));
    }
    if let Some(s) = get(system::SHARD_WAIT) {
        last.push(format!("shards waiting {:.0} % of their time", s.last));
    }
    if let Some(s) = get(system::GPU_UTIL) {
        last.push(format!("GPU {:.0} %", s.last));
    }
    if let Some(s) = get(system::GPU_MEMORY) {
        last.push(format!("GPU memory {} (peak {})", system::format_bytes(s.last), system::format_bytes(s.max)));
    }
    let peak = get(system::PEAK).map(|s| format!("peak memory {}", system::format_bytes(s.max)));
    match (peak, last.is_empty()) {
        (Some(peak), true) => lines.push(format!("system:   {peak}")),
        (Some(peak), false) => lines.push(format!("system:   {peak}; last sample: {}", last.join(", "))),
        (None, false) => lines.push(format!("system:   last sample: {}", last.join(", "))),
        (None, true) => {}
    }
    lines
}

/// `workbench runs show N --config`: an experiment file that trains the run again, from its
/// configuration as stored (every key, the plugins by name).
pub async fn show_config(store: &Store, id: i64) -> Result<i32> {
    let r = store.run(id).await?;
    let config = crate::run_config::RunConfig::from_json(&r.config)?;
    let mut header = vec![
        format!("Run {id}: {} {} on {} {} ({}).", r.layer.name, r.layer.version, r.task.name, r.task.version, r.status),
        format!(
            "Train it again: workbench runs show {id} --config > run{id}.toml && workbench train --config run{id}.toml"
        ),
    ];
    if let Some(source) = config.evaluates {
        // The file trains; what this run did is `eval` of another run's checkpoint.
        header[1] = format!(
            "It evaluated run {source}'s checkpoint (`workbench eval {source} key=value ...` scores it again); \
             the settings below train a new run instead: workbench train --config run{id}.toml"
        );
    }
    print!("{}", crate::experiment_file::to_toml(&config, &header));
    Ok(0)
}

/// The Slurm batch script kept with a run's artifacts, if there is one.
fn batch_script(store: &Store, r: &crate::store::RunRecord) -> Option<std::path::PathBuf> {
    r.supervision.job_id.as_ref()?;
    let path = store.artifacts_dir().ok()?.join(crate::train::worker::run_files(r.id)).join("slurm.sh");
    path.is_file().then_some(path)
}

/// The runs a command acting on runs one by one works on, split into those it acts on and
/// those left as they are. Ids are taken as given: the first that does not qualify is
/// refused (by `refuse`, with the command's own reason) before any run is changed. Of the runs
/// --sweep, --filter or --last pick, those that do not qualify are left, and said once.
async fn acted_on<F, Fut>(
    store: &Store,
    pick: &RunPick,
    verb: &str,
    qualifies: impl Fn(&RunRecord) -> bool,
    refuse: F,
) -> Result<Vec<RunRecord>>
where
    F: FnOnce(i64) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    if !pick.picks() {
        return Err(crate::exit_code::refused(anyhow::anyhow!(
            "name the runs to {verb}: ids (`12,13`), or --sweep N, --filter EXPR, --last N"
        )));
    }
    let (act, left): (Vec<RunRecord>, Vec<RunRecord>) = pick.select(store).await?.into_iter().partition(qualifies);
    match (pick.runs.is_some(), left.first()) {
        (true, Some(first)) => {
            refuse(first.id).await?;
            // It changed state since it was read, and the command took it; no other run was.
            anyhow::bail!(
                "run {} changed state while the runs were read and was taken as it is now; no other run was \
                 changed (run the command again for them)",
                first.id
            )
        }
        (false, Some(_)) if act.is_empty() => {
            anyhow::bail!(
                "none of the {} picked can {verb}: nothing was done",
                crate::wording::count(left.len(), "run")
            )
        }
        (false, Some(_)) => {
            let listed: Vec<String> = left.iter().map(|r| format!("{} ({})", r.id, r.shown_status())).collect();
            tracing::info!("left as they are: runs {}", listed.join(", "));
        }
        _ => {}
    }
    Ok(act)
}

/// `workbench runs cancel 12,13`: queued runs cancelled, running ones stopped with a checkpoint;
/// runs other users stored only with `yes` (they are named, and nothing is stopped, without).
pub async fn cancel(store: &Store, pick: &RunPick, grace: std::time::Duration, yes: bool) -> Result<i32> {
    let refuse = |id| async move { ops::runs::cancel(store, id, grace).await.map(|_| ()) };
    let runs = acted_on(store, pick, "be cancelled", ops::runs::cancellable, refuse).await?;
    // A colleague's run of GPU-days is not stopped by a mistyped id.
    if let (Some(others), false) = (ops::runs::stored_by_others(&runs), yes) {
        return Err(crate::exit_code::refused(anyhow::anyhow!(
            "{others}: add --yes to stop other users' runs too; nothing was stopped"
        )));
    }
    for run in runs {
        if run.status == crate::store::RunStatus::Running {
            tracing::info!("run {}: asking its worker to stop at its next step, with a checkpoint", run.id);
        }
        let cancelled = ops::runs::cancel(store, run.id, grace).await?;
        tracing::info!("{}", cancelled.describe(run.id, grace));
    }
    Ok(0)
}

/// `workbench runs requeue 12,13`: back in the queue, each continuing from its checkpoint.
pub async fn requeue(store: &Store, pick: &RunPick) -> Result<i32> {
    let refuse = |id| async move { ops::runs::requeue(store, id).await };
    let runs = acted_on(store, pick, "be requeued", ops::runs::requeueable, refuse).await?;
    for run in &runs {
        ops::runs::requeue(store, run.id).await?;
        tracing::info!("run {} queued again; the queue resumes it from its last checkpoint", run.id);
    }
    say_whose_runners_start(store, &runs);
    Ok(0)
}

/// `workbench runs delete 12,13 --yes`: without `--yes`, names the runs and deletes none
/// (exit code 2), as the TUI asks before it deletes.
pub async fn delete(store: &Store, pick: &RunPick, yes: bool, files: bool) -> Result<i32> {
    if !pick.picks() {
        return Err(crate::exit_code::refused(anyhow::anyhow!(
            "name the runs to delete: ids (`runs delete 12,13`), or --sweep N, --filter EXPR, --last N"
        )));
    }
    let picked = pick.select(store).await?;
    let ids: Vec<i64> = picked.iter().map(|r| r.id).collect();
    let named: Vec<String> = picked
        .iter()
        .map(|r| format!("run {} ({} on {}, {}, {} steps)", r.id, r.layer.name, r.task.name, r.status, r.last_step))
        .collect();
    if !yes {
        let what = match files {
            true => "what the store records for them and their files (runs/<id>/ in the artifacts directory)",
            false => "what the store records for them (their files stay on disk; --files deletes them too)",
        };
        // A long pick is named in part; `workbench runs` with the same options lists it whole.
        const NAMED: usize = 10;
        let more = match named.len().saturating_sub(NAMED) {
            0 => String::new(),
            n => format!(" and {n} more (`workbench runs` with the same options lists them)"),
        };
        let others = ops::runs::stored_by_others(&picked).map(|o| format!("; {o}")).unwrap_or_default();
        return Err(crate::exit_code::refused(anyhow::anyhow!(
            "this deletes {}: {}{more}, and {what}{others}; add --yes to delete",
            crate::wording::count(named.len(), "run"),
            named[..named.len().min(NAMED)].join(", ")
        )));
    }
    let removed = ops::runs::delete(store, &ids, files).await?;
    for line in named {
        tracing::info!("deleted {line}");
    }
    for r in &removed {
        tracing::info!(
            "deleted the files of run {} ({}, {})",
            r.run,
            r.dir.display(),
            system::format_bytes(r.bytes as f64)
        );
    }
    Ok(0)
}

/// `workbench runs pause|unpause 12,13`: queued runs kept from starting, or let start.
pub async fn hold(store: &Store, pick: &RunPick, held: bool) -> Result<i32> {
    let refuse = |id| async move { ops::runs::hold(store, id, held).await.map(|_| ()) };
    let verb = if held { "be paused" } else { "be unpaused" };
    let runs = acted_on(store, pick, verb, ops::runs::holdable, refuse).await?;
    for run in &runs {
        tracing::info!("{}", ops::runs::hold(store, run.id, held).await?.describe());
    }
    if !held {
        say_whose_runners_start(store, &runs);
    }
    Ok(0)
}

/// In a store a lab shares, names the runs just queued or let start that this user's runners
/// leave to their own users' runners.
fn say_whose_runners_start(store: &Store, runs: &[RunRecord]) {
    if let Some(note) = ops::runs::left_to_their_users(runs, &crate::store::Claims::mine(store)) {
        tracing::info!("{note}");
    }
}

/// `workbench runs tag 12,13 a,b` replaces the runs' tags; `+a,-b` adds and removes.
pub async fn tag(store: &Store, list: &str, tags: &str) -> Result<i32> {
    let ids = crate::plot::parse_run_ids(list).map_err(|e| crate::exit_code::refused(anyhow::anyhow!(e)))?;
    let edit = ops::runs::TagEdit::parse(tags)?;
    for (id, tags) in ops::runs::retag(store, &ids, &edit).await? {
        match tags.is_empty() {
            true => tracing::info!("run {id}: no tags"),
            false => tracing::info!("run {id} tagged {}", tags.join(", ")),
        }
    }
    Ok(0)
}

/// `workbench runs note N TEXT`: replaces the run's notes.
pub async fn note(store: &Store, id: i64, text: &str) -> Result<i32> {
    ops::runs::annotate(store, id, Some(text.trim()), None).await?;
    tracing::info!("run {id}: notes {}", if text.trim().is_empty() { "cleared" } else { "saved" });
    Ok(0)
}

/// `workbench runs diff A B [C ...]` (or the runs a pick names): configuration values that
/// are not the same in every run, plugin builds, final metrics, one column per run.
pub async fn diff(store: &Store, pick: &RunPick, as_json: bool) -> Result<i32> {
    if !pick.picks() {
        anyhow::bail!(
            "runs diff needs the runs to compare: two ids or more (`runs diff 3 4`), or --sweep, --filter or --last"
        );
    }
    let d = ops::diff::diff(store, &pick.select(store).await?).await?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&d)?);
        return Ok(0);
    }
    let heads: Vec<String> = d.runs.iter().map(|id| format!("run {id}")).collect();
    let value_columns = 1..1 + heads.len();
    if d.config.is_empty() {
        println!("config:   the same");
    } else {
        let mut table =
            TextTable::new(std::iter::once("key").chain(heads.iter().map(String::as_str))).right(value_columns.clone());
        for c in &d.config {
            let values = c.values.values.iter().map(|v| v.clone().unwrap_or_else(|| "-".into()));
            table.row(std::iter::once(c.key.clone()).chain(values));
        }
        table.print_after("config:   ");
    }
    let build = |p: &crate::store::PluginRef| {
        format!("{} {} build {} ({})", p.name, p.version, p.build.as_deref().unwrap_or("unknown"), p.fingerprint)
    };
    if d.plugins.is_empty() {
        println!("plugins:  the same builds");
    }
    for p in &d.plugins {
        for (i, (head, b)) in heads.iter().zip(&p.builds).enumerate() {
            let label = if i == 0 { format!("{}:", p.role) } else { String::new() };
            println!("{label:<9} {head}: {}", build(b));
        }
    }
    if d.metrics.is_empty() {
        println!("metrics:  none recorded");
        return Ok(0);
    }
    // Two runs get the difference; more get one column each, read across.
    let difference = match d.runs.as_slice() {
        [a, b] => Some(format!("{b} - {a}")),
        _ => None,
    };
    let mut header: Vec<&str> = vec!["split", "name"];
    header.extend(heads.iter().map(String::as_str));
    header.extend(difference.as_deref());
    let mut table = TextTable::new(header.iter().copied()).right(2..header.len());
    let mut marked = false;
    for m in &d.metrics {
        // The best value of the row carries a star; the others a space, so digits align.
        let num = |(v, best): (&Option<f64>, bool)| match v {
            Some(x) => format!("{}{}", ops::diff::value_text(&m.split, &m.name, *x), if best { " *" } else { "  " }),
            None => "-  ".into(),
        };
        let best = m.best();
        marked |= best.contains(&true);
        let mut row = vec![m.split.clone(), m.name.clone()];
        row.extend(m.values.values.iter().zip(best).map(num));
        if difference.is_some() {
            row.push(match m.values.values.as_slice() {
                [Some(x), Some(y)] => {
                    let sign = if y < x { "-" } else { "+" };
                    format!("{sign}{}", ops::diff::value_text(&m.split, &m.name, (y - x).abs()))
                }
                _ => "-".into(),
            });
        }
        table.row(row);
    }
    table.print_after("metrics:  ");
    if marked {
        println!("          * the best value of a metric (by its direction)");
    }
    Ok(0)
}

/// Which stored runs a command works on: ids, a sweep, a filter (`runs export`, `db copy`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RunPick {
    /// Run ids, comma-separated (e.g. 3,4,7).
    #[arg(long, conflicts_with = "sweep")]
    pub runs: Option<String>,
    /// The runs of this sweep.
    #[arg(long)]
    pub sweep: Option<i64>,
    /// Only the runs passing this filter, written as in the TUI's `/` box:
    /// `status:finished layer:hyperset tag:paper sweep:3 user:me lr=1e-3 d>=64 -tag:bad word`.
    #[arg(long, allow_hyphen_values = true)]
    pub filter: Option<String>,
    /// Only the N most recent of those runs (the highest ids), e.g. `--last 20` on a store
    /// that holds thousands.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub last: Option<u32>,
}

impl RunPick {
    /// Whether any of the options was given.
    pub fn picks(&self) -> bool {
        self.runs.is_some() || self.sweep.is_some() || self.filter.is_some() || self.last.is_some()
    }

    /// `runs` less all but the `--last` N (by id), in their order.
    fn keep_last(&self, mut runs: Vec<RunRecord>) -> Vec<RunRecord> {
        if let Some(n) = self.last {
            let mut ids: Vec<i64> = runs.iter().map(|r| r.id).collect();
            ids.sort_unstable_by(|a, b| b.cmp(a));
            let oldest_kept = ids.get(n as usize - 1).copied().unwrap_or(i64::MIN);
            runs.retain(|r| r.id >= oldest_kept);
        }
        runs
    }

    /// These options with the list's own arguments folded in (`workbench runs 3,4` or
    /// `workbench runs status:finished 'd>=64'`): words of ids and commas are run ids, as
    /// `--runs` takes them, the other words filter terms, after `--filter`'s own.
    pub fn with_terms(mut self, terms: &[String]) -> Result<RunPick> {
        let is_ids = |term: &&String| crate::plot::parse_run_ids(term).is_ok();
        let (ids, words): (Vec<&String>, Vec<&String>) = terms.iter().partition(is_ids);
        let ids = ids.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",");
        if !ids.is_empty() {
            if self.runs.is_some() || self.sweep.is_some() {
                anyhow::bail!(
                    "run ids were given both as arguments ({ids}) and with --runs or --sweep: name the runs \
                     one way, as arguments (`workbench runs 3,4`) or with the option"
                );
            }
            self.runs = Some(ids);
        }
        if !words.is_empty() {
            let words = words.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" ");
            self.filter = Some(match self.filter.take() {
                Some(filter) => format!("{filter} {words}"),
                None => words,
            });
        }
        Ok(self)
    }

    /// The runs these options name before `--filter`: `--runs`, `--sweep` or every run.
    pub fn which(&self) -> Result<ops::export_runs::Which> {
        use ops::export_runs::Which;
        Ok(match (&self.runs, self.sweep) {
            (Some(list), _) => Which::Runs(crate::plot::parse_run_ids(list).map_err(|e| anyhow::anyhow!(e))?),
            (None, Some(sweep)) => Which::Sweep(sweep),
            (None, None) => Which::All,
        })
    }

    /// The runs of `store` these options pick (every run when none is given); an error when
    /// none is picked.
    pub async fn select(&self, store: &Store) -> Result<Vec<RunRecord>> {
        Ok(self.keep_last(ops::export_runs::select(store, &self.which()?, self.filter.as_deref()).await?))
    }
}

/// `workbench runs export`: runs' curves and diagnostics as CSV, JSON lines or TensorBoard.
pub async fn export(
    store: &Store,
    which: &RunPick,
    format: &str,
    out: Option<&std::path::Path>,
    force: bool,
) -> Result<i32> {
    use ops::export_runs;
    let format = crate::export::Format::parse(format)?;
    if format == crate::export::Format::Tensorboard && out.is_none() {
        anyhow::bail!("--format tensorboard writes a directory of event files: name it with --out DIR");
    }
    let records = which.select(store).await?;
    let done = match out {
        Some(dir) if format == crate::export::Format::Tensorboard => {
            export_runs::write_tensorboard(store, records, dir, force).await?
        }
        Some(path) => export_runs::write_table_file(store, records, format, path, force).await?,
        None => {
            let runs = records.len();
            let mut stdout = std::io::stdout().lock();
            let values = export_runs::write_table(store, records, format, &mut stdout).await?;
            ops::export_runs::Exported { runs, values, files: Vec::new() }
        }
    };
    tracing::info!("{}", done.describe(format));
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(step: u64, split: &str, name: &str, value: f64) -> MetricRow {
        MetricRow { step, split: split.into(), name: name.into(), value, wall_time: step as f64 }
    }

    #[test]
    fn show_reports_peak_memory_and_eval_examples() {
        let mib = 1024.0 * 1024.0;
        let rows = [
            row(5, "sys", system::PEAK, 300.0 * mib),
            row(10, "sys", system::PEAK, 512.0 * mib),
            row(10, "sys", system::RSS, 400.0 * mib),
            row(10, "sys", system::CPU, 195.4),
            row(10, "sys", system::THREADS, 9.0),
            row(10, "sys", system::SHARD_WAIT, 7.6),
            row(10, "sys", system::EVAL_EXAMPLES, 256.0),
            row(10, "eval", "cell_acc", 0.5),
        ];
        let lines = system_lines(&summarise(&rows));
        assert_eq!(
            lines,
            [
                "eval:     256 examples per evaluation",
                "system:   peak memory 512.0 MiB; last sample: CPU 195 %, resident 400.0 MiB, 9 threads, \
                 shards waiting 8 % of their time",
            ]
        );
        // Runs recorded before system metrics existed: no lines.
        assert!(system_lines(&summarise(&rows[7..])).is_empty());
        // A worker whose heap is on huge pages says how much of the resident memory is.
        let huge = [row(10, "sys", system::RSS, 400.0 * mib), row(10, "sys", system::HUGE_PAGES, 300.0 * mib)];
        assert_eq!(
            system_lines(&summarise(&huge)),
            ["system:   last sample: resident 400.0 MiB (300.0 MiB on huge pages)"]
        );
        let none = [row(10, "sys", system::RSS, 400.0 * mib), row(10, "sys", system::HUGE_PAGES, 0.0)];
        assert_eq!(system_lines(&summarise(&none)), ["system:   last sample: resident 400.0 MiB"]);
    }
}
