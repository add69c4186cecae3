//! Computes the plugin fingerprint at build time: everything that must agree between the
//! host and a plugin for Rust values (tensors, trait objects) to cross between them safely.
use std::process::Command;

/// The candle version every crate of the workspace is pinned to (`=0.11.1` in the workspace
/// Cargo.toml). A unit test checks that Cargo.lock agrees.
const CANDLE_VERSION: &str = "0.11.1";

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rustc_version = Command::new(&rustc)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "rustc unknown".into());
    let features = if std::env::var_os("CARGO_FEATURE_CUDA").is_some() { "cuda" } else { "cpu" };
    let target = std::env::var("TARGET").unwrap_or_default();
    let fingerprint = format!(
        "plugin-api {}; {}; candle {}; {}; {}",
        std::env::var("CARGO_PKG_VERSION").unwrap_or_default(),
        rustc_version,
        CANDLE_VERSION,
        target,
        features
    );
    println!("cargo:rustc-env=WORKBENCH_PLUGIN_FINGERPRINT={fingerprint}");
    println!("cargo:rustc-env=WORKBENCH_CANDLE_VERSION={CANDLE_VERSION}");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RUSTC");
}
