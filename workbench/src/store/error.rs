//! Errors of the run store. Every message names the problem and what the user can do about it.

use sqlx::migrate::MigrateError;

use super::{RunStatus, StoreLocation};

/// Errors returned by [`Store`](super::Store) operations.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database file cannot be opened or created (missing directory, a directory given
    /// instead of a file, no permission, read-only file system, ...).
    #[error("cannot open run database at {}: {reason}; pass --db PATH or set WORKBENCH_DB to a writable location", db)]
    CannotOpen {
        /// The store that was given.
        db: StoreLocation,
        /// What went wrong.
        reason: String,
    },

    /// A PostgreSQL server that does not answer now (refused, unknown, silent): it may be
    /// restarting, so a worker waits for it as for an outage.
    #[error("cannot open run database at {}: {reason}; check --db or WORKBENCH_DB", db)]
    Unreachable {
        /// The store that was given.
        db: StoreLocation,
        /// What went wrong.
        reason: String,
    },

    /// The file exists but is not an SQLite database. It is left untouched.
    #[error("{} is not an SQLite database ({detail}); it was left untouched: pass --db PATH or set WORKBENCH_DB to a run database, or move that file away", db)]
    NotSqlite {
        /// The store that was given.
        db: StoreLocation,
        /// Why the file was rejected.
        detail: String,
    },

    /// The database has a migration applied that this binary does not know. It is left
    /// untouched.
    #[error("runs.db at {} was written by a newer workbench (schema version {version}); upgrade the workbench or use another --db", db)]
    NewerSchema {
        /// The store.
        db: StoreLocation,
        /// Highest schema (migration) version found in the database.
        version: i64,
    },

    /// The database's recorded schema conflicts with this binary's (a migration with the same
    /// version but different contents, or a migration that failed half-way).
    #[error("run database at {} has an incompatible schema: {detail}; use the workbench build that created it, or pass --db with another file", db)]
    IncompatibleSchema {
        /// The store.
        db: StoreLocation,
        /// What does not match.
        detail: String,
    },

    /// The database file is damaged, or holds a value this binary cannot interpret.
    #[error("run database at {} is damaged: {detail}; restore it from a backup or pass --db with another file", db)]
    Corrupt {
        /// The store.
        db: StoreLocation,
        /// What is wrong.
        detail: String,
    },

    /// Another process held a lock for longer than the busy timeout.
    #[error("run database at {} stayed locked by another process for more than {} s; retry, or look for a stuck workbench process", db, super::BUSY_TIMEOUT.as_secs())]
    Busy {
        /// The store.
        db: StoreLocation,
    },

    /// A store on a server has no place for run files unless one is given.
    #[error("the run store at {db} is a server, so run files (checkpoints, worker logs) need a directory that every machine running workers can reach: pass --artifacts DIR or set WORKBENCH_ARTIFACTS (for example a shared file system path)")]
    NoArtifactsDir {
        /// The store.
        db: StoreLocation,
    },

    /// No run has this id.
    #[error("run {0} does not exist (see `workbench runs`)")]
    NotFound(i64),

    /// No sweep has this id.
    #[error("sweep {0} does not exist (see `workbench sweeps`)")]
    SweepNotFound(i64),

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
    #[error("run database at {}: {message}", db)]
    Database {
        /// The store.
        db: StoreLocation,
        /// Readable description of the failure.
        message: String,
        /// The underlying error.
        #[source]
        source: sqlx::Error,
    },
}

