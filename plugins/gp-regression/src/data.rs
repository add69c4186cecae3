//! The options of the task, its functions and their batches.
//!
//! Batch layout (both settings): `inputs` `[B, N, F]` point features, `targets` `[B, N, 2]`
//! holding the observation `y` and a flag that is 1 on points of training data and 0 on
//! held-out points, and `mask` `[B, N]`, 1 on the scored tokens (the loss and the metrics use
//! those only).

use crate::model::GpModel;
use datasets::gp::{fit_data, function, mix_seed, FitData, GpDraw, GpPrior, Kernel, KernelFamily, MaternNu, Stream};
use plugin_api::candle::{Device, Tensor};
use plugin_api::candle_nn::VarBuilder;
use plugin_api::{config_error, Batch, Config, Footprint, MetricSpec, PluginError, Result, Task, TaskInfo, TaskModel};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Largest number of points drawn jointly in `setting=fit`: one Cholesky factorisation of an
/// `n x n` matrix, about a second at 2048 points in a debug build; at 8192 points the kernel
/// matrix, its factor and the work copy take 1.5 GiB.
pub const MAX_FIT_POINTS: usize = 8192;

/// Stream tags for the seeds derived from the run seed.
const EPOCH_TAG: u64 = 0x4550_4F43_4800_0001;
const STEP_TAG: u64 = 0x5354_4550_0000_0002;

/// How examples are made from functions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Setting {
    /// One function; tokens are its input points, `points` per example.
    Fit {
        /// Tokens per example `N`.
        points: usize,
        /// Training points (a multiple of `points`).
        train_points: usize,
        /// Test points (a multiple of `points`).
        test_points: usize,
    },
    /// A new function per example: context `(x, y)` tokens, then query `x` tokens.
    InContext {
        /// Context tokens per example.
        context_points: usize,
        /// Query tokens per example.
        query_points: usize,
        /// Size of the training pool (0: a fresh function per example).
        train_functions: u64,
        /// Held-out functions of the evaluation set.
        eval_functions: usize,
    },
}

/// The validated task options.
#[derive(Clone, Debug, PartialEq)]
pub struct GpOptions {
    /// Kernel, input dimension, noise and jitter.
    pub prior: GpPrior,
    /// Fitting one function or in-context regression.
    pub setting: Setting,
    /// Seed of the functions and inputs.
    pub data_seed: u64,
    /// Whether the layer runs with a causal mask.
    pub causal: bool,
}

fn kernel(cfg: &Config) -> Result<Kernel> {
    let strength = cfg.f64("nonstationary_strength")?;
    let family = match cfg.str("kernel")? {
        "rbf" => KernelFamily::Rbf,
        "matern" => KernelFamily::Matern(match cfg.str("matern_nu")? {
            "0.5" => MaternNu::Half,
            "1.5" => MaternNu::ThreeHalves,
            "2.5" => MaternNu::FiveHalves,
            other => return Err(config_error(format!("matern_nu `{other}` is not one of 0.5 | 1.5 | 2.5"))),
        }),
        "periodic" => KernelFamily::Periodic { period: cfg.f64("period")? },
        "rational_quadratic" => KernelFamily::RationalQuadratic { alpha: cfg.f64("rq_alpha")? },
        "nonstationary" => match cfg.str("nonstationary")? {
            "gibbs" => KernelFamily::Gibbs { strength },
            "warped" => KernelFamily::WarpedRbf { strength },
            other => return Err(config_error(format!("nonstationary `{other}` is not one of gibbs | warped"))),
        },
        other => {
            return Err(config_error(format!(
                "kernel `{other}` is not one of rbf | matern | periodic | rational_quadratic | nonstationary"
            )))
        }
    };
    Ok(Kernel { family, length_scale: cfg.f64("length_scale")?, variance: cfg.f64("variance")? })
}

/// Refuses a parameter changed from its default where it has no effect, naming the option
/// it needs (e.g. `period=3` with `kernel=rbf`).
fn refuse_unused(cfg: &Config, rules: &[(&str, bool, &str)]) -> Result<()> {
    let defaults = Config::defaults(&crate::params());
    for (key, applies, needs) in rules {
        let value = cfg.0.get(*key);
        if !applies && value != defaults.0.get(*key) {
            let shown = value.map(|v| v.to_string()).unwrap_or_default();
            return Err(config_error(format!("{key}={shown} only applies with {needs}; set {needs} or drop {key}")));
        }
    }
    Ok(())
}

