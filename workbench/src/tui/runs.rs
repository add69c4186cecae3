//! The Runs screen's model: filtering, sorting and the columns of the runs table.

use super::data::Snapshot;
use crate::run_config::{flatten_config, flatten_configs_beside};
use crate::store::RunRecord;
use std::collections::{BTreeMap, BTreeSet};

/// A column of the runs table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Column {
    Id,
    Status,
    Steps,
    Best,
    Layer,
    Task,
    /// The sweep the run belongs to.
    Sweep,
    /// The runs that differ from this one only by their seed.
    Group,
    /// Who stored the run: shown when the visible runs are not all one user's.
    User,
    /// A configuration key whose value differs between the visible runs.
    Key(String),
    Duration,
    Tags,
}

/// The columns before the configuration keys (core ones first: the rest are dropped from the
/// right when narrow) and after them.
const LEADING: [Column; 8] = [
    Column::Id,
    Column::Status,
    Column::Steps,
    Column::Best,
    Column::Layer,
    Column::Task,
    Column::Sweep,
    Column::Group,
];
const TRAILING: [Column; 2] = [Column::Duration, Column::Tags];

impl Column {
    /// Header text.
    pub fn title(&self) -> String {
        match self {
            Column::Key(k) => k.clone(),
            fixed => fixed.fixed_title().into(),
        }
    }

    /// The title of a column that is not a configuration key (`""` for a key).
    fn fixed_title(&self) -> &'static str {
        match self {
            Column::Id => "id",
            Column::Status => "status",
            Column::Layer => "layer",
            Column::Task => "task",
            Column::Key(_) => "",
            Column::Best => "best",
            Column::Steps => "steps",
            Column::Duration => "time",
            Column::Tags => "tags",
            Column::Sweep => "sweep",
            Column::Group => "group",
            Column::User => "user",
        }
    }

    /// Id, status, progress and best metric: always shown, at full width, before the rest.
    pub fn is_core(&self) -> bool {
        matches!(self, Column::Id | Column::Status | Column::Steps | Column::Best)
    }
}

/// The titles of the columns that are not configuration keys.
fn fixed_titles() -> Vec<&'static str> {
    LEADING.iter().chain([&Column::User]).chain(&TRAILING).map(Column::fixed_title).collect()
}

/// The filter, the sort and the marked runs of the Runs screen.
#[derive(Debug, Clone, Default)]
pub struct RunsState {
    /// Index of the cursor in the visible rows.
    pub cursor: usize,
    /// Column sorted on (by title, so it survives columns appearing and disappearing).
    pub sort: Option<String>,
    pub descending: bool,
    /// Filter text (space-separated terms, all must match).
    pub filter: String,
    /// Runs marked for Compare and Ablation (only those the filter shows are used).
    pub selected: BTreeSet<i64>,
    /// Typing into the filter box.
    pub filtering: bool,
    /// Titles of the columns the user hid (core columns cannot be hidden).
    pub hidden: BTreeSet<String>,
}

/// The visible rows and columns of the table.
pub struct RunsTable<'a> {
    pub runs: Vec<&'a RunRecord>,
    /// The columns shown, core ones first (the user's hidden ones left out).
    pub columns: Vec<Column>,
    /// Every column the table could show, hidden ones included (the column chooser's list).
    pub all: Vec<Column>,
    pub flat: Vec<BTreeMap<String, String>>,
    /// Per run id, its seed group: the smallest run id of the group and its size.
    pub groups: BTreeMap<i64, (i64, usize)>,
}

/// The seed groups of `runs`: runs of the same layer and task whose configurations differ only
/// by the seed share a group, named by its smallest run id.
pub fn seed_groups(runs: &[RunRecord]) -> BTreeMap<i64, (i64, usize)> {
    // Layer, task and the configuration without its seed.
    type GroupKey = (String, String, Vec<(String, String)>);
    let mut by_key: BTreeMap<GroupKey, Vec<i64>> = BTreeMap::new();
    for r in runs {
        let config: Vec<(String, String)> =
            flatten_config(&r.config).into_iter().filter(|(k, _)| k != "seed" && k != "train.seed").collect();
        by_key.entry((r.layer.name.clone(), r.task.name.clone(), config)).or_default().push(r.id);
    }
    let mut out = BTreeMap::new();
    for ids in by_key.values() {
        let first = ids.iter().copied().min().unwrap_or_default();
        for id in ids {
            out.insert(*id, (first, ids.len()));
        }
    }
    out
}

