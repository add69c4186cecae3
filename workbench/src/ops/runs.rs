//! Changing the state of runs that exist: cancel, pause and release, requeue, delete,
//! annotate; each returns what it did, with a line that says so where both front ends print it.

use crate::store::{RunRecord, RunStatus, Store};
use crate::train::stop::{cancel_queued, stop_running, StopOutcome};
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::time::Duration;

/// What a cancel did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancelled {
    /// A queued run was taken out of the queue (it is `interrupted` and can be requeued).
    BeforeStart,
    /// A running run was stopped, as the outcome says.
    Stopped(StopOutcome),
}

impl Cancelled {
    /// One line saying what happened to run `id` (`grace`: the grace period it had).
    pub fn describe(&self, id: i64, grace: Duration) -> String {
        let grace = grace.as_secs_f64();
        match self {
            Cancelled::BeforeStart => format!("run {id} cancelled before it started"),
            Cancelled::Stopped(StopOutcome::Stopped) => format!("run {id} stopped: interrupted with a checkpoint"),
            Cancelled::Stopped(StopOutcome::Terminated(signal)) => format!(
                "run {id} did not stop within {grace} s and was terminated ({signal}); \
                 it is interrupted and continues from its last checkpoint"
            ),
            Cancelled::Stopped(StopOutcome::Requested { host }) => {
                format!("run {id} runs on {host}: the stop request is recorded; its worker stops at its next step")
            }
            Cancelled::Stopped(StopOutcome::JobCancelled { job }) => format!(
                "run {id} did not stop within {grace} s: its Slurm job {job} was cancelled (scancel); \
                 it ends interrupted from its last checkpoint"
            ),
        }
    }
}

/// Cancels run `id`: a queued run leaves the queue (and its Slurm job, if submitted); a running
/// one is stopped, escalating after `grace` (see [`crate::train::stop`]).
pub async fn cancel(store: &Store, id: i64, grace: Duration) -> Result<Cancelled> {
    match store.run(id).await?.status {
        RunStatus::Queued => {
            cancel_queued(store, id).await?;
            Ok(Cancelled::BeforeStart)
        }
        RunStatus::Running => Ok(Cancelled::Stopped(stop_running(store, id, grace).await?)),
        status => bail!("run {id} is {status}: nothing to cancel"),
    }
}

/// Whether [`cancel`] takes `run`: it is queued or running.
pub fn cancellable(run: &RunRecord) -> bool {
    !run.status.is_terminal()
}

/// Whether [`hold`] takes `run`: it waits in the queue.
pub fn holdable(run: &RunRecord) -> bool {
    run.status == RunStatus::Queued
}

/// Whether [`requeue`] takes `run`: it was interrupted or failed.
pub fn requeueable(run: &RunRecord) -> bool {
    matches!(run.status, RunStatus::Interrupted | RunStatus::Failed)
}

/// Cancels every run of sweep `sweep` that has not ended; returns what happened to each.
pub async fn cancel_sweep(store: &Store, sweep: i64, grace: Duration) -> Result<Vec<(i64, Cancelled)>> {
    store.sweep(sweep).await?;
    let mut done = Vec::new();
    for run in store.sweep_runs(sweep).await? {
        if !run.status.is_terminal() {
            done.push((run.id, cancel(store, run.id, grace).await?));
        }
    }
    Ok(done)
}

/// What a pause or a release did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// Run `id` is now paused (`held`) or released.
    Run { id: i64, held: bool },
    /// `count` queued runs of sweep `sweep` are now paused or released.
    Sweep { sweep: i64, count: u64, held: bool },
}

impl Held {
    /// One line saying what changed.
    pub fn describe(&self) -> String {
        let word = |held: bool| if held { "paused" } else { "released" };
        match self {
            Held::Run { id, held } => format!("run {id} {}", word(*held)),
            Held::Sweep { sweep, count, held } => {
                format!("sweep {sweep}: {} {}", crate::wording::count(*count as usize, "queued run"), word(*held))
            }
        }
    }
}

/// Pauses (`held`) or releases a queued run.
pub async fn hold(store: &Store, id: i64, held: bool) -> Result<Held> {
    store.set_held(id, held).await?;
    Ok(Held::Run { id, held })
}

/// Pauses or releases every queued run of a sweep.
pub async fn hold_sweep(store: &Store, sweep: i64, held: bool) -> Result<Held> {
    Ok(Held::Sweep { sweep, count: store.set_sweep_held(sweep, held).await?, held })
}

/// After a release of a sweep's runs, the note naming whose runners start those a runner with
/// `claims` leaves (see [`left_to_their_users`]); `None` after a pause.
pub async fn whose_released_sweep(store: &Store, held: &Held, claims: &crate::store::Claims) -> Result<Option<String>> {
    let Held::Sweep { sweep, held: false, .. } = *held else { return Ok(None) };
    let queued: Vec<RunRecord> = store.sweep_runs(sweep).await?.into_iter().filter(holdable).collect();
    Ok(left_to_their_users(&queued, claims))
}

