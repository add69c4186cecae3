//! Training: the worker process that runs one run, and the launcher that starts and
//! follows it.

pub mod background;
pub mod checkpoint;
pub mod evaluation;
pub mod events;
pub mod exit;
pub mod launch;
pub mod optim;
mod optim_update;
pub mod outbox;
pub mod parallel;
pub mod schedule;
pub mod scoring;
pub mod stop;
pub mod system;
pub mod worker;
