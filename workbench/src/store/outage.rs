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

/// How long the store has been out of reach, for a long-lived reader (the queue runner of
/// `sweep` and `queue`, `train` following a Slurm job) or a worker's writer: a failure that may
/// pass is waited out, said once when the outage starts and once when it ends, until
/// [`OUTAGE_LIMIT`].
#[derive(Debug)]
pub struct StoreOutage {
    since: Option<Instant>,
    /// What goes on meanwhile, for the first message.
    going_on: &'static str,
}

impl Default for StoreOutage {
    fn default() -> Self {
        StoreOutage::new("workers go on and keep what they record")
    }
}

impl StoreOutage {
    /// An outage whose first message says that `going_on` while the store is away.
    pub fn new(going_on: &'static str) -> StoreOutage {
        StoreOutage { since: None, going_on }
    }

    /// Whether the last try failed and the store has not answered since.
    pub fn is_out(&self) -> bool {
        self.since.is_some()
    }

    /// The store answered: `say`s so, with for how long it was away, after an outage.
    pub fn answered(&mut self, say: impl FnOnce(String)) {
        if let Some(since) = self.since.take() {
            say(format!("the run store answers again after {:.0} s", since.elapsed().as_secs_f64()));
        }
    }

    /// A try failed with `error`: `Ok` while it may pass (`passing`) within the limit (the
    /// outage `say`s when it starts), else the reason to give up.
    pub fn failed(
        &mut self,
        error: &dyn std::fmt::Display,
        passing: bool,
        say: impl FnOnce(String),
    ) -> Result<(), String> {
        if !passing {
            return Err(error.to_string());
        }
        let since = *self.since.get_or_insert_with(|| {
            say(format!(
                "the run store is out of reach ({error}); {}; trying again (for at most {:.0} s)",
                self.going_on,
                OUTAGE_LIMIT.as_secs_f64()
            ));
            Instant::now()
        });
        match since.elapsed() > *OUTAGE_LIMIT {
            true => Err(format!("the run store stayed out of reach for more than {:.0} s", OUTAGE_LIMIT.as_secs_f64())),
            false => Ok(()),
        }
    }

    /// `Some` value of a pass that worked, `None` for one skipped while the store is out of
    /// reach, the error when it would not pass or the store stayed away too long. `say`
    /// tells the user.
    pub fn pass<T>(&mut self, result: anyhow::Result<T>, say: impl Fn(String)) -> anyhow::Result<Option<T>> {
        match result {
            Ok(value) => {
                self.answered(say);
                Ok(Some(value))
            }
            Err(e) => {
                let passing = is_passing(&e);
                match self.failed(&format_args!("{e:#}"), passing, say) {
                    Ok(()) => Ok(None),
                    Err(_) if !passing => Err(e),
                    Err(why) => Err(e.context(why)),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn an_outage_is_said_once_when_it_starts_and_once_when_it_ends() {
        let said = RefCell::new(Vec::new());
        let say = |line: String| said.borrow_mut().push(line);
        let mut outage = StoreOutage::new("training goes on");
        assert!(!outage.is_out());
        assert_eq!(outage.failed(&"connection refused", true, say), Ok(()));
        assert_eq!(outage.failed(&"connection refused", true, say), Ok(()));
        assert!(outage.is_out());
        outage.answered(say);
        outage.answered(say);
        assert!(!outage.is_out());
        let said = said.into_inner();
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(said[0].starts_with("the run store is out of reach (connection refused); training goes on"));
        assert!(said[1].starts_with("the run store answers again after"));
    }

    #[test]
    fn a_failure_that_will_not_pass_ends_at_once_and_says_nothing() {
        let mut outage = StoreOutage::default();
        let verdict = outage.failed(&"relation \"runs\" does not exist", false, |line| panic!("said {line}"));
        assert_eq!(verdict, Err("relation \"runs\" does not exist".to_string()));
        let passed = outage.pass::<()>(Err(anyhow::anyhow!("no such column")), |line| panic!("said {line}"));
        assert_eq!(passed.unwrap_err().to_string(), "no such column");
    }
}