/// Pauses run `id` if it is not paused, else releases it; with `whole_sweep`, does the same
/// to every queued run of its sweep.
pub async fn toggle_hold(store: &Store, id: i64, whole_sweep: bool) -> Result<Held> {
    let run = store.run(id).await?;
    let held = !run.held;
    match (whole_sweep, run.sweep) {
        (true, Some(s)) => hold_sweep(store, s.id, held).await,
        (true, None) => bail!("run {id} is not part of a sweep"),
        (false, _) => hold(store, id, held).await,
    }
}

/// Puts an interrupted or failed run back in the queue; the queue continues it from its last
/// checkpoint.
pub async fn requeue(store: &Store, id: i64) -> Result<()> {
    if let Some(damage) = store.run(id).await?.damage {
        bail!("run {id} cannot be trained again: {damage}");
    }
    store.requeue(id).await?;
    Ok(())
}

/// A run's directory of files removed by [`delete`], and how much it held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovedFiles {
    pub run: i64,
    pub dir: PathBuf,
    pub bytes: u64,
}

/// Whether `runs` were stored by more than one user (or some by a user and some before users
/// were recorded): when the run tables show who stored each.
pub fn of_several_users<'a>(runs: impl IntoIterator<Item = &'a RunRecord>) -> bool {
    let users: std::collections::BTreeSet<Option<&str>> = runs.into_iter().map(|r| r.created_by.as_deref()).collect();
    users.len() > 1
}

/// Of `runs`, those another user stored, for a question about deleting or stopping them in a
/// store a lab shares: `runs 4, 5 were stored by someone else (bob, grace)`. `None` when
/// every run is this user's or was stored before users were recorded.
pub fn stored_by_others<'a>(runs: impl IntoIterator<Item = &'a RunRecord>) -> Option<String> {
    let me = crate::store::user_name();
    let others: Vec<&RunRecord> =
        runs.into_iter().filter(|r| r.created_by.as_deref().is_some_and(|user| user != me)).collect();
    let ids: Vec<String> = others.iter().map(|r| r.id.to_string()).collect();
    match ids.as_slice() {
        [] => None,
        [id] => Some(format!("run {id} was stored by someone else ({})", users_of(&others))),
        _ => Some(format!("runs {} were stored by someone else ({})", ids.join(", "), users_of(&others))),
    }
}

/// `2 queued runs are other users' (bob, grace): their runners start them; `workbench queue
/// --all-users` starts every user's`, when the queue holds runs `claims` leaves.
pub fn others_queued(runs: &[RunRecord], claims: &crate::store::Claims) -> Option<String> {
    let left: Vec<&RunRecord> = runs.iter().filter(|r| r.status == RunStatus::Queued && !claims.cover(r)).collect();
    let (n, verb) = match left.len() {
        0 => return None,
        1 => ("1 queued run".to_string(), "is"),
        n => (format!("{n} queued runs"), "are"),
    };
    Some(format!("{n} {verb} other users' ({}): their runners start them; {ALL_USERS}", users_of(&left)))
}

/// Of `runs` just queued again or let start, those a runner with `claims` leaves to their
/// users' runners, said after `requeue` and `unpause`: `run 5 is bob's: a runner of theirs
/// starts it; ...`. `None` when `claims` cover them all.
pub fn left_to_their_users<'a>(
    runs: impl IntoIterator<Item = &'a RunRecord>,
    claims: &crate::store::Claims,
) -> Option<String> {
    let left: Vec<&RunRecord> = runs.into_iter().filter(|r| !claims.cover(r)).collect();
    let ids: Vec<String> = left.iter().map(|r| r.id.to_string()).collect();
    match ids.as_slice() {
        [] => None,
        [id] => Some(format!("run {id} is {}'s: a runner of theirs starts it; {ALL_USERS}", users_of(&left))),
        _ => Some(format!(
            "runs {} are other users' ({}): their runners start them; {ALL_USERS}",
            ids.join(", "),
            users_of(&left)
        )),
    }
}

const ALL_USERS: &str = "`workbench queue --all-users` starts every user's";

/// The users who stored `runs`, each once, in order: `bob, grace`.
fn users_of(runs: &[&RunRecord]) -> String {
    let users: std::collections::BTreeSet<&str> = runs.iter().filter_map(|r| r.created_by.as_deref()).collect();
    users.into_iter().collect::<Vec<_>>().join(", ")
}

