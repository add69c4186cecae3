//! The plugin host loads good plugins and reports every bad library without crashing.

use crate::common;

use common::{library, plugin_dir_with, run, temp_dir, workbench};
use plugin_api::{Config, PluginKind};
use workbench::host::{load, LoadError};

#[test]
fn workspace_plugins_load_with_their_declarations() {
    let host = common::load_plugins("good", &["hyperset", "transformer", "sudoku"]);
    assert!(host.errors.is_empty(), "{:?}", host.errors);
    let hyperset = host.get("hyperset", PluginKind::Layer).unwrap();
    assert!(hyperset.declaration.params.iter().any(|p| p.name == "heads"));
    assert!(host.get("sudoku", PluginKind::Task).is_ok());
    let err = host.get("hyperset", PluginKind::Task).unwrap_err().to_string();
    assert!(err.contains("is a layer plugin"), "{err}");
    let err = host.get("nope", PluginKind::Layer).unwrap_err().to_string();
    assert!(err.contains("available: hyperset, transformer"), "{err}");
}

/// Every workspace plugin.
const WORKSPACE_PLUGINS: [&str; 12] = [
    "hyperset",
    "transformer",
    "crate-layer",
    "energy-transformer",
    "intrinsic",
    "cem",
    "mlp",
    "sudoku",
    "language",
    "image-task",
    "masked-image",
    "gp-regression",
];

/// A run stored before any one of a plugin's keys existed lacks that key: for every plugin
/// and every key, the contract reads it at its default and the plugin's validator accepts
/// it; every layer builds from a configuration with no keys at all, as from its defaults.
#[test]
fn stored_configurations_missing_a_key_load_with_its_default_for_every_plugin() {
    let host = common::load_plugins("defaults", &WORKSPACE_PLUGINS);
    assert!(host.errors.is_empty(), "{:?}", host.errors);
    assert_eq!(host.plugins.len(), WORKSPACE_PLUGINS.len());
    for plugin in &host.plugins {
        let declaration = &plugin.declaration;
        let defaults = Config::defaults(&declaration.params);
        for spec in &declaration.params {
            let mut stored = defaults.clone();
            stored.0.remove(&spec.name);
            assert_eq!(declaration.complete(&stored), defaults, "{} without {}", declaration.name, spec.name);
            if let Err(e) = declaration.validate(&stored) {
                panic!("{} without {}: {e}", declaration.name, spec.name);
            }
        }
        if declaration.kind() == PluginKind::Layer {
            let count = |config: &Config| {
                let params = workbench::params::Params::new(0);
                let device = candle_core::Device::Cpu;
                host.build_layer(&declaration.name, config, params.var_builder(candle_core::DType::F32, &device))
                    .unwrap();
                params.count()
            };
            assert_eq!(count(&Config::default()), count(&defaults), "{}", declaration.name);
        }
    }
}

/// What each layer declares about a causal mask (checked by the host before a run is stored)
/// is what the built layer says (checked again at every causal pass).
#[test]
fn every_layer_declares_the_causal_mask_it_has() {
    let host = common::load_plugins("causal", &WORKSPACE_PLUGINS);
    let mut masking = Vec::new();
    for plugin in host.plugins.iter().filter(|p| p.declaration.kind() == PluginKind::Layer) {
        let declaration = &plugin.declaration;
        let params = workbench::params::Params::new(0);
        let vb = params.var_builder(candle_core::DType::F32, &candle_core::Device::Cpu);
        let layer = host.build_layer(&declaration.name, &Config::default(), vb).unwrap();
        assert_eq!(declaration.masks_causally(), layer.supports_causal(), "{}", declaration.name);
        if layer.supports_causal() {
            masking.push(declaration.name.clone());
        }
    }
    masking.sort();
    assert_eq!(masking, ["cem", "crate", "intrinsic", "mlp", "transformer"]);
}

