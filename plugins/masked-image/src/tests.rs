use crate::codebook::Codebook;
use crate::data::{masked_positions, MaskedImageTask, Options, EVAL_RATIOS};
use crate::model::{grid_positions, score};
use crate::params;
use crate::quality::{psnr, ssim, PSNR_CAP};
use datasets::images::shapes::{self, Split};
use datasets::images::TrainTest;
use plugin_api::candle::{DType, Device, Tensor};
use plugin_api::{Batch, Config, Task, TaskModel};
use plugin_testkit::{
    build_task_model, config_from_text, evaluate_all, param_count, task_gradient_sizes, train_on_task, SeededVars,
    TinyBlock,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The task's defaults with `overrides`, each checked against the schema as the host does.
fn config(overrides: &[(&str, &str)]) -> Config {
    config_from_text(&params(), overrides)
}

/// A small task on generated shapes: `train` and `test` images, a `codes`-entry codebook.
fn small_task(train: usize, test: usize, codes: usize, seed: u64) -> MaskedImageTask {
    let data =
        TrainTest { train: shapes::generate(1, Split::Train, train), test: shapes::generate(1, Split::Test, test) };
    let options =
        Options::from_config(&config(&[("codebook", &codes.to_string()), ("kmeans_iterations", "4")])).unwrap();
    MaskedImageTask::from_images(data, seed, &options).unwrap()
}

#[test]
fn kmeans_finds_separated_clusters_and_codes_round_trip() {
    // Three tight clusters in 2-D around (0, 0), (5, 5) and (-5, 5).
    let centres = [(0f32, 0f32), (5.0, 5.0), (-5.0, 5.0)];
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut points = Vec::new();
    for i in 0..300 {
        let (x, y) = centres[i % 3];
        points.extend([x + rng.random_range(-0.3..0.3), y + rng.random_range(-0.3..0.3)]);
    }
    let book = Codebook::fit(&points, 2, 3, 10, 7).unwrap();
    assert_eq!(book, Codebook::fit(&points, 2, 3, 10, 7).unwrap(), "the fit is deterministic");
    for (x, y) in centres {
        let nearest = (0..3)
            .map(|k| {
                let c = book.centroid(k);
                (c[0] - x).powi(2) + (c[1] - y).powi(2)
            })
            .fold(f32::MAX, f32::min);
        assert!(nearest < 0.05, "no centroid near ({x}, {y})");
    }
    let codes = book.encode(&points).unwrap();
    assert!((0..300).all(|i| codes[i] == codes[i % 3]), "each cluster has one code");
    // A codebook of the points themselves reproduces them exactly.
    let exact = Codebook::from_centroids(points[..20].to_vec(), 2);
    assert_eq!(exact.decode(&exact.encode(&points[..20]).unwrap()), points[..20].to_vec());
    assert!(Codebook::fit(&points[..4], 2, 3, 1, 0).is_err(), "two points cannot make three codes");
}

#[test]
fn psnr_and_ssim() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let image: Vec<f32> = (0..3 * 32 * 32).map(|_| rng.random_range(0.0..1.0)).collect();
    assert_eq!(psnr(&image, &image), PSNR_CAP);
    let shifted: Vec<f32> = image.iter().map(|v| v + 0.1).collect();
    assert!((psnr(&image, &shifted) - 20.0).abs() < 1e-4, "an error of 0.1 everywhere is 20 dB");
    assert!((ssim(&image, &image, 3, 32) - 1.0).abs() < 1e-12);
    let noisy: Vec<f32> = image.iter().map(|v| (v + rng.random_range(-0.2..0.2)).clamp(0.0, 1.0)).collect();
    let (s, t) = (ssim(&image, &noisy, 3, 32), ssim(&noisy, &image, 3, 32));
    assert!(s < 0.95 && s > 0.0, "ssim of a noisy copy {s}");
    assert!((s - t).abs() < 1e-12, "ssim is symmetric");
    // A constant image against another constant: only the luminance term differs.
    let (a, b) = (vec![0.5f32; 3 * 32 * 32], vec![0.25f32; 3 * 32 * 32]);
    let luminance = (2.0 * 0.5 * 0.25 + 1e-4) / (0.25 + 0.0625 + 1e-4);
    assert!((ssim(&a, &b, 3, 32) - luminance).abs() < 1e-6);
}

