//! Computes the plugin fingerprint at build time: everything that must agree between the
//! host and a plugin for Rust values (tensors, trait objects) to cross between them safely.
use std::path::Path;
use std::process::Command;

/// The candle version every crate of the workspace is pinned to (`=0.11.1` in the workspace
/// Cargo.toml). A unit test checks that Cargo.lock agrees.
const CANDLE_VERSION: &str = "0.11.1";

/// The patched candle every crate builds with (`vendor/README.md`): its patches change types
/// and traits that cross the boundary (the custom ops' methods), so its sources are hashed too.
const VENDORED_CANDLE: &str = "../vendor/candle-core/src";

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
        "plugin-api {} (api {}); {}; candle {} (source {}); {}; {}",
        std::env::var("CARGO_PKG_VERSION").unwrap_or_default(),
        source_hash(Path::new("src")),
        rustc_version,
        CANDLE_VERSION,
        source_hash(Path::new(VENDORED_CANDLE)),
        target,
        features
    );
    println!("cargo:rustc-env=WORKBENCH_PLUGIN_FINGERPRINT={fingerprint}");
    println!("cargo:rustc-env=WORKBENCH_CANDLE_VERSION={CANDLE_VERSION}");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed={VENDORED_CANDLE}");
    println!("cargo:rerun-if-env-changed=RUSTC");
}

/// A hash of the sources under `root` (names relative to it, and contents): the traits and
/// types that cross the boundary are defined in this crate and in candle, and any change to
/// them changes their layout, whatever the version number says. A missing directory hashes
/// as empty, so that a build without it cannot pass for one with it.
fn source_hash(root: &Path) -> String {
    let mut files: Vec<std::path::PathBuf> = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    // FNV-1a over names and contents: stable across Rust releases, unlike std's hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for file in files {
        let bytes = std::fs::read(&file).unwrap_or_default();
        let name = file.strip_prefix(root).unwrap_or(&file).to_string_lossy().into_owned();
        for b in name.bytes().chain(bytes) {
            hash = (hash ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{:012x}", hash & 0xffff_ffff_ffff)
}