#[test]
fn a_file_that_is_not_a_library_is_reported() {
    let dir = temp_dir("garbage");
    let path = dir.join("libgarbage.so");
    std::fs::write(&path, b"this is not an ELF file").unwrap();
    let err = load(&path).expect_err("refused");
    assert!(matches!(err, LoadError::NotALibrary { .. }), "{err}");
    assert!(err.to_string().contains("libgarbage.so"));
}

#[test]
fn a_library_without_the_entry_symbol_is_reported() {
    // Any ordinary shared library will do: the C maths library is on every Linux machine.
    let libm = [
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib/x86_64-linux-gnu/libm.so.6",
        "/lib64/libm.so.6",
        "/usr/lib/libm.so.6",
    ]
    .into_iter()
    .map(std::path::PathBuf::from)
    .find(|p| p.is_file())
    .expect("a libm to load");
    let err = load(&libm).expect_err("refused");
    assert!(matches!(err, LoadError::NoEntry { .. }), "{err}");
    assert!(err.to_string().contains("export_plugin"), "{err}");
}

/// A plugin built by another plugin-api version: the real library with the version inside its
/// fingerprint rewritten (same length), as a stale build would carry.
#[test]
fn a_plugin_with_another_fingerprint_is_refused_naming_both_and_the_rebuild() {
    let bytes = std::fs::read(library("transformer")).unwrap();
    let ours = plugin_api::FINGERPRINT.as_bytes();
    let theirs = plugin_api::FINGERPRINT.replacen("plugin-api ", "plugin-api 9", 1);
    let theirs = &theirs.as_bytes()[..ours.len()];
    let mut patched = bytes.clone();
    let mut found = 0;
    let mut at = 0;
    while let Some(offset) = patched[at..].windows(ours.len()).position(|w| w == ours) {
        patched[at + offset..at + offset + ours.len()].copy_from_slice(theirs);
        at += offset + ours.len();
        found += 1;
    }
    assert!(found > 0, "fingerprint string inside the library");
    let dir = temp_dir("fingerprint");
    let path = dir.join("libtransformer.so");
    std::fs::write(&path, patched).unwrap();
    let err = load(&path).expect_err("refused");
    let text = err.to_string();
    assert!(matches!(err, LoadError::Fingerprint { .. }), "{text}");
    assert!(text.contains(plugin_api::FINGERPRINT), "{text}");
    assert!(text.contains(std::str::from_utf8(theirs).unwrap()), "{text}");
    assert!(text.contains("cargo build -p transformer"), "{text}");
}

/// A plugin that panics while registering is reported; the other plugins still load; the
/// process does not crash.
#[test]
fn a_plugin_panicking_at_registration_is_reported_and_the_others_load() {
    let plugins = plugin_dir_with("panic-declare", &["fixture-panicking-plugin", "hyperset", "sudoku"]);
    let dir = temp_dir("panic-declare-db");
    let (code, stdout, stderr) = run(workbench(&dir)
        .env("WORKBENCH_PLUGIN_PATH", &plugins)
        .env("WB_FIXTURE_PANIC_AT", "declare")
        .args(["plugins", "--json"]));
    assert_eq!(code, 0, "{stderr}");
    let listing: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let names: Vec<&str> = listing["plugins"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"hyperset") && names.contains(&"sudoku"), "{names:?}");
    assert!(!names.contains(&"panicking"));
    let errors = listing["errors"].as_array().unwrap();
    let error =
        errors.iter().find(|e| e["path"].as_str().unwrap().contains("fixture_panicking")).expect("fixture reported");
    let message = error["error"].as_str().unwrap();
    assert!(message.contains("panicked") && message.contains("fixture panics while registering"), "{message}");
    println!("FIGURE plugin faults: a panic while registering: reported with its message, the other plugins load");
}

