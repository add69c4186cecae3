//! Errors of the run store. Every message names the problem and what the user can do about it.

use std::path::{Path, PathBuf};

use sqlx::migrate::MigrateError;

use super::RunStatus;

/// Errors returned by [`Store`](super::Store) operations.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database file cannot be opened or created (missing directory, a directory given
    /// instead of a file, no permission, read-only file system, ...).
    #[error("cannot open run database at {}: {reason}; pass --db PATH or set WORKBENCH_DB to a writable location", path.display())]
    CannotOpen {
        /// Path that was given.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },

    /// The file exists but is not an SQLite database. It is left untouched.
    #[error("{} is not an SQLite database ({detail}); it was left untouched: pass --db PATH or set WORKBENCH_DB to a run database, or move that file away", path.display())]
    NotSqlite {
        /// Path that was given.
        path: PathBuf,
        /// Why the file was rejected.
        detail: String,
    },

    /// The database has a migration applied that this binary does not know. It is left
    /// untouched.
    #[error("runs.db at {} was written by a newer workbench (schema version {version}); upgrade the workbench or use another --db", path.display())]
    NewerSchema {
        /// Path of the database.
        path: PathBuf,
        /// Highest schema (migration) version found in the database.
        version: i64,
    },

    /// The database's recorded schema conflicts with this binary's (a migration with the same
    /// version but different contents, or a migration that failed half-way).
    #[error("run database at {} has an incompatible schema: {detail}; use the workbench build that created it, or pass --db with another file", path.display())]
    IncompatibleSchema {
        /// Path of the database.
        path: PathBuf,
        /// What does not match.
        detail: String,
    },

    /// The database file is damaged, or holds a value this binary cannot interpret.
    #[error("run database at {} is damaged: {detail}; restore it from a backup or pass --db with another file", path.display())]
    Corrupt {
        /// Path of the database.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },

    /// Another process held a lock for longer than the busy timeout.
    #[error("run database at {} stayed locked by another process for more than {} s; retry, or look for a stuck workbench process", path.display(), super::BUSY_TIMEOUT.as_secs())]
    Busy {
        /// Path of the database.
        path: PathBuf,
    },

    /// No run has this id.
    #[error("run {0} does not exist (see `workbench runs`)")]
    NotFound(i64),

    /// The run's current status does not allow the requested change.
    #[error("run {id} is {status}, so it cannot {action}; {hint}")]
    InvalidTransition {
        /// Run id.
        id: i64,
        /// Its current status.
        status: RunStatus,
        /// What was attempted, e.g. `"be requeued"`.
        action: &'static str,
        /// What the user can do instead.
        hint: String,
    },

    /// [`Store::finish`](super::Store::finish) was given a non-terminal status.
    #[error("`{0}` is not a final run status; finish a run as finished, failed, interrupted or diverged")]
    NotTerminal(RunStatus),

    /// Text that is not a run status.
    #[error("unknown run status {0:?}; expected one of queued, running, finished, failed, interrupted, diverged")]
    UnknownStatus(String),

    /// A tag that cannot be stored.
    #[error("invalid tag {tag:?}: {reason}")]
    InvalidTag {
        /// The offending tag.
        tag: String,
        /// Why it is rejected.
        reason: &'static str,
    },

    /// A number too large for SQLite's signed 64-bit integers.
    #[error("{what} = {value} is too large to store (at most {max})", max = i64::MAX)]
    OutOfRange {
        /// Which value.
        what: &'static str,
        /// The value given.
        value: u64,
    },

    /// Any other database error.
    #[error("run database at {}: {message}", path.display())]
    Database {
        /// Path of the database.
        path: PathBuf,
        /// Readable description of the failure.
        message: String,
        /// The underlying error.
        #[source]
        source: sqlx::Error,
    },
}

// SQLite primary result codes (https://www.sqlite.org/rescode.html).
const SQLITE_PERM: i64 = 3;
const SQLITE_BUSY: i64 = 5;
const SQLITE_LOCKED: i64 = 6;
const SQLITE_READONLY: i64 = 8;
const SQLITE_IOERR: i64 = 10;
const SQLITE_CORRUPT: i64 = 11;
const SQLITE_FULL: i64 = 13;
const SQLITE_CANTOPEN: i64 = 14;
const SQLITE_NOTADB: i64 = 26;

/// Primary SQLite result code and message of a database error, if it is one.
fn sqlite_code(e: &sqlx::Error) -> Option<(i64, String)> {
    match e {
        sqlx::Error::Database(db) => {
            let code = db.code()?.parse::<i64>().ok()?;
            Some((code & 0xff, db.message().to_string()))
        }
        _ => None,
    }
}

/// Maps an error met while the store is in use.
pub(crate) fn from_sqlx(path: &Path, e: sqlx::Error) -> StoreError {
    let path = path.to_path_buf();
    match sqlite_code(&e) {
        Some((SQLITE_BUSY | SQLITE_LOCKED, _)) => StoreError::Busy { path },
        Some((SQLITE_CORRUPT | SQLITE_NOTADB, msg)) => StoreError::Corrupt { path, detail: msg },
        Some((SQLITE_FULL, msg)) => {
            StoreError::Database { path, message: format!("{msg} (free some disk space)"), source: e }
        }
        Some((SQLITE_READONLY, msg)) => StoreError::Database {
            path,
            message: format!("{msg} (the file or its directory is not writable)"),
            source: e,
        },
        Some((_, msg)) => StoreError::Database { path, message: msg, source: e },
        None => match e {
            sqlx::Error::PoolTimedOut => StoreError::Busy { path },
            e => StoreError::Database { path, message: e.to_string(), source: e },
        },
    }
}

/// Maps an error met while opening the database or running migrations.
pub(crate) fn from_sqlx_open(path: &Path, e: sqlx::Error) -> StoreError {
    let p = path.to_path_buf();
    match sqlite_code(&e) {
        Some((SQLITE_NOTADB, msg)) => StoreError::NotSqlite { path: p, detail: msg },
        Some((SQLITE_CANTOPEN | SQLITE_READONLY, msg)) => {
            let dir = match path.parent().filter(|d| !d.as_os_str().is_empty()) {
                Some(d) => d.display().to_string(),
                None => "the current directory".to_string(),
            };
            StoreError::CannotOpen {
                path: p,
                reason: format!(
                    "{msg} (the file and its directory {dir} must be writable: SQLite keeps \
                     -wal and -shm files next to the database)"
                ),
            }
        }
        Some((SQLITE_PERM | SQLITE_IOERR | SQLITE_FULL, msg)) => StoreError::CannotOpen { path: p, reason: msg },
        Some(_) => from_sqlx(path, e),
        None => match e {
            sqlx::Error::Io(io) => StoreError::CannotOpen { path: p, reason: io.to_string() },
            e => from_sqlx(path, e),
        },
    }
}

/// Maps a migration error.
pub(crate) fn from_migrate(path: &Path, e: MigrateError) -> StoreError {
    let p = path.to_path_buf();
    match e {
        MigrateError::VersionMissing(version) => StoreError::NewerSchema { path: p, version },
        MigrateError::VersionMismatch(v) => StoreError::IncompatibleSchema {
            path: p,
            detail: format!("migration {v} recorded in the database differs from this build's"),
        },
        MigrateError::Dirty(v) => {
            StoreError::IncompatibleSchema { path: p, detail: format!("migration {v} was started but never completed") }
        }
        MigrateError::Execute(e) => from_sqlx_open(path, e),
        MigrateError::ExecuteMigration(e, v) => match from_sqlx_open(path, e) {
            StoreError::Database { path, message, source } => {
                StoreError::Database { path, message: format!("applying schema migration {v}: {message}"), source }
            }
            other => other,
        },
        other => StoreError::IncompatibleSchema { path: p, detail: other.to_string() },
    }
}
