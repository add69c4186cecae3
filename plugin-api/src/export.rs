//! The plugin boundary: the C entry symbol, the fingerprint check and the panic guards.
//!
//! Rust has no stable ABI. The host first reads the entry through the C ABI only (a magic
//! tag and the fingerprint string); only if the fingerprint equals its own does it call the
//! Rust-ABI `declare` function and exchange Rust values (tensors, trait objects) with the
//! plugin. Every call into plugin code runs inside [`guard`], in the plugin's own copy of
//! std, so a panic becomes a [`PluginError::Panic`] instead of unwinding into the host.

use crate::error::{PluginError, Result};
use crate::layer::{DescentCheck, Energy, GradientIdentity, Layer, Pass};
use crate::schema::{Config, ParamSpec};
use crate::task::{Batch, Footprint, LayerPass, MetricTally, Progress, Task, TaskInfo, TaskModel};
use candle_core::{Device, Tensor};
use candle_nn::VarBuilder;
use std::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Name of the symbol every plugin library exports (see [`export_plugin!`](crate::export_plugin)).
pub const ENTRY_SYMBOL: &str = "workbench_plugin_entry";

/// First bytes of every [`PluginEntry`], to recognise a workbench plugin.
pub const ENTRY_MAGIC: [u8; 8] = *b"WBPLUGIN";

/// Everything that must agree between host and plugin for Rust values to cross between
/// them: plugin-api version, rustc version, candle version, target and device features.
pub const FINGERPRINT: &str = env!("WORKBENCH_PLUGIN_FINGERPRINT");

/// The same fingerprint, NUL-terminated, for the C-ABI part of the entry.
pub const FINGERPRINT_C: &str = concat!(env!("WORKBENCH_PLUGIN_FINGERPRINT"), "\0");

/// The candle version this build of the plugin API was made with.
pub const CANDLE_VERSION: &str = env!("WORKBENCH_CANDLE_VERSION");

/// What the entry symbol returns. Only `magic` and `fingerprint` may be read before the
/// fingerprint has been checked.
#[repr(C)]
pub struct PluginEntry {
    /// Always [`ENTRY_MAGIC`].
    pub magic: [u8; 8],
    /// NUL-terminated fingerprint of the plugin's build.
    pub fingerprint: *const c_char,
    /// Builds the declaration (Rust ABI: call only after the fingerprint matched).
    pub declare: fn() -> Result<Declaration>,
}

// SAFETY: the entry is immutable static data (a pointer to a static string and a fn pointer).
unsafe impl Sync for PluginEntry {}

/// Whether a plugin is a layer family or a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginKind {
    /// A layer family: maps tokens to tokens.
    Layer,
    /// A task: data, embedding, head, loss, metrics.
    Task,
}

impl PluginKind {
    /// `layer` or `task`.
    pub fn as_str(self) -> &'static str {
        match self {
            PluginKind::Layer => "layer",
            PluginKind::Task => "task",
        }
    }
}