/// A library whose ELF constructor aborts, or never returns, is loaded first by a probing
/// child process: `workbench plugins` reports it with the cause and lists the others (loading
/// it in the host used to kill the command with SIGABRT, or hang it).
#[test]
fn a_library_that_aborts_or_hangs_while_loading_is_reported_and_the_host_lives() {
    let plugins = plugin_dir_with("on-load", &["fixture-panicking-plugin", "sudoku"]);
    // A cache of its own (the same library loaded safely in other tests), or none at all.
    for (mode, expected, cache) in
        [("abort", "SIGABRT", "own"), ("hang", "did not end within 2 s", "own"), ("abort", "SIGABRT", "off")]
    {
        let dir = temp_dir(&format!("on-load-{mode}-{cache}"));
        let cache_said = if cache == "off" { ", with the probe cache off" } else { "" };
        let cache = if cache == "off" { "off".into() } else { dir.join("cache").into_os_string() };
        let (code, stdout, stderr) = run(workbench(&dir)
            .env("WORKBENCH_PLUGIN_PATH", &plugins)
            .env("WB_FIXTURE_ON_LOAD", mode)
            .env("WORKBENCH_CACHE", &cache)
            .env("WORKBENCH_PROBE_TIMEOUT_S", "2")
            .args(["plugins", "--json"]));
        assert_eq!(code, 0, "{mode}: {stderr}");
        let listing: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let names: Vec<&str> =
            listing["plugins"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert!(names.contains(&"sudoku") && !names.contains(&"panicking"), "{mode}: {names:?}");
        let errors = listing["errors"].as_array().unwrap();
        let message = errors
            .iter()
            .find(|e| e["path"].as_str().unwrap().contains("fixture_panicking"))
            .and_then(|e| e["error"].as_str())
            .expect("the library is reported");
        assert!(message.contains(expected) && message.contains("it was not loaded"), "{mode}: {message}");
        println!("FIGURE plugin faults: a library constructor that does {mode} at load{cache_said}: reported ({expected}), the host lives");
    }
}

/// Trains the fixture layer `panicking` (with `extra` overrides) on a few Sudoku puzzles;
/// returns the exit code, stderr and `runs show 1 --json`.
fn train_fixture(tag: &str, extra: &[&str]) -> (i32, String, serde_json::Value) {
    let plugins = plugin_dir_with(tag, &["fixture-panicking-plugin", "sudoku"]);
    let dir = temp_dir(&format!("{tag}-db"));
    let mut args = vec![
        "train",
        "--layer",
        "panicking",
        "--task",
        "sudoku",
        "task.train_puzzles=8",
        "task.eval_puzzles=4",
        "steps=5",
    ];
    args.extend_from_slice(extra);
    let (code, _stdout, stderr) = run(workbench(&dir).env("WORKBENCH_PLUGIN_PATH", &plugins).args(&args));
    let (_, shown, _) = run(workbench(&dir).args(["runs", "show", "1", "--json"]));
    (code, stderr, serde_json::from_str(&shown).unwrap())
}

/// A layer that panics in its forward pass fails its run with the panic message; the
/// launching command reports it and exits non-zero, nothing crashes.
#[test]
fn a_plugin_panicking_in_forward_fails_the_run_not_the_host() {
    let (code, stderr, shown) = train_fixture("panic-forward", &[]);
    assert_eq!(code, 3, "a failed run exits 3: {stderr}");
    assert!(stderr.contains("failed") && stderr.contains("fixture panics in forward"), "{stderr}");
    assert_eq!(shown["run"]["status"], "failed");
    println!("FIGURE plugin faults: a panic in a layer's forward pass: the run fails with the message, the host lives");
}

/// A loss that becomes NaN stops the run as `diverged`, keeping what was recorded.
#[test]
fn a_nan_loss_stops_the_run_as_diverged() {
    let (code, stderr, shown) = train_fixture("nan", &["mode=nan"]);
    assert_eq!(code, 4, "a diverged run exits 4: {stderr}");
    assert!(stderr.contains("diverged") && stderr.contains("NaN"), "{stderr}");
    assert_eq!(shown["run"]["status"], "diverged");
    let loss = shown["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["split"] == "train" && m["name"] == "loss")
        .expect("the NaN loss is recorded");
    assert_eq!(loss["summary"]["last_step"], 1);
}