// The matcher is shared with `workbench runs --filter`.
pub use crate::ops::elapsed::format_duration;
pub use crate::ops::filter::{matches, same_value};

impl RunsState {
    /// The visible runs (filtered and sorted) and the table's columns.
    pub fn table<'a>(&self, snapshot: &'a Snapshot, now: f64) -> RunsTable<'a> {
        let visible: Vec<&RunRecord> = snapshot.runs.iter().filter(|r| matches(r, &self.filter)).collect();
        let configs: Vec<&serde_json::Value> = visible.iter().map(|r| &r.config).collect();
        let mut rows: Vec<(&RunRecord, BTreeMap<String, String>)> =
            // A key spelled like another column is shown with its section (`train.steps` beside
            // the progress column `steps`), so that each title names one column to sort or hide.
            visible.iter().copied().zip(flatten_configs_beside(&configs, &fixed_titles())).collect();
        let keys: BTreeSet<&String> = rows.iter().flat_map(|(_, f)| f.keys()).collect();
        let differing: Vec<String> = keys
            .into_iter()
            .filter(|k| rows.iter().filter_map(|(_, f)| f.get(*k)).collect::<BTreeSet<_>>().len() > 1)
            .cloned()
            .collect();
        let mut all = LEADING.to_vec();
        if crate::ops::runs::of_several_users(visible.iter().copied()) {
            all.push(Column::User);
        }
        all.extend(differing.into_iter().map(Column::Key));
        all.extend(TRAILING);
        let columns: Vec<Column> =
            all.iter().filter(|c| c.is_core() || !self.hidden.contains(&c.title())).cloned().collect();
        let groups = seed_groups(&snapshot.runs);

        if let Some(sort) = &self.sort {
            if let Some(col) = columns.iter().find(|c| &c.title() == sort) {
                rows.sort_by(|(a, fa), (b, fb)| {
                    let o = compare(col, (a, fa), (b, fb), snapshot, &groups, now);
                    if self.descending {
                        o.reverse()
                    } else {
                        o
                    }
                });
            }
        }
        let (runs, flat) = rows.into_iter().unzip();
        RunsTable { runs, columns, all, flat, groups }
    }
}

/// Orders two runs, each with its flattened configuration, by `col`.
fn compare(
    col: &Column,
    (a, fa): (&RunRecord, &BTreeMap<String, String>),
    (b, fb): (&RunRecord, &BTreeMap<String, String>),
    snapshot: &Snapshot,
    groups: &BTreeMap<i64, (i64, usize)>,
    now: f64,
) -> std::cmp::Ordering {
    let num =
        |x: Option<f64>, y: Option<f64>| x.unwrap_or(f64::NEG_INFINITY).total_cmp(&y.unwrap_or(f64::NEG_INFINITY));
    match col {
        Column::Id => a.id.cmp(&b.id),
        Column::Status => a.shown_status().cmp(b.shown_status()),
        Column::Layer => a.layer.name.cmp(&b.layer.name),
        Column::Task => a.task.name.cmp(&b.task.name),
        Column::Key(k) => {
            let (x, y) = (fa.get(k), fb.get(k));
            match (x.and_then(|v| v.parse::<f64>().ok()), y.and_then(|v| v.parse::<f64>().ok())) {
                (Some(x), Some(y)) => x.total_cmp(&y),
                _ => x.cmp(&y),
            }
        }
        Column::Best => num(snapshot.best_headline(a).map(|b| b.1), snapshot.best_headline(b).map(|b| b.1)),
        Column::Steps => a.last_step.cmp(&b.last_step),
        Column::Duration => num(snapshot.training_seconds(a, now), snapshot.training_seconds(b, now)),
        Column::Tags => a.tags.join(",").cmp(&b.tags.join(",")),
        Column::Sweep => a.sweep.as_ref().map(|s| s.id).cmp(&b.sweep.as_ref().map(|s| s.id)),
        Column::Group => groups.get(&a.id).cmp(&groups.get(&b.id)),
        Column::User => a.created_by.cmp(&b.created_by),
    }
}

