//! Seeded generators and loaders for the workbench tasks.
pub mod sudoku;
pub mod text;
