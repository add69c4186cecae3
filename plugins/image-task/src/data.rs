//! The images of a run, their augmentation and their cutting into patch tokens.

use crate::model::{ImageModel, ModelShape};
use datasets::images::{patchify, CropFlip, ImageDataError, ImageSet, ImageSource, TrainTest};
use datasets::seeding::item_seed;
use plugin_api::candle::{Device, Tensor};
use plugin_api::candle_nn::VarBuilder;
use plugin_api::{config_error, Batch, Config, Footprint, MetricSpec, PluginError, Result, Task, TaskInfo, TaskModel};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Side of every image the model sees; MNIST's 28×28 digits are padded to it.
pub const IMAGE_SIDE: usize = 32;

/// The task's options, parsed and checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// The data.
    pub source: ImageSource,
    /// Patches per image side.
    pub patches: usize,
    /// Training augmentation.
    pub augment: CropFlip,
    /// Label smoothing `e` of the loss.
    pub label_smoothing: f64,
}

impl Options {
    /// Reads the options and refuses inconsistent ones, with the fix in the message.
    pub fn from_config(cfg: &Config) -> Result<Self> {
        let source = ImageSource::from_options(
            cfg.str("dataset")?,
            cfg.str("data_dir")?,
            cfg.str("cifar100_labels")?,
            cfg.i64("shapes_seed")? as u64,
            cfg.usize("train_images")?,
            cfg.usize("test_images")?,
        )
        .map_err(config_error)?;
        let patches = cfg.usize("patches")?;
        if patches == 0 || !IMAGE_SIDE.is_multiple_of(patches) {
            let divisors: Vec<String> =
                (1..=IMAGE_SIDE).filter(|&k| IMAGE_SIDE.is_multiple_of(k)).map(|k| k.to_string()).collect();
            return Err(config_error(format!(
                "patches={patches} does not divide the {IMAGE_SIDE}-pixel image side (MNIST's 28×28 images are padded \
                 to {IMAGE_SIDE}×{IMAGE_SIDE}); choose one of {}",
                divisors.join(", ")
            )));
        }
        let flip = match cfg.str("flip")? {
            "true" => true,
            "false" => false,
            // Mirrored digits are other symbols (or none); clothes, shapes and CIFAR's
            // objects keep their class.
            _ => !source.is_digits(),
        };
        Ok(Options {
            source,
            patches,
            augment: CropFlip { padding: cfg.usize("crop_padding")?, flip },
            label_smoothing: cfg.f64("label_smoothing")?,
        })
    }

    /// Checks the options and, for file data sets, the files' headers and sizes, so that a
    /// bad path or file is reported before a run is stored.
    pub fn validate(cfg: &Config) -> Result<()> {
        let options = Options::from_config(cfg)?;
        options.source.check().map_err(|e| config_error(format!("data_dir: {e}")))
    }
}

fn data_error(e: ImageDataError) -> PluginError {
    PluginError::Data(e.to_string())
}

/// The image classification task of a run.
pub struct ImageTask {
    train: ImageSet,
    test: ImageSet,
    seed: u64,
    patches: usize,
    augment: CropFlip,
    label_smoothing: f64,
}

impl ImageTask {
    /// Generates or reads the images named by `cfg`; `seed` (the run's) drives batches and
    /// augmentation only.
    pub fn new(cfg: &Config, seed: u64) -> Result<Self> {
        let options = Options::from_config(cfg)?;
        let data = options.source.load().map_err(data_error)?;
        Self::from_images(data, seed, &options)
    }

    /// The task on given images (brought to [`IMAGE_SIDE`] by zero padding if smaller).
    pub fn from_images(data: TrainTest, seed: u64, options: &Options) -> Result<Self> {
        let fit = |set: ImageSet| set.fit_to(IMAGE_SIDE).map_err(PluginError::Data);
        let (train, test) = (fit(data.train)?, fit(data.test)?);
        if train.is_empty() || test.is_empty() {
            return Err(PluginError::Data("the training or the test split holds no image".into()));
        }
        Ok(ImageTask {
            train,
            test,
            seed,
            patches: options.patches,
            augment: options.augment,
            label_smoothing: options.label_smoothing,
        })
    }

