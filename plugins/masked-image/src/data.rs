//! The images of a run as grids of codes, and their masking.

use crate::codebook::Codebook;
use crate::decoding::Decoding;
use crate::model::{CodeGrid, MaskedImageModel};
use datasets::images::{patchify, ImageSet, ImageSource, TrainTest};
use datasets::seeding::{item_seed, splitmix64};
use plugin_api::candle::{Device, Tensor};
use plugin_api::candle_nn::VarBuilder;
use plugin_api::{config_error, Batch, Config, Footprint, MetricSpec, PluginError, Result, Task, TaskInfo, TaskModel};
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

/// Side of every image; MNIST's 28×28 digits are padded to it.
pub const IMAGE_SIDE: usize = 32;

/// The masking ratios of evaluation (seed 000 Table 18 reports 10-40%; Table 3 uses 40%).
pub const EVAL_RATIOS: [f64; 4] = [0.1, 0.2, 0.3, 0.4];

/// Seed of the codebook fit and of the evaluation masks: fixed, so all runs on the same
/// images share the tokenizer and the masked positions.
const DATA_SEED: u64 = 0x4D49_4D00;

/// Patches sampled to fit the codebook.
const FIT_SAMPLE: usize = 65_536;

/// The task's options, parsed and checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// The images.
    pub source: ImageSource,
    /// Codes per image side.
    pub patches: usize,
    /// Codebook size `K`.
    pub codebook: usize,
    /// Lloyd iterations of the codebook fit.
    pub kmeans_iterations: usize,
    /// Training masks hide a fraction drawn from `U[0, max_mask_ratio]`.
    pub max_mask_ratio: f64,
    /// Standard deviation of the embedding and head init.
    pub init_std: f64,
    /// Evaluation by iterative decoding.
    pub decoding: Decoding,
}

impl Options {
    /// Reads the options and refuses inconsistent ones, with the fix in the message.
    pub fn from_config(cfg: &Config) -> Result<Self> {
        let source = ImageSource::from_options(
            cfg.str("dataset")?,
            cfg.str("data_dir")?,
            "fine",
            cfg.i64("shapes_seed")? as u64,
            cfg.usize("train_images")?,
            cfg.usize("test_images")?,
        )
        .map_err(config_error)?;
        let patches = cfg.usize("patches")?;
        if patches < 2 || !IMAGE_SIDE.is_multiple_of(patches) {
            return Err(config_error(format!(
                "patches={patches} must divide the {IMAGE_SIDE}-pixel image side and leave more than one code \
                 (MNIST's 28×28 images are padded to {IMAGE_SIDE}×{IMAGE_SIDE}); choose one of 2, 4, 8, 16, 32"
            )));
        }
        Ok(Options {
            source,
            patches,
            codebook: cfg.usize("codebook")?,
            kmeans_iterations: cfg.usize("kmeans_iterations")?,
            max_mask_ratio: cfg.f64("max_mask_ratio")?,
            init_std: cfg.f64("init_std")?,
            decoding: Decoding { steps: cfg.usize("decode_steps")?, temperature: cfg.f64("decode_temperature")? },
        })
    }

    /// Checks the options and, for file data sets, the files' headers and sizes.
    pub fn validate(cfg: &Config) -> Result<()> {
        let options = Options::from_config(cfg)?;
        if let ImageSource::Shapes { train, .. } = options.source {
            let patches = train * options.patches * options.patches;
            if patches < options.codebook {
                return Err(config_error(format!(
                    "codebook={} needs at least as many training patches to fit, but train_images={train} gives \
                     {patches}; lower codebook or raise train_images",
                    options.codebook
                )));
            }
        }
        options.source.check().map_err(|e| config_error(format!("data_dir: {e}")))
    }
}

/// Image codes, `tokens` per image.
struct Codes {
    codes: Vec<u32>,
    tokens: usize,
}

impl Codes {
    fn len(&self) -> usize {
        self.codes.len() / self.tokens
    }

    fn image(&self, index: usize) -> &[u32] {
        &self.codes[index * self.tokens..(index + 1) * self.tokens]
    }
}

