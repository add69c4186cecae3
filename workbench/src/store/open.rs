//! Opening a store: checks that refuse a wrong target before anything is written, the
//! connection settings of each backend, and the schema migrations.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::migrate::Migrator;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{AnyPool, ConnectOptions, Connection, Executor, SqliteConnection};

use super::{error, schema, Store, StoreError, StoreLocation, BUSY_TIMEOUT};

/// Schema migrations of each backend, embedded from `workbench/migrations/<backend>/`. The two
/// directories hold the same numbered steps, each written in its engine's SQL.
static SQLITE_MIGRATOR: Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATOR: Migrator = sqlx::migrate!("./migrations/postgres");

/// The first 16 bytes of every SQLite database file.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// Connections one store handle opens to a PostgreSQL server at most, unless it is opened
/// with [`Store::connect_serial`] or [`Store::connect_occasional`].
const POSTGRES_CONNECTIONS: u32 = 4;

/// How long the connection of a [`Store::connect_occasional`] handle stays open unused.
const OCCASIONAL_IDLE: Duration = Duration::from_secs(5);

/// The connections a store handle keeps to a PostgreSQL server (an SQLite file's are
/// local and cost nothing).
struct Connections {
    /// At most this many.
    most: u32,
    /// Each closed once unused for this long (`None`: sqlx's default, 10 minutes).
    idle: Option<Duration>,
    /// The `application_name` the server lists them under, unless the URL names one.
    name: String,
}

/// `url` with `application_name=name` added, unless it names one already.
fn with_application_name(url: &str, name: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if !parsed.query_pairs().any(|(key, _)| key == "application_name") => {
            parsed.query_pairs_mut().append_pair("application_name", name);
            parsed.into()
        }
        _ => url.to_string(),
    }
}

/// How long to wait for a PostgreSQL server to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Schema version this binary creates and understands (the highest embedded migration; the
/// same number on both backends).
pub fn schema_version() -> i64 {
    SQLITE_MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
}

impl Store {
    /// Opens the SQLite run database at `path`, creating it if missing, and brings its schema
    /// up to date.
    ///
    /// The parent directory must exist (it is not created; the error names it). Connections
    /// use WAL journaling, a 30 s busy timeout, `foreign_keys = ON` and `synchronous = NORMAL`
    /// (see the module docs for why).
    ///
    /// Refuses, without modifying anything: a directory path, a path whose directory is
    /// missing ([`StoreError::CannotOpen`]); an existing file that is not SQLite
    /// ([`StoreError::NotSqlite`]); a database written by a newer workbench
    /// ([`StoreError::NewerSchema`]).
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
        Store::connect(&StoreLocation::Sqlite(path.to_path_buf())).await
    }

    /// Opens the store at `location`: an SQLite file (as [`Store::open`]) or a PostgreSQL
    /// database, whose schema is brought up to date the same way. A PostgreSQL database
    /// written by a newer workbench is refused before anything is changed.
    pub async fn connect(location: &StoreLocation) -> Result<Store, StoreError> {
        let connections = Connections { most: POSTGRES_CONNECTIONS, idle: None, name: "workbench".into() };
        Store::connect_pooled(location, connections).await
    }

    /// [`Store::connect`] for a handle used by one task at a time and often (a worker's
    /// heartbeat, its writer): one connection to a PostgreSQL server, so that the hundreds of
    /// workers of a cluster stay within the server's connection limit. The server lists it as
    /// `workbench <role>` (`pg_stat_activity.application_name`).
    pub async fn connect_serial(location: &StoreLocation, role: &str) -> Result<Store, StoreError> {
        Store::connect_pooled(location, Connections { most: 1, idle: None, name: format!("workbench {role}") }).await
    }

    /// [`Store::connect_serial`] for a handle used now and then (a worker, as it starts and
    /// ends its run): its connection to a PostgreSQL server is closed after
    /// 5 s unused (`OCCASIONAL_IDLE`), and opened again when it is next needed.
    pub async fn connect_occasional(location: &StoreLocation, role: &str) -> Result<Store, StoreError> {
        let connections = Connections { most: 1, idle: Some(OCCASIONAL_IDLE), name: format!("workbench {role}") };
        Store::connect_pooled(location, connections).await
    }

    async fn connect_pooled(location: &StoreLocation, connections: Connections) -> Result<Store, StoreError> {
        sqlx::any::install_default_drivers();
        match location {
            StoreLocation::Sqlite(path) => open_sqlite(location, path).await,
            StoreLocation::Postgres(url) => open_postgres(location, url, connections).await,
        }
    }
}