/// Refuses a set of `total` points that cannot be cut into examples of `points` tokens.
fn check_multiple(name: &str, total: usize, points: usize) -> Result<()> {
    if total.is_multiple_of(points) {
        return Ok(());
    }
    let below = total / points * points;
    let fix = if below > 0 { format!("{name}={below} or {}", below + points) } else { format!("{name}={points}") };
    Err(config_error(format!(
        "{name}={total} is not a multiple of points={points} (every example holds `points` tokens); use {fix}, or a `points` that divides {total}"
    )))
}

impl GpOptions {
    /// Reads and checks the options; every refusal names the problem and the fix.
    pub fn from_config(cfg: &Config) -> Result<Self> {
        let kernel_name = cfg.str("kernel")?;
        let fit = cfg.str("setting")? == "fit";
        refuse_unused(
            cfg,
            &[
                ("matern_nu", kernel_name == "matern", "kernel=matern"),
                ("period", kernel_name == "periodic", "kernel=periodic"),
                ("rq_alpha", kernel_name == "rational_quadratic", "kernel=rational_quadratic"),
                ("nonstationary", kernel_name == "nonstationary", "kernel=nonstationary"),
                ("nonstationary_strength", kernel_name == "nonstationary", "kernel=nonstationary"),
                ("points", fit, "setting=fit"),
                ("train_points", fit, "setting=fit"),
                ("test_points", fit, "setting=fit"),
                ("context_points", !fit, "setting=in_context"),
                ("query_points", !fit, "setting=in_context"),
                ("train_functions", !fit, "setting=in_context"),
                ("eval_functions", !fit, "setting=in_context"),
            ],
        )?;
        let prior = GpPrior {
            kernel: kernel(cfg)?,
            input_dim: cfg.usize("input_dim")?,
            noise: cfg.f64("noise")?,
            jitter: cfg.f64("jitter")?,
        };
        prior.check().map_err(|e| config_error(e.to_string()))?;
        let setting = if fit {
            let (points, train_points, test_points) =
                (cfg.usize("points")?, cfg.usize("train_points")?, cfg.usize("test_points")?);
            check_multiple("train_points", train_points, points)?;
            check_multiple("test_points", test_points, points)?;
            if train_points + test_points > MAX_FIT_POINTS {
                return Err(config_error(format!(
                    "train_points + test_points = {} exceeds {MAX_FIT_POINTS}: the function is drawn at all of them with one Cholesky factorisation; use fewer points",
                    train_points + test_points
                )));
            }
            Setting::Fit { points, train_points, test_points }
        } else {
            Setting::InContext {
                context_points: cfg.usize("context_points")?,
                query_points: cfg.usize("query_points")?,
                train_functions: cfg.i64("train_functions")? as u64,
                eval_functions: cfg.usize("eval_functions")?,
            }
        };
        Ok(GpOptions { prior, setting, data_seed: cfg.i64("data_seed")? as u64, causal: cfg.bool("causal")? })
    }

    /// Tokens per example `N`.
    pub fn seq_len(&self) -> usize {
        match self.setting {
            Setting::Fit { points, .. } => points,
            Setting::InContext { context_points, query_points, .. } => context_points + query_points,
        }
    }

    /// Bytes of the drawn functions: in `fit`, the points and the `n x n` kernel matrix of
    /// their one joint draw; in context, every pooled and held-out function's points.
    pub fn data_bytes(&self) -> u64 {
        let point = (self.prior.input_dim + 1) * std::mem::size_of::<f64>();
        match self.setting {
            Setting::Fit { train_points, test_points, .. } => {
                let n = (train_points + test_points) as u64;
                n * point as u64 + n * n * std::mem::size_of::<f64>() as u64
            }
            Setting::InContext { train_functions, eval_functions, .. } => {
                (train_functions + eval_functions as u64) * (self.seq_len() * point) as u64
            }
        }
    }

    /// Features per token `F`: `x`, plus `(y * c, c)` in context.
    pub fn features(&self) -> usize {
        match self.setting {
            Setting::Fit { .. } => self.prior.input_dim,
            Setting::InContext { .. } => self.prior.input_dim + 2,
        }
    }
}

/// The model at `width` built into `vb`, the tokens and the functions' bytes.
pub fn footprint(cfg: &Config, vb: VarBuilder, width: usize) -> Result<Footprint> {
    let options = GpOptions::from_config(cfg)?;
    GpModel::new(vb, options.features(), width)?;
    Ok(Footprint { seq_len: options.seq_len(), data_bytes: options.data_bytes() })
}

/// The functions of a run, ready to batch.
pub struct GpTask {
    options: GpOptions,
    /// The run seed: orders the training points or picks training functions.
    seed: u64,
    /// `setting=fit`: the training and test sets of the one function.
    fit: Option<FitData>,
}