/// The masked image modelling task of a run.
pub struct MaskedImageTask {
    train: Codes,
    test: Codes,
    grid: CodeGrid,
    seed: u64,
    max_mask_ratio: f64,
    init_std: f64,
    decoding: Decoding,
}

/// The codes of every image of `set`, encoded a few hundred images at a time.
fn encode(codebook: &Codebook, set: &ImageSet, patches: usize) -> Result<Codes> {
    let mut codes = Vec::with_capacity(set.len() * patches * patches);
    let mut values = Vec::new();
    for start in (0..set.len()).step_by(256) {
        values.clear();
        for i in start..(start + 256).min(set.len()) {
            patchify(set.image(i), set.channels, IMAGE_SIDE, patches, &mut values);
        }
        codes.extend(codebook.encode(&values)?);
    }
    Ok(Codes { codes, tokens: patches * patches })
}

impl MaskedImageTask {
    /// Generates or reads the images named by `cfg`, fits the codebook and encodes them;
    /// `seed` (the run's) drives the training batches and masks only.
    pub fn new(cfg: &Config, seed: u64) -> Result<Self> {
        let options = Options::from_config(cfg)?;
        let data = options.source.load().map_err(|e| PluginError::Data(e.to_string()))?;
        Self::from_images(data, seed, &options)
    }

    /// The task on given images (zero-padded to [`IMAGE_SIDE`] if smaller).
    pub fn from_images(data: TrainTest, seed: u64, options: &Options) -> Result<Self> {
        let fit = |set: ImageSet| set.fit_to(IMAGE_SIDE).map_err(PluginError::Data);
        let (train, test) = (fit(data.train)?, fit(data.test)?);
        if train.is_empty() || test.is_empty() {
            return Err(PluginError::Data("the training or the test split holds no image".into()));
        }
        let patches = options.patches;
        let tokens = patches * patches;
        let features = train.channels * (IMAGE_SIDE / patches).pow(2);
        // Fit on patches drawn without replacement from all training patches.
        let mut rng = ChaCha8Rng::seed_from_u64(DATA_SEED);
        let total = train.len() * tokens;
        let mut picked: Vec<usize> = sample(&mut rng, total, total.min(FIT_SAMPLE)).into_vec();
        picked.sort_unstable();
        let (mut sample_values, mut one) = (Vec::with_capacity(picked.len() * features), Vec::new());
        let mut current = usize::MAX;
        for p in picked {
            if p / tokens != current {
                current = p / tokens;
                one.clear();
                patchify(train.image(current), train.channels, IMAGE_SIDE, patches, &mut one);
            }
            sample_values.extend_from_slice(&one[(p % tokens) * features..][..features]);
        }
        let codebook = Codebook::fit(&sample_values, features, options.codebook, options.kmeans_iterations, DATA_SEED)?;
        Ok(MaskedImageTask {
            train: encode(&codebook, &train, patches)?,
            test: encode(&codebook, &test, patches)?,
            grid: CodeGrid { codebook: Arc::new(codebook), patches, side: IMAGE_SIDE, channels: train.channels },
            seed,
            max_mask_ratio: options.max_mask_ratio,
            init_std: options.init_std,
            decoding: options.decoding,
        })
    }

    /// The model at `width` built into `vb`, the code tokens and the images' and codes' bytes,
    /// from the configuration alone (the codebook size is the configured one).
    pub fn footprint(cfg: &Config, vb: VarBuilder, width: usize) -> Result<Footprint> {
        let options = Options::from_config(cfg)?;
        MaskedImageModel::parameters(&vb, options.codebook, width, options.init_std)?;
        let bounds = options.source.bounds();
        let tokens = options.patches * options.patches;
        let code_bytes = (bounds.images * tokens * std::mem::size_of::<u32>()) as u64;
        Ok(Footprint { seq_len: tokens, data_bytes: bounds.bytes(IMAGE_SIDE) + code_bytes })
    }

    /// The codebook and grid the model decodes with.
    #[cfg(test)]
    pub fn grid(&self) -> &CodeGrid {
        &self.grid
    }

