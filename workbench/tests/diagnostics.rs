//! Per-iteration diagnostics recorded at every evaluation, end to end through the real binary.

use crate::common;

use common::{temp_dir, train_tiny};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use workbench::store::DiagnosticRow;

/// Trains a tiny run of `layer` with evaluations at steps 2 and 4, at 2 and 4 iterations.
fn train_tiny_diagnostics(tag: &str, layer: &str, layer_args: &[&str]) -> Vec<DiagnosticRow> {
    let dir = temp_dir(tag);
    let (_, stderr) = train_tiny(&dir, layer, layer_args);
    assert!(!stderr.contains("no diagnostics"), "{stderr}");
    diagnostics(&dir, 1)
}

fn diagnostics(dir: &Path, id: i64) -> Vec<DiagnosticRow> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let store = workbench::store::Store::open(&dir.join("runs.db")).await.unwrap();
        store.diagnostics(id).await.unwrap()
    })
}

/// `(step, iteration, name) -> value`.
fn by_key(rows: &[DiagnosticRow]) -> BTreeMap<(u64, u32, String), f64> {
    let mut map = BTreeMap::new();
    for r in rows {
        assert!(map.insert((r.step, r.iteration, r.name.clone()), r.value).is_none(), "duplicate row {r:?}");
    }
    map
}

/// The iterations recorded for each name (at `step`) under `prefix` (`""` for the training
/// depth, `"eval@4/"` for the deeper pass).
fn iterations_per_name(rows: &[DiagnosticRow], step: u64, prefix: &str) -> BTreeMap<String, BTreeSet<u32>> {
    let mut map: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.step == step) {
        let unprefixed = if prefix.is_empty() {
            (!r.name.starts_with("eval@")).then_some(r.name.as_str())
        } else {
            r.name.strip_prefix(prefix)
        };
        // Token trajectories have a test of their own (tests/sphere.rs).
        if let Some(name) = unprefixed.filter(|n| !n.starts_with("sphere/")) {
            map.entry(name.to_string()).or_default().insert(r.iteration);
        }
    }
    map
}

/// Rank and angle rows: erank in [1, p], integer rank <= min(N, p), angles in [0, 180].
fn check_rank_and_angles(values: &BTreeMap<(u64, u32, String), f64>, step: u64, t: u32, prefix: &str, p: f64) {
    let get = |name: &str| {
        *values
            .get(&(step, t, format!("{prefix}{name}")))
            .unwrap_or_else(|| panic!("no {prefix}{name} at step {step}, t {t}"))
    };
    let erank = get("erank");
    assert!((1.0 - 1e-9..=p + 1e-9).contains(&erank), "{prefix}erank {erank} at step {step}, t {t}");
    for head in 0..2 {
        let e = get(&format!("erank/head{head}"));
        assert!((1.0 - 1e-9..=p + 1e-9).contains(&e), "{prefix}erank/head{head} {e} at step {step}, t {t}");
    }
    let rank = get("rank");
    assert!(rank.fract() == 0.0 && rank >= 1.0 && rank <= 81f64.min(p), "{prefix}rank {rank} at step {step}, t {t}");
    for name in ["angle/mean_arccos", "angle/arccos_mean"] {
        let a = get(name);
        assert!((0.0..=180.0).contains(&a), "{prefix}{name} {a} at step {step}, t {t}");
    }
}

/// Hyper-SET: energies (mean and std), ranks and angles at every iteration of both depths,
/// at both evaluations, with total = attention + feedforward.
#[test]
fn hyperset_records_energies_ranks_and_angles_per_iteration() {
    let rows = train_tiny_diagnostics("diag-hyperset", "hyperset", &["time_dim=8"]);
    let values = by_key(&rows);
    let steps: BTreeSet<u64> = rows.iter().map(|r| r.step).collect();
    assert_eq!(steps, BTreeSet::from([2, 4]));
    let names = [
        "energy/attention",
        "energy/attention/std",
        "energy/feedforward",
        "energy/feedforward/std",
        "energy/total",
        "energy/total/std",
        "erank",
        "erank/head0",
        "erank/head1",
        "rank",
        "angle/mean_arccos",
        "angle/arccos_mean",
    ];
    for step in [2, 4] {
        for (prefix, depth) in [("", 2u32), ("eval@4/", 4)] {
            let recorded = iterations_per_name(&rows, step, prefix);
            let expected: BTreeSet<u32> = (0..=depth).collect();
            for name in names {
                assert_eq!(recorded.get(name), Some(&expected), "{prefix}{name} at step {step}: {recorded:?}");
            }
            assert_eq!(recorded.len(), names.len(), "unexpected names: {:?}", recorded.keys());
            for t in 0..=depth {
                let get = |name: &str| values[&(step, t, format!("{prefix}{name}"))];
                let (a, f, total) = (get("energy/attention"), get("energy/feedforward"), get("energy/total"));
                assert!(a.is_finite() && f.is_finite(), "{a} {f}");
                assert!(
                    (total - (a + f)).abs() <= 1e-4 * total.abs().max(1e-6),
                    "total {total} != {a} + {f} at step {step}, t {t}"
                );
                for name in ["energy/attention/std", "energy/feedforward/std", "energy/total/std"] {
                    assert!(get(name) >= 0.0 && get(name).is_finite(), "{name} {}", get(name));
                }
                check_rank_and_angles(&values, step, t, prefix, 8.0);
            }
        }
        // The deeper pass starts from the same input, so t = 0 agrees at both depths.
        for name in ["energy/attention", "erank", "angle/mean_arccos"] {
            let (shallow, deep) = (values[&(step, 0, name.to_string())], values[&(step, 0, format!("eval@4/{name}"))]);
            assert!((shallow - deep).abs() <= 1e-6 * shallow.abs().max(1.0), "{name}: {shallow} vs {deep}");
        }
    }
}

/// The plain Transformer defines no energy but still gets rank and angle rows.
#[test]
fn transformer_records_ranks_and_angles_but_no_energies() {
    let rows = train_tiny_diagnostics("diag-transformer", "transformer", &[]);
    assert!(!rows.is_empty());
    assert!(rows.iter().all(|r| !r.name.contains("energy/")), "{:?}", rows.iter().find(|r| r.name.contains("energy/")));
    let values = by_key(&rows);
    for step in [2, 4] {
        for (prefix, depth) in [("", 2u32), ("eval@4/", 4)] {
            let recorded = iterations_per_name(&rows, step, prefix);
            let expected: BTreeSet<u32> = (0..=depth).collect();
            for name in ["erank", "erank/head0", "erank/head1", "rank", "angle/mean_arccos", "angle/arccos_mean"] {
                assert_eq!(recorded.get(name), Some(&expected), "{prefix}{name} at step {step}");
            }
            for t in 0..=depth {
                check_rank_and_angles(&values, step, t, prefix, 8.0);
            }
        }
    }
}
