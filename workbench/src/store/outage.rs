//! The store out of reach for a while (a server restarting, the network away): how long the
//! processes that keep a run going wait for it, and how a long-lived reader rides it out.

use super::StoreError;
use std::time::{Duration, Instant};

/// How long a worker, a queue runner or a command following a run keeps going while the
/// store is out of reach before it gives up with the error: 10 minutes, or
/// `WORKBENCH_STORE_OUTAGE_S` seconds (tests shorten it).
pub static OUTAGE_LIMIT: std::sync::LazyLock<Duration> = std::sync::LazyLock::new(|| {
    std::env::var("WORKBENCH_STORE_OUTAGE_S")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| *s > 0.0 && s.is_finite())
        .map_or(Duration::from_secs(600), Duration::from_secs_f64)
});

/// Whether `e` comes from a store failure that may pass ([`StoreError::is_passing`]).
pub fn is_passing(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| cause.downcast_ref::<StoreError>().is_some_and(StoreError::is_passing))
}

/// A long-lived reader's view of the store's reach (the queue runner of `sweep` and `queue`,
/// `train` following a Slurm job): a pass that fails in a way that may pass is skipped, the
/// outage said once when it starts and once when it ends, until [`OUTAGE_LIMIT`].
#[derive(Debug, Default)]
pub struct StoreOutage {
    since: Option<Instant>,
}

impl StoreOutage {
    /// `Some` value of a pass that worked, `None` for one skipped while the store is out of
    /// reach, the error when it would not pass or the store stayed away too long. `say`
    /// tells the user.
    pub fn pass<T>(&mut self, result: anyhow::Result<T>, say: impl Fn(String)) -> anyhow::Result<Option<T>> {
        match result {
            Ok(value) => {
                if let Some(since) = self.since.take() {
                    say(format!("the run store answers again after {:.0} s", since.elapsed().as_secs_f64()));
                }
                Ok(Some(value))
            }
            Err(e) if is_passing(&e) => {
                let since = *self.since.get_or_insert_with(|| {
                    say(format!(
                        "the run store is out of reach ({e:#}); workers go on and keep what they record; \
                         trying again (for at most {:.0} s)",
                        OUTAGE_LIMIT.as_secs_f64()
                    ));
                    Instant::now()
                });
                if since.elapsed() > *OUTAGE_LIMIT {
                    return Err(e.context(format!(
                        "the run store stayed out of reach for more than {:.0} s",
                        OUTAGE_LIMIT.as_secs_f64()
                    )));
                }
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}
