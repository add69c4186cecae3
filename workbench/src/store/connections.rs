//! How many more workers a PostgreSQL server can take: every process of a cluster that uses
//! the store (workers, runners, TUIs) holds connections to one server, whose limits they
//! share: the server's `max_connections` (100 by default), and the database's and the role's
//! `CONNECTION LIMIT` where one is set. An SQLite file has no such limit.

use super::{Backend, Store, StoreError};
use sqlx::Any;

/// Connections a running run's worker keeps while it trains: the one its heartbeat and its
/// writer share (the one it starts and ends the run with is closed meanwhile; see
/// [`Store::connect_occasional`]).
pub const PER_WORKER: u64 = 1;

/// One limit on the connections the store's processes may open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimit {
    /// What sets it: `the server`, `the database runs`, `the role lab`.
    pub by: String,
    /// How many connections it allows (for the server, less those reserved for superusers).
    pub most: u64,
    /// How many of those are open now.
    pub in_use: u64,
    /// The statement that raises it to `{}`.
    raise: String,
}

impl ConnectionLimit {
    /// The limit set by `by` as the server counts it (`most`, `in_use`); `None` where `most`
    /// is -1, no limit.
    fn set(by: String, (most, in_use): (i64, i64), raise: String) -> Option<ConnectionLimit> {
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        (most >= 0).then(|| ConnectionLimit { by, most: count(most), in_use: count(in_use), raise })
    }

    fn free(&self) -> u64 {
        self.most.saturating_sub(self.in_use)
    }
}

/// The limits on a PostgreSQL store's connections, as the server counts them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConnections {
    /// The server's, then the database's and the role's where set.
    pub limits: Vec<ConnectionLimit>,
}

impl ServerConnections {
    /// The limit with the fewest connections free.
    fn tightest(&self) -> Option<&ConnectionLimit> {
        self.limits.iter().min_by_key(|limit| limit.free())
    }

    /// How many more runs can train at once, each worker keeping [`PER_WORKER`].
    pub fn room_for_runs(&self) -> u64 {
        self.tightest().map_or(u64::MAX, |limit| limit.free() / PER_WORKER)
    }

    /// `the server takes 97 connections, 12 open: room for 42 more running runs (...)`.
    pub fn describe(&self) -> String {
        let Some(limit) = self.tightest() else { return "no connection limit".into() };
        format!(
            "{} takes {} connections, {} open: room for {} more running runs (each run's worker keeps \
             {PER_WORKER} while it trains, 2 as it starts)",
            limit.by,
            limit.most,
            limit.in_use,
            self.room_for_runs()
        )
    }

    /// A warning when `workers` more runs starting at once would not all find a connection:
    /// the others wait for one before they start (and fail after the store outage limit).
    pub fn crowded(&self, workers: u64) -> Option<String> {
        let limit = self.tightest()?;
        (workers > self.room_for_runs()).then(|| {
            // Room for them all beside what is open now, rounded up to a hundred.
            let enough = (limit.in_use + workers * PER_WORKER).div_ceil(100) * 100;
            format!(
                "{}; of the {workers} runs this runner may start at once, the others wait for a \
                 connection before they start and fail after {:.0} s without one: raise the limit \
                 ({}) or lower --jobs",
                self.describe(),
                super::OUTAGE_LIMIT.as_secs_f64(),
                limit.raise.replace("{}", &enough.to_string())
            )
        })
    }
}

impl Store {
    /// The limits on this PostgreSQL store's connections; `None` for an SQLite file.
    pub async fn server_connections(&self) -> Result<Option<ServerConnections>, StoreError> {
        if self.backend() != Backend::Postgres {
            return Ok(None);
        }
        // `reserved_connections` exists from PostgreSQL 16 on; a limit of -1 is none.
        let row: (i64, i64, String, i64, i64, String, i64, i64) = sqlx::query_as::<Any, _>(
            "SELECT current_setting('max_connections')::bigint \
                    - current_setting('superuser_reserved_connections')::bigint \
                    - COALESCE(current_setting('reserved_connections', true), '0')::bigint, \
                    (SELECT COUNT(*) FROM pg_stat_activity WHERE backend_type = 'client backend'), \
                    current_database()::text, \
                    (SELECT datconnlimit::bigint FROM pg_database WHERE datname = current_database()), \
                    (SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()), \
                    current_user::text, \
                    (SELECT rolconnlimit::bigint FROM pg_roles WHERE rolname = current_user), \
                    (SELECT COUNT(*) FROM pg_stat_activity WHERE usename = current_user)",
        )
        .fetch_one(&self.pool)
        .await
        .map_err(|e| self.err(e))?;
        let (server_most, server_open, database, database_most, database_open, role, role_most, role_open) = row;
        let limits = [
            ConnectionLimit::set(
                "the server".into(),
                (server_most, server_open),
                "`ALTER SYSTEM SET max_connections = {}`, then restart the server".into(),
            ),
            ConnectionLimit::set(
                format!("the database {database}"),
                (database_most, database_open),
                format!("`ALTER DATABASE \"{database}\" CONNECTION LIMIT {{}}`"),
            ),
            ConnectionLimit::set(
                format!("the role {role}"),
                (role_most, role_open),
                format!("`ALTER ROLE \"{role}\" CONNECTION LIMIT {{}}`"),
            ),
        ];
        let limits = limits.into_iter().flatten().collect();
        Ok(Some(ServerConnections { limits }))
    }
}

#[cfg(test)]
mod tests {
    use super::{ConnectionLimit, ServerConnections};

    fn limit(by: &str, most: u64, in_use: u64, raise: &str) -> ConnectionLimit {
        ConnectionLimit { by: by.into(), most, in_use, raise: raise.into() }
    }

    #[test]
    fn the_tightest_limit_gives_the_room_and_a_crowd_is_told_how_to_raise_it() {
        let server = limit("the server", 97, 12, "ALTER SYSTEM SET max_connections = {}");
        let alone = ServerConnections { limits: vec![server.clone()] };
        assert_eq!(alone.room_for_runs(), 85);
        assert_eq!(alone.crowded(85), None);
        let warning = alone.crowded(256).unwrap();
        assert!(warning.starts_with("the server takes 97 connections, 12 open: room for 85 more"), "{warning}");
        assert!(warning.contains("of the 256 runs"), "{warning}");
        // 12 + 256 = 268, rounded up.
        assert!(warning.contains("(ALTER SYSTEM SET max_connections = 300)"), "{warning}");

        let database = limit("the database runs", 20, 6, "ALTER DATABASE runs CONNECTION LIMIT {}");
        let both = ServerConnections { limits: vec![server, database] };
        assert_eq!(both.room_for_runs(), 14);
        let warning = both.crowded(15).unwrap();
        assert!(warning.starts_with("the database runs takes 20 connections, 6 open: room for 14"), "{warning}");
        assert!(warning.contains("(ALTER DATABASE runs CONNECTION LIMIT 100)"), "{warning}");

        let full = ServerConnections { limits: vec![limit("the server", 97, 120, "")] };
        assert_eq!(full.room_for_runs(), 0);
        assert!(full.crowded(1).is_some());
    }
}
