//! Hyperparameter schemas: what a plugin accepts, and the validated values it receives.
//!
//! The host validates every `key=value` override against the schema before a run is stored,
//! so a plugin's constructor only ever sees complete, well-typed, in-range values.
//!
//! A configuration stored before a key existed lacks that key. The contract fills it in:
//! [`Config::with_defaults`] adds every missing key with its default, and
//! [`Declaration`](crate::Declaration) does so before every call into a plugin (its
//! validator and constructors), so plugins never handle a missing key themselves.

use crate::error::{config_error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// One hyperparameter value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    /// A boolean flag.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A real number.
    Float(f64),
    /// A string (also the value of a choice).
    Str(String),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Str(s) => write!(f, "{s}"),
        }
    }
}

/// The type of a hyperparameter and the values it allows.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamKind {
    /// An integer in `min..=max`.
    Int {
        /// Smallest allowed value.
        min: i64,
        /// Largest allowed value.
        max: i64,
    },
    /// A real number in `min..=max`.
    Float {
        /// Smallest allowed value.
        min: f64,
        /// Largest allowed value.
        max: f64,
    },
    /// `true` or `false`.
    Bool,
    /// One of a fixed list of names.
    Choice(Vec<String>),
    /// Free text (a path, a list...).
    Text,
}

impl ParamKind {
    /// Short type name for listings: `int`, `float`, `bool`, `choice`, `text`.
    pub fn type_name(&self) -> &'static str {
        match self {
            ParamKind::Int { .. } => "int",
            ParamKind::Float { .. } => "float",
            ParamKind::Bool => "bool",
            ParamKind::Choice(_) => "choice",
            ParamKind::Text => "text",
        }
    }

    /// The allowed values, phrased for a listing (`1..=64`, `a | b`).
    pub fn allowed(&self) -> String {
        match self {
            ParamKind::Int { min, max } => format!("{min}..={max}"),
            ParamKind::Float { min, max } => format!("{min}..={max}"),
            ParamKind::Bool => "true | false".into(),
            ParamKind::Choice(c) => c.join(" | "),
            ParamKind::Text => "any text".into(),
        }
    }
}

/// The declaration of one hyperparameter.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamSpec {
    /// Key used on the command line (`key=value`).
    pub name: String,
    /// Type and allowed values.
    pub kind: ParamKind,
    /// Value used when the user gives none.
    pub default: Value,
    /// One line of help.
    pub help: String,
}

impl ParamSpec {
    /// An integer parameter in `min..=max`.
    pub fn int(name: &str, default: i64, min: i64, max: i64, help: &str) -> Self {
        Self::new(name, ParamKind::Int { min, max }, Value::Int(default), help)
    }
    /// A real parameter in `min..=max`.
    pub fn float(name: &str, default: f64, min: f64, max: f64, help: &str) -> Self {
        Self::new(name, ParamKind::Float { min, max }, Value::Float(default), help)
    }
    /// A boolean parameter.
    pub fn bool(name: &str, default: bool, help: &str) -> Self {
        Self::new(name, ParamKind::Bool, Value::Bool(default), help)
    }
    /// A choice among `choices`; `default` must be one of them.
    pub fn choice(name: &str, default: &str, choices: &[&str], help: &str) -> Self {
        let choices = choices.iter().map(|c| c.to_string()).collect();
        Self::new(name, ParamKind::Choice(choices), Value::Str(default.into()), help)
    }
    /// A free-text parameter.
    pub fn text(name: &str, default: &str, help: &str) -> Self {
        Self::new(name, ParamKind::Text, Value::Str(default.into()), help)
    }

    fn new(name: &str, kind: ParamKind, default: Value, help: &str) -> Self {
        Self { name: name.into(), kind, default, help: help.into() }
    }

    /// Parses and checks a value given as text on the command line or in a form.
    pub fn parse(&self, text: &str) -> std::result::Result<Value, String> {
        let text = text.trim();
        let value = match &self.kind {
            ParamKind::Int { .. } => {
                text.parse::<i64>().map(Value::Int).map_err(|_| format!("`{text}` is not an integer"))?
            }
            ParamKind::Float { .. } => {
                text.parse::<f64>().map(Value::Float).map_err(|_| format!("`{text}` is not a number"))?
            }
            ParamKind::Bool => match text.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => Value::Bool(true),
                "false" | "0" | "no" | "off" => Value::Bool(false),
                _ => return Err(format!("`{text}` is not true or false")),
            },
            ParamKind::Choice(_) | ParamKind::Text => Value::Str(text.to_string()),
        };
        self.check(&value)?;
        Ok(value)
    }

    /// Checks a typed value (e.g. one read back from a stored config) against the schema.
    pub fn check(&self, value: &Value) -> std::result::Result<(), String> {
        match (&self.kind, value) {
            (ParamKind::Int { min, max }, Value::Int(v)) => {
                if v < min || v > max {
                    return Err(format!("{v} is outside the allowed range {min}..={max}"));
                }
            }
            (ParamKind::Float { min, max }, Value::Float(v)) => {
                if !v.is_finite() || v < min || v > max {
                    return Err(format!("{v} is outside the allowed range {min}..={max}"));
                }
            }
            (ParamKind::Float { min, max }, Value::Int(v)) => {
                let v = *v as f64;
                if v < *min || v > *max {
                    return Err(format!("{v} is outside the allowed range {min}..={max}"));
                }
            }
            (ParamKind::Bool, Value::Bool(_)) | (ParamKind::Text, Value::Str(_)) => {}
            (ParamKind::Choice(choices), Value::Str(s)) => {
                if !choices.iter().any(|c| c == s) {
                    return Err(format!("`{s}` is not one of {}", choices.join(" | ")));
                }
            }
            (kind, v) => return Err(format!("{v} is not a valid {}", kind.type_name())),
        }
        Ok(())
    }
}

