//! A Slurm controller that stops answering while runs are queued (a restart, an outage): the
//! queue runner keeps them queued without using up their start attempts, says why it waits,
//! and submits them once the controller answers again.
//!
//! The outage is real Slurm's: the client commands read a `slurm.conf` naming a closed port on
//! this machine, so `sbatch` and `scontrol ping` find no controller. The return uses the
//! single-node cluster of `scripts/services start` (`WORKBENCH_TEST_SLURM`, `SLURM_CONF`);
//! without it that half is skipped with a message, except under CI, where it fails. This file
//! holds one test, so that it may point `SLURM_CONF` at its own file for the whole process.

mod common;

use common::stores::{Backend, TestDb};
use common::{plain_run, temp_dir};
use workbench::executor::Executor;
use workbench::queue::{QueueRunner, SPAWN_ATTEMPTS};
use workbench::store::{Claims, RunStatus};

/// A `slurm.conf` whose controller is a closed port on 127.0.0.1 (`MessageTimeout=1`, so that
/// `sbatch` gives up at once instead of retrying for ten seconds).
fn unreachable_controller() -> String {
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    format!(
        "ClusterName=away\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort={closed_port}\nMessageTimeout=1\n\
         NodeName=localhost CPUs=1 State=UNKNOWN\nPartitionName=debug Nodes=localhost Default=YES\n"
    )
}

/// The running cluster's `slurm.conf`, or `None` (after saying why) when there is none.
fn running_cluster_conf() -> Option<String> {
    match (std::env::var_os("WORKBENCH_TEST_SLURM"), std::env::var_os("SLURM_CONF")) {
        (Some(_), Some(conf)) => Some(std::fs::read_to_string(conf).unwrap()),
        _ if std::env::var_os("CI").is_some() => panic!(
            "WORKBENCH_TEST_SLURM and SLURM_CONF are not set, and CI must test the Slurm executor: \
             run `scripts/services start` and `eval \"$(scripts/services env)\"` first"
        ),
        _ => {
            eprintln!("skipped the controller's return: no Slurm cluster (`scripts/services start` runs one)");
            None
        }
    }
}

#[test]
fn queued_runs_wait_while_the_slurm_controller_is_away() {
    let running = running_cluster_conf();
    let dir = temp_dir("slurm-away");
    let conf = dir.join("slurm.conf");
    std::fs::write(&conf, unreachable_controller()).unwrap();
    // SAFETY: the only test of this binary, before it starts any thread.
    unsafe { std::env::set_var("SLURM_CONF", &conf) };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let db = TestDb::new(Backend::Sqlite, "slurm-away").await.unwrap();
        let store = db.open().await;
        let id = store.create_run(&plain_run(0)).await.unwrap();
        let runner = QueueRunner::new(store.clone(), Vec::new(), 1).with_executor(Executor::Slurm(Default::default()));
        for pass in 1..=SPAWN_ATTEMPTS + 2 {
            assert!(runner.tick().await.unwrap().is_empty(), "pass {pass} started a run");
            let run = store.run(id).await.unwrap();
            assert_eq!(run.status, RunStatus::Queued, "pass {pass}: {:?}", run.error);
            let waiting = runner.waiting().unwrap_or_default();
            assert!(
                waiting.contains("no Slurm controller answers") || waiting.contains("`scontrol` is not installed"),
                "pass {pass}: {waiting:?}"
            );
        }
        assert!(store.claim_next(1, 1, &Claims::Everyone).await.unwrap().is_some(), "the run's claim was released");
        store.release_claim(id).await.unwrap();

        let Some(running) = running else { return };
        std::fs::write(&conf, running).unwrap();
        let started: Vec<i64> = runner.tick().await.unwrap().iter().map(|s| s.run).collect();
        assert_eq!(started, vec![id], "submitted once the controller answers");
        assert_eq!(runner.waiting(), None);
        let run = store.run(id).await.unwrap();
        let job = run.supervision.job_id.expect("the run's Slurm job");
        // The job would start this test binary as its worker: it is not needed.
        workbench::executor::slurm::cancel(&job).unwrap();
    });
}