/// Deletes runs and everything recorded for them, all or none: a running run is refused
/// before anything is deleted. With `files`, each run's directory of files goes too
/// (`runs/<id>/` in the artifacts directory: checkpoint, worker and job logs, batch script),
/// before its rows, so that a directory that cannot be removed leaves its run listed; the
/// directories removed are returned.
pub async fn delete(store: &Store, ids: &[i64], files: bool) -> Result<Vec<RemovedFiles>> {
    for &id in ids {
        if store.run(id).await?.status == RunStatus::Running {
            bail!("run {id} is running: cancel it first (`workbench runs cancel {id}`, x in the TUI)");
        }
    }
    let artifacts = match files {
        true => Some(store.artifacts_dir().context("finding the runs' files to delete")?),
        false => None,
    };
    let mut removed = Vec::new();
    for &id in ids {
        if let Some(artifacts) = &artifacts {
            let dir = artifacts.join(crate::train::worker::run_files(id));
            if dir.exists() {
                let bytes = walkdir::WalkDir::new(&dir)
                    .into_iter()
                    .filter_map(|entry| entry.ok()?.metadata().ok())
                    .filter(|meta| meta.is_file())
                    .map(|meta| meta.len())
                    .sum();
                std::fs::remove_dir_all(&dir).with_context(|| {
                    let done: Vec<String> = removed.iter().map(|r: &RemovedFiles| r.run.to_string()).collect();
                    let done = if done.is_empty() { "none".to_string() } else { done.join(", ") };
                    format!("removing the files of run {id} ({}); runs deleted before it: {done}", dir.display())
                })?;
                removed.push(RemovedFiles { run: id, dir, bytes });
            }
        }
        store.delete_run(id).await?;
    }
    Ok(removed)
}

/// Tags as a user writes them, comma-separated (`baseline, paper`): trimmed, empty ones and
/// repeats dropped, in their order. A tag holding a space is refused: the filter's `tag:T`
/// matches one word, so such a tag could never be found.
pub fn parse_tags(list: &str) -> Result<Vec<String>> {
    let mut tags: Vec<String> = Vec::new();
    for tag in list.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        if tag.chars().any(char::is_whitespace) {
            bail!("tag `{tag}` holds a space: tags are single words (the filter's `tag:T` matches one word)");
        }
        if !tags.iter().any(|t| t == tag) {
            tags.push(tag.to_string());
        }
    }
    Ok(tags)
}

/// What `runs tag` and the TUI's tag dialog do to runs' tags: a plain list replaces them
/// (`paper,baseline`; empty clears them), `+tag` and `-tag` add and remove
/// (`+paper,-draft`), leaving the others.
#[derive(Debug, Clone, PartialEq)]
pub enum TagEdit {
    Replace(Vec<String>),
    Change { add: Vec<String>, remove: Vec<String> },
}

impl TagEdit {
    /// Reads `paper,baseline` or `+paper,-draft`; a list that mixes the two is refused, as
    /// is a tag holding a space (see [`parse_tags`]).
    pub fn parse(list: &str) -> Result<TagEdit> {
        let items: Vec<&str> = list.split(',').map(str::trim).filter(|t| !t.is_empty()).collect();
        let signed = items.iter().filter(|t| t.starts_with(['+', '-'])).count();
        if signed == 0 {
            return Ok(TagEdit::Replace(parse_tags(list)?));
        }
        if signed < items.len() {
            bail!(
                "`{list}` mixes tags with +tag / -tag: list the tags to replace them all (paper,baseline), \
                 or +tag to add and -tag to remove (+paper,-draft)"
            );
        }
        let named = |sign: char| {
            let names: Vec<&str> = items.iter().filter_map(|t| t.strip_prefix(sign)).collect();
            parse_tags(&names.join(","))
        };
        Ok(TagEdit::Change { add: named('+')?, remove: named('-')? })
    }

    /// `tags` after the edit: added tags after the ones kept, each once.
    pub fn apply(&self, tags: &[String]) -> Vec<String> {
        match self {
            TagEdit::Replace(new) => new.clone(),
            TagEdit::Change { add, remove } => {
                let mut out: Vec<String> = tags.iter().filter(|t| !remove.contains(t)).cloned().collect();
                for tag in add {
                    if !out.contains(tag) {
                        out.push(tag.clone());
                    }
                }
                out
            }
        }
    }

    /// `+paper -draft`, or the list that replaces the tags, as a status line says it.
    pub fn describe(&self) -> String {
        match self {
            TagEdit::Replace(tags) if tags.is_empty() => "tags cleared".into(),
            TagEdit::Replace(tags) => format!("tags set to {}", tags.join(", ")),
            TagEdit::Change { add, remove } => {
                let signed = add.iter().map(|t| format!("+{t}")).chain(remove.iter().map(|t| format!("-{t}")));
                format!("tags {}", signed.collect::<Vec<_>>().join(" "))
            }
        }
    }
}