/// The text of one cell of `table`'s row for `run`.
pub fn cell(
    col: &Column,
    run: &RunRecord,
    flat: &BTreeMap<String, String>,
    table: &RunsTable,
    snapshot: &Snapshot,
    now: f64,
) -> String {
    match col {
        Column::Id => run.id.to_string(),
        Column::Status => run.shown_status().into(),
        Column::Layer => run.layer.name.clone(),
        Column::Task => run.task.name.clone(),
        Column::Key(k) => flat.get(k).cloned().unwrap_or_else(|| "-".into()),
        Column::Best => snapshot.best_headline(run).map_or_else(|| "-".into(), |(n, v)| format!("{n} {v:.4}")),
        Column::Steps => match run.total_steps {
            Some(t) => format!("{}/{t}", run.last_step),
            None => run.last_step.to_string(),
        },
        Column::Duration => snapshot.training_seconds(run, now).map_or_else(|| "-".into(), format_duration),
        Column::Tags => run.tags.join(","),
        Column::User => run.created_by.clone().unwrap_or_else(|| "-".into()),
        // `2 lr-grid`: the id the `sweep:N` filter takes, then the sweep's name.
        Column::Sweep => match run.sweep.as_ref() {
            None => "-".into(),
            Some(s) => match snapshot.sweeps.get(&s.id).filter(|n| !n.is_empty()) {
                Some(name) => format!("{} {name}", s.id),
                None => s.id.to_string(),
            },
        },
        // `g4×3`: the group of run 4, three runs (seeds) in it.
        Column::Group => match table.groups.get(&run.id) {
            Some((first, n)) if *n > 1 => format!("g{first}×{n}"),
            Some((first, _)) => format!("g{first}"),
            None => "-".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::RunStatus;
    use serde_json::json;

    pub(crate) fn run(id: i64, layer: &str, status: RunStatus, d: i64, tags: &[&str]) -> RunRecord {
        RunRecord {
            status,
            started_at: Some(10.0),
            finished_at: Some(75.0),
            last_step: 5,
            total_steps: Some(10),
            notes: "first try".into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            ..RunRecord::fixture(
                id,
                layer,
                json!({"layer_config": {"d": d}, "task_config": {"difficulty": "easy"}, "train": {"seed": 0}}),
            )
        }
    }

    #[test]
    fn filter_terms() {
        let r = run(1, "hyperset", RunStatus::Finished, 64, &["baseline"]);
        assert!(matches(&r, ""));
        assert!(matches(&r, "status:finished layer:hyperset"));
        assert!(!matches(&r, "status:running"));
        assert!(matches(&r, "plugin:sudoku tag:baseline"));
        assert!(matches(&r, "d=64"));
        assert!(!matches(&r, "d=32"));
        assert!(matches(&r, "TRY"));
        assert!(matches(&r, "d=64.0") && matches(&r, "d=6.4e1") && matches(&r, "difficulty=EASY"));
        assert!(!matches(&r, "nothing-like-this"));
        // A section names the key there only, whatever the key is called beside other runs.
        assert!(matches(&r, "layer.d=64") && !matches(&r, "task.d=64") && !matches(&r, "train.d=64"));
        assert!(matches(&r, "task.difficulty=easy"));
    }

    #[test]
    fn key_values_compare_by_type() {
        assert!(same_value("0.001", "1e-3") && same_value("0.001", "1E-3") && same_value("0.001", ".001"));
        assert!(!same_value("0.001", "1e-2"));
        assert!(same_value("true", "TRUE") && !same_value("false", "true"));
        assert!(same_value("row_col_box", "row_col_box") && !same_value("row_col_box", "row"));
        let mut r = run(1, "hyperset", RunStatus::Finished, 64, &[]);
        r.config = json!({"layer_config": {"d": 64}, "task_config": {}, "train": {"lr": 0.001, "seed": 0}});
        assert!(matches(&r, "lr=1e-3") && matches(&r, "lr=0.0010") && matches(&r, "train.lr=1e-3"));
        assert!(!matches(&r, "lr=3e-3"));
    }

    #[test]
    fn differing_keys_become_columns_and_sorting_is_numeric() {
        let snapshot = Snapshot {
            runs: vec![
                run(1, "hyperset", RunStatus::Finished, 128, &[]),
                run(2, "hyperset", RunStatus::Failed, 64, &[]),
                run(3, "transformer", RunStatus::Finished, 256, &[]),
            ],
            ..Default::default()
        };
        let mut state = RunsState { sort: Some("d".into()), ..Default::default() };
        let table = state.table(&snapshot, 100.0);
        assert!(table.columns.contains(&Column::Key("d".into())));
        assert!(!table.columns.contains(&Column::Key("difficulty".into())));
        assert_eq!(table.runs.iter().map(|r| r.id).collect::<Vec<_>>(), vec![2, 1, 3]);
        state.descending = true;
        state.filter = "layer:hyperset".into();
        let table = state.table(&snapshot, 100.0);
        assert_eq!(table.runs.iter().map(|r| r.id).collect::<Vec<_>>(), vec![1, 2]);
    }

    /// A store a lab shares: the `user` column appears when the visible runs are not all one
    /// user's, and sorts by user.
    #[test]
    fn a_user_column_when_the_runs_are_several_users() {
        let mut runs: Vec<RunRecord> = (1..=3).map(|id| run(id, "hyperset", RunStatus::Finished, 64, &[])).collect();
        for (r, user) in runs.iter_mut().zip(["bob", "alice", "bob"]) {
            r.created_by = Some(user.into());
        }
        let snapshot = Snapshot { runs, ..Default::default() };
        let mut state = RunsState { sort: Some("user".into()), ..Default::default() };
        let table = state.table(&snapshot, 100.0);
        assert!(table.columns.contains(&Column::User));
        assert_eq!(table.runs.iter().map(|r| r.id).collect::<Vec<_>>(), vec![2, 1, 3]);
        assert_eq!(cell(&Column::User, table.runs[0], &table.flat[0], &table, &snapshot, 100.0), "alice");
        state.filter = "user:bob".into();
        assert!(!state.table(&snapshot, 100.0).columns.contains(&Column::User), "one user's runs");
    }

    #[test]
    fn a_key_spelled_like_another_column_carries_its_section() {
        let mut runs =
            vec![run(1, "hyperset", RunStatus::Finished, 64, &[]), run(2, "hyperset", RunStatus::Finished, 64, &[])];
        for (r, steps) in runs.iter_mut().zip([100, 2000]) {
            r.config["train"]["steps"] = json!(steps);
        }
        let snapshot = Snapshot { runs, ..Default::default() };
        let state = RunsState { sort: Some("train.steps".into()), descending: true, ..Default::default() };
        let table = state.table(&snapshot, 100.0);
        let titles: Vec<String> = table.columns.iter().map(Column::title).collect();
        assert_eq!(titles.iter().filter(|t| *t == "steps").count(), 1, "{titles:?}");
        assert!(titles.contains(&"train.steps".to_string()), "{titles:?}");
        assert_eq!(table.runs.iter().map(|r| r.id).collect::<Vec<_>>(), vec![2, 1], "sorted on the key");
        // Every column that is not a key is in the list the keys keep clear of.
        for column in table.all.iter().filter(|c| !matches!(c, Column::Key(_))) {
            assert!(fixed_titles().contains(&column.title().as_str()), "{column:?}");
        }
    }
}