type LayerCtor = Box<dyn Fn(&Config, VarBuilder) -> Result<Box<dyn Layer>> + Send + Sync>;
type TaskCtor = Box<dyn Fn(&Config, u64, Progress<'_>) -> Result<Box<dyn Task>> + Send + Sync>;
type Validator = Box<dyn Fn(&Config) -> Result<()> + Send + Sync>;
type NeedsCausal = Box<dyn Fn(&Config) -> bool + Send + Sync>;
type FootprintFn = Box<dyn Fn(&Config, VarBuilder, usize) -> Result<Footprint> + Send + Sync>;

enum Constructor {
    Layer(LayerCtor),
    Task(TaskCtor),
}

/// A plugin's self-description and constructor.
pub struct Declaration {
    /// Unique plugin name (`hyperset`, `sudoku`).
    pub name: String,
    /// Plugin version (usually the crate version).
    pub version: String,
    /// One line describing the plugin.
    pub description: String,
    /// Hyperparameter schema.
    pub params: Vec<ParamSpec>,
    constructor: Constructor,
    validator: Option<Validator>,
    /// Layer: it can run with a causal mask. Task: when its layer must run causally.
    causal: Causal,
    footprint: Option<FootprintFn>,
    activation_floats: Option<u32>,
}

/// What a plugin declares about causal passes, so the host can refuse a non-causal layer on
/// a causal task before a run is stored (the pass itself would fail only in the worker).
enum Causal {
    /// A layer that cannot mask, or a task that never needs it.
    No,
    /// A layer with a causal mask ([`Layer::supports_causal`] is true).
    LayerMasks,
    /// A task that needs a causal layer for configurations where this holds.
    TaskNeeds(NeedsCausal),
}

impl Declaration {
    /// Declares a layer plugin whose constructor is `build(config, vb)`.
    pub fn layer<L, F>(name: &str, version: &str, description: &str, params: Vec<ParamSpec>, build: F) -> Self
    where
        L: Layer + 'static,
        F: Fn(&Config, VarBuilder) -> Result<L> + Send + Sync + 'static,
    {
        let ctor: LayerCtor = Box::new(move |cfg, vb| {
            let layer = guard(|| build(cfg, vb))?;
            Ok(Box::new(Guarded(layer)) as Box<dyn Layer>)
        });
        Self::new(name, version, description, params, Constructor::Layer(ctor))
    }

    /// Declares a task plugin whose constructor is `build(config, seed)`.
    pub fn task<T, F>(name: &str, version: &str, description: &str, params: Vec<ParamSpec>, build: F) -> Self
    where
        T: Task + 'static,
        F: Fn(&Config, u64) -> Result<T> + Send + Sync + 'static,
    {
        Self::task_reporting(name, version, description, params, move |cfg, seed, _| build(cfg, seed))
    }

    /// Declares a task plugin whose constructor `build(config, seed, progress)` reports how
    /// far its data preparation has come.
    pub fn task_reporting<T, F>(name: &str, version: &str, description: &str, params: Vec<ParamSpec>, build: F) -> Self
    where
        T: Task + 'static,
        F: Fn(&Config, u64, Progress<'_>) -> Result<T> + Send + Sync + 'static,
    {
        let ctor: TaskCtor = Box::new(move |cfg, seed, progress| {
            let task = guard(|| build(cfg, seed, progress))?;
            Ok(Box::new(Guarded(task)) as Box<dyn Task>)
        });
        Self::new(name, version, description, params, Constructor::Task(ctor))
    }

    fn new(name: &str, version: &str, description: &str, params: Vec<ParamSpec>, constructor: Constructor) -> Self {
        Declaration {
            name: name.into(),
            version: version.into(),
            description: description.into(),
            params,
            constructor,
            validator: None,
            causal: Causal::No,
            footprint: None,
            activation_floats: None,
        }
    }

    /// Declares that this layer can run causally (its [`Layer::supports_causal`] is true).
    pub fn with_causal_mask(mut self) -> Self {
        self.causal = Causal::LayerMasks;
        self
    }

    /// Declares that this task needs a causal layer for the configurations where `needs`
    /// holds (its [`crate::TaskInfo::causal`] then is true).
    pub fn needs_causal_layer<F>(mut self, needs: F) -> Self
    where
        F: Fn(&Config) -> bool + Send + Sync + 'static,
    {
        self.causal = Causal::TaskNeeds(Box::new(move |cfg| guard(|| Ok(needs(cfg))).unwrap_or(false)));
        self
    }

    /// Whether a layer plugin declared a causal mask.
    pub fn masks_causally(&self) -> bool {
        matches!(self.causal, Causal::LayerMasks)
    }

    /// Whether a task plugin with `config` needs a causal layer.
    pub fn needs_causal(&self, config: &Config) -> bool {
        match &self.causal {
            Causal::TaskNeeds(needs) => needs(&self.complete(config)),
            _ => false,
        }
    }

    /// Adds a check of whole configurations (e.g. `d` divisible by `heads`) that the host
    /// runs before a run is stored, without building the model.
    pub fn with_validator<F>(mut self, validate: F) -> Self
    where
        F: Fn(&Config) -> Result<()> + Send + Sync + 'static,
    {
        self.validator = Some(Box::new(move |cfg| guard(|| validate(cfg))));
        self
    }

    /// Declares what this task needs in memory for a configuration: `footprint(config, vb,
    /// width)` builds the task's model into `vb` (as `Task::build_model` would, with shapes
    /// taken from the configuration, upper bounds where only the data can tell) and returns the
    /// sequence length and data size, all without making or reading data.
    pub fn with_footprint<F>(mut self, footprint: F) -> Self
    where
        F: Fn(&Config, VarBuilder, usize) -> Result<Footprint> + Send + Sync + 'static,
    {
        self.footprint = Some(Box::new(move |cfg, vb, width| guard(|| footprint(cfg, vb, width))));
        self
    }

    /// The task's footprint for `config` at `width`, its model built into `vb`; `None` if
    /// the plugin declares none.
    pub fn footprint(&self, config: &Config, vb: VarBuilder, width: usize) -> Option<Result<Footprint>> {
        self.footprint.as_ref().map(|footprint| footprint(&self.complete(config), vb, width))
    }

    /// Declares how many floats this layer's pass keeps for the backward pass, per token,
    /// width unit, example and iteration (the host's memory estimate; measured, e.g. by
    /// running a few steps under `/usr/bin/time -v`). Layers that declare none are taken to
    /// keep the host's default.
    pub fn with_activation_floats(mut self, floats: u32) -> Self {
        self.activation_floats = Some(floats);
        self
    }

    /// What [`Declaration::with_activation_floats`] declared.
    pub fn activation_floats(&self) -> Option<u32> {
        self.activation_floats
    }

    /// `config` with every key of the plugin's schema it lacks set to its default: how a
    /// configuration stored before an option existed is read. Every call into the plugin
    /// below passes its configuration through this first.
    pub fn complete(&self, config: &Config) -> Config {
        config.with_defaults(&self.params)
    }

    /// Runs the plugin's configuration check, if it declared one.
    pub fn validate(&self, config: &Config) -> Result<()> {
        match &self.validator {
            Some(validate) => validate(&self.complete(config)),
            None => Ok(()),
        }
    }

    /// Layer or task.
    pub fn kind(&self) -> PluginKind {
        match self.constructor {
            Constructor::Layer(_) => PluginKind::Layer,
            Constructor::Task(_) => PluginKind::Task,
        }
    }

    /// Builds the layer (its parameters come from `vb`) from the completed `config`. Errors if
    /// this is a task plugin.
    pub fn build_layer(&self, config: &Config, vb: VarBuilder) -> Result<Box<dyn Layer>> {
        match &self.constructor {
            Constructor::Layer(ctor) => ctor(&self.complete(config), vb),
            Constructor::Task(_) => Err(PluginError::Other(format!("`{}` is a task plugin, not a layer", self.name))),
        }
    }

    /// Builds the task from the completed `config` with the run's seed. Errors if this is a
    /// layer plugin.
    pub fn build_task(&self, config: &Config, seed: u64) -> Result<Box<dyn Task>> {
        self.build_task_reporting(config, seed, Progress::ignored())
    }

    /// [`Declaration::build_task`], the task reporting its data preparation to `progress`.
    pub fn build_task_reporting(&self, config: &Config, seed: u64, progress: Progress<'_>) -> Result<Box<dyn Task>> {
        match &self.constructor {
            Constructor::Task(ctor) => ctor(&self.complete(config), seed, progress),
            Constructor::Layer(_) => Err(PluginError::Other(format!("`{}` is a layer plugin, not a task", self.name))),
        }
    }
}

/// Runs `f`, turning a panic into [`PluginError::Panic`] with the panic message.
pub fn guard<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_string());
            Err(PluginError::Panic(message))
        }
    }
}

