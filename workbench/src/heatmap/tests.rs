use super::*;
use crate::store::{MetricDirection, MetricRow, RunRecord};
use serde_json::json;

fn record(id: i64, layers: i64, iterations: i64, d: i64, seed: u64) -> RunRecord {
    RunRecord {
        seed,
        param_count: Some(1000),
        last_step: 4,
        total_steps: Some(4),
        metric_specs: vec![
            MetricDirection { name: "cell_acc".into(), higher_is_better: true },
            MetricDirection { name: "loss".into(), higher_is_better: false },
        ],
        ..RunRecord::fixture(
            id,
            "hyperset",
            json!({
                "layer_config": {"layers": {"Int": layers}, "iterations": {"Int": iterations}, "d": {"Int": d}},
                "task_config": {}, "train": {"seed": seed, "steps": 4}
            }),
        )
    }
}

/// Eval rows: `cell_acc` at steps 2 and 4 (the last is the final value) and `loss`.
fn metrics(acc: [f64; 2], loss: f64) -> Vec<MetricRow> {
    let row = |step: u64, name: &str, value: f64| MetricRow {
        step,
        split: "eval".into(),
        name: name.into(),
        value,
        wall_time: step as f64,
    };
    vec![row(2, "cell_acc", acc[0]), row(4, "cell_acc", acc[1]), row(4, "loss", loss)]
}

fn grid(
    recs: &[RunRecord],
    ms: &[Vec<MetricRow>],
    rows: &str,
    cols: &str,
    metric: Option<&str>,
) -> Result<Grid, Refusal> {
    let inputs: Vec<RunInput> = recs.iter().zip(ms).map(|(record, metrics)| RunInput { record, metrics }).collect();
    Grid::build(&inputs, rows, cols, metric)
}

/// Three configurations of a 2 × 2 grid, one with two seeds; (layers 2, iterations 2) never ran.
fn sample() -> (Vec<RunRecord>, Vec<Vec<MetricRow>>) {
    let recs = vec![record(1, 1, 2, 16, 0), record(2, 1, 2, 16, 1), record(3, 2, 4, 16, 0), record(4, 1, 4, 16, 0)];
    let ms =
        vec![metrics([0.1, 0.5], 2.0), metrics([0.9, 0.7], 1.0), metrics([0.2, 0.9], 3.0), metrics([0.3, 0.6], 0.5)];
    (recs, ms)
}

#[test]
fn cells_are_means_over_seeds_and_missing_cells_are_empty() {
    let (recs, ms) = sample();
    let g = grid(&recs, &ms, "layers", "iterations", None).unwrap();
    assert_eq!((g.row_key.as_str(), g.col_key.as_str()), ("layers", "iterations"));
    assert_eq!(g.metric, "final cell_acc", "the headline metric's final value by default");
    assert_eq!(
        (g.rows.clone(), g.columns.clone()),
        (vec!["1".to_string(), "2".into()], vec!["2".to_string(), "4".into()])
    );
    // Final accuracies 0.5 and 0.7: mean 0.6, sample std sqrt(0.02).
    let two = g.cells[0][0].as_ref().unwrap();
    assert!((two.stat.mean - 0.6).abs() < 1e-12 && (two.stat.std - 0.02f64.sqrt()).abs() < 1e-12, "{two:?}");
    assert_eq!((two.stat.n, two.runs.clone()), (2, vec![1, 2]));
    assert_eq!(g.cells[0][1].as_ref().unwrap().stat.mean, 0.6);
    assert_eq!(g.cells[1][1].as_ref().unwrap().stat.mean, 0.9);
    assert_eq!(g.cells[1][0], None);
    assert_eq!(g.best(), Some((1, 1)));
    assert_eq!(g.value_text(1, 0), EMPTY);

    let text = g.to_text();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("final cell_acc") && lines[0].contains("1 to 2 seeds"), "{text}");
    assert_eq!(lines[1].split_whitespace().collect::<Vec<_>>(), ["layers", "\\", "iterations", "2", "4"], "{text}");
    assert_eq!(lines[2].split_whitespace().collect::<Vec<_>>(), ["1", "0.6000", "±", "0.1414", "0.6000"], "{text}");
    assert_eq!(lines[3].split_whitespace().collect::<Vec<_>>(), ["2", EMPTY, "0.9000"], "{text}");
    // Aligned: every value ends in the same column as its header.
    assert_eq!(lines[1].len() - lines[1].trim_end().len(), 0);
    assert_eq!(lines[1].chars().count(), lines[2].chars().count(), "{text}");
    assert!(text.contains("best (highest): layers=2, iterations=4: 0.9000"), "{text}");

    let j = g.to_json();
    assert_eq!(j["cells"][1][0], serde_json::Value::Null);
    assert_eq!(j["cells"][0][0]["n"], 2);
    assert_eq!(j["cells"][0][0]["runs"], json!([1, 2]));
    assert_eq!(j["best"], json!({"row": "2", "column": "4"}));
    assert_eq!(j["rows_key"], "layers");
}

