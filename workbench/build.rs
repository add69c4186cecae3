//! Rebuilds the workbench when a migration is added: `sqlx::migrate!` embeds the folders at
//! compile time, and cargo would not otherwise look at them.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
