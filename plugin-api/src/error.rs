//! The one error type that crosses the plugin boundary.
//!
//! Errors are flattened to text inside the plugin, so that no value whose destructor lives in
//! plugin code (a boxed error, a backtrace) outlives the call that made it.

/// Result of every call across the plugin boundary.
pub type Result<T> = std::result::Result<T, PluginError>;

/// What went wrong inside a plugin.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PluginError {
    /// A tensor operation failed (shape mismatch, device error...).
    #[error("tensor error: {0}")]
    Tensor(String),
    /// A configuration value was refused by the plugin.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A data file or generator failed.
    #[error("data error: {0}")]
    Data(String),
    /// The plugin panicked; the panic was caught at the boundary.
    #[error("plugin panicked: {0}")]
    Panic(String),
    /// Anything else, already phrased for the user.
    #[error("{0}")]
    Other(String),
}

impl From<candle_core::Error> for PluginError {
    fn from(e: candle_core::Error) -> Self {
        PluginError::Tensor(e.to_string())
    }
}

/// Shorthand for a configuration error.
pub fn config_error(message: impl Into<String>) -> PluginError {
    PluginError::Config(message.into())
}
