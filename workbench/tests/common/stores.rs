//! Fresh run stores for tests, on either backend: an SQLite file in a temp directory, or a
//! throwaway database on the PostgreSQL server named by `WORKBENCH_TEST_POSTGRES`
//! (`scripts/services start` runs one on 127.0.0.1 and `scripts/services env` prints the URL).
//!
//! Without that variable the PostgreSQL tests are skipped with a message, except under CI
//! (`CI` set), where they fail: a suite that silently skipped its server would prove nothing.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use sqlx::{Connection, PgConnection};
use workbench::store::{Store, StoreLocation};

/// The environment variable holding the URL of a PostgreSQL database whose role may create
/// databases.
pub const POSTGRES_ENV: &str = "WORKBENCH_TEST_POSTGRES";

/// Which engine a test store uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A store location that exists for one test and is removed afterwards.
pub struct TestDb {
    pub location: StoreLocation,
    /// The temp directory (SQLite file, artifacts).
    pub dir: PathBuf,
    /// The PostgreSQL database to drop at the end, with the admin URL to drop it through.
    postgres: Option<(String, String)>,
}

/// The admin URL of the test server, or `None` (after saying why) when the tests should skip.
pub fn postgres_admin_url() -> Option<String> {
    match std::env::var(POSTGRES_ENV) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => panic!(
            "{POSTGRES_ENV} is not set, and CI must test the PostgreSQL store: \
             run `scripts/services start` and `eval \"$(scripts/services env)\"` first"
        ),
        _ => {
            eprintln!(
                "skipped: no PostgreSQL server for this test ({POSTGRES_ENV} is not set; \
                 `scripts/services start` and `eval \"$(scripts/services env)\"` provide one)"
            );
            None
        }
    }
}