#[test]
fn best_values_and_smaller_is_better_metrics() {
    let (recs, ms) = sample();
    let best = grid(&recs, &ms, "layers", "iterations", Some("best:cell_acc")).unwrap();
    assert_eq!(best.metric, "best cell_acc");
    // Best accuracies 0.5 and 0.9: mean 0.7.
    assert!((best.cells[0][0].as_ref().unwrap().stat.mean - 0.7).abs() < 1e-12);
    let same = grid(&recs, &ms, "layers", "iterations", Some("best cell_acc")).unwrap();
    assert_eq!(same, best);
    let loss = grid(&recs, &ms, "layers", "iterations", Some("loss")).unwrap();
    assert_eq!((loss.higher_is_better, loss.best()), (Some(false), Some((0, 1))));
    // The lowest loss is the best: goodness 1; the highest is 0.
    assert_eq!(loss.goodness(0.5), 1.0);
    assert_eq!(loss.goodness(3.0), 0.0);
    // Equal cells have no best.
    let equal = vec![metrics([0.5, 0.5], 1.0); 4];
    let flat = grid(&recs, &equal, "layers", "iterations", None).unwrap();
    assert_eq!((flat.best(), flat.goodness(0.5)), (None, 1.0));
    assert!(!flat.to_text().contains("best"), "{}", flat.to_text());
    assert!(loss.to_text().contains("best (lowest)"));
}

#[test]
fn keys_resolve_by_full_name_and_axes_can_be_swapped() {
    let (recs, ms) = sample();
    let full = grid(&recs, &ms, "layer.layers", "layer.iterations", None).unwrap();
    assert_eq!(full, grid(&recs, &ms, "layers", "iterations", None).unwrap());
    let swapped = grid(&recs, &ms, "iterations", "layers", None).unwrap();
    assert_eq!(swapped.rows, vec!["2", "4"]);
    assert_eq!(swapped.cells[0][1], None);
    assert_eq!(swapped.cells[1][1].as_ref().unwrap().stat.mean, 0.9);
}

#[test]
fn numbers_are_ordered_numerically() {
    let recs = vec![record(1, 1, 16, 16, 0), record(2, 1, 8, 16, 0), record(3, 2, 16, 16, 0)];
    let ms = vec![metrics([0.1, 0.2], 1.0), metrics([0.1, 0.3], 1.0), metrics([0.1, 0.4], 1.0)];
    let g = grid(&recs, &ms, "layers", "iterations", None).unwrap();
    assert_eq!(g.columns, vec!["8", "16"]);
}

#[test]
fn runs_that_differ_in_another_key_are_refused_not_averaged() {
    let (mut recs, mut ms) = sample();
    recs.push(record(5, 1, 2, 32, 0));
    ms.push(metrics([0.0, 0.0], 1.0));
    let err = grid(&recs, &ms, "layers", "iterations", None).unwrap_err();
    assert_eq!(err, Refusal::Mixed(vec![("d".into(), vec!["16".into(), "32".into()])]));
    let text = err.to_string();
    assert!(text.contains("differ in `d` (16, 32)") && text.contains("--where d=16"), "{text}");
    let empty = Refusal::Mixed(vec![("eval_depths".into(), vec!["".into(), "2".into()])]);
    assert!(empty.to_string().contains("`eval_depths` (\"\", 2)"), "{empty}");
    // With that key on an axis, the same runs make a grid.
    assert!(grid(&recs, &ms, "d", "iterations", None).is_err(), "layers still varies");
    // Another layer is another configuration too.
    let (mut recs, ms) = sample();
    recs[3].layer.name = "transformer".into();
    match grid(&recs, &ms, "layers", "iterations", None).unwrap_err() {
        Refusal::Mixed(keys) => assert_eq!(keys[0].0, "layer"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_input_is_refused_with_a_clear_message() {
    let (recs, ms) = sample();
    let message = |rows: &str, cols: &str, metric: Option<&str>| match grid(&recs, &ms, rows, cols, metric) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("{rows},{cols} {metric:?} was accepted"),
    };
    let m = message("layres", "iterations", None);
    assert!(m.contains("unknown key `layres`") && m.contains("did you mean `layers`?"), "{m}");
    let m = message("layers", "layer.layers", None);
    assert!(m.contains("`layers` is given twice"), "{m}");
    let m = message("layers", "steps", None);
    assert!(m.contains("`steps` has one value") && m.contains("steps=4"), "{m}");
    let m = message("layers", "iterations", Some("cel_acc"));
    assert!(m.contains("no metric `cel_acc`") && m.contains("did you mean `cell_acc`?"), "{m}");
    assert!(parse_axes("layers").is_err() && parse_axes("a,b,c").is_err() && parse_axes("a,").is_err());
    assert_eq!(parse_axes(" layers , iterations ").unwrap(), ("layers".into(), "iterations".into()));
    let none: Vec<Vec<MetricRow>> = recs.iter().map(|_| vec![]).collect();
    let m = grid(&recs, &none, "layers", "iterations", Some("loss")).unwrap_err().to_string();
    assert!(m.contains("no run has a value of `final loss`"), "{m}");
    assert!(grid(&[], &[], "layers", "iterations", None).is_err());
}