/// Validated hyperparameter values, keyed by name. Every key of the schema is present when a
/// plugin receives it (missing keys are filled by [`Config::with_defaults`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Config(pub BTreeMap<String, Value>);

impl Config {
    /// The defaults of a schema.
    pub fn defaults(schema: &[ParamSpec]) -> Self {
        Config(schema.iter().map(|p| (p.name.clone(), p.default.clone())).collect())
    }

    /// This configuration with every key of `schema` it lacks set to the key's default, so
    /// that one stored before an option existed reads as if the option had been left at its
    /// default. Keys the schema does not declare are kept as they are.
    pub fn with_defaults(&self, schema: &[ParamSpec]) -> Self {
        let mut complete = self.clone();
        for spec in schema {
            complete.0.entry(spec.name.clone()).or_insert_with(|| spec.default.clone());
        }
        complete
    }

    /// Sets one value (already checked by the caller).
    pub fn set(&mut self, key: &str, value: Value) {
        self.0.insert(key.to_string(), value);
    }

    fn get(&self, key: &str) -> Result<&Value> {
        self.0.get(key).ok_or_else(|| config_error(format!("missing key `{key}` (not in the schema?)")))
    }

    /// An integer value as `usize`.
    pub fn usize(&self, key: &str) -> Result<usize> {
        match self.get(key)? {
            Value::Int(v) if *v >= 0 => Ok(*v as usize),
            v => Err(config_error(format!("`{key}` = {v} is not a non-negative integer"))),
        }
    }

    /// An integer value.
    pub fn i64(&self, key: &str) -> Result<i64> {
        match self.get(key)? {
            Value::Int(v) => Ok(*v),
            v => Err(config_error(format!("`{key}` = {v} is not an integer"))),
        }
    }

    /// A real value (integers are widened).
    pub fn f64(&self, key: &str) -> Result<f64> {
        match self.get(key)? {
            Value::Float(v) => Ok(*v),
            Value::Int(v) => Ok(*v as f64),
            v => Err(config_error(format!("`{key}` = {v} is not a number"))),
        }
    }

    /// A boolean value.
    pub fn bool(&self, key: &str) -> Result<bool> {
        match self.get(key)? {
            Value::Bool(v) => Ok(*v),
            v => Err(config_error(format!("`{key}` = {v} is not a boolean"))),
        }
    }

    /// A choice or text value.
    pub fn str(&self, key: &str) -> Result<&str> {
        match self.get(key)? {
            Value::Str(v) => Ok(v),
            v => Err(config_error(format!("`{key}` = {v} is not text"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_checks_type_and_range() {
        let p = ParamSpec::int("heads", 4, 1, 64, "attention heads");
        assert_eq!(p.parse("8"), Ok(Value::Int(8)));
        assert!(p.parse("0").unwrap_err().contains("1..=64"));
        assert!(p.parse("eight").unwrap_err().contains("not an integer"));
        let c = ParamSpec::choice("ff", "relu", &["relu", "gelu"], "activation");
        assert!(c.parse("tanh").unwrap_err().contains("relu | gelu"));
        let f = ParamSpec::float("lr", 1e-3, 0.0, 1.0, "");
        assert_eq!(f.parse("1e-4"), Ok(Value::Float(1e-4)));
        assert!(f.parse("nan").is_err());
        let b = ParamSpec::bool("x0", true, "");
        assert_eq!(b.parse("off"), Ok(Value::Bool(false)));
    }

    #[test]
    fn config_round_trips_through_json() {
        let schema = vec![
            ParamSpec::int("d", 128, 1, 4096, ""),
            ParamSpec::float("lr", 0.5, 0.0, 1.0, ""),
            ParamSpec::choice("a", "x", &["x", "y"], ""),
            ParamSpec::bool("b", false, ""),
        ];
        let cfg = Config::defaults(&schema);
        let json = serde_json::to_string(&cfg).unwrap();
        let back: Config = serde_json::from_str(&json).unwrap();
        assert_eq!(back, cfg);
        assert_eq!(back.usize("d").unwrap(), 128);
        assert_eq!(back.f64("lr").unwrap(), 0.5);
        assert!(back.usize("a").is_err());
    }

    /// A configuration stored before `b` existed reads `b`'s default; stored values win over
    /// defaults, and keys outside the schema stay.
    #[test]
    fn missing_keys_take_their_defaults() {
        let schema = vec![ParamSpec::int("d", 128, 1, 4096, ""), ParamSpec::bool("b", false, "")];
        let mut stored = Config::default();
        stored.set("d", Value::Int(64));
        stored.set("retired", Value::Str("kept".into()));
        let read = stored.with_defaults(&schema);
        assert_eq!(read.usize("d").unwrap(), 64);
        assert!(!read.bool("b").unwrap());
        assert_eq!(read.str("retired").unwrap(), "kept");
        assert_eq!(Config::default().with_defaults(&schema), Config::defaults(&schema));
    }
}
