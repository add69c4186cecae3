use crate::data::{batch, SudokuData, CELLS};
use crate::model::score;
use datasets::sudoku::{generate, Difficulty};
use plugin_api::candle::{Device, Tensor};
use plugin_api::Task;
use plugin_testkit::{build_task_model, param_count};

#[test]
fn batches_mark_blanks_and_shift_targets() {
    let puzzles = generate(1, 2, Difficulty::Easy);
    let b = batch(puzzles.iter(), &Device::Cpu).unwrap();
    assert_eq!(b.inputs.dims(), &[2, CELLS]);
    let inputs: Vec<Vec<u32>> = b.inputs.to_vec2().unwrap();
    let targets: Vec<Vec<u32>> = b.targets.to_vec2().unwrap();
    let mask: Vec<Vec<f32>> = b.mask.unwrap().to_vec2().unwrap();
    for (i, p) in puzzles.iter().enumerate() {
        for c in 0..CELLS {
            assert_eq!(inputs[i][c], p.puzzle[c] as u32);
            assert_eq!(targets[i][c], p.solution[c] as u32 - 1);
            assert_eq!(mask[i][c], if p.puzzle[c] == 0 { 1.0 } else { 0.0 });
        }
    }
}

/// Logits that are right on every blank of board 0 and wrong on one blank of board 1.
#[test]
fn metrics_count_boards_and_blank_cells() {
    let puzzles = generate(2, 2, Difficulty::Easy);
    let b = batch(puzzles.iter(), &Device::Cpu).unwrap();
    let mut logits = vec![0f32; 2 * CELLS * 9];
    let mut wrong_cell = None;
    for (i, p) in puzzles.iter().enumerate() {
        for c in 0..CELLS {
            let mut digit = p.solution[c] as usize - 1;
            if i == 1 && p.puzzle[c] == 0 && wrong_cell.is_none() {
                digit = (digit + 1) % 9;
                wrong_cell = Some(c);
            }
            logits[(i * CELLS + c) * 9 + digit] = 10.0;
        }
    }
    let logits = Tensor::from_vec(logits, (2 * CELLS, 9), &Device::Cpu).unwrap();
    let means = score(&logits, &b).unwrap().means();
    let blanks: usize = puzzles.iter().map(|p| CELLS - p.givens()).sum();
    assert_eq!(means["board_acc"], 0.5);
    assert!((means["cell_acc"] - (blanks - 1) as f64 / blanks as f64).abs() < 1e-9);
    assert!(means["loss"] > 0.0);
}

/// notes-hyperset.md §8: the task's share of the 5,195,584-parameter Sudoku model.
#[test]
fn embedding_and_head_parameter_count() {
    let data = SudokuData::from_puzzles(generate(3, 4, Difficulty::Easy), generate(4, 2, Difficulty::Easy), 0);
    let (map, _model) = build_task_model(&data, 768);
    assert_eq!(param_count(&map), 10 * 768 + 81 * 768 + 768 + 768 * 9);
}

#[test]
fn training_batches_depend_only_on_seed_and_step() {
    let data = SudokuData::from_puzzles(generate(3, 50, Difficulty::Easy), vec![], 7);
    let a: Vec<Vec<u32>> = data.train_batch(5, 4, &Device::Cpu).unwrap().inputs.to_vec2().unwrap();
    let b: Vec<Vec<u32>> = data.train_batch(5, 4, &Device::Cpu).unwrap().inputs.to_vec2().unwrap();
    let c: Vec<Vec<u32>> = data.train_batch(6, 4, &Device::Cpu).unwrap().inputs.to_vec2().unwrap();
    assert_eq!(a, b);
    assert_ne!(a, c);
}

/// The headline (first declared metric) is cell_acc: board_acc is 0 for every small run, so
/// ranking runs by it would rank nothing.
#[test]
fn cell_acc_is_the_headline() {
    let data = SudokuData::from_puzzles(generate(3, 4, Difficulty::Easy), generate(4, 2, Difficulty::Easy), 0);
    let names: Vec<String> = data.info().unwrap().metrics.into_iter().map(|m| m.name).collect();
    assert_eq!(names, ["cell_acc", "board_acc", "loss"]);
}

/// Embedding dropout (the published models': 0.1): training only, inverted (kept entries
/// scaled by 1 / (1 - p)), the same mask for the same boards and seed, another for another seed.
#[test]
fn embedding_dropout_is_seeded_and_training_only() {
    use crate::model::{ModelOptions, SudokuModel};
    use plugin_api::candle::DType;
    use plugin_api::candle_nn::{VarBuilder, VarMap};
    use plugin_api::TaskModel;
    let puzzles = generate(5, 2, Difficulty::Easy);
    let b = batch(puzzles.iter(), &Device::Cpu).unwrap();
    let model = |dropout: f64, seed: u64| {
        let map = VarMap::new();
        let vb = VarBuilder::from_varmap(&map, DType::F32, &Device::Cpu);
        let options = ModelOptions { init_std: 1.0, factored_positions: false, norm_eps: 1e-6, dropout, seed };
        let model = SudokuModel::new(vb, 8, options).unwrap();
        (map, model)
    };
    // The same parameters in every model: copied from the first one.
    let (map, plain) = model(0.0, 1);
    let (other_map, dropped) = model(0.5, 1);
    let (third_map, reseeded) = model(0.5, 2);
    for target in [&other_map, &third_map] {
        for (name, var) in map.data().lock().unwrap().iter() {
            target.data().lock().unwrap()[name].set(var.as_tensor()).unwrap();
        }
    }
    let values = |t: Tensor| -> Vec<f32> { t.flatten_all().unwrap().to_vec1().unwrap() };
    let reference = values(plain.embed(&b, true).unwrap());
    assert_eq!(values(dropped.embed(&b, false).unwrap()), reference, "evaluation never drops");
    let first = values(dropped.embed(&b, true).unwrap());
    assert_eq!(first, values(dropped.embed(&b, true).unwrap()), "same boards and seed, same mask");
    assert_ne!(first, values(reseeded.embed(&b, true).unwrap()), "another seed, another mask");
    let zeros = first.iter().filter(|v| **v == 0.0).count() as f64 / first.len() as f64;
    assert!((zeros - 0.5).abs() < 0.05, "dropped share {zeros}");
    for (kept, original) in first.iter().zip(&reference).filter(|(v, _)| **v != 0.0) {
        assert!((kept - 2.0 * original).abs() <= 1e-6 * original.abs().max(1.0));
    }
}
