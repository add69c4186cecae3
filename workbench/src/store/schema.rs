//! What this binary needs of a store's schema, checked read-only when it opens, so a damaged or
//! foreign database is refused with the reason before anything is written to it (rather than
//! opening and failing at the first write, with a run half-stored).

use std::collections::BTreeSet;

use sqlx::{Connection, SqliteConnection};

use super::{copy, StoreError, StoreLocation};

/// Tables the store reads beyond those a copy carries, with their columns.
const SUMMARIES: (&str, &[&str]) =
    ("metric_summaries", &["run_id", "split", "name", "lo", "hi", "last", "last_step", "wall"]);

/// Every table this binary uses, with the columns it reads or writes.
fn required() -> Vec<(&'static str, Vec<&'static str>)> {
    let mut tables = copy::copied_columns();
    tables.push((SUMMARIES.0, SUMMARIES.1.to_vec()));
    tables
}

/// The names of the tables this binary uses.
pub(super) fn table_names() -> Vec<&'static str> {
    required().into_iter().map(|(t, _)| t).collect()
}

/// The first table or column of [`required`] that `columns_of` does not list, as a sentence.
pub(super) fn missing(columns_of: impl Fn(&str) -> BTreeSet<String>) -> Option<String> {
    for (table, needed) in required() {
        let have = columns_of(table);
        if have.is_empty() {
            return Some(format!("table {table} is missing"));
        }
        let absent: Vec<&str> = needed.iter().copied().filter(|c| !have.contains(*c)).collect();
        if !absent.is_empty() {
            return Some(format!("table {table} lacks column(s) {}", absent.join(", ")));
        }
    }
    None
}

/// Checks, on a read-only connection, that a fully migrated SQLite database has every table
/// and column this binary needs and was not claimed by another program (`user_version`).
pub(super) async fn check_sqlite(location: &StoreLocation, conn: &mut SqliteConnection) -> Result<(), StoreError> {
    let incompatible = |detail: String| StoreError::IncompatibleSchema { db: location.clone(), detail };
    let open_error = |e| super::error::from_sqlx_open(location, e);
    let user_version: i64 =
        sqlx::query_scalar("PRAGMA user_version").fetch_one(&mut *conn).await.map_err(open_error)?;
    if user_version != 0 {
        return Err(incompatible(format!(
            "PRAGMA user_version is {user_version}, which the workbench never sets, so the file belongs to \
             another program or a different workbench"
        )));
    }
    let mut columns = std::collections::HashMap::new();
    for (table, _) in required() {
        let names: Vec<String> = sqlx::query_scalar("SELECT name FROM pragma_table_info(?)")
            .bind(table)
            .fetch_all(&mut *conn)
            .await
            .map_err(open_error)?;
        columns.insert(table, names.into_iter().collect::<BTreeSet<String>>());
    }
    match missing(|t| columns.get(t).cloned().unwrap_or_default()) {
        Some(what) => Err(incompatible(format!("{what} (this workbench needs it)"))),
        None => Ok(()),
    }
}

/// Whether an SQLite database holds any table of its own (not SQLite's internal ones).
pub(super) async fn has_tables(conn: &mut SqliteConnection) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
        .fetch_all(&mut *conn)
        .await
}

/// Closes a read-only connection (which writes nothing).
pub(super) async fn close(conn: SqliteConnection) {
    let _ = conn.close().await;
}