/// One example of the evaluation set in `setting=in_context`.
#[derive(Clone, Copy)]
struct FunctionRef {
    stream: Stream,
    index: u64,
}

/// Features, targets and mask of examples, appended token by token.
#[derive(Default)]
struct BatchBuilder {
    inputs: Vec<f32>,
    targets: Vec<f32>,
    mask: Vec<f32>,
}

impl BatchBuilder {
    fn push(&mut self, features: impl IntoIterator<Item = f64>, y: f64, training: bool, scored: bool) {
        self.inputs.extend(features.into_iter().map(|v| v as f32));
        self.targets.extend([y as f32, if training { 1.0 } else { 0.0 }]);
        self.mask.push(if scored { 1.0 } else { 0.0 });
    }

    /// Tokens `0..context` of `draw` as context `(x, y, 1)`, the rest as queries `(x, 0, 0)`.
    fn push_function(&mut self, draw: &GpDraw, context: usize, training: bool) {
        for i in 0..draw.len() {
            let in_context = i < context;
            let (y, c) = if in_context { (draw.targets[i], 1.0) } else { (0.0, 0.0) };
            self.push(draw.input(i).iter().copied().chain([y, c]), draw.targets[i], training, !in_context);
        }
    }

    fn build(self, seq_len: usize, features: usize, device: &Device) -> Result<Batch> {
        let size = self.mask.len() / seq_len;
        Ok(Batch {
            inputs: Tensor::from_vec(self.inputs, (size, seq_len, features), device)?,
            targets: Tensor::from_vec(self.targets, (size, seq_len, 2), device)?,
            mask: Some(Tensor::from_vec(self.mask, (size, seq_len), device)?),
            size,
        })
    }
}

fn data_error(e: datasets::gp::GpError) -> PluginError {
    PluginError::Data(e.to_string())
}

impl GpTask {
    /// The task of a run with seed `seed`; in `setting=fit` draws the function now.
    pub fn new(cfg: &Config, seed: u64) -> Result<Self> {
        Self::from_options(GpOptions::from_config(cfg)?, seed)
    }

    /// Checks a configuration without drawing anything.
    pub fn validate(cfg: &Config) -> Result<()> {
        GpOptions::from_config(cfg).map(|_| ())
    }

    /// The task for already validated options.
    pub fn from_options(options: GpOptions, seed: u64) -> Result<Self> {
        let fit = match options.setting {
            Setting::Fit { train_points, test_points, .. } => {
                Some(fit_data(&options.prior, train_points, test_points, options.data_seed).map_err(data_error)?)
            }
            Setting::InContext { .. } => None,
        };
        Ok(GpTask { options, seed, fit })
    }

    /// The options.
    #[cfg(test)]
    pub fn options(&self) -> &GpOptions {
        &self.options
    }

    /// `setting=fit`: the training and test sets.
    #[cfg(test)]
    pub fn fit_data(&self) -> Option<&FitData> {
        self.fit.as_ref()
    }

    /// Function `index` of `stream` (`setting=in_context`).
    pub fn function(&self, stream: Stream, index: u64) -> Result<GpDraw> {
        function(&self.options.prior, self.options.seq_len(), self.options.data_seed, stream, index).map_err(data_error)
    }

    /// The order in which epoch `epoch` visits the `n` training points.
    fn epoch_order(&self, epoch: u64, n: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..n).collect();
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(mix_seed(self.seed, EPOCH_TAG, epoch)));
        order
    }

    /// Indices of the training points of step `step`: positions `step * B * N ..` of the
    /// concatenated epoch orders.
    fn fit_train_indices(&self, step: u64, count: usize, n: usize) -> Vec<usize> {
        let first = step as u128 * count as u128;
        let (mut epoch_of_order, mut order) = (None, Vec::new());
        let mut indices = Vec::with_capacity(count);
        for global in first..first + count as u128 {
            let epoch = (global / n as u128) as u64;
            if epoch_of_order != Some(epoch) {
                order = self.epoch_order(epoch, n);
                epoch_of_order = Some(epoch);
            }
            indices.push(order[(global % n as u128) as usize]);
        }
        indices
    }

    /// The held-out functions, then (with a finite pool) as many training functions.
    fn eval_functions(&self) -> Vec<FunctionRef> {
        let Setting::InContext { train_functions, eval_functions, .. } = self.options.setting else {
            return Vec::new();
        };
        let held_out = (0..eval_functions as u64).map(|index| FunctionRef { stream: Stream::Eval, index });
        let training =
            (0..train_functions.min(eval_functions as u64)).map(|index| FunctionRef { stream: Stream::Train, index });
        held_out.chain(training).collect()
    }

    fn fit_sets(&self) -> Result<&FitData> {
        self.fit.as_ref().ok_or_else(|| PluginError::Other("setting=fit without its data".into()))
    }
}

