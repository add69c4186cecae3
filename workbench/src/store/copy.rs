//! Copying everything one store holds into another (`workbench db copy`): runs with their
//! metrics, diagnostics, artifact records, logs, notes and tags, and sweeps, between any two
//! stores (SQLite to PostgreSQL and back), so a laptop's runs can join a lab's shared store.
//!
//! `metric_summaries` is derived from the metric rows and rebuilt in the target. Rows are
//! copied column by column from the lists below, so every value arrives as it was
//! stored, timestamps included. Runs and sweeps the target already holds (the same `uid`,
//! migration 0009: copied there before, or copied from there) are not copied again; the
//! report names them, and those that changed since. Ids are kept when the target has none of
//! those copied (a copy into an empty store is exact, and a round trip leaves every row
//! equal); otherwise the copied runs and sweeps get new ids, and the report says which id
//! became which.

use std::collections::{BTreeMap, BTreeSet};

use sqlx::any::AnyRow;
use sqlx::{Any, Row};

use super::{Backend, Float, Store, StoreError, WriteTx};

/// How a column's values are read and written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Int,
    Real,
    Text,
}

/// One stored value (NULL as `None`).
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Int(Option<i64>),
    Real(Option<f64>),
    Text(Option<String>),
}

use Kind::{Int, Real, Text};

/// A table and the columns a copy carries, in order. `id` columns are handled by the copy
/// itself (kept or renumbered); `run_id` / `sweep_id` references are remapped.
struct Table {
    name: &'static str,
    /// The column that orders rows as they were inserted.
    order: &'static str,
    columns: &'static [(&'static str, Kind)],
}

/// The columns by which a copy made before identities (migration 0009) is known as the same
/// run or sweep: a copy keeps them exactly, the creation time to the bit.
const SAME_SWEEP: &[&str] = &["created_at", "name", "spec"];
const SAME_RUN: &[&str] = &["created_at", "layer_name", "task_name", "seed", "config"];

const SWEEPS: Table = Table {
    name: "sweeps",
    order: "id",
    columns: &[("id", Int), ("name", Text), ("spec", Text), ("created_at", Real), ("uid", Text)],
};

const RUNS: Table = Table {
    name: "runs",
    order: "id",
    columns: &[
        ("id", Int),
        ("status", Text),
        ("layer_name", Text),
        ("layer_version", Text),
        ("layer_fingerprint", Text),
        ("layer_build", Text),
        ("task_name", Text),
        ("task_version", Text),
        ("task_fingerprint", Text),
        ("task_build", Text),
        ("config", Text),
        ("seed", Int),
        ("device", Text),
        ("param_count", Int),
        ("git_rev", Text),
        ("created_at", Real),
        ("started_at", Real),
        ("finished_at", Real),
        ("error", Text),
        ("worker_pid", Int),
        ("last_step", Int),
        ("total_steps", Int),
        ("notes", Text),
        ("tags", Text),
        ("metric_specs", Text),
        ("sweep_id", Int),
        ("sweep_index", Int),
        ("held", Int),
        ("claimed_by", Int),
        ("claimed_at", Real),
        ("host", Text),
        ("pid_start", Int),
        ("heartbeat_at", Real),
        ("cause", Text),
        ("executor", Text),
        ("job_id", Text),
        ("stop_requested", Real),
        ("claimed_host", Text),
        // Carried for completeness only: the target's triggers stamp a revision of its own.
        ("revision", Int),
        ("uid", Text),
        ("created_by", Text),
        ("submission", Text),
    ],
};

/// Tables whose rows belong to one run.
const PER_RUN: [Table; 4] = [
    Table {
        name: "metrics",
        order: "rowid",
        columns: &[
            ("run_id", Int),
            ("step", Int),
            ("split", Text),
            ("name", Text),
            ("value", Real),
            ("wall_time", Real),
        ],
    },
    Table {
        name: "diagnostics",
        order: "rowid",
        columns: &[("run_id", Int), ("step", Int), ("iteration", Int), ("name", Text), ("value", Real)],
    },
    Table {
        name: "artifacts",
        order: "id",
        columns: &[("id", Int), ("run_id", Int), ("kind", Text), ("path", Text), ("step", Int), ("created_at", Real)],
    },
    Table {
        name: "logs",
        order: "id",
        columns: &[("id", Int), ("run_id", Int), ("at", Real), ("line", Text), ("writer", Text), ("seq", Int)],
    },
];