#[test]
fn positions_encode_row_then_column() {
    let p: Vec<Vec<f32>> = grid_positions(3, 8, DType::F32, &Device::Cpu).unwrap().to_vec2().unwrap();
    assert_eq!(p.len(), 9);
    // Cell 5 is row 1, column 2: sin(1 * w_0) first, sin(2 * w_0) at the column half.
    assert!((p[5][0] - 1f32.sin()).abs() < 1e-6);
    assert!((p[5][4] - 2f32.sin()).abs() < 1e-6);
    assert_eq!(p[0][2], 1.0); // cos(0)
    let odd: Vec<Vec<f32>> = grid_positions(2, 7, DType::F32, &Device::Cpu).unwrap().to_vec2().unwrap();
    assert_eq!(odd[3].len(), 7);
}

/// notes-hyperset.md §8: the MIM model (d = 768, K = 1024) has the embedding 1025·768 and
/// the head RMSNorm + Linear(768 -> 1024 with bias) in its 3,937,856 parameters.
#[test]
fn embedding_and_head_parameter_count() {
    let (map, _) = build_task_model(&small_task(20, 4, 1024, 0), 768);
    let total = param_count(&map);
    assert_eq!(total, 1025 * 768 + 768 + 768 * 1024 + 1024);
    assert_eq!(total, 1_575_424);
}

#[test]
fn training_masks_hide_up_to_the_maximum_ratio() {
    let task = small_task(30, 4, 32, 9);
    let b = task.train_batch(4, 64, &Device::Cpu).unwrap();
    assert_eq!(view(&b), view(&task.train_batch(4, 64, &Device::Cpu).unwrap()));
    let inputs: Vec<Vec<u32>> = b.inputs.to_vec2().unwrap();
    let targets: Vec<Vec<u32>> = b.targets.to_vec2().unwrap();
    let mask: Vec<Vec<f32>> = b.mask.as_ref().unwrap().to_vec2().unwrap();
    let mut counts = Vec::new();
    for r in 0..64 {
        let hidden = mask[r].iter().filter(|&&m| m > 0.0).count();
        assert!((1..=26).contains(&hidden), "{hidden} of 64 hidden (ratio at most 0.4)");
        counts.push(hidden);
        for i in 0..64 {
            let expected = if mask[r][i] > 0.0 { 32 } else { targets[r][i] };
            assert_eq!(inputs[r][i], expected);
            assert!(targets[r][i] < 32);
        }
    }
    let distinct: std::collections::BTreeSet<_> = counts.iter().collect();
    assert!(distinct.len() > 10, "ratios vary: {counts:?}");
    let other: Vec<Vec<f32>> = task.train_batch(5, 64, &Device::Cpu).unwrap().mask.unwrap().to_vec2().unwrap();
    assert_ne!(mask, other);
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    assert_eq!(masked_positions(&mut rng, 64, 0.0).len(), 1);
    assert_eq!(masked_positions(&mut rng, 64, 1.0).len(), 64);
}

/// A comparable copy of a batch's tensors: inputs, targets, mask.
#[derive(Debug, PartialEq)]
struct BatchView {
    inputs: Vec<Vec<u32>>,
    targets: Vec<Vec<u32>>,
    mask: Vec<Vec<f32>>,
}

fn view(b: &Batch) -> BatchView {
    BatchView {
        inputs: b.inputs.to_vec2().unwrap(),
        targets: b.targets.to_vec2().unwrap(),
        mask: b.mask.as_ref().unwrap().to_vec2().unwrap(),
    }
}

#[test]
fn evaluation_masks_are_fixed_at_ten_to_forty_percent() {
    let task = small_task(20, 10, 32, 0);
    let batches = task.eval_batches(10, 5, &Device::Cpu).unwrap();
    // Two images (8 rows) per batch of at most 10 rows: 2 + 2 + 1 images.
    assert_eq!(batches.iter().map(|b| b.size).collect::<Vec<_>>(), vec![8, 8, 4]);
    let again = task.eval_batches(10, 5, &Device::Cpu).unwrap();
    for (a, b) in batches.iter().zip(&again) {
        assert_eq!(view(a), view(b));
    }
    for batch in &batches {
        let mask: Vec<Vec<f32>> = batch.mask.as_ref().unwrap().to_vec2().unwrap();
        for (r, row) in mask.iter().enumerate() {
            let hidden = row.iter().filter(|&&m| m > 0.0).count();
            assert_eq!(hidden, (EVAL_RATIOS[r % 4] * 64.0).round() as usize);
        }
    }
}

