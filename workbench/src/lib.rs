//! The workbench: plugin host, training worker, run store and command line.
//!
//! - [`host`] finds, loads and checks plugin libraries;
//! - [`run_config`] resolves `key=value` overrides against the plugins' schemas;
//! - [`experiment_file`] reads TOML experiment files into those overrides and sweep axes;
//! - [`train`] runs a stored run in a worker process and follows it;
//! - [`executor`] starts workers: local processes, or Slurm batch jobs;
//! - [`store`] is the SQLite run database;
//! - [`plot`] turns stored metrics and diagnostics into the series of `workbench plot`;
//! - [`figure`] draws them into PNG or SVG files;
//! - [`heatmap`] lays one metric out over two keys, [`heatmap_figure`] draws that grid;
//! - [`diagnostics`] measures energies, ranks and angles per layer iteration at evaluations;
//! - [`sphere`] records a few tokens' head projections per iteration, and [`sphere_figure`]
//!   draws their trajectories;
//! - [`ablation`] groups runs into mean ± std tables (Markdown, LaTeX, CSV);
//! - [`export`] writes runs' curves as CSV, JSON lines or TensorBoard event files;
//! - [`scaffold`] makes new plugin crates from templates (`workbench plugin new`);
//! - [`ops`] are the operations on runs that the CLI and the TUI share;
//! - [`tui`] is the terminal workbench;
//! - [`commands`] and [`cli`] are the command line on top;
//! - [`colour`] knows whether colours may be used (`NO_COLOR`);
//! - [`exit_code`] names the process exit codes;
//! - [`huge_pages`] starts training processes with their heap on transparent huge pages;
//! - [`logging`] prints their messages (`tracing`) on stderr, filtered by `RUST_LOG`.

pub mod ablation;
pub mod axis_range;
pub mod cli;
pub mod colour;
pub mod commands;
pub mod device;
pub mod diagnostics;
pub mod executor;
pub mod exit_code;
pub mod experiment_file;
pub mod export;
pub mod figure;
pub mod figure_labels;
pub mod figure_ticks;
pub mod heatmap;
pub mod heatmap_figure;
pub mod host;
pub mod huge_pages;
pub mod import;
pub mod logging;
pub mod memory;
pub mod ops;
pub mod params;
pub mod plot;
pub mod queue;
pub mod run_config;
pub mod scaffold;
pub mod sphere;
pub mod sphere_figure;
pub mod store;
pub mod train;
pub mod tui;
pub mod wording;