/// Wraps a plugin object so that each of its methods runs inside [`guard`]. It is
/// instantiated in the plugin's crate (by [`Declaration::layer`] / [`Declaration::task`]), so
/// the `catch_unwind` runs in the plugin's own std.
struct Guarded<T>(T);

impl<L: Layer> Layer for Guarded<L> {
    fn width(&self) -> usize {
        guard(|| Ok(self.0.width())).unwrap_or(0)
    }
    fn train_iterations(&self) -> usize {
        guard(|| Ok(self.0.train_iterations())).unwrap_or(0)
    }
    /// A causal pass of a layer that cannot mask is refused here, so no layer can silently
    /// look ahead whatever its own code does.
    fn forward(&self, x0: &Tensor, pass: &mut Pass<'_>) -> Result<Tensor> {
        if pass.causal && !self.supports_causal() {
            return Err(crate::PluginError::Other(
                "this layer cannot run causally (it has no causal mask); use a non-causal task or a causal layer"
                    .into(),
            ));
        }
        guard(|| self.0.forward(x0, pass))
    }
    fn supports_causal(&self) -> bool {
        guard(|| Ok(self.0.supports_causal())).unwrap_or(false)
    }
    fn energies(&self, t: usize, iterations: usize, x: &Tensor, x0: &Tensor) -> Result<Vec<Energy>> {
        guard(|| self.0.energies(t, iterations, x, x0))
    }
    fn head_projections(&self, t: usize, iterations: usize, x: &Tensor) -> Result<Option<Tensor>> {
        guard(|| self.0.head_projections(t, iterations, x))
    }
    fn gradient_identities(&self, x: &Tensor) -> Result<Vec<GradientIdentity>> {
        guard(|| self.0.gradient_identities(x))
    }
    fn descent_checks(&self, x: &Tensor, step: f64) -> Result<Vec<DescentCheck>> {
        guard(|| self.0.descent_checks(x, step))
    }
}

