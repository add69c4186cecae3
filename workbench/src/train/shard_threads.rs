//! Long-lived threads for the shards after the first: the calling thread runs job 0 and one
//! thread per further job runs the others, at once, borrowing what the caller lends them.
//!
//! Why not a thread per job per step (`std::thread::scope`)? A new thread starts with an
//! empty thread-local state: the kernels' per-thread scratch (`scratch.rs`, megabytes that
//! the first op of every step would fault in again), the head products' packed operands and
//! the allocator's per-thread caches. Kept threads keep them from step to step, as the
//! calling thread does for shard 0. Each thread is a rayon pool of one thread, for its
//! scoped spawn (a job may borrow from the caller's stack, and the call returns only when
//! every job has ended); the plugins' ops on it still split their work over the plugins' own
//! rayon pool of `RAYON_NUM_THREADS` threads, as on any other thread.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

/// A job lent to a shard thread.
pub type Job<'a, R> = Box<dyn FnOnce() -> R + Send + 'a>;

/// The kept pools, one per shard after the first, created when first needed.
static POOLS: Mutex<Vec<&'static rayon::ThreadPool>> = Mutex::new(Vec::new());

/// Runs `first` on the calling thread and each of `others` on a kept thread, all at once,
/// and returns their results in that order; a job that panicked gives `Err` with the panic's
/// message. Errs only when a thread for the jobs cannot be started.
pub fn run_concurrently<'a, R: Send>(
    first: impl FnOnce() -> R,
    others: Vec<Job<'a, R>>,
) -> anyhow::Result<Vec<Result<R, String>>> {
    let pools = pools(others.len())?;
    let mut slots: Vec<Option<Result<R, String>>> = (0..=others.len()).map(|_| None).collect();
    let (first_slot, other_slots) = slots.split_at_mut(1);
    nest(&pools, others, other_slots, || first_slot[0] = Some(guarded(first)));
    Ok(slots.into_iter().map(|slot| slot.unwrap_or_else(|| Err("the job never ran".into()))).collect())
}

/// The last of `jobs` on the last pool, in a scope whose body does the same with the others,
/// and `innermost` in the body of the last scope, on the calling thread; a scope ends when
/// its job has.
fn nest<'a, R: Send>(
    pools: &[&'static rayon::ThreadPool],
    mut jobs: Vec<Job<'a, R>>,
    slots: &mut [Option<Result<R, String>>],
    innermost: impl FnOnce(),
) {
    let (Some(last), Some((last_slot, rest))) = (jobs.pop(), slots.split_last_mut()) else {
        return innermost();
    };
    pools[jobs.len()].in_place_scope(|scope| {
        scope.spawn(move |_| *last_slot = Some(guarded(last)));
        nest(pools, jobs, rest, innermost);
    });
}

fn guarded<R>(job: impl FnOnce() -> R) -> Result<R, String> {
    catch_unwind(AssertUnwindSafe(job)).map_err(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        format!("a shard thread panicked outside the plugins' guards: {message}")
    })
}

/// The first `count` kept pools, starting those not yet started.
fn pools(count: usize) -> anyhow::Result<Vec<&'static rayon::ThreadPool>> {
    let mut pools = POOLS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    while pools.len() < count {
        let index = pools.len() + 1;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .thread_name(move |_| format!("shard-{index}"))
            .build()
            .map_err(|e| anyhow::anyhow!("could not start the thread of shard {index}: {e}"))?;
        // Kept for the process's life, as the calling thread is.
        pools.push(Box::leak(Box::new(pool)));
    }
    Ok(pools[..count].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_run_at_once_on_kept_threads_and_return_in_order() {
        let borrowed = vec![10, 20, 30];
        let names = |_: ()| {
            let job = |i: usize| {
                let borrowed = &borrowed;
                move || {
                    (borrowed[i] + i, std::thread::current().name().map(str::to_string), std::thread::current().id())
                }
            };
            let jobs: Vec<Job<(usize, Option<String>, std::thread::ThreadId)>> = (1..3)
                .map(|i| {
                    let borrowed = &borrowed;
                    Box::new(move || {
                        (
                            borrowed[i] + i,
                            std::thread::current().name().map(str::to_string),
                            std::thread::current().id(),
                        )
                    }) as Job<_>
                })
                .collect();
            run_concurrently(job(0), jobs).unwrap().into_iter().map(Result::unwrap).collect::<Vec<_>>()
        };
        let first = names(());
        assert_eq!(first.iter().map(|r| r.0).collect::<Vec<_>>(), [10, 21, 32]);
        assert_eq!(first[0].2, std::thread::current().id(), "job 0 runs on the calling thread");
        assert_eq!(first[1].1.as_deref(), Some("shard-1"));
        assert_eq!(first[2].1.as_deref(), Some("shard-2"));
        let again = names(());
        assert_eq!((again[1].2, again[2].2), (first[1].2, first[2].2), "the same threads the next time");
    }

    #[test]
    fn jobs_wait_for_each_other_and_a_panic_is_an_error() {
        // Job 0, on the calling thread, waits for job 1's message: both must run at once.
        let (tx, rx) = std::sync::mpsc::channel();
        let first = move || rx.recv_timeout(std::time::Duration::from_secs(20)).map(|_| ()).map_err(|e| e.to_string());
        let jobs: Vec<Job<Result<(), String>>> =
            vec![Box::new(move || tx.send(7).map_err(|e| e.to_string())), Box::new(|| panic!("shard two broke"))];
        let results = run_concurrently(first, jobs).unwrap();
        assert_eq!(results[0], Ok(Ok(())));
        assert_eq!(results[1], Ok(Ok(())));
        let error = results[2].clone().unwrap_err();
        assert!(error.contains("shard two broke"), "{error}");
        assert_eq!(run_concurrently(|| 5, Vec::new()).unwrap(), [Ok(5)]);
    }
}