/// What a copy did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CopyReport {
    /// Runs copied.
    pub runs: u64,
    /// Sweeps copied.
    pub sweeps: u64,
    /// Rows copied per run table (`metrics`, `diagnostics`, `artifacts`, `logs`).
    pub rows: BTreeMap<String, u64>,
    /// Whether the copied runs and sweeps kept their ids.
    pub kept_ids: bool,
    /// Source run id -> target run id, for runs whose id changed.
    pub renumbered: BTreeMap<i64, i64>,
    /// Runs that were running in the source: copied as interrupted (no worker writes to the
    /// copy), their target ids.
    pub were_running: Vec<i64>,
    /// Source run id -> target run id, for runs the target already held: not copied again.
    pub already_there: BTreeMap<i64, i64>,
    /// Of those, the ones whose status or progress differs between the two stores.
    pub changed_since: Vec<ChangedRun>,
    /// Sweeps the target already held (source id -> target id); runs copied into them join them.
    pub sweeps_already_there: BTreeMap<i64, i64>,
    /// Copied runs that name another run (starting from its parameters, `init_from`, or
    /// evaluating its checkpoint, `evaluates`) that this copy did not bring and the target does
    /// not hold: their setting still names the source's run.
    pub refers_elsewhere: Vec<RefersElsewhere>,
}

/// A copied run (its target id) whose `setting` names run `other` of the source store alone.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RefersElsewhere {
    pub run: i64,
    /// `init_from` or `evaluates` ([`RUN_REFERENCES`]).
    pub setting: &'static str,
    pub other: i64,
}

/// Where a stored configuration names another run by id: the run it starts from
/// (`train.init_from`) and the run whose checkpoint it evaluates (`evaluates`).
pub const RUN_REFERENCES: [(&str, &str); 2] = [("init_from", "/train/init_from"), ("evaluates", "/evaluates")];

/// A run held by both stores whose copies differ: trained on after it was copied, say.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ChangedRun {
    /// Its id in the source, and its status and last step there.
    pub source: i64,
    pub source_state: String,
    /// Its id in the target, and its status and last step there.
    pub target: i64,
    pub target_state: String,
}

/// A run's status and last step, as the copy compares them.
fn state(status: &Value, last_step: &Value) -> String {
    let status = match status {
        Value::Text(Some(s)) => s.as_str(),
        _ => "?",
    };
    format!("{status} at step {}", int(last_step))
}

impl Store {
    /// Copies every run and sweep of this store (or the runs `only` names, with their sweeps)
    /// into `target` in one transaction of the target (all or nothing). See the module docs
    /// for ids.
    pub async fn copy_into(&self, target: &Store, only: Option<&BTreeSet<i64>>) -> Result<CopyReport, StoreError> {
        self.copy_into_as(target, only, None).await
    }

