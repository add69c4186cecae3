//! Test utilities shared by the plugin crates.
//!
//! Every plugin's tests need the same few things: a configuration from the plugin's schema
//! with some keys overridden, a layer built on a fresh `VarMap` whose parameters can then be
//! counted, perturbed and inspected, the relative error of a gradient identity as
//! `workbench verify` measures it, a check that every parameter receives a gradient, and short
//! AdamW runs on toy objectives. Kept here once, the plugins measure these things the same way.
//!
//! Add it as a `[dev-dependencies]` entry only (`plugin-testkit = { path =
//! "../../plugin-api/testkit" }`); it is never part of a plugin library.

mod config;
mod draws;
mod gradients;
mod measure;
mod seeded_vars;
mod task;
mod tiny_block;
mod training;
mod vars;

pub use config::{config, config_from_text, text};
pub use draws::randn;
pub use gradients::{assert_same_gradients, gradient_sizes, random_projection_gradients};
pub use measure::{
    entries, larger, max_abs, max_abs_diff, relative_error, relative_error_of, relative_max_diff, scalar,
};
pub use seeded_vars::SeededVars;
pub use task::{build_task_model, evaluate_all, task_gradient_sizes, train_on_task};
pub use tiny_block::TinyBlock;
pub use training::{loss_before_and_after, mean_squared_error, sequence_mean, train};
pub use vars::{build, named_vars, normal, param_count, perturb, perturb_seeded, rng};

#[cfg(test)]
mod tests;