    /// Inputs (codes, masked ones replaced by the [MASK] id `K`), targets (the codes) and the
    /// mask of some images, each with the positions to hide.
    fn batch(&self, rows: &[(&[u32], Vec<usize>)], device: &Device) -> Result<Batch> {
        let (size, n, mask_id) = (rows.len(), self.grid.tokens(), self.grid.codebook.size() as u32);
        let mut inputs = Vec::with_capacity(size * n);
        let mut targets = Vec::with_capacity(size * n);
        let mut mask = vec![0f32; size * n];
        for (r, (codes, hidden)) in rows.iter().enumerate() {
            let start = inputs.len();
            inputs.extend_from_slice(codes);
            targets.extend_from_slice(codes);
            for &i in hidden {
                inputs[start + i] = mask_id;
                mask[r * n + i] = 1.0;
            }
        }
        Ok(Batch {
            inputs: Tensor::from_vec(inputs, (size, n), device)?,
            targets: Tensor::from_vec(targets, (size, n), device)?,
            mask: Some(Tensor::from_vec(mask, (size, n), device)?),
            size,
        })
    }
}

/// `round(ratio * n)` positions out of `n`, at least one, drawn from `rng`.
pub fn masked_positions<R: Rng + ?Sized>(rng: &mut R, n: usize, ratio: f64) -> Vec<usize> {
    let count = ((ratio * n as f64).round() as usize).clamp(1, n);
    sample(rng, n, count).into_vec()
}

impl Task for MaskedImageTask {
    fn info(&self) -> Result<TaskInfo> {
        let mut metrics =
            vec![MetricSpec::higher("acc_40"), MetricSpec::higher("psnr_40"), MetricSpec::higher("ssim_40")];
        for percent in [10, 20, 30] {
            metrics.push(MetricSpec::higher(&format!("acc_{percent}")));
            metrics.push(MetricSpec::higher(&format!("psnr_{percent}")));
            metrics.push(MetricSpec::higher(&format!("ssim_{percent}")));
        }
        metrics.push(MetricSpec::lower("loss"));
        Ok(TaskInfo {
            seq_len: self.grid.tokens(),
            causal: false,
            metrics,
            train_examples: Some(self.train.len()),
            eval_examples: self.test.len(),
        })
    }

    /// Images drawn with replacement, each masked at a ratio from `U[0, max_mask_ratio]`
    /// (seed 000 §5.3), by a ChaCha8 RNG seeded from (run seed, step) only.
    fn train_batch(&self, step: u64, batch_size: usize, device: &Device) -> Result<Batch> {
        let mut rng = ChaCha8Rng::seed_from_u64(item_seed(self.seed, step));
        let n = self.grid.tokens();
        let rows: Vec<(&[u32], Vec<usize>)> = (0..batch_size)
            .map(|_| {
                let image = self.train.image(rng.random_range(0..self.train.len()));
                let ratio = rng.random_range(0.0..=self.max_mask_ratio);
                (image, masked_positions(&mut rng, n, ratio))
            })
            .collect();
        self.batch(&rows, device)
    }

    /// Each of the first `max_examples` test images four times, masked at 10, 20, 30 and 40%
    /// (row `i` at `EVAL_RATIOS[i % 4]`), with masks fixed by the image index; batches hold
    /// whole groups of four.
    fn eval_batches(&self, batch_size: usize, max_examples: usize, device: &Device) -> Result<Vec<Batch>> {
        let images = self.test.len().min(max_examples);
        let per_batch = (batch_size / EVAL_RATIOS.len()).max(1);
        let n = self.grid.tokens();
        let indices: Vec<usize> = (0..images).collect();
        indices
            .chunks(per_batch)
            .map(|chunk| {
                let rows: Vec<(&[u32], Vec<usize>)> = chunk
                    .iter()
                    .flat_map(|&i| {
                        EVAL_RATIOS.iter().enumerate().map(move |(k, &ratio)| {
                            let mut rng = ChaCha8Rng::seed_from_u64(splitmix64(DATA_SEED ^ (4 * i + k) as u64));
                            (self.test.image(i), masked_positions(&mut rng, n, ratio))
                        })
                    })
                    .collect();
                self.batch(&rows, device)
            })
            .collect()
    }

    fn build_model(&self, vb: VarBuilder, width: usize) -> Result<Box<dyn TaskModel>> {
        Ok(Box::new(MaskedImageModel::new(vb, self.grid.clone(), width, self.init_std, self.decoding)?))
    }
}
