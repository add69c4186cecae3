//! Seeded generators and loaders for the workbench tasks.
pub mod fetch;
pub mod files;
pub mod generated_cache;
pub mod gp;
pub mod images;
pub mod seeding;
pub mod sudoku;
pub mod text;
