//! Masked image modelling evaluated by MaskGIT's iterative decoding through the host: the
//! task runs the layer several times per evaluation batch (`TaskModel::evaluate_decoding`).

use crate::common;

use common::{run, show, temp_dir, workbench};

/// The final `eval` metrics of a tiny masked-image run decoded in `steps` steps.
fn eval_metrics(steps: &str) -> serde_json::Map<String, serde_json::Value> {
    let dir = temp_dir(&format!("decoding-{steps}"));
    let args = [
        "train",
        "--layer",
        "hyperset",
        "--task",
        "masked-image",
        "--json",
        "d=16",
        "heads=2",
        "iterations=2",
        "train_images=32",
        "test_images=8",
        "codebook=16",
        "steps=2",
        "eval_every=2",
        "eval_depths=",
        "batch_size=8",
        "threads=1",
    ];
    let (code, stdout, stderr) = run(workbench(&dir).args(args).arg(format!("decode_steps={steps}")));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let shown = show(&dir, 1);
    let mut metrics = serde_json::Map::new();
    for m in shown["metrics"].as_array().unwrap() {
        if m["split"] == "eval" {
            metrics.insert(m["name"].as_str().unwrap().to_string(), m["summary"]["last"].clone());
        }
    }
    metrics
}

#[test]
fn iterative_decoding_changes_the_reconstruction_not_the_loss() {
    let (one, many) = (eval_metrics("1"), eval_metrics("6"));
    for name in ["loss", "acc_40", "psnr_40", "ssim_10"] {
        assert!(one.contains_key(name) && many.contains_key(name), "{name}: {one:?} {many:?}");
    }
    // The loss is measured on the first pass, the same model's in both runs.
    assert_eq!(one["loss"], many["loss"]);
    // Decoding in six steps conditions later predictions on revealed codes: the
    // reconstructions differ from the one-pass argmax.
    let differs = one.keys().filter(|k| k.starts_with("psnr_") || k.starts_with("acc_")).any(|k| one[k] != many[k]);
    assert!(differs, "one pass {one:?}\nsix steps {many:?}");
    // Seeded draws: the same run decoded again gives the same numbers.
    assert_eq!(eval_metrics("6"), many);
}
