//! Parameter counts of the paper's configurations (notes-hyperset.md §4 and §8).
//!
//! The image-classification figures include the task's embedding and head, which a task
//! plugin owns; their share is computed here from the notes' description of the authors'
//! model (§9): patch embedding `LayerNorm(f) -> Linear(f, d) -> LayerNorm(d)` with
//! `f = 3 x 14 x 14` (a 16 x 16 grid of 14-pixel patches of a 224-pixel image, §3.2), a
//! learnable [CLS] token, parameter-free sinusoidal positions, and a `LayerNorm -> Linear`
//! head on the [CLS] output. The layer side is the plugin's: `W`, `D`, the Q/K/V and
//! feedforward RMSNorm gains, and the `normed` step network with its input RMSNorm.

use crate::test_support::{build, config, s};
use plugin_api::candle::DType;
use plugin_api::Value;
use plugin_testkit::param_count;

/// Features of one patch: 3 channels of `(image / grid)^2` pixels.
fn patch_features(image: usize, grid: usize) -> usize {
    3 * (image / grid).pow(2)
}

/// The task's share of an image-classification model (embedding, [CLS] token, head).
fn classification_task_params(features: usize, d: usize, classes: usize) -> usize {
    let layer_norm = |n: usize| 2 * n;
    let embedding = layer_norm(features) + features * d + d + layer_norm(d);
    let cls_token = d;
    let head = layer_norm(d) + d * classes + classes;
    embedding + cls_token + head
}

/// The layer of the image-classification model: one layer, 12 iterations, heads of width
/// 64, M = d, step sizes conditioned on X_t by the `normed` network, separate Q/K/V gains,
/// GELU feedforward (the last changes no count).
fn classification_layer(d: usize, extra: &[(&str, Value)]) -> usize {
    let mut pairs = vec![
        ("d", Value::Int(d as i64)),
        ("heads", Value::Int(d as i64 / 64)),
        ("iterations", Value::Int(12)),
        ("ff_ratio", Value::Int(1)),
        ("time_dim", Value::Int(512)),
        ("step_cond", s("xt")),
        ("step_net", s("normed")),
        ("qkv_gains", Value::Bool(true)),
        ("feedforward", s("gelu")),
    ];
    pairs.extend(extra.iter().cloned());
    let (map, _) = build(&config(&pairs), DType::F32);
    param_count(&map)
}

/// Millions with two decimals, as the paper's tables print them.
fn millions(n: usize) -> String {
    format!("{:.2}", n as f64 / 1e6)
}

const IMAGENET_FEATURES: (usize, usize) = (224, 16);

/// notes-hyperset.md §8 and ICLR Tables 16-17: at d = 384 on ImageNet-1K the model has
/// 1,551,808 parameters, and 909,760 with fixed step sizes (no step network).
#[test]
fn imagenet_1k_width_384_has_1_551_808_and_909_760_without_the_step_network() {
    let task = classification_task_params(patch_features(IMAGENET_FEATURES.0, IMAGENET_FEATURES.1), 384, 1000);
    assert_eq!(classification_layer(384, &[]) + task, 1_551_808);
    let fixed = [("step_sizes", s("fixed")), ("step_net", s("plain")), ("step_cond", s("x0"))];
    assert_eq!(classification_layer(384, &fixed) + task, 909_760);
}

/// notes-hyperset.md §8: at d = 512 the ImageNet-100 model has 1,934,268 parameters
/// (Table 5: 1.93M) and the ImageNet-1K one 2,395,968 (Table 1: 2.39M).
#[test]
fn imagenet_width_512_has_1_934_268_on_100_classes_and_2_395_968_on_1000() {
    let features = patch_features(IMAGENET_FEATURES.0, IMAGENET_FEATURES.1);
    let layer = classification_layer(512, &[]);
    assert_eq!(layer + classification_task_params(features, 512, 100), 1_934_268);
    assert_eq!(layer + classification_task_params(features, 512, 1000), 2_395_968);
}

/// ICLR Table 5: depth-wise LoRA of rank r on W and D at each of the 12 iterations adds
/// 24,576 r parameters at d = M = 512 (notes-hyperset.md §2.3): 1.93M -> 2.03 / 2.13 /
/// 2.33 / 2.72M for r = 4 / 8 / 16 / 32 on ImageNet-100.
#[test]
fn depthwise_lora_counts_match_table_5() {
    let task = classification_task_params(patch_features(IMAGENET_FEATURES.0, IMAGENET_FEATURES.1), 512, 100);
    let base = classification_layer(512, &[]) + task;
    assert_eq!(millions(base), "1.93");
    for (rank, table) in [(4, "2.03"), (8, "2.13"), (16, "2.33"), (32, "2.72")] {
        let total = classification_layer(512, &[("lora_rank", Value::Int(rank))]) + task;
        assert_eq!(total, base + 24_576 * rank as usize, "rank {rank}");
        assert_eq!(millions(total), table, "rank {rank}: {total}");
    }
}

/// ICLR Table 2 (12-layer non-recurrent models, counted on ImageNet-1K): 8.17M at d = 512
/// and 17.56M at d = 768, with one step network shared by the 12 layers; and ICLR Table 1:
/// 3.40M for the one-layer model at d = 640.
#[test]
fn twelve_distinct_layers_and_width_640_match_tables_1_and_2() {
    let features = patch_features(IMAGENET_FEATURES.0, IMAGENET_FEATURES.1);
    for (d, table) in [(512, "8.17"), (768, "17.56")] {
        let total =
            classification_layer(d, &[("layers", Value::Int(12))]) + classification_task_params(features, d, 1000);
        assert_eq!(millions(total), table, "d = {d}: {total}");
    }
    let total = classification_layer(640, &[]) + classification_task_params(features, 640, 1000);
    assert_eq!(millions(total), "3.40", "{total}");
}

/// notes-hyperset.md §8: the masked-image-modelling model (d = 768, 12 heads, M = d, the
/// step network without time MLP, one shared head RMSNorm) has 3,937,856 parameters, and
/// 8.07M with 24 iterations and M = 8d (ICLR Table 3). The task's share: token embedding
/// 1025 x 768, head RMSNorm 768 and Linear(768 -> 1024) with bias.
#[test]
fn masked_image_modelling_has_3_937_856_parameters() {
    let task = 1025 * 768 + 768 + 768 * 1024 + 1024;
    let layer = |iterations: i64, ff_ratio: i64| {
        let cfg = config(&[
            ("d", Value::Int(768)),
            ("heads", Value::Int(12)),
            ("iterations", Value::Int(iterations)),
            ("ff_ratio", Value::Int(ff_ratio)),
            ("time_dim", Value::Int(768)),
            ("step_net", s("direct")),
        ]);
        param_count(&build(&cfg, DType::F32).0)
    };
    assert_eq!(layer(12, 1) + task, 3_937_856);
    assert_eq!(millions(layer(24, 8) + task), "8.07");
}
