//! Operations on runs, below both front ends: the command line (`commands/`) and the terminal
//! workbench (`tui/service.rs`) call the same functions here, so an operation behaves the same
//! wherever it is asked for. They talk to the store and the executor and print nothing: each
//! returns what it did (or an error that names the problem and the fix), which the front end
//! words as a line on stderr or in the status bar. Runs are named by their ids (`i64`), never
//! by text to parse again.
//!
//! - [`grid`]: a grid of configurations planned from axes, every point validated, every bad
//!   point reported;
//! - [`launch`]: the stored form of a new run, and queueing new runs alone or as a sweep;
//! - [`runs`]: cancel (escalating stop), pause and release, requeue, delete, notes and tags,
//!   of single runs and of sweeps;
//! - [`export`]: figures and ablation tables of runs, written to files;
//! - [`export_names`]: where exports go when no file is named, and what they are called;
//! - [`diff`]: what differs between runs;
//! - [`export_runs`]: runs' metric curves and diagnostics as CSV, JSON lines or TensorBoard
//!   files (the formats are in [`crate::export`]);
//! - [`filter`]: the run filter shared by the TUI's `/` box and `workbench runs --filter`;
//! - [`import`]: a published PyTorch checkpoint stored as a finished, evaluated run;
//! - [`evaluate`]: a stored run's checkpoint scored again with other evaluation settings, as
//!   a new run (and the scoring that `import` shares);
//! - [`elapsed`]: how long a run has trained, written for a person;
//! - [`ended`]: how a run that ended is told (its best headline value, or its reason);
//! - [`sort`]: the order of a list of runs, by a column or a metric.

pub mod diff;
pub mod elapsed;
pub mod ended;
pub mod evaluate;
pub mod export;
pub mod export_names;
pub mod export_runs;
pub mod filter;
pub mod grid;
pub mod import;
pub mod launch;
pub mod runs;
pub mod sort;
