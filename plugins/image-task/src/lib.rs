//! Image classification as a task plugin (seed 000 §5.2; notes-hyperset.md §3.2 and §9).
//!
//! An image of `32 × 32` pixels is cut into a grid of `patches × patches` patches (the seeds'
//! "patch size 8" for CIFAR is this grid: 8 × 8 patches of 4 × 4 pixels, 65 tokens with the
//! `[CLS]` token). Each patch goes through `LayerNorm -> Linear -> LayerNorm`, a learnable `[CLS]`
//! token is put first and 1-D sinusoidal positions are added; the head is
//! `LayerNorm -> Linear` on the `[CLS]` output, trained with label-smoothed cross-entropy.
//! Metrics: top-1 accuracy (headline), the loss, and the plain cross-entropy `nll`.
//!
//! Data: a generated shapes set (the default, no files needed), CIFAR-10/100 (binary
//! version), MNIST or Fashion-MNIST (IDX files). MNIST-format images (28 × 28 gray) are
//! zero-padded to 32 × 32 so every data set takes the same patch grids. Training images are
//! randomly cropped from a zero-padded copy and flipped (the code's CIFAR augmentation;
//! AutoAugment is not reproduced), deterministically from the run seed and the step.
//!
//! Choices where the seeds are silent: pixel values are scaled to [0, 1] without
//! per-channel normalisation (the first LayerNorm normalises each patch anyway); the
//! `[CLS]` token takes sinusoidal position 0; `flip=auto` flips everything but MNIST digits.

mod data;
mod model;

use data::{ImageTask, Options};
use plugin_api::{export_plugin, Declaration, ParamSpec, Result};

fn params() -> Vec<ParamSpec> {
    vec![
        ParamSpec::choice(
            "dataset",
            "shapes",
            &datasets::images::DATASET_NAMES,
            "images: generated 32x32 shapes (10 classes, no files), or files in data_dir (idx: any IDX image set)",
        ),
        ParamSpec::text("data_dir", "", "folder of the dataset's files (CIFAR binary batches or IDX files)"),
        ParamSpec::choice("cifar100_labels", "fine", &["fine", "coarse"], "CIFAR-100 classes: 100 fine or 20 coarse"),
        ParamSpec::int(
            "patches",
            8,
            1,
            32,
            "patches per image side (the seeds' CIFAR 'patch size' 8: 8x8 grid, 65 tokens)",
        ),
        ParamSpec::int("train_images", 20_000, 1, 10_000_000, "generated training images (dataset=shapes)"),
        ParamSpec::int("test_images", 2_000, 1, 1_000_000, "generated test images (dataset=shapes)"),
        ParamSpec::int(
            "shapes_seed",
            1,
            0,
            i64::MAX,
            "seed of the generated images, shared by all runs so they compare (dataset=shapes)",
        ),
        ParamSpec::int(
            "crop_padding",
            4,
            0,
            16,
            "training crops from the image zero-padded by this many pixels (0: none)",
        ),
        ParamSpec::choice(
            "flip",
            "auto",
            &["auto", "true", "false"],
            "random horizontal flips of training images; auto: all data sets but MNIST digits",
        ),
        ParamSpec::float(
            "label_smoothing",
            0.1,
            0.0,
            0.99,
            "label smoothing of the cross-entropy (the seeds' code: 0.1)",
        ),
    ]
}

fn declare() -> Result<Declaration> {
    Ok(Declaration::task(
        "image",
        env!("CARGO_PKG_VERSION"),
        "Image classification: patch tokens and a [CLS] token; generated shapes, CIFAR-10/100 or (Fashion-)MNIST",
        params(),
        ImageTask::new,
    )
    .with_validator(Options::validate)
    .with_footprint(ImageTask::footprint))
}

export_plugin!(declare);

#[cfg(test)]
mod tests;
