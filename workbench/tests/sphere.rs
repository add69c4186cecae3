//! Token trajectories on the hypersphere, end to end through the real binary: recorded at every
//! evaluation, read back, and drawn by `workbench plot --sphere`.

use crate::common;

use common::{run, temp_dir, workbench};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use workbench::store::DiagnosticRow;

/// `workbench train` of a tiny Hyper-SET run on easy Sudoku (d = `d`, 4 heads, 3
/// iterations, and the `extra` options) with JSON events and evaluations at steps 2 and 4.
fn train_args(d: u32, extra: &[&str]) -> Vec<String> {
    let d = format!("d={d}");
    let mut args: Vec<String> = [
        "train",
        "--layer",
        "hyperset",
        "--task",
        "sudoku",
        "--json",
        &d,
        "heads=4",
        "iterations=3",
        "time_dim=8",
        "difficulty=easy",
        "task.train_puzzles=32",
        "task.eval_puzzles=8",
        "steps=4",
        "eval_every=2",
        "eval_depths=2",
        "eval_examples=8",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// Trains the run of [`train_args`] and returns its diagnostics and its standard error.
fn train_with(dir: &Path, d: u32, extra: &[&str]) -> (Vec<DiagnosticRow>, String) {
    let (code, stdout, stderr) = run(workbench(dir).args(train_args(d, extra)));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.lines().any(|l| l.contains("\"event\":\"finished\"")), "{stdout}\n{stderr}");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let rows = rt.block_on(async {
        let store = workbench::store::Store::open(&dir.join("runs.db")).await.unwrap();
        store.diagnostics(1).await.unwrap()
    });
    (rows, stderr)
}

/// As [`train_with`] with the default head and tokens, which must be recorded.
fn train(dir: &Path, d: u32) -> Vec<DiagnosticRow> {
    let (rows, stderr) = train_with(dir, d, &[]);
    assert!(!stderr.contains("no token trajectories"), "{stderr}");
    rows
}

/// `(step, token, t) -> [x, y, z]` of the sphere rows, and the other sphere rows by
/// `(step, name)`.
type Points = BTreeMap<(u64, usize, u32), [f64; 3]>;
type Others = BTreeMap<(u64, String), (u32, f64)>;

fn sphere_rows(rows: &[DiagnosticRow]) -> (Points, Others) {
    let mut points: Points = BTreeMap::new();
    let mut other = BTreeMap::new();
    for r in rows.iter().filter(|r| r.name.contains("sphere/")) {
        assert!(r.name.starts_with("sphere/"), "sphere rows are at the training depth only: {}", r.name);
        let rest = &r.name["sphere/".len()..];
        match rest.strip_prefix("token").and_then(|s| s.split_once('/')) {
            Some((i, axis)) => {
                let a = ["x", "y", "z"].iter().position(|x| *x == axis).unwrap_or_else(|| panic!("{}", r.name));
                points.entry((r.step, i.parse().unwrap(), r.iteration)).or_insert([f64::NAN; 3])[a] = r.value;
            }
            None => assert!(other.insert((r.step, rest.to_string()), (r.iteration, r.value)).is_none()),
        }
    }
    (points, other)
}

fn decode_png(path: &Path) -> (u32, u32, usize) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let pixels = &buf[..info.buffer_size()];
    let px = info.color_type.samples() * (info.bit_depth as usize / 8).max(1);
    let distinct = pixels.chunks(px).filter(|c| *c != &pixels[..px]).count();
    (info.width, info.height, distinct)
}

