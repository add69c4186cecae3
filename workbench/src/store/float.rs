//! Optional floating-point values bound to queries on either backend.
//!
//! sqlx 0.9's generic driver sends a NULL `f64` to PostgreSQL declared as `float4` (and a NULL
//! `f32` as `float8`). PostgreSQL keeps a prepared statement's parameter types, so a statement
//! first run with a NULL would refuse every later 8-byte value ("incorrect binary data format").
//! [`Float`] therefore binds a value as `f64` and a NULL with the tag that both engines read as
//! the NULL of a double column.

use sqlx::any::{AnyTypeInfo, AnyTypeInfoKind};
use sqlx::encode::{Encode, IsNull};
use sqlx::error::BoxDynError;
use sqlx::types::Type;
use sqlx::Any;
use sqlx_core::any::{AnyArgumentBuffer, AnyValueKind};

/// A nullable double-precision parameter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Float(pub Option<f64>);

impl Float {
    /// NaN is stored as NULL: SQLite cannot store NaN, and both backends then read the same.
    pub fn nan_as_null(v: f64) -> Float {
        Float((!v.is_nan()).then_some(v))
    }
}

impl Type<Any> for Float {
    fn type_info() -> AnyTypeInfo {
        <f64 as Type<Any>>::type_info()
    }
}

impl Encode<'_, Any> for Float {
    fn encode_by_ref(&self, buf: &mut AnyArgumentBuffer) -> Result<IsNull, BoxDynError> {
        match self.0 {
            Some(v) => {
                buf.0.push(AnyValueKind::Double(v));
                Ok(IsNull::No)
            }
            None => {
                // The tag that sqlx maps to a PostgreSQL `float8` NULL (see the module doc).
                buf.0.push(AnyValueKind::Null(AnyTypeInfoKind::Real));
                Ok(IsNull::Yes)
            }
        }
    }
}
