//! `workbench bench`: throughput figures, and the side-by-side PyTorch reference (`--reference`)
//! driven through stand-ins for Python, since tests never need PyTorch.

use crate::common;

use common::{run, temp_dir, workbench};
use std::path::{Path, PathBuf};

const TINY: [&str; 7] = ["--steps", "2", "d=16", "heads=2", "iterations=2", "time_dim=8", "batch_size=4"];

/// What a stand-in reference says once ready: a parameter count that is not the model's.
const FAKE_READY: &str = r#"{"torch": "9.9.9", "threads": 2, "parameters": 1}"#;

/// An executable stand-in for `python3`, run as `python -c SCRIPT ARGUMENT`: it keeps the
/// script as `received.py`, the JSON argument as `args.json` and its environment as `env.txt`,
/// prints `stdout` and `stderr`, exits with `code` if it is not 0, and otherwise answers each
/// request for a block of steps (logged in `requests.txt`) with 0.5 s per step: 8 samples/s
/// at the tests' batch of 4.
fn fake_python(dir: &Path, stdout: &str, stderr: &str, code: i32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("python");
    let _ = std::fs::remove_file(dir.join("requests.txt"));
    std::fs::write(
        &path,
        format!(
            r#"#!/bin/sh
here="$(dirname "$0")"
[ "$1" = "-c" ] || {{ echo "expected -c, got $1" >&2; exit 64; }}
printf '%s' "$2" > "$here/received.py"
printf '%s' "$3" > "$here/args.json"
env > "$here/env.txt"
echo '{stdout}'
echo "{stderr}" >&2
[ {code} -eq 0 ] || exit {code}
while read -r steps; do
    echo "$steps" >> "$here/requests.txt"
    echo '{{"step_s": 0.5}}'
done
"#
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn bench(dir: &Path, python: Option<&Path>, extra: &[&str]) -> (i32, String, String) {
    let mut cmd = workbench(dir);
    cmd.arg("bench").args(TINY).args(extra);
    if let Some(python) = python {
        cmd.env("WORKBENCH_PYTHON", python);
    }
    run(&mut cmd)
}

#[test]
fn bench_prints_throughput_and_the_split() {
    let dir = temp_dir("bench");
    let (code, stdout, stderr) = bench(&dir, None, &["threads=2"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("2 shard(s) x 1 thread(s) per op"), "{stdout}");
    assert!(stdout.contains("samples/s") && stdout.contains("GFLOP/s"), "{stdout}");
    // Two shards: how long their threads waited for the slower one.
    let waiting = stdout.lines().find(|l| l.trim_start().starts_with("shards: the slowest takes")).expect(&stdout);
    assert!(waiting.contains("% of that time waiting for it"), "{waiting}");
    // One shard never waits: no such line.
    let (code, stdout, stderr) = bench(&dir, None, &["threads=1"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stdout.contains("shards:"), "{stdout}");
}

/// No timed steps would print a step of 0 s and infinite GFLOP/s: refused before any work.
#[test]
fn bench_refuses_zero_timed_steps() {
    let dir = temp_dir("bench-zero");
    let (code, stdout, stderr) = run(workbench(&dir).args(["bench", "--steps", "0"]));
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    assert!(stderr.contains("--steps") && stderr.contains("must be at least 1"), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    // A plugin named where settings go: the option that takes it, before any work.
    let (code, stdout, stderr) = run(workbench(&dir).args(["bench", "transformer"]));
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    assert!(stderr.contains("`transformer` is a layer plugin: give it as `--layer transformer`"), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
}

#[test]
fn the_reference_ratio_is_printed_side_by_side() {
    let dir = temp_dir("bench-ref");
    let python = fake_python(&dir, FAKE_READY, "", 0);
    let (code, stdout, stderr) = bench(&dir, Some(&python), &["--reference"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("reference PyTorch 9.9.9 CPU eager, 2 threads"), "{stdout}");
    // The script arrives as an argument, never as a file in a shared directory.
    assert!(std::fs::read_to_string(dir.join("received.py")).unwrap().contains("import torch"));
    // The stand-in's parameter count is not the model's: said, not hidden.
    assert!(stdout.contains("(differs: not the same model)"), "{stdout}");
    let ours: f64 = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("throughput "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("a throughput line");
    let ratio: f64 = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("ratio "))
        .and_then(|rest| rest.split('x').next())
        .and_then(|v| v.parse().ok())
        .expect("a ratio line");
    assert!((ratio - ours / 8.0).abs() < 0.01 * ratio.max(1.0), "ratio {ratio} vs {ours} / 8");
    // One round: one block of the two timed steps asked of PyTorch, and no per-round line.
    assert_eq!(std::fs::read_to_string(dir.join("requests.txt")).unwrap(), "2\n");
    assert!(!stdout.contains("rounds of"), "{stdout}");
}

/// `--rounds`: the timed steps alternate with PyTorch's in blocks, each round's ratio printed
/// and kept in the JSON report.
#[test]
fn rounds_alternate_blocks_of_steps_with_the_reference() {
    let dir = temp_dir("bench-rounds");
    let python = fake_python(&dir, FAKE_READY, "", 0);
    let (code, stdout, stderr) = bench(&dir, Some(&python), &["--reference", "--rounds", "3", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(std::fs::read_to_string(dir.join("requests.txt")).unwrap(), "2\n2\n2\n");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!((report["steps"].as_u64(), report["rounds"].as_u64()), (Some(2), Some(3)), "{report}");
    let rounds = report["reference"]["rounds"].as_array().expect("the rounds");
    assert_eq!(rounds.len(), 3, "{report}");
    for round in rounds {
        let (ours, theirs) = (round["step_s"].as_f64().unwrap(), round["reference_step_s"].as_f64().unwrap());
        assert_eq!(theirs, 0.5, "{report}");
        assert!((round["ratio"].as_f64().unwrap() - theirs / ours).abs() < 1e-9, "{report}");
    }
    // The overall step is the mean of the rounds' (equal blocks).
    let mean = rounds.iter().map(|r| r["step_s"].as_f64().unwrap()).sum::<f64>() / 3.0;
    assert!((report["step_s"].as_f64().unwrap() - mean).abs() < 1e-9 * mean, "{report}");
    // As lines: one ratio per round.
    let (code, stdout, stderr) = bench(&dir, Some(&python), &["--reference", "--rounds", "2"]);
    assert_eq!(code, 0, "{stderr}");
    let line = stdout.lines().find(|l| l.contains("rounds of 2 steps each side")).expect(&stdout);
    assert_eq!(line.matches('x').count(), 2, "{line}");
    // Rounds with neither a reference nor the peak are refused by the parser.
    let (code, _, stderr) = bench(&dir, None, &["--rounds", "2"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--reference|--peak"), "{stderr}");
}

/// `--peak`: each round's steps framed by 1024² products on as many threads as shards, the
/// step's GFLOP/s read as a share of theirs round by round.
#[test]
fn the_peak_share_is_measured_round_by_round() {
    let dir = temp_dir("bench-peak");
    let (code, stdout, stderr) = bench(&dir, None, &["--peak", "--rounds", "3", "threads=2", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    let peak = &report["peak"];
    assert_eq!(peak["threads"], report["shards"], "{report}");
    let rounds = peak["rounds"].as_array().expect("the rounds");
    assert_eq!(rounds.len(), 3, "{report}");
    let mut shares = Vec::new();
    for round in rounds {
        let (step, product, share) = (
            round["step_gflop_per_s"].as_f64().unwrap(),
            round["gflop_per_s"].as_f64().unwrap(),
            round["share"].as_f64().unwrap(),
        );
        assert!(step > 0.0 && product > 0.0, "{report}");
        assert!((share - step / product).abs() < 1e-9 * share, "{report}");
        shares.push(share);
    }
    shares.sort_by(f64::total_cmp);
    assert_eq!(peak["share"].as_f64(), Some(shares[1]), "the median of the rounds: {report}");
    // The step's rounds are the bench's own: their mean is the overall step's GFLOP/s.
    let flop = report["gflop_per_step"].as_f64().unwrap();
    let mean_step_s = rounds.iter().map(|r| flop / r["step_gflop_per_s"].as_f64().unwrap()).sum::<f64>() / 3.0;
    assert!((mean_step_s - report["step_s"].as_f64().unwrap()).abs() < 1e-9, "{report}");
    // As lines: the share, then one per round.
    let (code, stdout, stderr) = bench(&dir, None, &["--peak", "--rounds", "2"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("% of the gemm peak: a 1024² f32 product on"), "{stdout}");
    let line = stdout.lines().find(|l| l.contains("rounds of 2 steps framed by products")).expect(&stdout);
    let (_, each) = line.split_once(':').expect(line);
    assert_eq!(each.matches('%').count(), 2, "{line}");
}

/// Every layer family gets a FLOP count and a peak share: the products are counted off the
/// recorded graph, the CRATE layer's (one without any count written for it) as Hyper-SET's.
#[test]
fn every_layer_is_counted_and_read_against_the_peak() {
    let dir = temp_dir("bench-peak-any-layer");
    let (code, stdout, stderr) = run(workbench(&dir).args([
        "bench",
        "--layer",
        "crate",
        "--task",
        "image",
        "--steps",
        "1",
        "--peak",
        "--json",
        "d=16",
        "heads=2",
        "iterations=2",
        "batch_size=4",
    ]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert!(report["gflop_per_step"].as_f64().is_some_and(|f| f > 0.0), "{report}");
    assert!(report["product_nodes"].as_u64().is_some_and(|n| n > 0), "{report}");
    assert!(report["peak"]["share"].as_f64().is_some_and(|s| s > 0.0), "{report}");
    // CRATE's attention keeps its weights inside its fused op; the graph's bytes count them.
    let (kept, graph) = (report["graph_kept_in_ops_mb"].as_f64().unwrap(), report["graph_mb"].as_f64().unwrap());
    assert!(kept > 0.0 && kept < graph, "{report}");
}

/// A reference that dies after building its model is reported with what it said, and the
/// bench fails instead of printing a ratio.
#[test]
fn a_reference_that_dies_while_timing_is_named_with_its_error() {
    let dir = temp_dir("bench-ref-dies");
    let python = fake_python(&dir, FAKE_READY, "RuntimeError: out of memory", 3);
    let (code, stdout, stderr) = bench(&dir, Some(&python), &["--reference"]);
    assert_ne!(code, 0, "{stdout}");
    assert!(
        stderr.contains("ended before reporting 2 timed steps") || stderr.contains("stopped before timing"),
        "{stderr}"
    );
    assert!(stderr.contains("RuntimeError: out of memory") && stderr.contains("exit status: 3"), "{stderr}");
    assert!(!stdout.contains("ratio"), "{stdout}");
}

/// `--json`: one object with the measurements and the reference, nothing else on stdout.
#[test]
fn bench_json_is_one_object() {
    let dir = temp_dir("bench-json");
    let python = fake_python(&dir, FAKE_READY, "", 0);
    let (code, stdout, stderr) = bench(&dir, Some(&python), &["--reference", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(report["layer"], "hyperset");
    assert_eq!(report["steps"], 2);
    let ours = report["samples_per_s"].as_f64().unwrap();
    assert!(ours > 0.0 && report["step_s"].as_f64().unwrap() > 0.0, "{report}");
    assert!(report["gflop_per_s"].as_f64().is_some(), "{report}");
    let waiting = report["shard_wait_share"].as_f64().unwrap();
    assert!((0.0..1.0).contains(&waiting), "{report}");
    assert_eq!(report["reference"]["torch"], "9.9.9");
    let ratio = report["reference"]["ratio"].as_f64().unwrap();
    assert!((ratio - ours / 8.0).abs() < 1e-9 * ratio.max(1.0), "{report}");
}

#[test]
fn a_python_without_torch_is_named_with_the_fix() {
    let dir = temp_dir("bench-notorch");
    let python = fake_python(&dir, "", "ModuleNotFoundError: No module named 'torch'", 1);
    let (code, _, stderr) = bench(&dir, Some(&python), &["--reference"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("pip install torch") && stderr.contains("WORKBENCH_PYTHON"), "{stderr}");
    let (code, _, stderr) = bench(&dir, Some(&dir.join("no-such-python")), &["--reference"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("cannot run") && stderr.contains("no-such-python"), "{stderr}");
}

#[test]
fn the_reference_refuses_what_it_does_not_model_before_timing() {
    let dir = temp_dir("bench-refuse");
    let (code, stdout, stderr) = bench(&dir, None, &["--reference", "attention=sigmoid"]);
    assert_eq!(code, 2, "refused as a configuration error: {stderr}");
    assert!(stderr.contains("attention=sigmoid") && stderr.contains("reference of `hyperset`"), "{stderr}");
    assert!(!stdout.contains("throughput"), "timed before refusing: {stdout}");
    // A task option that changes the model is refused too; one that only sizes the data is not.
    let (code, _, stderr) = bench(&dir, None, &["--reference", "task.positions=row_col_box"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("reference of `sudoku`") && stderr.contains("positions=row_col_box"), "{stderr}");
    // Layers and tasks without a reference are named, with the ones that have one.
    let (code, _, stderr) = run(workbench(&dir).args(["bench", "--layer", "mlp", "--reference", "--steps", "1"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no PyTorch reference of the `mlp` layer") && stderr.contains("hyperset"), "{stderr}");
    let (code, _, stderr) =
        run(workbench(&dir).args(["bench", "--task", "gp-regression", "--reference", "--steps", "1"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("`gp-regression` task") && stderr.contains("language"), "{stderr}");
}

/// `--task`: the task's reference file and the layer's arrive in one script, with the batch's
/// shapes and the resolved options as the argument.
#[test]
fn the_reference_of_a_layer_on_another_task() {
    let dir = temp_dir("bench-image");
    let python = fake_python(&dir, FAKE_READY, "", 0);
    let (code, stdout, stderr) = bench(&dir, Some(&python), &["--task", "image", "--reference", "task.patches=4"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("layer hyperset on image"), "{stdout}");
    let received = std::fs::read_to_string(dir.join("received.py")).unwrap();
    assert!(received.contains("class ImageModel") && received.contains("class HyperSet"), "{received}");
    let args: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("args.json")).unwrap()).unwrap();
    // 4 x 4 patches of 3 x 8 x 8 values, a batch of 4.
    assert_eq!(args["inputs"], serde_json::json!([4, 16, 192]), "{args}");
    assert_eq!(args["task"]["patches"], 4, "{args}");
    assert_eq!(args["layer"]["d"], 16, "{args}");
    assert_eq!(args["causal"], false, "{args}");
    // PyTorch runs on the bench's device.
    assert_eq!(args["device"], "cpu", "{args}");
}

/// `WORKBENCH_REFERENCE_DIR` reads the reference files from a folder; a missing one is named.
#[test]
fn references_can_be_read_from_a_folder() {
    let dir = temp_dir("bench-refdir");
    let python = fake_python(&dir, "{}", "", 0);
    let (code, _, stderr) = run(workbench(&dir)
        .args(["bench", "--reference"])
        .args(TINY)
        .env("WORKBENCH_PYTHON", &python)
        .env("WORKBENCH_REFERENCE_DIR", dir.join("refs")));
    assert_ne!(code, 0);
    assert!(stderr.contains("refs/common.py") && stderr.contains("WORKBENCH_REFERENCE_DIR"), "{stderr}");
}

/// Every layer family on its main task has a reference (seed tasks as the benchmark table in
/// the README lists them): the option lists name keys the plugins declare, and the script
/// holds the task's model and the layer's.
#[test]
fn every_family_has_a_reference_on_its_main_task() {
    let dir = temp_dir("bench-families");
    let python = fake_python(&dir, FAKE_READY, "", 0);
    let families: [(&str, &str, &str, &[&str]); 8] = [
        ("hyperset", "sudoku", "class HyperSet", &["time_dim=8"]),
        ("hyperset", "image", "class HyperSet", &["time_dim=8"]),
        ("transformer", "sudoku", "class TransformerBlock", &[]),
        ("transformer", "image", "class TransformerBlock", &[]),
        ("crate", "image", "class CrateBlock(", &[]),
        ("energy-transformer", "image", "class EnergyTransformer(", &[]),
        ("intrinsic", "language", "class Intrinsic(", &["layers=2", "task.seq_len=16"]),
        ("cem", "language", "class Cem(", &["layers=2", "task.seq_len=16"]),
    ];
    let task_class = |task: &str| match task {
        "sudoku" => "class SudokuModel",
        "image" => "class ImageModel",
        _ => "class LanguageModel",
    };
    for (layer, task, layer_marker, extra) in families {
        let (code, stdout, stderr) = run(workbench(&dir)
            .args(["bench", "--layer", layer, "--task", task, "--reference", "--steps", "1"])
            .args(["d=16", "heads=2", "iterations=2", "batch_size=4"])
            .args(extra)
            .env("WORKBENCH_PYTHON", &python));
        assert_eq!(code, 0, "{layer} on {task}: {stderr}");
        assert!(stdout.contains("ratio"), "{layer} on {task}: {stdout}");
        let received = std::fs::read_to_string(dir.join("received.py")).unwrap();
        assert!(received.contains(task_class(task)) && received.contains(layer_marker), "{layer} on {task}");
    }
}

/// `WORKBENCH_KERNELS_ISA` narrower than the processor: the report says the kernels are capped,
/// and the PyTorch reference is started with the same cap on its own kernels.
#[test]
fn a_narrower_instruction_set_is_reported_and_given_to_the_reference() {
    use plugin_api::isa::{Isa, ISA_VARIABLE};
    let dir = temp_dir("bench-isa");
    let python = fake_python(&dir, FAKE_READY, "", 0);
    let mut cmd = workbench(&dir);
    cmd.arg("bench").args(TINY).arg("--reference").env("WORKBENCH_PYTHON", &python).env(ISA_VARIABLE, "baseline");
    let (code, stdout, stderr) = run(&mut cmd);
    assert_eq!(code, 0, "{stderr}");
    let detected = Isa::detected();
    let environment = std::fs::read_to_string(dir.join("env.txt")).unwrap();
    if detected == Isa::Baseline {
        assert!(stdout.contains("instructions baseline (the processor's widest)"), "{stdout}");
        assert!(!environment.contains("ATEN_CPU_CAPABILITY=default"), "{environment}");
    } else {
        let line =
            format!("instructions baseline ({ISA_VARIABLE} caps the kernels; the processor has {})", detected.name());
        assert!(stdout.contains(&line), "{stdout}");
        assert!(stdout.contains("instructions capped alike: ATEN_CPU_CAPABILITY=default"), "{stdout}");
        assert!(environment.lines().any(|l| l == "ATEN_CPU_CAPABILITY=default"), "{environment}");
        assert!(environment.lines().any(|l| l == "MKL_ENABLE_INSTRUCTIONS=SSE4_2"), "{environment}");
    }
}

/// A value that names no instruction set stops the workbench before it loads a plugin.
#[test]
fn an_unknown_instruction_set_is_refused_with_the_accepted_names() {
    let dir = temp_dir("bench-isa-unknown");
    let (code, _, stderr) = run(workbench(&dir).arg("bench").args(TINY).env(plugin_api::isa::ISA_VARIABLE, "avx9000"));
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr
            .contains("WORKBENCH_KERNELS_ISA=\"avx9000\" names no instruction set: use one of baseline, avx2, avx512"),
        "{stderr}"
    );
}

/// A `WORKBENCH_BLAS` that names no CBLAS library stops the workbench before it loads a
/// plugin, with the reason and the fix.
#[test]
fn a_blas_library_that_cannot_serve_is_refused_at_start() {
    use plugin_api::blas::BLAS_VARIABLE;
    let dir = temp_dir("bench-blas-refused");
    let not_library = dir.join("libnot-blas.so");
    std::fs::write(&not_library, "not a library").unwrap();
    let (code, _, stderr) = run(workbench(&dir).arg("bench").args(TINY).env(BLAS_VARIABLE, &not_library));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("libnot-blas.so: cannot be loaded") && stderr.contains("unset it"), "{stderr}");
    let (code, _, stderr) = run(workbench(&dir).arg("runs").env(BLAS_VARIABLE, dir.join("missing.so")));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("missing.so: no such file"), "{stderr}");
}

/// The products on Debian's OpenBLAS (`WORKBENCH_BLAS`): the bench trains with them and names
/// the library; without the variable, `gemm`. Required where CI is set (`.ci/run` installs
/// `libopenblas0-pthread`).
#[test]
fn the_bench_names_the_library_its_products_run_on() {
    use plugin_api::blas::BLAS_VARIABLE;
    let library = Path::new(plugin_api::blas::DEBIAN_OPENBLAS);
    if !library.is_file() {
        assert!(std::env::var_os("CI").is_none(), "no OpenBLAS at {}: install libopenblas0-pthread", library.display());
        eprintln!("skipped: no OpenBLAS at {} (Debian: libopenblas0-pthread)", library.display());
        return;
    }
    let dir = temp_dir("bench-blas");
    let (code, stdout, stderr) = run(workbench(&dir).arg("bench").args(TINY).env(BLAS_VARIABLE, library));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("products libopenblas.so.0 (WORKBENCH_BLAS;"), "{stdout}");
    let (code, stdout, stderr) = run(workbench(&dir).arg("bench").args(TINY).env_remove(BLAS_VARIABLE));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("products gemm (built in;"), "{stdout}");
    // A run's worker inherits it, and its log says what ran its products.
    let tiny_run = ["--layer", "transformer", "--task", "sudoku", "d=16", "heads=2", "iterations=1", "difficulty=easy"];
    let short = ["task.train_puzzles=50", "task.eval_puzzles=16", "steps=2", "eval_every=2", "checkpoint=false"];
    let (code, _, stderr) = run(workbench(&dir).arg("train").args(tiny_run).args(short).env(BLAS_VARIABLE, library));
    assert_eq!(code, 0, "{stderr}");
    let log = common::show(&dir, 1)["log"].to_string();
    assert!(log.contains("matrix products on libopenblas.so.0 (WORKBENCH_BLAS)"), "{log}");
}

/// A training process starts itself again with `glibc.malloc.hugetlb=1` where the kernel gives
/// huge pages only on request, reports how much of its memory is on them, and gives the
/// processes it starts (the reference) the environment it was given; a tunable the user set
/// is left as it is.
#[test]
fn the_heap_is_on_huge_pages_where_the_kernel_gives_them_on_request() {
    use workbench::huge_pages::ThpMode;
    let dir = temp_dir("bench-huge-pages");
    let python = fake_python(&dir, FAKE_READY, "", 0);
    let report = |tunables: &str| -> serde_json::Value {
        let mut cmd = workbench(&dir);
        cmd.arg("bench").args(TINY).args(["--reference", "--json"]).env("WORKBENCH_PYTHON", &python);
        let (code, stdout, stderr) = run(cmd.env("GLIBC_TUNABLES", tunables));
        assert_eq!(code, 0, "{stderr}");
        let report: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
        let env = std::fs::read_to_string(dir.join("env.txt")).unwrap();
        assert!(env.lines().any(|l| l == format!("GLIBC_TUNABLES={tunables}")), "the reference's environment:\n{env}");
        assert!(!env.contains("WORKBENCH_GLIBC_TUNABLES_BEFORE") && !env.contains("WORKBENCH_HEAP_STARTS"), "{env}");
        report["memory"].clone()
    };
    let mode = ThpMode::current();
    let memory = report("glibc.malloc.arena_max=4");
    let (start, huge) = (memory["start"].as_str().unwrap(), memory["huge_pages_mb"].as_f64().unwrap());
    assert!(memory["resident_mb"].as_f64().unwrap() > huge, "{memory}");
    match mode {
        Some(ThpMode::Madvise) => {
            assert!(start.starts_with("glibc.malloc.hugetlb=1 set at start"), "{memory}");
            assert!(huge > 0.0, "{memory}");
        }
        Some(ThpMode::Always) => assert!(start.contains("THP mode always"), "{memory}"),
        Some(ThpMode::Never) => assert!(start.contains("THP mode never") && huge == 0.0, "{memory}"),
        None => assert!(start.contains("does not say"), "{memory}"),
    }
    let memory = report("glibc.malloc.hugetlb=0");
    assert_eq!(memory["start"], "GLIBC_TUNABLES sets glibc.malloc.hugetlb", "{memory}");
    if mode != Some(ThpMode::Always) {
        assert_eq!(memory["huge_pages_mb"].as_f64(), Some(0.0), "{memory}");
    }
}
