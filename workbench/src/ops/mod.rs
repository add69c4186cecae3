//! Operations on runs, below both front ends: the command line and the terminal workbench call
//! the same functions here, so an operation behaves the same wherever it is asked for. They
//! talk to the store and the executor and print nothing: each returns what it did, which the
//! front end words (a line on stderr, a status-bar message).
//!
//! - [`launch`]: the stored form of a new run;
//! - [`runs`]: cancel (escalating stop), pause and release, requeue, delete, notes and tags,
//!   of single runs and of sweeps.

pub mod launch;
pub mod runs;