    /// The sizes of the model this task needs.
    pub fn model_shape(&self) -> ModelShape {
        ModelShape::of(self.train.channels, self.patches, self.train.classes)
    }

    /// The model at `width` built into `vb`, the tokens and the images' bytes, from the
    /// configuration alone (channels and classes at the data set's most).
    pub fn footprint(cfg: &Config, vb: VarBuilder, width: usize) -> Result<Footprint> {
        let options = Options::from_config(cfg)?;
        let bounds = options.source.bounds();
        let shape = ModelShape::of(bounds.channels, options.patches, bounds.classes);
        ImageModel::new(vb, shape, width, options.label_smoothing)?;
        Ok(Footprint { seq_len: options.patches * options.patches + 1, data_bytes: bounds.bytes(IMAGE_SIDE) })
    }

    /// Images (with their labels) as a batch of patch tokens.
    fn batch<'a>(
        &self,
        images: impl ExactSizeIterator<Item = (std::borrow::Cow<'a, [u8]>, u16)>,
        device: &Device,
    ) -> Result<Batch> {
        let size = images.len();
        let shape = self.model_shape();
        let mut inputs = Vec::with_capacity(size * shape.patch_tokens * shape.patch_features);
        let mut targets = Vec::with_capacity(size);
        for (image, label) in images {
            patchify(&image, self.train.channels, IMAGE_SIDE, self.patches, &mut inputs);
            targets.push(label as u32);
        }
        Ok(Batch {
            inputs: Tensor::from_vec(inputs, (size, shape.patch_tokens, shape.patch_features), device)?,
            targets: Tensor::from_vec(targets, size, device)?,
            mask: None,
            size,
        })
    }
}

impl Task for ImageTask {
    fn info(&self) -> Result<TaskInfo> {
        Ok(TaskInfo {
            seq_len: self.patches * self.patches + 1,
            causal: false,
            metrics: vec![MetricSpec::higher("top1"), MetricSpec::lower("loss"), MetricSpec::lower("nll")],
            train_examples: Some(self.train.len()),
            eval_examples: self.test.len(),
        })
    }

    /// Images drawn with replacement by a ChaCha8 RNG seeded from (run seed, step), each
    /// cropped and flipped by the same RNG: the batch depends on nothing else.
    fn train_batch(&self, step: u64, batch_size: usize, device: &Device) -> Result<Batch> {
        let mut rng = ChaCha8Rng::seed_from_u64(item_seed(self.seed, step));
        let set = &self.train;
        let picked: Vec<_> = (0..batch_size)
            .map(|_| {
                let index = rng.random_range(0..set.len());
                let image = if self.augment.is_identity() {
                    set.image(index).into()
                } else {
                    self.augment.apply(set.image(index), set.channels, set.height, set.width, &mut rng).into()
                };
                (image, set.labels[index])
            })
            .collect();
        self.batch(picked.into_iter(), device)
    }

    fn eval_batches(&self, batch_size: usize, max_examples: usize, device: &Device) -> Result<Vec<Batch>> {
        let n = self.test.len().min(max_examples);
        let indices: Vec<usize> = (0..n).collect();
        indices
            .chunks(batch_size.max(1))
            .map(|chunk| self.batch(chunk.iter().map(|&i| (self.test.image(i).into(), self.test.labels[i])), device))
            .collect()
    }

    fn build_model(&self, vb: VarBuilder, width: usize) -> Result<Box<dyn TaskModel>> {
        Ok(Box::new(ImageModel::new(vb, self.model_shape(), width, self.label_smoothing)?))
    }
}
