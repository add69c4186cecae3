//! Taking turns to write to an SQLite file.
//!
//! SQLite lets one connection write at a time. A connection that finds the write lock taken
//! polls for it, sleeping between tries (up to 100 ms per sleep), so with dozens of worker
//! processes writing at once the lock often sits free while every waiter sleeps: throughput
//! collapses and a writer can wait for tens of seconds. Every write of this workbench
//! therefore first takes an exclusive lock on a file next to the database
//! (`runs.db-writers`, an advisory `flock`): the kernel hands it to the next waiter the moment
//! it is released, so the writers queue instead of polling, and SQLite's own lock is then
//! (almost) never contended. PostgreSQL needs none of this.
//!
//! Writes go through [`WriteTx`] (a transaction holding the turn) or the [`Write`] methods
//! on single statements, which run them in one.

use std::fs::{File, OpenOptions};
use std::ops::{Deref, DerefMut};
use std::path::PathBuf;

use sqlx::any::{AnyArguments, AnyQueryResult, AnyRow};
use sqlx::query::{Query, QueryScalar};
use sqlx::AnyConnection;
use sqlx::{Any, Transaction};

use super::{Store, StoreError, StoreLocation};

/// The lock file of one SQLite database.
#[derive(Debug)]
pub(super) struct Turnstile {
    path: PathBuf,
}

/// A held turn: the lock is released when the file is closed (dropped).
pub(super) struct Turn {
    _file: File,
}

impl Turnstile {
    /// The turnstile of the database at `db` (`<db>-writers`).
    pub fn for_database(db: &std::path::Path) -> Turnstile {
        let mut name = db.as_os_str().to_owned();
        name.push("-writers");
        Turnstile { path: PathBuf::from(name) }
    }

    /// Waits for this process's turn to write to `db` (the database this turnstile guards,
    /// named in the error).
    pub async fn enter(&self, db: &StoreLocation) -> Result<Turn, StoreError> {
        let path = self.path.clone();
        let taken: std::io::Result<Turn> = tokio::task::spawn_blocking(move || {
            let file = OpenOptions::new().create(true).truncate(false).write(true).open(&path)?;
            file.lock()?;
            Ok(Turn { _file: file })
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        taken.map_err(|e| StoreError::CannotOpen {
            db: db.clone(),
            reason: format!("cannot take the writers' lock file next to it: {e}"),
        })
    }
}

/// A write transaction that holds the store's turn (on SQLite) until it commits or drops.
pub(crate) struct WriteTx {
    tx: Transaction<'static, Any>,
    _turn: Option<Turn>,
}

impl WriteTx {
    pub(super) fn new(tx: Transaction<'static, Any>, turn: Option<Turn>) -> WriteTx {
        WriteTx { tx, _turn: turn }
    }

    /// Commits, then gives the turn to the next writer.
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        self.tx.commit().await
    }
}

impl Deref for WriteTx {
    type Target = AnyConnection;

    fn deref(&self) -> &AnyConnection {
        &self.tx
    }
}

impl DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        &mut self.tx
    }
}

/// Single write statements, each run in a write transaction of its own.
pub(super) trait Write {
    /// The statement's rows-affected result.
    async fn write(self, store: &Store) -> Result<AnyQueryResult, StoreError>;
}

/// Single write statements that return a row (`... RETURNING`).
pub(super) trait WriteReturning<T> {
    /// The row it returned, if any.
    async fn write_returning(self, store: &Store) -> Result<Option<T>, StoreError>;
}

impl<'q> Write for Query<'q, Any, AnyArguments> {
    async fn write(self, store: &Store) -> Result<AnyQueryResult, StoreError> {
        let mut tx = store.begin_write().await?;
        let result = self.execute(&mut *tx).await.map_err(|e| store.err(e))?;
        tx.commit().await.map_err(|e| store.err(e))?;
        Ok(result)
    }
}

impl<'q> WriteReturning<AnyRow> for Query<'q, Any, AnyArguments> {
    async fn write_returning(self, store: &Store) -> Result<Option<AnyRow>, StoreError> {
        let mut tx = store.begin_write().await?;
        let row = self.fetch_optional(&mut *tx).await.map_err(|e| store.err(e))?;
        tx.commit().await.map_err(|e| store.err(e))?;
        Ok(row)
    }
}

impl<'q, O> WriteReturning<O> for QueryScalar<'q, Any, O, AnyArguments>
where
    O: Send + Unpin,
    (O,): for<'r> sqlx::FromRow<'r, AnyRow>,
{
    async fn write_returning(self, store: &Store) -> Result<Option<O>, StoreError> {
        let mut tx = store.begin_write().await?;
        let value = self.fetch_optional(&mut *tx).await.map_err(|e| store.err(e))?;
        tx.commit().await.map_err(|e| store.err(e))?;
        Ok(value)
    }
}