fn unique(tag: &str) -> String {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let tag: String = tag.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    format!("{tag}_{}_{}_{}", std::process::id(), nanos % 1_000_000_000, COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// `url` with its database name replaced.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let host_end = base[scheme_end..].find('/').map(|i| scheme_end + i).unwrap_or(base.len());
    let mut out = format!("{}/{name}", &base[..host_end]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

impl TestDb {
    /// A new empty location, or `None` when `backend` is PostgreSQL and no server is
    /// configured outside CI (the caller returns: the test is skipped).
    pub async fn new(backend: Backend, tag: &str) -> Option<TestDb> {
        let dir = std::env::temp_dir().join(format!("workbench-store-test-{}", unique(tag)));
        std::fs::create_dir_all(&dir).unwrap();
        match backend {
            Backend::Sqlite => {
                Some(TestDb { location: StoreLocation::Sqlite(dir.join("runs.db")), dir, postgres: None })
            }
            Backend::Postgres => {
                let admin = postgres_admin_url()?;
                let name = format!("wbt_{}", unique(tag)).to_ascii_lowercase();
                let mut conn = PgConnection::connect(&admin)
                    .await
                    .unwrap_or_else(|e| panic!("cannot reach the test PostgreSQL server ({POSTGRES_ENV}): {e}"));
                sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .execute(&mut conn)
                    .await
                    .unwrap_or_else(|e| panic!("cannot create test database {name}: {e}"));
                conn.close().await.unwrap();
                let url = with_database(&admin, &name);
                Some(TestDb { location: StoreLocation::Postgres(url), dir, postgres: Some((admin, name)) })
            }
        }
    }

    /// Opens (and migrates) the store, with its artifacts in the temp directory.
    pub async fn open(&self) -> Store {
        Store::connect(&self.location)
            .await
            .unwrap_or_else(|e| panic!("opening {}: {e}", self.location))
            .with_artifacts_dir(Some(self.dir.clone()))
    }

    /// The value for `WORKBENCH_DB` of a workbench process using this store.
    pub fn db_arg(&self) -> std::ffi::OsString {
        self.location.to_arg()
    }

    /// The address of the PostgreSQL server (`host:port` of its URL, resolved).
    pub fn postgres_addr(&self) -> std::net::SocketAddr {
        use std::net::ToSocketAddrs;
        let authority = self.postgres_authority();
        let with_port = if authority.contains(':') { authority.to_string() } else { format!("{authority}:5432") };
        with_port.to_socket_addrs().unwrap().next().expect("the server's address resolves")
    }

    /// The value for `WORKBENCH_DB` of a workbench process reaching this PostgreSQL store
    /// through `127.0.0.1:port` (a [`CuttableProxy`](super::proxy::CuttableProxy)).
    pub fn db_arg_through(&self, port: u16) -> String {
        let StoreLocation::Postgres(url) = &self.location else { panic!("a PostgreSQL test store") };
        url.replacen(self.postgres_authority(), &format!("127.0.0.1:{port}"), 1)
    }

    /// `host[:port]` of the PostgreSQL URL.
    fn postgres_authority(&self) -> &str {
        let StoreLocation::Postgres(url) = &self.location else { panic!("a PostgreSQL test store") };
        let after_scheme = &url[url.find("://").expect("a URL") + 3..];
        let host_and_path = after_scheme.rsplit_once('@').map_or(after_scheme, |(_, rest)| rest);
        host_and_path.split(['/', '?']).next().unwrap_or_default()
    }

    /// A PostgreSQL store out of reach (`true`) or back (`false`): its database refuses new
    /// connections and the open ones are cut, as when the server restarts, while the server
    /// and every other test's database go on.
    pub async fn set_out_of_reach(&self, out: bool) {
        let (admin, name) = self.postgres.as_ref().expect("a PostgreSQL test store");
        let mut conn = PgConnection::connect(admin).await.unwrap();
        let allow = if out { "false" } else { "true" };
        sqlx::query(sqlx::AssertSqlSafe(format!("ALTER DATABASE {name} ALLOW_CONNECTIONS {allow}")))
            .execute(&mut conn)
            .await
            .unwrap();
        if out {
            sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
                .bind(name)
                .execute(&mut conn)
                .await
                .unwrap();
        }
        conn.close().await.unwrap();
    }

    /// Sets the database's `CONNECTION LIMIT` (-1: none).
    pub async fn set_connection_limit(&self, limit: i32) {
        let (admin, name) = self.postgres.as_ref().expect("a PostgreSQL test store");
        let mut conn = PgConnection::connect(admin).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!("ALTER DATABASE {name} CONNECTION LIMIT {limit}")))
            .execute(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();
    }

    /// The connections open to the database, by the `application_name` they gave, asked
    /// through the admin database (so as not to count the asking one).
    pub async fn connections_by_name(&self) -> Vec<(String, i64)> {
        let (admin, name) = self.postgres.as_ref().expect("a PostgreSQL test store");
        let mut conn = PgConnection::connect(admin).await.unwrap();
        let rows = sqlx::query_as(
            "SELECT application_name, COUNT(*) FROM pg_stat_activity WHERE datname = $1 GROUP BY 1 ORDER BY 1",
        )
        .bind(name)
        .fetch_all(&mut conn)
        .await
        .unwrap();
        conn.close().await.unwrap();
        rows
    }

    /// Runs `sql` (no parameters) directly on the database.
    pub async fn execute(&self, sql: &'static str) {
        let mut conn = self.connect().await;
        sqlx::raw_sql(sql).execute(&mut conn).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        conn.close().await.unwrap();
    }

    /// A connection of its own to the database.
    pub async fn connect(&self) -> sqlx::AnyConnection {
        sqlx::any::install_default_drivers();
        let url = match &self.location {
            StoreLocation::Sqlite(path) => format!("sqlite://{}", path.display()),
            StoreLocation::Postgres(url) => url.clone(),
        };
        sqlx::AnyConnection::connect(&url).await.unwrap()
    }

    /// Runs `sql` (with `$1` = `run_id`) directly on the database and returns the count it
    /// selects.
    pub async fn count(&self, sql: &'static str, run_id: i64) -> i64 {
        let mut conn = self.connect().await;
        let n: i64 = sqlx::query_scalar(sql).bind(run_id).fetch_one(&mut conn).await.unwrap();
        conn.close().await.unwrap();
        n
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some((admin, name)) = self.postgres.take() {
            // Drop may run inside a runtime: drop the database from a thread of its own.
            let dropped = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                rt.block_on(async {
                    let mut conn = PgConnection::connect(&admin).await?;
                    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
                        .execute(&mut conn)
                        .await?;
                    conn.close().await
                })
            })
            .join();
            if let Ok(Err(e)) = dropped {
                eprintln!("could not drop a test database: {e}");
            }
        }
    }
}

/// Declares each listed `async fn NAME(backend: Backend)` as two tests, `sqlite::NAME` and
/// `postgres::NAME`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::stores::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::stores::Backend::Postgres).await
                }
            )*
        }
    };
}