    /// [`copy_into`](Self::copy_into), recording the runs it copies as stored by `as_user`
    /// where given: a laptop's runs, stored under the laptop's login, become those of the
    /// researcher's login where the target's runners run (which start their own user's runs).
    pub async fn copy_into_as(
        &self,
        target: &Store,
        only: Option<&BTreeSet<i64>>,
        as_user: Option<&str>,
    ) -> Result<CopyReport, StoreError> {
        let mut report = CopyReport::default();
        let (status_col, step_col) = (column_index(&RUNS, "status"), column_index(&RUNS, "last_step"));
        let held_sweeps = target.held(&SWEEPS, &[], SAME_SWEEP).await?;
        let held_runs = target.held(&RUNS, &["status", "last_step"], SAME_RUN).await?;
        let picked = |row: &Vec<Value>| only.is_none_or(|ids| ids.contains(&int(&row[0])));
        let source_runs: Vec<Vec<Value>> = self.read_rows(&RUNS, None).await?.into_iter().filter(picked).collect();
        let sweep_col = column_index(&RUNS, "sweep_id");
        let their_sweeps: BTreeSet<i64> = source_runs.iter().map(|row| int(&row[sweep_col])).collect();
        let mut sweep_ids = BTreeMap::new();
        let mut sweeps = Vec::new();
        for row in self.read_rows(&SWEEPS, None).await? {
            if only.is_some() && !their_sweeps.contains(&int(&row[0])) {
                continue;
            }
            match held_sweeps.find(&SWEEPS, &row, SAME_SWEEP) {
                Some(there) => {
                    report.sweeps_already_there.insert(int(&row[0]), int(&there[0]));
                    sweep_ids.insert(int(&row[0]), int(&there[0]));
                }
                None => sweeps.push(row),
            }
        }
        let mut runs = Vec::new();
        for row in source_runs {
            match held_runs.find(&RUNS, &row, SAME_RUN) {
                Some(there) => {
                    let (source, target) = (int(&row[0]), int(&there[0]));
                    report.already_there.insert(source, target);
                    let (here, there) = (state(&row[status_col], &row[step_col]), state(&there[1], &there[2]));
                    if here != there {
                        report.changed_since.push(ChangedRun {
                            source,
                            source_state: here,
                            target,
                            target_state: there,
                        });
                    }
                }
                None => runs.push(row),
            }
        }
        let clash = target.any_id_taken("runs", &runs).await? || target.any_id_taken("sweeps", &sweeps).await?;
        let keep = !clash;
        report.kept_ids = keep;

        let mut tx = target.begin_write().await?;
        for row in &sweeps {
            let old = int(&row[0]);
            let new = insert(target, &mut tx, &SWEEPS, row, keep).await?;
            sweep_ids.insert(old, new);
            report.sweeps += 1;
        }
        let error_col = column_index(&RUNS, "error");
        let config_col = column_index(&RUNS, "config");
        let copied: BTreeSet<i64> = runs.iter().map(|row| int(&row[0])).collect();
        let claim_cols = [column_index(&RUNS, "claimed_by"), column_index(&RUNS, "claimed_at")];
        let claim_host = column_index(&RUNS, "claimed_host");
        let created_by_col = column_index(&RUNS, "created_by");
        for row in &runs {
            let old = int(&row[0]);
            let mut row = row.clone();
            if let Value::Int(Some(sweep)) = row[sweep_col] {
                row[sweep_col] = Value::Int(sweep_ids.get(&sweep).copied());
            }
            if let Some(user) = as_user {
                row[created_by_col] = Value::Text(Some(user.to_string()));
            }
            // A claim belongs to a queue runner of the source; the copy waits for its own.
            row[claim_cols[0]] = Value::Int(None);
            row[claim_cols[1]] = Value::Real(None);
            row[claim_host] = Value::Text(None);
            // A run that starts from another's parameters, or evaluates its checkpoint, names
            // it by id: the id it has here.
            let mut elsewhere = Vec::new();
            for (setting, pointer) in RUN_REFERENCES {
                let Some(other) = run_reference(&row[config_col], pointer) else { continue };
                let here = report.renumbered.get(&other).or(report.already_there.get(&other)).copied();
                match here.or_else(|| (keep && copied.contains(&other)).then_some(other)) {
                    Some(id) if id != other => row[config_col] = with_run_reference(&row[config_col], pointer, id),
                    Some(_) => {}
                    None => elsewhere.push((setting, other)),
                }
            }
            let was_running = row[status_col] == Value::Text(Some("running".into()));
            if was_running {
                row[status_col] = Value::Text(Some("interrupted".into()));
                row[error_col] = Value::Text(Some(format!(
                    "copied from {} while it was running; its worker goes on writing there, not here",
                    self.location()
                )));
            }
            let new = insert(target, &mut tx, &RUNS, &row, keep).await?;
            if was_running {
                report.were_running.push(new);
            }
            if new != old {
                report.renumbered.insert(old, new);
            }
            for (setting, other) in elsewhere {
                report.refers_elsewhere.push(RefersElsewhere { run: new, setting, other });
            }
            report.runs += 1;
            for table in &PER_RUN {
                let mut copied = 0;
                for mut child in self.read_rows(table, Some(old)).await? {
                    let run_col = column_index(table, "run_id");
                    child[run_col] = Value::Int(Some(new));
                    insert(target, &mut tx, table, &child, keep).await?;
                    copied += 1;
                }
                *report.rows.entry(table.name.to_string()).or_insert(0) += copied;
            }
            // Summaries are derived from the metric rows: rebuilt, not copied.
            target.rebuild_summaries(&mut tx, new, None).await?;
        }
        if keep && target.backend() == Backend::Postgres {
            // Explicit ids do not advance PostgreSQL's sequences: move them past the copy.
            for (table, column) in [("runs", "id"), ("sweeps", "id"), ("artifacts", "id"), ("logs", "id")] {
                let sql = format!(
                    "SELECT setval(pg_get_serial_sequence('{table}', '{column}'), \
                     GREATEST((SELECT MAX({column}) FROM {table}), 1))"
                );
                sqlx::query::<Any>(sqlx::AssertSqlSafe(sql)).execute(&mut *tx).await.map_err(|e| target.err(e))?;
            }
        }
        tx.commit().await.map_err(|e| target.err(e))?;
        Ok(report)
    }

