//! `NO_COLOR` (<https://no-color.org>): when it is set and not empty, nothing the workbench
//! draws or prints carries an ANSI colour. Bold and reverse video stay, so a cursor or a
//! selection remains visible.
//!
//! Read once per process: drawing asks on every frame.

use std::cell::Cell;
use std::sync::LazyLock;

static FROM_ENV: LazyLock<bool> = LazyLock::new(|| std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()));

thread_local! {
    /// A test's choice, for its own thread only (the environment is shared by every test).
    static OVERRIDE: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Whether colours may be used.
pub fn enabled() -> bool {
    !OVERRIDE.with(Cell::get).unwrap_or(*FROM_ENV)
}

/// Behaves on this thread as if `NO_COLOR` were set (`true`) or unset (`false`).
pub fn set_no_color_on_this_thread(no_color: bool) {
    OVERRIDE.with(|o| o.set(Some(no_color)));
}