impl<T: Task> Task for Guarded<T> {
    fn info(&self) -> Result<TaskInfo> {
        guard(|| self.0.info())
    }
    fn train_batch(&self, step: u64, batch_size: usize, device: &Device) -> Result<Batch> {
        guard(|| self.0.train_batch(step, batch_size, device))
    }
    fn eval_batches(&self, batch_size: usize, max_examples: usize, device: &Device) -> Result<Vec<Batch>> {
        guard(|| self.0.eval_batches(batch_size, max_examples, device))
    }
    fn build_model(&self, vb: VarBuilder, width: usize) -> Result<Box<dyn TaskModel>> {
        let model = guard(|| self.0.build_model(vb, width))?;
        Ok(Box::new(Guarded(model)))
    }
}

impl<M: TaskModel> TaskModel for Guarded<M> {
    fn embed(&self, batch: &Batch, train: bool) -> Result<Tensor> {
        guard(|| self.0.embed(batch, train))
    }
    fn loss(&self, h: &Tensor, batch: &Batch) -> Result<Tensor> {
        guard(|| self.0.loss(h, batch))
    }
    fn loss_weight(&self, batch: &Batch) -> Result<f64> {
        guard(|| self.0.loss_weight(batch))
    }
    fn evaluate(&self, h: &Tensor, batch: &Batch) -> Result<MetricTally> {
        guard(|| self.0.evaluate(h, batch))
    }
    fn evaluate_decoding(&self, batch: &Batch, layer: LayerPass<'_>) -> Option<Result<MetricTally>> {
        guard(|| Ok(self.0.evaluate_decoding(batch, &mut *layer))).unwrap_or_else(|e| Some(Err(e)))
    }
}