/// Edits the tags of each run of `ids` (every run must exist; none is changed otherwise) and
/// returns each run's tags after the edit.
pub async fn retag(store: &Store, ids: &[i64], edit: &TagEdit) -> Result<Vec<(i64, Vec<String>)>> {
    let mut runs = Vec::new();
    for &id in ids {
        runs.push(store.run(id).await?);
    }
    let mut done = Vec::new();
    for run in runs {
        let tags = edit.apply(&run.tags);
        store.set_tags(run.id, &tags).await?;
        done.push((run.id, tags));
    }
    Ok(done)
}

/// Replaces a run's notes and tags (either left as it is when `None`).
pub async fn annotate(store: &Store, id: i64, notes: Option<&str>, tags: Option<&[String]>) -> Result<()> {
    if let Some(notes) = notes {
        store.set_notes(id, notes).await?;
    }
    if let Some(tags) = tags {
        store.set_tags(id, tags).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::TagEdit;
    use crate::store::{Claims, RunRecord, RunStatus};

    /// In a store a lab shares: the runs of other users a question names, and the queued runs
    /// a runner leaves to their users' runners.
    #[test]
    fn other_users_runs_are_named() {
        let me = crate::store::user_name();
        let run = |id, user: Option<&str>, status| RunRecord {
            status,
            created_by: user.map(String::from),
            ..RunRecord::fixture(id, "hyperset", serde_json::json!({}))
        };
        let runs = [
            run(1, Some(&me), RunStatus::Queued),
            run(2, Some("not-me-grace"), RunStatus::Queued),
            run(3, Some("not-me-bob"), RunStatus::Queued),
            run(4, None, RunStatus::Queued),
            run(5, Some("not-me-bob"), RunStatus::Finished),
        ];
        assert_eq!(super::stored_by_others(&runs[..1]), None);
        assert_eq!(super::stored_by_others(&runs[3..4]), None, "no user recorded: nobody's to warn about");
        assert_eq!(super::stored_by_others(&runs[1..2]).unwrap(), "run 2 was stored by someone else (not-me-grace)");
        assert_eq!(
            super::stored_by_others(&runs).unwrap(),
            "runs 2, 3, 5 were stored by someone else (not-me-bob, not-me-grace)"
        );
        let mine = Claims::User(me.clone());
        assert_eq!(
            super::others_queued(&runs, &mine).unwrap(),
            "2 queued runs are other users' (not-me-bob, not-me-grace): their runners start them; \
             `workbench queue --all-users` starts every user's"
        );
        assert_eq!(super::others_queued(&runs, &Claims::Everyone), None);
        assert_eq!(
            super::left_to_their_users(&runs[..2], &mine).unwrap(),
            "run 2 is not-me-grace's: a runner of theirs starts it; `workbench queue --all-users` starts every user's"
        );
        assert_eq!(
            super::left_to_their_users(&runs[1..], &mine).unwrap(),
            "runs 2, 3, 5 are other users' (not-me-bob, not-me-grace): their runners start them; \
             `workbench queue --all-users` starts every user's"
        );
        assert_eq!(super::left_to_their_users([&runs[0], &runs[3]], &mine), None, "mine, and nobody's");
        assert_eq!(super::left_to_their_users(&runs, &Claims::Everyone), None);
        assert!(super::of_several_users(&runs) && !super::of_several_users(&runs[1..2]));
    }

    #[test]
    fn a_plain_list_replaces_the_tags_and_signed_ones_add_and_remove() {
        let tags = |list: &[&str]| list.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        let had = tags(&["draft", "lr", "seed"]);
        let replace = TagEdit::parse("paper, baseline").unwrap();
        assert_eq!(replace.apply(&had), tags(&["paper", "baseline"]));
        assert_eq!(TagEdit::parse("").unwrap().apply(&had), tags(&[]));
        let change = TagEdit::parse("+paper, -draft, +lr").unwrap();
        assert_eq!(change, TagEdit::Change { add: tags(&["paper", "lr"]), remove: tags(&["draft"]) });
        assert_eq!(change.apply(&had), tags(&["lr", "seed", "paper"]));
        assert_eq!(change.describe(), "tags +paper +lr -draft");
        let e = TagEdit::parse("paper,-draft").unwrap_err().to_string();
        assert!(e.contains("mixes tags with +tag / -tag"), "{e}");
        assert!(TagEdit::parse("+two words").unwrap_err().to_string().contains("holds a space"));
    }

    #[test]
    fn tags_are_single_words_kept_once_in_their_order() {
        assert_eq!(super::parse_tags(" paper, baseline,,paper ").unwrap(), ["paper", "baseline"]);
        assert!(super::parse_tags("").unwrap().is_empty());
        let e = super::parse_tags("ok, two words").unwrap_err().to_string();
        assert!(e.contains("`two words` holds a space"), "{e}");
    }
}