/// Appends points `indices` of `draw` as fit tokens, all scored.
fn push_points(builder: &mut BatchBuilder, draw: &GpDraw, indices: impl IntoIterator<Item = usize>, training: bool) {
    for i in indices {
        builder.push(draw.input(i).iter().copied(), draw.targets[i], training, true);
    }
}

impl Task for GpTask {
    fn info(&self) -> Result<TaskInfo> {
        let mut metrics = vec![MetricSpec::lower("rmse")];
        let (train_examples, eval_examples) = match self.options.setting {
            Setting::Fit { points, train_points, test_points } => {
                metrics.push(MetricSpec::lower("train_rmse"));
                (Some(train_points / points), (train_points + test_points) / points)
            }
            Setting::InContext { train_functions, .. } => {
                if train_functions > 0 {
                    metrics.push(MetricSpec::lower("train_rmse"));
                }
                ((train_functions > 0).then_some(train_functions as usize), self.eval_functions().len())
            }
        };
        metrics.push(MetricSpec::lower("loss"));
        Ok(TaskInfo {
            seq_len: self.options.seq_len(),
            causal: self.options.causal,
            metrics,
            train_examples,
            eval_examples,
        })
    }

    /// `setting=fit`: the next `batch_size * N` training points of the run's epoch orders.
    /// `setting=in_context`: `batch_size` training functions picked by a ChaCha8 RNG seeded
    /// from (run seed, step). Either depends only on the run seed and `step`.
    fn train_batch(&self, step: u64, batch_size: usize, device: &Device) -> Result<Batch> {
        let (seq_len, features) = (self.options.seq_len(), self.options.features());
        let mut builder = BatchBuilder::default();
        match self.options.setting {
            Setting::Fit { points, .. } => {
                let train = &self.fit_sets()?.train;
                push_points(&mut builder, train, self.fit_train_indices(step, batch_size * points, train.len()), true);
            }
            Setting::InContext { context_points, train_functions, .. } => {
                let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(self.seed, STEP_TAG, step));
                for _ in 0..batch_size {
                    let index = if train_functions > 0 { rng.random_range(0..train_functions) } else { rng.random() };
                    builder.push_function(&self.function(Stream::Train, index)?, context_points, true);
                }
            }
        }
        builder.build(seq_len, features, device)
    }

    /// Held-out examples first (test points, or held-out functions), then training examples
    /// (training points, or the first training functions of a finite pool), truncated to
    /// `max_examples` and cut into batches of `batch_size`.
    fn eval_batches(&self, batch_size: usize, max_examples: usize, device: &Device) -> Result<Vec<Batch>> {
        let (seq_len, features) = (self.options.seq_len(), self.options.features());
        let batch_size = batch_size.max(1);
        let mut batches = Vec::new();
        match self.options.setting {
            Setting::Fit { points, .. } => {
                let sets = self.fit_sets()?;
                let examples: Vec<(&GpDraw, usize, bool)> = (0..sets.test.len() / points)
                    .map(|k| (&sets.test, k, false))
                    .chain((0..sets.train.len() / points).map(|k| (&sets.train, k, true)))
                    .take(max_examples)
                    .collect();
                for chunk in examples.chunks(batch_size) {
                    let mut builder = BatchBuilder::default();
                    for &(draw, k, training) in chunk {
                        push_points(&mut builder, draw, k * points..(k + 1) * points, training);
                    }
                    batches.push(builder.build(seq_len, features, device)?);
                }
            }
            Setting::InContext { context_points, .. } => {
                let functions: Vec<FunctionRef> = self.eval_functions().into_iter().take(max_examples).collect();
                for chunk in functions.chunks(batch_size) {
                    let mut builder = BatchBuilder::default();
                    for f in chunk {
                        let draw = self.function(f.stream, f.index)?;
                        builder.push_function(&draw, context_points, f.stream == Stream::Train);
                    }
                    batches.push(builder.build(seq_len, features, device)?);
                }
            }
        }
        Ok(batches)
    }

    fn build_model(&self, vb: VarBuilder, width: usize) -> Result<Box<dyn TaskModel>> {
        Ok(Box::new(GpModel::new(vb, self.options.features(), width)?))
    }
}
