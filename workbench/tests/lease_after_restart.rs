//! Leases on PostgreSQL count from the server's start as well as from the last heartbeat: a
//! server that restarts (or was down) kept every worker from renewing its lease, and each gets
//! a whole lease to renew it before any reader marks its run interrupted.
//!
//! The server of `scripts/services` is not restarted here (other tests share it): the lease is
//! made longer than the server has been up (`WORKBENCH_LEASE_S`, read once per process, so this
//! file holds one test), and a run's last heartbeat is put before the server's start by more
//! than that lease.

mod common;

use common::plain_run;
use common::stores::{Backend, TestDb};
use workbench::store::RunStatus;

#[test]
fn a_lease_is_counted_from_the_servers_start() {
    let probe = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let Some(server_age) = probe.block_on(async {
        let db = TestDb::new(Backend::Postgres, "lease-restart-age").await?;
        // Whole seconds the server has been up (`count` binds a run id, unused here).
        let age = "SELECT EXTRACT(EPOCH FROM now() - pg_postmaster_start_time())::bigint + 0 * $1";
        Some(db.count(age, 0).await)
    }) else {
        return;
    };
    drop(probe);
    let lease = server_age + 60;
    // SAFETY: the only test of this binary; no thread of it runs now.
    unsafe { std::env::set_var("WORKBENCH_LEASE_S", lease.to_string()) };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let db = TestDb::new(Backend::Postgres, "lease-restart").await.unwrap();
        let store = db.open().await.with_host("node-a");
        let id = store.create_run(&plain_run(0)).await.unwrap();
        store.mark_running(id, 3_999_931).await.unwrap();
        // Silent since long before the server started: longer than a lease by the heartbeat,
        // shorter than one since the server's start.
        let silence = "UPDATE runs SET heartbeat_at = EXTRACT(EPOCH FROM pg_postmaster_start_time()) - 120 \
                       WHERE id = $1 RETURNING id";
        db.count(silence, id).await;
        let reader = db.open().await.with_host("node-b");
        assert_eq!(reader.reap_orphans(|_| true).await.unwrap(), Vec::<i64>::new());
        assert_eq!(store.run(id).await.unwrap().status, RunStatus::Running);
    });
}