impl StoreError {
    /// Whether the failure may pass by itself, so that the same write is worth trying again
    /// later: another writer holding the lock, or the server out of reach (connection refused
    /// or dropped, no connection free, the server shutting down, starting up or refusing new
    /// connections). Anything else (a damaged file, a missing run, a value out of range)
    /// would fail again.
    pub fn is_passing(&self) -> bool {
        match self {
            StoreError::Busy { .. } | StoreError::Unreachable { .. } => true,
            StoreError::Database { source, .. } => match source {
                sqlx::Error::Io(_)
                | sqlx::Error::Tls(_)
                | sqlx::Error::Protocol(_)
                | sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::WorkerCrashed => true,
                // connection_exception (08...), admin_shutdown, crash_shutdown,
                // cannot_connect_now, too_many_connections, and "database is not currently
                // accepting connections" (55000, object_not_in_prerequisite_state).
                sqlx::Error::Database(db) => db.code().is_some_and(|state| {
                    state.starts_with("08") || matches!(&*state, "57P01" | "57P02" | "57P03" | "53300" | "55000")
                }),
                _ => false,
            },
            _ => false,
        }
    }
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

/// SQLSTATE and message of a PostgreSQL error, if it is one.
fn postgres_state(e: &sqlx::Error) -> Option<(String, String)> {
    match e {
        sqlx::Error::Database(db) => Some((db.code()?.into_owned(), db.message().to_string())),
        _ => None,
    }
}

/// Maps an error met while the store is in use.
pub(crate) fn from_sqlx(db: &StoreLocation, e: sqlx::Error) -> StoreError {
    match db {
        StoreLocation::Sqlite(_) => from_sqlite(db, e),
        StoreLocation::Postgres(_) => from_postgres(db, e),
    }
}

fn from_sqlite(db: &StoreLocation, e: sqlx::Error) -> StoreError {
    let db = db.clone();
    match sqlite_code(&e) {
        Some((SQLITE_BUSY | SQLITE_LOCKED, _)) => StoreError::Busy { db },
        Some((SQLITE_CORRUPT | SQLITE_NOTADB, msg)) => StoreError::Corrupt { db, detail: msg },
        Some((SQLITE_FULL, msg)) => {
            StoreError::Database { db, message: format!("{msg} (free some disk space)"), source: e }
        }
        Some((SQLITE_READONLY, msg)) => StoreError::Database {
            db,
            message: format!("{msg} (the file or its directory is not writable)"),
            source: e,
        },
        Some((_, msg)) => StoreError::Database { db, message: msg, source: e },
        None => match e {
            sqlx::Error::PoolTimedOut => StoreError::Busy { db },
            e => StoreError::Database { db, message: e.to_string(), source: e },
        },
    }
}

fn from_postgres(db: &StoreLocation, e: sqlx::Error) -> StoreError {
    let db = db.clone();
    match postgres_state(&e) {
        // lock_not_available, deadlock_detected, serialization_failure: another writer won.
        Some((state, _)) if matches!(state.as_str(), "55P03" | "40P01" | "40001") => StoreError::Busy { db },
        // data_corrupted, index_corrupted
        Some((state, msg)) if matches!(state.as_str(), "XX001" | "XX002") => StoreError::Corrupt { db, detail: msg },
        // disk_full
        Some((state, msg)) if state == "53100" => {
            StoreError::Database { db, message: format!("{msg} (the server's disk is full)"), source: e }
        }
        Some((_, msg)) => StoreError::Database { db, message: msg, source: e },
        None => match e {
            sqlx::Error::PoolTimedOut => StoreError::Database {
                message: "no connection to the server became free (is it overloaded, or did it stop?)".into(),
                db,
                source: e,
            },
            e => StoreError::Database { db, message: e.to_string(), source: e },
        },
    }
}

/// Maps an error met while opening the database or running migrations.
pub(crate) fn from_sqlx_open(db: &StoreLocation, e: sqlx::Error) -> StoreError {
    match db {
        StoreLocation::Sqlite(path) => from_sqlite_open(db, path, e),
        StoreLocation::Postgres(_) => from_postgres_open(db, e),
    }
}

fn from_sqlite_open(db: &StoreLocation, path: &std::path::Path, e: sqlx::Error) -> StoreError {
    let p = db.clone();
    match sqlite_code(&e) {
        Some((SQLITE_NOTADB, msg)) => StoreError::NotSqlite { db: p, detail: msg },
        Some((SQLITE_CANTOPEN | SQLITE_READONLY, msg)) => {
            let dir = match path.parent().filter(|d| !d.as_os_str().is_empty()) {
                Some(d) => d.display().to_string(),
                None => "the current directory".to_string(),
            };
            StoreError::CannotOpen {
                db: p,
                reason: format!(
                    "{msg} (the file and its directory {dir} must be writable: SQLite keeps \
                     -wal and -shm files next to the database)"
                ),
            }
        }
        Some((SQLITE_PERM | SQLITE_IOERR | SQLITE_FULL, msg)) => StoreError::CannotOpen { db: p, reason: msg },
        Some(_) => from_sqlite(db, e),
        None => match e {
            sqlx::Error::Io(io) => StoreError::CannotOpen { db: p, reason: io.to_string() },
            e => from_sqlite(db, e),
        },
    }
}

fn from_postgres_open(db: &StoreLocation, e: sqlx::Error) -> StoreError {
    let reason = match postgres_state(&e) {
        // invalid_password, invalid_authorization_specification
        Some((state, msg)) if state == "28P01" || state == "28000" => {
            format!("{msg} (check the user and password in the URL, and the server's pg_hba.conf)")
        }
        Some((state, msg)) if state == "3D000" => {
            format!("{msg} (create it first, e.g. `createdb NAME`, or fix the database name in the URL)")
        }
        Some(_) => return from_postgres(db, e),
        None => match &e {
            sqlx::Error::Io(io) => {
                let reason = format!(
                    "cannot reach the server: {io} (is PostgreSQL running and listening there? \
                     `scripts/services start` starts a local one)"
                );
                return StoreError::Unreachable { db: db.clone(), reason };
            }
            sqlx::Error::PoolTimedOut => {
                let reason = "the server did not answer in time (is it running and reachable?)".into();
                return StoreError::Unreachable { db: db.clone(), reason };
            }
            sqlx::Error::Configuration(c) => format!("the URL is not valid: {c}"),
            sqlx::Error::Tls(t) => format!("TLS: {t}"),
            _ => return from_postgres(db, e),
        },
    };
    StoreError::CannotOpen { db: db.clone(), reason }
}

/// Maps a migration error.
pub(crate) fn from_migrate(db: &StoreLocation, e: MigrateError) -> StoreError {
    let p = db.clone();
    match e {
        MigrateError::VersionMissing(version) => StoreError::NewerSchema { db: p, version },
        MigrateError::VersionMismatch(v) => StoreError::IncompatibleSchema {
            db: p,
            detail: format!("migration {v} recorded in the database differs from this build's"),
        },
        MigrateError::Dirty(v) => {
            StoreError::IncompatibleSchema { db: p, detail: format!("migration {v} was started but never completed") }
        }
        MigrateError::Execute(e) => from_sqlx_open(db, e),
        MigrateError::ExecuteMigration(e, v) => match from_sqlx_open(db, e) {
            StoreError::Database { db, message, source } => {
                StoreError::Database { db, message: format!("applying schema migration {v}: {message}"), source }
            }
            other => other,
        },
        other => StoreError::IncompatibleSchema { db: p, detail: other.to_string() },
    }
}
