//! Masked image modelling as a task plugin (seed 000 §5.3; notes-hyperset.md §3.3).
//!
//! Images are tokenized into a `patches × patches` grid of codes from a k-means codebook of
//! patches (a stand-in for the seeds' pretrained VQGAN, see [`codebook`]). Training hides a
//! fraction of the codes drawn from `U[0, max_mask_ratio]` (the seeds' `U[0, 0.4]`) behind a
//! learnable `[MASK]` token and trains on cross-entropy at the hidden positions only.
//! Evaluation hides 10, 20, 30 and 40% of each test image's codes, predicts them with
//! MaskGIT's iterative decoding (the seeds': 24 steps, temperature 1; [`decoding`]; one
//! step is the one-pass argmax) and reports, per ratio,
//! the masked-code accuracy and the PSNR and SSIM of the decoded image against the image of
//! the true codes (so the tokenizer's own error is left out). Headline: `acc_40`.
//!
//! Data: the image task's sources (generated shapes, CIFAR-10/100, MNIST, Fashion-MNIST).

pub mod codebook;
mod data;
pub mod decoding;
mod model;
pub mod quality;

use data::{MaskedImageTask, Options};
use datasets::images::DATASET_NAMES;
use plugin_api::{export_plugin, Declaration, ParamSpec, Result};

fn params() -> Vec<ParamSpec> {
    vec![
        ParamSpec::choice("dataset", "shapes", &DATASET_NAMES, "images: generated 32x32 shapes, or files in data_dir"),
        ParamSpec::text("data_dir", "", "folder of the dataset's files (CIFAR binary batches or MNIST IDX files)"),
        ParamSpec::int("patches", 8, 2, 32, "codes per image side: 8 gives 64 codes of 4x4-pixel patches"),
        ParamSpec::int("codebook", 256, 2, 8192, "codebook size K (the seeds' VQGAN has 1024)"),
        ParamSpec::int("kmeans_iterations", 10, 0, 1000, "Lloyd iterations of the codebook fit"),
        ParamSpec::float(
            "max_mask_ratio",
            0.4,
            0.0,
            1.0,
            "training hides a fraction of codes drawn from U[0, max_mask_ratio] (the seeds': 0.4)",
        ),
        ParamSpec::int("train_images", 20_000, 1, 10_000_000, "generated training images (dataset=shapes)"),
        ParamSpec::int("test_images", 2_000, 1, 1_000_000, "generated test images (dataset=shapes)"),
        ParamSpec::int("shapes_seed", 1, 0, i64::MAX, "seed of the generated images (dataset=shapes)"),
        ParamSpec::float("init_std", 0.02, 0.0, 10.0, "standard deviation of the N(0, s^2) init of embedding and head"),
        ParamSpec::int(
            "decode_steps",
            24,
            1,
            256,
            "evaluation by MaskGIT's iterative decoding in this many steps (the seeds': 24); 1 = one pass, argmax",
        ),
        ParamSpec::float(
            "decode_temperature",
            1.0,
            0.0,
            10.0,
            "sampling temperature of the decoding (the seeds': 1); 0 = argmax without noise",
        ),
    ]
}

fn declare() -> Result<Declaration> {
    Ok(Declaration::task(
        "masked-image",
        env!("CARGO_PKG_VERSION"),
        "Masked image modelling: predict hidden k-means patch codes; accuracy, PSNR and SSIM at 10-40% masking",
        params(),
        MaskedImageTask::new,
    )
    .with_validator(Options::validate)
    .with_footprint(MaskedImageTask::footprint))
}

export_plugin!(declare);

#[cfg(test)]
mod tests;
