//! The run filter of the TUI's `/` box and of `workbench runs --filter`: space-separated terms,
//! all of which must match. One matcher for both, so a filter typed in one finds the same
//! runs in the other.

use crate::run_config::qualified_config;
use crate::store::RunRecord;
use anyhow::{bail, Result};

/// The `field:value` terms a filter understands.
pub const FIELDS: [&str; 6] = ["status", "layer", "task", "plugin", "tag", "sweep"];

/// Whether `run` passes every term of `filter`: `status:S`, `layer:L`, `task:T`,
/// `plugin:P` (layer or task), `tag:T`, `sweep:N`, `key=value` (a configuration value, compared
/// by type: see [`same_value`]; a bare key matches it in any section, `layer.`, `task.` or
/// `train.` in that one), or a bare word matched against status, plugins, tags and notes.
pub fn matches(run: &RunRecord, filter: &str) -> bool {
    // The configuration by section, read once per run and only for a `key=value` term.
    let mut qualified = None;
    filter.split_whitespace().all(|term| {
        let term_lc = term.to_lowercase();
        if let Some((field, want)) = term_lc.split_once(':') {
            let eq = |s: &str| s.to_lowercase() == want;
            return match field {
                "status" => eq(run.status.as_str()) || eq(run.shown_status()),
                "layer" => eq(&run.layer.name),
                "task" => eq(&run.task.name),
                "plugin" => eq(&run.layer.name) || eq(&run.task.name),
                "tag" => run.tags.iter().any(|t| eq(t)),
                "sweep" => run.sweep.is_some_and(|s| s.id.to_string() == want),
                _ => false,
            };
        }
        if let Some((key, want)) = term.split_once('=') {
            let config = qualified.get_or_insert_with(|| qualified_config(&run.config));
            return config.iter().any(|(k, v)| names_key(k, key) && same_value(v, want));
        }
        let hay = [run.status.as_str(), run.shown_status(), &run.layer.name, &run.task.name, &run.notes];
        hay.iter().any(|h| h.to_lowercase().contains(&term_lc))
            || run.tags.iter().any(|t| t.to_lowercase().contains(&term_lc))
    })
}

/// Whether `key` as a user writes it names the configuration key `qualified` (`layer.d`):
/// spelled with its section, or bare (`d`, whichever section has it).
pub fn names_key(qualified: &str, key: &str) -> bool {
    qualified == key || qualified.split_once('.').is_some_and(|(_, bare)| bare == key)
}

/// Whether a configuration value equals what the filter asks for, compared by type: numbers
/// numerically (`lr=1e-3` finds `0.001`, `d=64.0` finds `64`), booleans as booleans, any
/// other text ignoring case.
pub fn same_value(have: &str, want: &str) -> bool {
    if let (Ok(a), Ok(b)) = (have.trim().parse::<f64>(), want.trim().parse::<f64>()) {
        return a == b || (a - b).abs() <= 1e-12 * a.abs().max(b.abs());
    }
    if let (Ok(a), Ok(b)) = (have.trim().parse::<bool>(), want.trim().to_lowercase().parse::<bool>()) {
        return a == b;
    }
    have.trim().eq_ignore_ascii_case(want.trim())
}

/// Refuses a filter with a term no run can match because its field is unknown (`stauts:x`).
/// The TUI filters as the user types and shows the empty table instead; on the command line
/// a typo would silently select nothing.
pub fn check(filter: &str) -> Result<()> {
    for term in filter.split_whitespace() {
        if let Some((field, _)) = term.split_once(':') {
            if !FIELDS.contains(&field.to_lowercase().as_str()) {
                bail!(
                    "unknown filter field `{field}` in `{term}`: use one of {}, key=value for a \
                     configuration value, or a bare word",
                    FIELDS.map(|f| format!("{f}:")).join(", ")
                );
            }
        }
    }
    Ok(())
}

/// The runs of `runs` that pass `filter` (checked first, see [`check`]), in their order.
pub fn select(runs: Vec<RunRecord>, filter: &str) -> Result<Vec<RunRecord>> {
    check(filter)?;
    Ok(runs.into_iter().filter(|r| matches(r, filter)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_refused_with_the_known_ones() {
        let e = check("status:finished stauts:failed").unwrap_err().to_string();
        assert!(e.contains("`stauts`") && e.contains("status:") && e.contains("sweep:"), "{e}");
        assert!(check("Status:finished TAG:x d=64 word").is_ok());
    }

    /// A queued run whose Slurm job has not started reads `submitted` in the run tables, so
    /// `status:submitted` finds it; `status:queued` still does too, as the store has it.
    #[test]
    fn a_submitted_run_is_found_by_its_shown_state_and_its_stored_one() {
        let mut run =
            RunRecord { status: crate::store::RunStatus::Queued, ..RunRecord::fixture(1, "hyperset", json!({})) };
        assert!(!matches(&run, "status:submitted") && matches(&run, "status:queued"));
        run.supervision.job_id = Some("77".into());
        for filter in ["status:submitted", "status:queued", "submitted"] {
            assert!(matches(&run, filter), "{filter}");
        }
        run.held = true;
        assert!(matches(&run, "status:paused") && !matches(&run, "status:submitted"));
    }
}