    /// Every row of `table` (of run `run`, for per-run tables) in insertion order.
    async fn read_rows(&self, table: &Table, run: Option<i64>) -> Result<Vec<Vec<Value>>, StoreError> {
        self.read_columns(table, table.columns, run).await
    }

    /// `read_rows` of some of the table's columns.
    async fn read_columns(
        &self,
        table: &Table,
        columns: &[(&str, Kind)],
        run: Option<i64>,
    ) -> Result<Vec<Vec<Value>>, StoreError> {
        let kinds = columns;
        let columns: Vec<&str> = columns.iter().map(|(c, _)| *c).collect();
        let filter = if run.is_some() { " WHERE run_id = $1" } else { "" };
        let sql = format!("SELECT {} FROM {}{filter} ORDER BY {}", columns.join(", "), table.name, table.order);
        let mut query = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql));
        if let Some(run) = run {
            query = query.bind(run);
        }
        let rows = query.fetch_all(&self.pool).await.map_err(|e| self.err(e))?;
        rows.iter().map(|row| self.read_values(table.name, kinds, row)).collect()
    }

    fn read_values(&self, table: &str, columns: &[(&str, Kind)], row: &AnyRow) -> Result<Vec<Value>, StoreError> {
        columns
            .iter()
            .enumerate()
            .map(|(i, (name, kind))| {
                let bad = |e: sqlx::Error| self.corrupt(format!("cannot read {table}.{name}: {e}"));
                Ok(match kind {
                    Int => Value::Int(row.try_get(i).map_err(bad)?),
                    Real => Value::Real(row.try_get(i).map_err(bad)?),
                    Text => Value::Text(row.try_get(i).map_err(bad)?),
                })
            })
            .collect()
    }

    /// The rows of `table`, by identity: their id, then the `columns` asked for.
    async fn held(&self, table: &Table, columns: &[&str], same: &[&str]) -> Result<Held, StoreError> {
        let wanted: Vec<&str> =
            std::iter::once("id").chain(columns.iter().copied()).chain(["uid"]).chain(same.iter().copied()).collect();
        let picked: Vec<(&str, Kind)> = wanted.iter().map(|name| table.columns[column_index(table, name)]).collect();
        let mut held = Held::default();
        for mut row in self.read_columns(table, &picked, None).await? {
            let content = content_key(&row.split_off(columns.len() + 2));
            let uid = row.pop();
            if let Some(Value::Text(Some(uid))) = uid {
                held.by_uid.insert(uid, row.clone());
            }
            held.by_content.insert(content, row);
        }
        Ok(held)
    }

    /// Whether any id of `rows` (first column) already exists in `table` of this store.
    async fn any_id_taken(&self, table: &str, rows: &[Vec<Value>]) -> Result<bool, StoreError> {
        let sql = format!("SELECT COUNT(*) FROM {table} WHERE id = $1");
        for row in rows {
            let n: i64 = sqlx::query_scalar::<Any, _>(sqlx::AssertSqlSafe(sql.clone()))
                .bind(int(&row[0]))
                .fetch_one(&self.pool)
                .await
                .map_err(|e| self.err(e))?;
            if n > 0 {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

fn column_index(table: &Table, name: &str) -> usize {
    table.columns.iter().position(|(c, _)| *c == name).unwrap_or_else(|| panic!("{}.{name} is listed", table.name))
}

/// What a target holds: its rows' id and asked-for columns, by identity and by content.
#[derive(Default)]
struct Held {
    by_uid: BTreeMap<String, Vec<Value>>,
    by_content: BTreeMap<String, Vec<Value>>,
}

impl Held {
    /// The target's row for this source row: the same identity, or, for the rows of stores
    /// copied before identities existed (each side then gave its rows a random one), the same
    /// `same` columns.
    fn find(&self, table: &Table, row: &[Value], same: &[&str]) -> Option<&Vec<Value>> {
        uid(table, row).and_then(|uid| self.by_uid.get(uid)).or_else(|| {
            let values: Vec<Value> = same.iter().map(|name| row[column_index(table, name)].clone()).collect();
            self.by_content.get(&content_key(&values))
        })
    }
}

/// The values as one key; floats by their shortest exact spelling, so equal bits match.
fn content_key(values: &[Value]) -> String {
    format!("{values:?}")
}

/// A run's or sweep's identity across stores (NULL only in rows written by hand).
fn uid<'a>(table: &Table, row: &'a [Value]) -> Option<&'a str> {
    match &row[column_index(table, "uid")] {
        Value::Text(Some(uid)) => Some(uid),
        _ => None,
    }
}

/// The run a stored configuration names at `pointer` (one of [`RUN_REFERENCES`]), if any.
fn run_reference(config: &Value, pointer: &str) -> Option<i64> {
    let Value::Text(Some(text)) = config else { return None };
    let config: serde_json::Value = serde_json::from_str(text).ok()?;
    config.pointer(pointer)?.as_i64().filter(|id| *id > 0)
}

/// `config` naming run `id` at `pointer` instead.
fn with_run_reference(config: &Value, pointer: &str, id: i64) -> Value {
    let Value::Text(Some(text)) = config else { return config.clone() };
    let Ok(mut parsed) = serde_json::from_str::<serde_json::Value>(text) else { return config.clone() };
    if let Some(slot) = parsed.pointer_mut(pointer) {
        *slot = serde_json::json!(id);
    }
    Value::Text(Some(parsed.to_string()))
}

fn int(value: &Value) -> i64 {
    match value {
        Value::Int(Some(v)) => *v,
        _ => 0,
    }
}

/// Inserts one row; an `id` column is written when `keep_ids`, else left to the target.
/// Returns the row's id in the target (0 for tables without one).
async fn insert(
    target: &Store,
    tx: &mut WriteTx,
    table: &Table,
    row: &[Value],
    keep_ids: bool,
) -> Result<i64, StoreError> {
    let has_id = table.columns.first().is_some_and(|(c, _)| *c == "id");
    let skip = usize::from(has_id && !keep_ids);
    let columns: Vec<&str> = table.columns[skip..].iter().map(|(c, _)| *c).collect();
    let params: Vec<String> = (1..=columns.len()).map(|i| format!("${i}")).collect();
    let returning = if has_id { " RETURNING id" } else { "" };
    let sql = format!("INSERT INTO {} ({}) VALUES ({}){returning}", table.name, columns.join(", "), params.join(", "));
    let mut query = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql));
    for value in &row[skip..] {
        query = match value {
            Value::Int(v) => query.bind(*v),
            Value::Real(v) => query.bind(Float(*v)),
            Value::Text(v) => query.bind(v.clone()),
        };
    }
    if has_id {
        let row = query.fetch_one(&mut **tx).await.map_err(|e| target.err(e))?;
        row.try_get::<i64, _>(0).map_err(|e| target.err(e))
    } else {
        query.execute(&mut **tx).await.map_err(|e| target.err(e))?;
        Ok(0)
    }
}

/// The columns a copy carries per table, for the test that checks they cover the schema.
pub fn copied_columns() -> Vec<(&'static str, Vec<&'static str>)> {
    std::iter::once(&SWEEPS)
        .chain(std::iter::once(&RUNS))
        .chain(PER_RUN.iter())
        .map(|t| (t.name, t.columns.iter().map(|(c, _)| *c).collect()))
        .collect()
}

impl Store {
    /// The columns `table` has in this store's schema (without PostgreSQL's explicit `rowid`,
    /// which SQLite keeps implicitly).
    pub async fn table_columns(&self, table: &str) -> Result<Vec<String>, StoreError> {
        let sql = match self.backend() {
            Backend::Sqlite => "SELECT name FROM pragma_table_info($1)",
            Backend::Postgres => {
                "SELECT column_name::text FROM information_schema.columns \
                 WHERE table_name = $1 AND table_schema = current_schema()"
            }
        };
        let columns: Vec<String> =
            sqlx::query_scalar::<Any, _>(sql).bind(table).fetch_all(&self.pool).await.map_err(|e| self.err(e))?;
        Ok(columns.into_iter().filter(|c| c != "rowid").collect())
    }
}