/// Why no SQLite store can be at `path` (an empty path, a directory, a missing or foreign
/// parent directory), checked before anything is opened or created; `None` when one can.
pub(crate) fn unusable_sqlite_path(path: &Path) -> Option<String> {
    if path.as_os_str().is_empty() {
        return Some("the path is empty".into());
    }
    if path.is_dir() {
        return Some(format!("it is a directory, not a file (for example {})", path.join("runs.db").display()));
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty())?;
    match (parent.is_dir(), parent.exists()) {
        (true, _) => None,
        (false, true) => Some(format!("{} is not a directory", parent.display())),
        (false, false) => Some(format!("directory {} does not exist (create it first)", parent.display())),
    }
}

async fn open_sqlite(location: &StoreLocation, path: &Path) -> Result<Store, StoreError> {
    let cannot = |reason: String| StoreError::CannotOpen { db: location.clone(), reason };

    if let Some(reason) = unusable_sqlite_path(path) {
        return Err(cannot(reason));
    }

    // Set when this call creates the (empty) file, so a failed open can remove it again.
    let mut created = false;
    // Whether every migration is applied already (then nothing is written while opening).
    let mut up_to_date = false;
    match std::fs::metadata(path) {
        Ok(meta) if !meta.is_file() => {
            return Err(cannot("it is not a regular file".into()));
        }
        Ok(meta) => {
            // An empty file is a valid (empty) SQLite database; anything else must carry the
            // SQLite header. Checked here so SQLite never opens a foreign file for writing.
            if meta.len() > 0 {
                check_header(location, path, meta.len())?;
            }
            // SQLite silently falls back to read-only for a write-protected file and would
            // only fail at the first write; ask the OS now (opening for writing without
            // truncating changes nothing).
            if let Err(e) = std::fs::OpenOptions::new().write(true).open(path) {
                return Err(cannot(format!("the file is not writable: {e}")));
            }
            if meta.len() > 0 {
                up_to_date = preflight_sqlite(location, path).await?;
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Create it ourselves: the OS error ("Permission denied", "Read-only file system")
            // says more than SQLite's "unable to open database file".
            match std::fs::OpenOptions::new().write(true).create_new(true).open(path) {
                Ok(_) => created = true,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(cannot(format!("cannot create the file: {e}"))),
            }
        }
        Err(e) => return Err(cannot(e.to_string())),
    }
    let remove_if_created = || {
        if created && std::fs::metadata(path).is_ok_and(|m| m.len() == 0) {
            let _ = std::fs::remove_file(path);
        }
    };

    // The generic pool is configured by URL; an absolute path keeps the URL unambiguous, and
    // sqlx's own encoder escapes the characters a URL cannot hold.
    let absolute = std::path::absolute(path).map_err(|e| cannot(e.to_string()))?;
    let url = SqliteConnectOptions::new().filename(&absolute).to_url_lossy();
    let options = AnyConnectOptions::from_url(&url).map_err(|e| cannot(e.to_string()))?;
    let pool = AnyPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(BUSY_TIMEOUT + Duration::from_secs(20))
        .after_connect(|conn, _| {
            Box::pin(async move {
                let busy_ms = BUSY_TIMEOUT.as_millis();
                conn.execute(sqlx::AssertSqlSafe(format!(
                    "PRAGMA busy_timeout = {busy_ms}; PRAGMA foreign_keys = ON; \
                     PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
                )))
                .await?;
                Ok(())
            })
        })
        .connect_with(options)
        .await
        .map_err(|e| {
            remove_if_created();
            error::from_sqlx_open(location, e)
        })?;

    // Processes that open a new (or older) file at the same moment would each apply the same
    // migrations ("table runs already exists"): they take turns, and each migrates only what
    // the ones before it left to do.
    let _turn = if up_to_date {
        None
    } else {
        match super::Turnstile::for_database(path).enter(location).await {
            Ok(turn) => Some(turn),
            Err(e) => {
                pool.close().await;
                return Err(e);
            }
        }
    };
    migrated(pool, location, &SQLITE_MIGRATOR).await
}

async fn open_postgres(location: &StoreLocation, url: &str, connections: Connections) -> Result<Store, StoreError> {
    let options: AnyConnectOptions = with_application_name(url, &connections.name)
        .parse()
        .map_err(|e| StoreError::CannotOpen { db: location.clone(), reason: format!("{e}") })?;
    // One direct connection first: a pool retries until its timeout and then reports only
    // that it timed out, where the first attempt says why (refused, unknown host, password).
    let probe = tokio::time::timeout(CONNECT_TIMEOUT, sqlx::AnyConnection::connect_with(&options))
        .await
        .map_err(|_| error::from_sqlx_open(location, sqlx::Error::PoolTimedOut))?
        .map_err(|e| error::from_sqlx_open(location, e))?;
    let _ = probe.close().await;
    // A few connections per handle: a cluster's workers, runners and TUIs all connect to one
    // server, whose connection limit (100 by default) they share.
    let mut pool = AnyPoolOptions::new().max_connections(connections.most).acquire_timeout(CONNECT_TIMEOUT);
    if let Some(idle) = connections.idle {
        pool = pool.idle_timeout(idle);
    }
    let pool = pool.connect_with(options).await.map_err(|e| error::from_sqlx_open(location, e))?;

    // Refuse a database that a newer workbench migrated, before the migrator touches it.
    let applied: Vec<i64> = match pool.fetch_optional("SELECT to_regclass('_sqlx_migrations')::text").await {
        Ok(row) => {
            let exists = row.and_then(|r| sqlx::Row::try_get::<Option<String>, _>(&r, 0).ok().flatten()).is_some();
            if exists {
                sqlx::query_scalar("SELECT version FROM _sqlx_migrations")
                    .fetch_all(&pool)
                    .await
                    .map_err(|e| error::from_sqlx_open(location, e))?
            } else {
                Vec::new()
            }
        }
        Err(e) => return Err(error::from_sqlx_open(location, e)),
    };
    if let Some(version) = applied.into_iter().filter(|v| !POSTGRES_MIGRATOR.version_exists(*v)).max() {
        pool.close().await;
        return Err(StoreError::NewerSchema { db: location.clone(), version });
    }

    migrated(pool, location, &POSTGRES_MIGRATOR).await
}

/// Brings the schema up to date with `migrator` and makes the store handle.
async fn migrated(pool: AnyPool, location: &StoreLocation, migrator: &Migrator) -> Result<Store, StoreError> {
    if let Err(e) = migrator.run(&pool).await {
        pool.close().await;
        return Err(error::from_migrate(location, e));
    }
    let store = Store {
        pool,
        location: Arc::new(location.clone()),
        artifacts: None,
        host: Arc::from(super::this_host()),
        user: Arc::from(super::user_name()),
        turnstile: location.sqlite_path().map(|p| Arc::new(super::Turnstile::for_database(p))),
    };
    // Migrations assume the tables of earlier ones: a table dropped by hand is found here.
    let mut columns = std::collections::HashMap::new();
    for table in schema::table_names() {
        columns.insert(table, store.table_columns(table).await?.into_iter().collect());
    }
    if let Some(what) = schema::missing(|t| columns.get(t).cloned().unwrap_or_default()) {
        store.close().await;
        return Err(StoreError::IncompatibleSchema {
            db: location.clone(),
            detail: format!("{what} (this workbench needs it)"),
        });
    }
    Ok(store)
}

/// Refuses a non-empty file that does not start with the SQLite header.
fn check_header(location: &StoreLocation, path: &Path, len: u64) -> Result<(), StoreError> {
    use std::io::Read;
    let mut header = [0u8; 16];
    let read = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut header));
    match read {
        Ok(()) if &header == SQLITE_HEADER && len >= 100 => Ok(()),
        Ok(()) => Err(StoreError::NotSqlite {
            db: location.clone(),
            detail: "it does not start with the SQLite file header".into(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Err(StoreError::NotSqlite { db: location.clone(), detail: format!("it is only {len} bytes long") })
        }
        Err(e) => Err(StoreError::CannotOpen { db: location.clone(), reason: e.to_string() }),
    }
}

/// Read-only look at an existing SQLite database before opening it for writing. Refuses,
/// without modifying it: migrations applied that this binary does not know; tables with no
/// record of the workbench's migrations (another program's database, or a removed record); a
/// fully migrated database missing a table or column this binary needs, or claimed by
/// another program (`user_version`). `Ok(true)` when every migration is applied already.
async fn preflight_sqlite(location: &StoreLocation, path: &Path) -> Result<bool, StoreError> {
    // A database that no process has open in WAL mode has no `-wal` file. Opened immutable,
    // SQLite then creates no `-wal`/`-shm` files either, so a refusal leaves the directory as
    // it was; with a `-wal` file (workers may be writing) it reads as any reader does.
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let immutable = !Path::new(&wal).exists();
    let options = SqliteConnectOptions::new()
        .filename(path)
        .read_only(true)
        .immutable(immutable)
        .create_if_missing(false)
        .busy_timeout(BUSY_TIMEOUT);
    let mut conn = SqliteConnection::connect_with(&options).await.map_err(|e| error::from_sqlx_open(location, e))?;
    let result = inspect_sqlite(location, &mut conn).await;
    schema::close(conn).await;
    result
}

async fn inspect_sqlite(location: &StoreLocation, conn: &mut SqliteConnection) -> Result<bool, StoreError> {
    let applied = applied_sqlite_versions(conn).await.map_err(|e| error::from_sqlx_open(location, e))?;
    if let Some(version) = applied.iter().copied().filter(|v| !SQLITE_MIGRATOR.version_exists(*v)).max() {
        return Err(StoreError::NewerSchema { db: location.clone(), version });
    }
    if applied.is_empty() {
        let mut tables = schema::has_tables(conn).await.map_err(|e| error::from_sqlx_open(location, e))?;
        // The migrator creates its (empty) record table before the first migration commits.
        tables.retain(|t| t != "_sqlx_migrations");
        if !tables.is_empty() {
            return Err(StoreError::IncompatibleSchema {
                db: location.clone(),
                detail: format!(
                    "it has tables ({}) but no record of the workbench's migrations (_sqlx_migrations): \
                     it belongs to another program, or that record was removed",
                    tables.join(", ")
                ),
            });
        }
        return Ok(false);
    }
    let up_to_date = SQLITE_MIGRATOR.iter().all(|m| applied.contains(&m.version));
    if up_to_date {
        schema::check_sqlite(location, conn).await?;
    }
    Ok(up_to_date)
}

/// Versions recorded in `_sqlx_migrations` (empty if the table does not exist yet).
async fn applied_sqlite_versions(conn: &mut SqliteConnection) -> Result<Vec<i64>, sqlx::Error> {
    let has_table: Option<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'")
            .fetch_optional(&mut *conn)
            .await?;
    if has_table.is_none() {
        return Ok(Vec::new());
    }
    sqlx::query_scalar("SELECT version FROM _sqlx_migrations").fetch_all(&mut *conn).await
}