#[test]
fn heads_of_dimension_three_are_recorded_on_the_unit_sphere_and_drawn() {
    let dir = temp_dir("sphere-p3");
    let rows = train(&dir, 12);
    let (points, other) = sphere_rows(&rows);
    for step in [2u64, 4] {
        assert_eq!(other.get(&(step, "dim".into())), Some(&(0, 3.0)), "{other:?}");
        assert_eq!(other.get(&(step, "head".into())), Some(&(0, 0.0)));
        assert!(!other.contains_key(&(step, "pca_explained".into())), "no PCA for p = 3");
        // Sudoku has 81 tokens: the first 8 are recorded, at t = 0..=3.
        let tokens: BTreeSet<usize> = points.keys().filter(|k| k.0 == step).map(|k| k.1).collect();
        assert_eq!(tokens, (0..8).collect());
        for i in 0..8 {
            for t in 0..=3u32 {
                let p = points.get(&(step, i, t)).unwrap_or_else(|| panic!("no token {i} at t {t}, step {step}"));
                let norm = p.iter().map(|v| v * v).sum::<f64>().sqrt();
                assert!((norm - 1.0).abs() < 1e-5, "token {i} at t {t}, step {step}: |{p:?}| = {norm}");
            }
            assert!(!points.contains_key(&(step, i, 4)), "only the training depth is recorded");
        }
    }

    let png = dir.join("sphere.png");
    let (code, stdout, stderr) = run(workbench(&dir).args([
        "plot",
        "--runs",
        "1",
        "--sphere",
        "--size",
        "900x700",
        "--out",
        png.to_str().unwrap(),
    ]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("step 4") && stdout.contains("8 tokens"), "{stdout}");
    let (w, h, distinct) = decode_png(&png);
    assert_eq!((w, h), (900, 700));
    assert!(distinct > 1000, "the image is (almost) one flat colour: {distinct} differing pixels");

    // An earlier evaluation, as SVG, reported as JSON.
    let svg = dir.join("sphere.svg");
    let (code, stdout, stderr) = run(workbench(&dir).args([
        "plot",
        "--runs",
        "1",
        "--sphere",
        "--step",
        "2",
        "--json",
        "--out",
        svg.to_str().unwrap(),
    ]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!((report["step"].as_u64(), report["dim"].as_u64()), (Some(2), Some(3)));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("step 2 · head 0 · p = 3 heads") && text.contains("token 7"));

    // Without --out: a PNG named after the run in the exports folder (--exports here).
    let elsewhere = dir.join("figures");
    let (code, stdout, stderr) =
        run(workbench(&dir).args(["--exports", elsewhere.to_str().unwrap(), "plot", "1", "--sphere", "--json"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(report["out"], serde_json::json!(elsewhere.join("sphere-run-1.png")), "{report}");
    assert!(decode_png(&elsewhere.join("sphere-run-1.png")).2 > 1000);

    // A step without trajectories, and two runs at once, are refused with the reason.
    let (code, _, stderr) =
        run(workbench(&dir).args(["plot", "--runs", "1", "--sphere", "--step", "3", "--out", png.to_str().unwrap()]));
    assert_ne!(code, 0);
    assert!(stderr.contains("step 3") && stderr.contains("2, 4"), "{stderr}");
    let (code, _, stderr) = run(workbench(&dir).args(["plot", "--runs", "1,1", "--sphere", "--out", "x.png"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("one run"), "{stderr}");
    let (code, _, stderr) =
        run(workbench(&dir).args(["plot", "--runs", "1", "--sphere", "--panels", "loss", "--out", "x.png"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--panels"), "{stderr}");
}

#[test]
fn wider_heads_are_a_pca_projection_and_say_so() {
    let dir = temp_dir("sphere-pca");
    let rows = train(&dir, 32);
    let (points, other) = sphere_rows(&rows);
    let (t, p) = other[&(4, "dim".into())];
    assert_eq!((t, p), (0, 8.0));
    let (_, share) = other[&(4, "pca_explained".into())];
    assert!(share > 0.0 && share <= 1.0 + 1e-12, "{share}");
    // The projection of unit vectors, centred, is never longer than 2 and is not all zero.
    let at_step: Vec<&[f64; 3]> = points.iter().filter(|(k, _)| k.0 == 4).map(|(_, v)| v).collect();
    assert_eq!(at_step.len(), 8 * 4);
    assert!(at_step.iter().all(|p| p.iter().map(|v| v * v).sum::<f64>().sqrt() <= 2.0 + 1e-9));
    assert!(at_step.iter().any(|p| p.iter().any(|v| v.abs() > 1e-6)));

    let svg = dir.join("pca.svg");
    let (code, stdout, stderr) =
        run(workbench(&dir).args(["plot", "--runs", "1", "--sphere", "--out", svg.to_str().unwrap()]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("PCA of 8-dim heads (") && text.contains("% variance)"), "no PCA note in the title");
}

#[test]
fn the_head_and_token_count_are_options_and_a_missing_head_is_named() {
    let dir = temp_dir("sphere-choice");
    let (rows, stderr) = train_with(&dir, 12, &["sphere_head=2", "sphere_tokens=3"]);
    assert!(!stderr.contains("no token trajectories"), "{stderr}");
    let (points, other) = sphere_rows(&rows);
    assert_eq!(other.get(&(4, "head".into())), Some(&(0, 2.0)), "{other:?}");
    let tokens: BTreeSet<usize> = points.keys().filter(|k| k.0 == 4).map(|k| k.1).collect();
    assert_eq!(tokens, (0..3).collect());
    let (code, stdout, stderr) =
        run(workbench(&dir).args(["plot", "--runs", "1", "--sphere", "--out", dir.join("s.svg").to_str().unwrap()]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("3 tokens"), "{stdout}");
    assert!(std::fs::read_to_string(dir.join("s.svg")).unwrap().contains("head 2"));

    // Head 4 of 4: the run fails before its first step, naming the heads there are.
    let dir = temp_dir("sphere-no-head");
    let (code, stdout, stderr) = run(workbench(&dir).args(train_args(12, &["sphere_head=4"])));
    assert_eq!(code, 3, "{stdout}{stderr}");
    assert!(stderr.contains("sphere_head = 4 but the layer has 4 heads"), "{stderr}");
    assert!(stderr.contains("0..=3"), "{stderr}");
    assert!(!stdout.contains("\"event\":\"step\""), "no step ran: {stdout}");
}

#[test]
fn a_run_without_trajectories_is_refused_with_the_reason() {
    let dir = temp_dir("sphere-missing");
    // The MLP layer defines no head projections, so nothing is recorded to draw.
    let (code, _, stderr) = run(workbench(&dir).args([
        "train",
        "--layer",
        "mlp",
        "--task",
        "sudoku",
        "d=16",
        "hidden=16",
        "iterations=2",
        "layers=2",
        "difficulty=easy",
        "task.train_puzzles=8",
        "task.eval_puzzles=4",
        "steps=2",
        "eval_every=1",
        "eval_examples=4",
    ]));
    assert_eq!(code, 0, "{stderr}");
    let out = dir.join("x.png");
    let (code, _, stderr) =
        run(workbench(&dir).args(["plot", "--runs", "1", "--sphere", "--out", out.to_str().unwrap()]));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("run 1: no token trajectories") && stderr.contains("head projections"), "{stderr}");
    assert!(!out.exists());
}