/// Exports a plugin: `export_plugin!(declare)` where `fn declare() -> Result<Declaration>`.
///
/// Generates the one `extern "C"` entry symbol the host looks for. A panic inside `declare`
/// is caught and reported by the host as a failed registration.
#[macro_export]
macro_rules! export_plugin {
    ($declare:path) => {
        /// Entry point read by the workbench host.
        #[no_mangle]
        pub extern "C" fn workbench_plugin_entry() -> *const $crate::PluginEntry {
            fn declare_guarded() -> $crate::Result<$crate::Declaration> {
                $crate::guard(|| $declare())
            }
            static ENTRY: $crate::PluginEntry = $crate::PluginEntry {
                magic: $crate::ENTRY_MAGIC,
                fingerprint: $crate::FINGERPRINT_C.as_ptr() as *const ::std::ffi::c_char,
                declare: declare_guarded,
            };
            &ENTRY
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Value;
    use std::sync::{Arc, Mutex};

    /// What a constructor or validator was given.
    type Seen = Arc<Mutex<Vec<Config>>>;

    fn schema() -> Vec<ParamSpec> {
        vec![ParamSpec::int("d", 8, 1, 64, ""), ParamSpec::choice("kernels", "fused", &["fused", "composed"], "")]
    }

    /// A configuration stored before `kernels` existed.
    fn stored() -> Config {
        let mut cfg = Config::default();
        cfg.set("d", Value::Int(4));
        cfg
    }

    fn expected() -> Config {
        let mut cfg = Config::defaults(&schema());
        cfg.set("d", Value::Int(4));
        cfg
    }

    struct Identity;

    impl Layer for Identity {
        fn width(&self) -> usize {
            4
        }
        fn train_iterations(&self) -> usize {
            1
        }
        fn forward(&self, x0: &Tensor, _pass: &mut Pass<'_>) -> Result<Tensor> {
            Ok(x0.clone())
        }
    }

    /// Never built: its constructor only records its configuration and refuses.
    struct NoTask;

    impl Task for NoTask {
        fn info(&self) -> Result<TaskInfo> {
            unreachable!()
        }
        fn train_batch(&self, _: u64, _: usize, _: &Device) -> Result<Batch> {
            unreachable!()
        }
        fn eval_batches(&self, _: usize, _: usize, _: &Device) -> Result<Vec<Batch>> {
            unreachable!()
        }
        fn build_model(&self, _: VarBuilder, _: usize) -> Result<Box<dyn TaskModel>> {
            unreachable!()
        }
    }

    /// Validator, layer constructor and task constructor all receive the stored
    /// configuration with the missing key at its default.
    #[test]
    fn every_call_into_a_plugin_sees_missing_keys_at_their_defaults() {
        let seen = Seen::default();
        let (by_validator, by_ctor) = (seen.clone(), seen.clone());
        let layer = Declaration::layer("l", "0", "", schema(), move |cfg: &Config, _vb| {
            by_ctor.lock().unwrap().push(cfg.clone());
            Ok(Identity)
        })
        .with_validator(move |cfg| {
            by_validator.lock().unwrap().push(cfg.clone());
            Ok(())
        });
        let by_task = seen.clone();
        let task = Declaration::task("t", "0", "", schema(), move |cfg: &Config, _seed| -> Result<NoTask> {
            by_task.lock().unwrap().push(cfg.clone());
            Err(PluginError::Other("not built".into()))
        });
        layer.validate(&stored()).unwrap();
        let vb = VarBuilder::zeros(candle_core::DType::F32, &Device::Cpu);
        layer.build_layer(&stored(), vb).unwrap();
        assert!(task.build_task(&stored(), 0).is_err());
        assert_eq!(*seen.lock().unwrap(), vec![expected(); 3]);
        assert_eq!(layer.complete(&stored()), expected());
    }
}
