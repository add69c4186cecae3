//! Configurations built from a plugin's schema, as the host builds them.

use plugin_api::{Config, ParamSpec, Value};

/// The schema's defaults with `pairs` set as given, without checking them against the schema:
/// tests also build configurations that the plugin's own validator must refuse, and it is the
/// validator, not this function, that has to name the problem.
pub fn config(schema: &[ParamSpec], pairs: &[(&str, Value)]) -> Config {
    let mut cfg = Config::defaults(schema);
    for (key, value) in pairs {
        cfg.set(key, value.clone());
    }
    cfg
}

/// The schema's defaults with `overrides` written as on the command line (`key=value`), each
/// parsed by its spec as the host parses it. Panics naming a key the schema does not have or a
/// value its spec refuses, so a typo in a test cannot silently test the defaults.
pub fn config_from_text(schema: &[ParamSpec], overrides: &[(&str, &str)]) -> Config {
    let mut cfg = Config::defaults(schema);
    for (key, text) in overrides {
        let spec = schema.iter().find(|p| p.name == *key).unwrap_or_else(|| panic!("no option {key}"));
        cfg.set(key, spec.parse(text).unwrap_or_else(|e| panic!("{key}={text}: {e}")));
    }
    cfg
}

/// `Value::Str` shorthand for choice and text options in `config` pairs.
pub fn text(value: &str) -> Value {
    Value::Str(value.into())
}
