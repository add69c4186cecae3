//! Building the layer: shared by the variant, kernel and parameter-count tests (the generic
//! measures come from `plugin_testkit`).

use crate::config::HyperSetConfig;
use crate::model::HyperSet;
use plugin_api::candle::DType;
use plugin_api::candle_nn::VarMap;
use plugin_api::{Config, Value};

/// `Value::Str` shorthand.
pub use plugin_testkit::text as s;

/// The defaults with `pairs` set.
pub fn config(pairs: &[(&str, Value)]) -> Config {
    plugin_testkit::config(&crate::params(), pairs)
}

/// A small layer: d = 16, 2 heads, time_dim = 8, 4 iterations, then `pairs`.
pub fn small(pairs: &[(&str, Value)]) -> Config {
    let mut all = vec![
        ("d", Value::Int(16)),
        ("heads", Value::Int(2)),
        ("time_dim", Value::Int(8)),
        ("iterations", Value::Int(4)),
    ];
    all.extend(pairs.iter().cloned());
    config(&all)
}

/// Builds the layer on the CPU, its parameters in a fresh `VarMap`.
pub fn build(cfg: &Config, dtype: DType) -> (VarMap, HyperSet) {
    plugin_testkit::build(dtype, |vb| HyperSet::new(&HyperSetConfig::from_config(cfg).unwrap(), vb))
}