#[test]
fn perfect_and_wrong_predictions_score_as_expected() {
    let task = small_task(20, 4, 32, 0);
    let batch = task.eval_batches(8, 2, &Device::Cpu).unwrap().remove(0);
    let targets: Vec<u32> = batch.targets.flatten_all().unwrap().to_vec1().unwrap();
    let one_hot = |shift: u32| {
        let mut logits = vec![0f32; targets.len() * 32];
        for (i, &t) in targets.iter().enumerate() {
            logits[i * 32 + ((t + shift) % 32) as usize] = 20.0;
        }
        Tensor::from_vec(logits, (targets.len(), 32), &Device::Cpu).unwrap()
    };
    let perfect = score(&one_hot(0), &batch, task.grid()).unwrap().means();
    for percent in [10, 20, 30, 40] {
        assert_eq!(perfect[&format!("acc_{percent}")], 1.0);
        assert_eq!(perfect[&format!("psnr_{percent}")], PSNR_CAP);
        assert!((perfect[&format!("ssim_{percent}")] - 1.0).abs() < 1e-9);
    }
    assert!(perfect["loss"] < 1e-6);
    let wrong = score(&one_hot(1), &batch, task.grid()).unwrap().means();
    assert_eq!(wrong["acc_40"], 0.0);
    assert!(wrong["psnr_40"] < wrong["psnr_10"], "more wrong codes, lower PSNR");
    assert!(wrong["ssim_40"] < 1.0 && wrong["loss"] > 10.0);
}

#[test]
fn the_validator_names_the_problem_and_the_fix() {
    let refused = |overrides: &[(&str, &str)]| Options::validate(&config(overrides)).unwrap_err().to_string();
    let text = refused(&[("patches", "5")]);
    assert!(text.contains("patches=5") && text.contains("2, 4, 8, 16, 32"), "{text}");
    let text = refused(&[("train_images", "2"), ("codebook", "256")]);
    assert!(text.contains("codebook=256") && text.contains("train_images"), "{text}");
    let text = refused(&[("dataset", "mnist")]);
    assert!(text.contains("data_dir") && text.contains("t10k-images-idx3-ubyte"), "{text}");
    assert!(Options::validate(&config(&[])).is_ok());
}

#[test]
fn every_parameter_receives_a_gradient() {
    let task = small_task(20, 4, 32, 0);
    let sizes = task_gradient_sizes(&task, 16, 4, |x0| x0.broadcast_add(&x0.mean_keepdim(1).unwrap()).unwrap());
    assert_eq!(sizes.len(), 4);
    for (name, size) in sizes {
        assert!(size > 0.0, "no gradient for {name}");
    }
}

/// The embedding, head and masked loss train: a tiny model (width 32, one attention block)
/// trained for 100 steps of 32 images on 300 generated images fills in 40% hidden codes of
/// 50 new images far better than always guessing the most frequent code (58% against 9%
/// with these seeds).
#[test]
fn a_tiny_model_learns_to_fill_in_codes() {
    let dev = Device::Cpu;
    let task = small_task(300, 50, 32, 3);
    let vars = SeededVars::new(5);
    let vb = vars.var_builder();
    let model = task.build_model(vb.pp("task"), 32).unwrap();
    let layer = TinyBlock::new(&vb.pp("layer"), 32);
    let eval = task.eval_batches(100, 50, &dev).unwrap();
    let through_layer = |h: &Tensor, _: &Batch| layer.forward(h);
    let accuracy = |model: &dyn TaskModel| evaluate_all(model, &eval, through_layer).means()["acc_40"];
    // The most frequent code of the test images, as a guess for every hidden one.
    let mut frequency = [0usize; 32];
    let mut hidden = 0usize;
    for batch in &eval {
        let targets: Vec<u32> = batch.targets.flatten_all().unwrap().to_vec1().unwrap();
        let mask: Vec<f32> = batch.mask.as_ref().unwrap().flatten_all().unwrap().to_vec1().unwrap();
        for (t, m) in targets.iter().zip(&mask) {
            if *m > 0.0 {
                frequency[*t as usize] += 1;
                hidden += 1;
            }
        }
    }
    let majority = *frequency.iter().max().unwrap() as f64 / hidden as f64;
    let before = accuracy(&*model);
    train_on_task(&task, &*model, through_layer, vars.all(), 3e-3, 100, 32);
    let after = accuracy(&*model);
    assert!(before < majority, "acc_40 {before:.3} before training");
    assert!(
        after > majority + 0.2,
        "acc_40 {after:.3} after training (before {before:.3}, majority guess {majority:.3})"
    );
}
