//! `workbench verify` through the real binary.

use crate::common;

use common::{run, temp_dir, workbench};

#[test]
fn hyperset_updates_are_energy_gradients() {
    let dir = temp_dir("verify");
    for extra in [&[][..], &["--layer", "hyperset", "norm_gain=false", "layers=2", "iterations=4"][..]] {
        let (code, stdout, stderr) = run(workbench(&dir).arg("verify").arg("--json").args(extra));
        assert_eq!(code, 0, "{stdout}\n{stderr}");
        let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap();
        let hyperset: Vec<&serde_json::Value> = rows.iter().filter(|r| r["layer"] == "hyperset").collect();
        let identities: Vec<f64> = hyperset
            .iter()
            .filter(|r| r["claim"].as_str().unwrap().contains("= -dE"))
            .map(|r| r["value"].as_f64().unwrap())
            .collect();
        assert!(identities.len() >= 4, "{stdout}");
        assert!(identities.iter().all(|e| *e < 1e-10), "identity errors {identities:?}");
        let descents = hyperset.iter().filter(|r| r["claim"].as_str().unwrap().contains("does not rise")).count();
        assert_eq!(descents, 6, "{stdout}");
        assert!(rows.iter().all(|r| r["passed"] == true), "{stdout}");
    }
}

/// The random parameters and tokens come from `--seed`: the same seed gives the same numbers,
/// another seed other numbers.
#[test]
fn verify_is_reproducible_for_a_seed() {
    let dir = temp_dir("verify-seed");
    let json = |seed: &str| {
        let (code, stdout, stderr) =
            run(workbench(&dir).args(["verify", "--json", "--layer", "hyperset", "--seed", seed]));
        assert_eq!(code, 0, "{stdout}\n{stderr}");
        stdout
    };
    assert_eq!(json("5"), json("5"));
    assert_ne!(json("5"), json("6"));
}
