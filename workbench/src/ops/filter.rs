//! The run filter of the TUI's `/` box and of `workbench runs --filter`: space-separated terms,
//! all of which must match. One matcher for both, so a filter typed in one finds the same
//! runs in the other.

use crate::run_config::qualified_config;
use crate::store::RunRecord;
use anyhow::{bail, Result};

/// The `field:value` terms a filter understands.
pub const FIELDS: [&str; 7] = ["status", "layer", "task", "plugin", "tag", "sweep", "user"];

/// One term of a filter, as [`parse`] reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Term<'a> {
    /// `field:value`, one of [`FIELDS`].
    Field(&'a str, &'a str),
    /// `key=value`: a configuration value, compared by type.
    Equals(&'a str, &'a str),
    /// `key<value`, `key<=value`, `key>value`, `key>=value`: a configuration value compared
    /// as a number.
    Compare(&'a str, Comparison, &'a str),
    /// Anything else: matched against status, plugins, tags and notes.
    Word(&'a str),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Comparison {
    Less,
    AtMost,
    Greater,
    AtLeast,
}

impl Comparison {
    fn holds(self, have: f64, want: f64) -> bool {
        match self {
            Comparison::Less => have < want,
            Comparison::AtMost => have <= want,
            Comparison::Greater => have > want,
            Comparison::AtLeast => have >= want,
        }
    }
}

/// A term and whether it is negated (`-status:failed`, `-tag:bad`, `-lr=1e-3`). The first of
/// `:`, `=`, `<`, `>` decides what a term is, so a value may hold the others
/// (`device=cuda:0`).
fn parse(term: &str) -> (bool, Term<'_>) {
    let (negated, term) = match term.strip_prefix('-') {
        Some(rest) if !rest.is_empty() => (true, rest),
        _ => (false, term),
    };
    let Some(at) = term.find([':', '=', '<', '>']).filter(|&at| at > 0) else {
        return (negated, Term::Word(term));
    };
    let (key, rest) = term.split_at(at);
    let parsed = match rest.as_bytes() {
        [b':', ..] => Term::Field(key, &rest[1..]),
        [b'=', ..] => Term::Equals(key, &rest[1..]),
        [b'<', b'=', ..] => Term::Compare(key, Comparison::AtMost, &rest[2..]),
        [b'>', b'=', ..] => Term::Compare(key, Comparison::AtLeast, &rest[2..]),
        [b'<', ..] => Term::Compare(key, Comparison::Less, &rest[1..]),
        _ => Term::Compare(key, Comparison::Greater, &rest[1..]),
    };
    (negated, parsed)
}

/// Whether `run` passes every term of `filter`: `status:S`, `layer:L`, `task:T`,
/// `plugin:P` (layer or task), `tag:T`, `sweep:N`, `user:U` (who stored the run; `user:me`,
/// the user running this), `key=value` (a configuration value, compared
/// by type: see [`same_value`]; a bare key matches it in any section, `layer.`, `task.` or
/// `train.` in that one), `key<value`, `key<=value`, `key>value`, `key>=value` (a
/// configuration value compared as a number), or a bare word matched against status, plugins,
/// tags, notes and user; `-` before a term keeps the runs it does not match.
pub fn matches(run: &RunRecord, filter: &str) -> bool {
    // The configuration by section, read once per run and only for a term on a key.
    let mut qualified = None;
    filter.split_whitespace().all(|term| {
        let (negated, term) = parse(term);
        let matched = match term {
            Term::Field(field, want) => {
                let want = want.to_lowercase();
                let eq = |s: &str| s.to_lowercase() == want;
                match field.to_lowercase().as_str() {
                    "status" => eq(run.status.as_str()) || eq(run.shown_status()),
                    "layer" => eq(&run.layer.name),
                    "task" => eq(&run.task.name),
                    "plugin" => eq(&run.layer.name) || eq(&run.task.name),
                    "tag" => run.tags.iter().any(|t| eq(t)),
                    "sweep" => run.sweep.is_some_and(|s| s.id.to_string() == want),
                    "user" if want == "me" => run.created_by.as_deref() == Some(crate::store::user_name().as_str()),
                    "user" => run.created_by.as_deref().is_some_and(eq),
                    _ => false,
                }
            }
            Term::Equals(key, want) => {
                let config = qualified.get_or_insert_with(|| qualified_config(&run.config));
                config.iter().any(|(k, v)| names_key(k, key) && same_value(v, want))
            }
            Term::Compare(key, comparison, want) => {
                let config = qualified.get_or_insert_with(|| qualified_config(&run.config));
                let number = |text: &str| text.trim().parse::<f64>().ok().filter(|v| !v.is_nan());
                config.iter().any(|(k, v)| {
                    names_key(k, key)
                        && number(v).zip(number(want)).is_some_and(|(have, want)| comparison.holds(have, want))
                })
            }
            Term::Word(word) => {
                let word = word.to_lowercase();
                let user = run.created_by.as_deref().unwrap_or_default();
                let hay = [run.status.as_str(), run.shown_status(), &run.layer.name, &run.task.name, &run.notes, user];
                hay.iter().any(|h| h.to_lowercase().contains(&word))
                    || run.tags.iter().any(|t| t.to_lowercase().contains(&word))
            }
        };
        matched != negated
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

/// Refuses a filter with a term no run can match: an unknown field (`stauts:x`), or a
/// comparison with something other than a number (`lr<abc`). The TUI filters as the user
/// types and shows the empty table instead; on the command line a typo would silently select
/// nothing.
pub fn check(filter: &str) -> Result<()> {
    for term in filter.split_whitespace() {
        match parse(term).1 {
            Term::Field(field, _) if !FIELDS.contains(&field.to_lowercase().as_str()) => bail!(
                "unknown filter field `{field}` in `{term}`: use one of {}, key=value (or key<value, \
                 key>=value, ...) for a configuration value, or a bare word",
                FIELDS.map(|f| format!("{f}:")).join(", ")
            ),
            Term::Compare(key, _, want) if want.trim().parse::<f64>().map_or(true, f64::is_nan) => bail!(
                "`{term}` compares `{key}` with `{want}`, which is not a number: <, <=, > and >= compare \
                 numbers (e.g. lr<1e-3); use {key}={want} for other values"
            ),
            _ => {}
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

    fn run(id: i64, d: u64, lr: f64, device: &str) -> RunRecord {
        let config = json!({
            "layer_config": {"d": d, "attention": "bisoftmax"},
            "task_config": {},
            "train": {"lr": lr, "device": device},
        });
        let mut run = RunRecord::fixture(id, "hyperset", config);
        run.tags = vec![format!("t{id}")];
        run
    }

    fn ids(runs: &[RunRecord], filter: &str) -> Vec<i64> {
        check(filter).unwrap_or_else(|e| panic!("{filter}: {e}"));
        runs.iter().filter(|r| matches(r, filter)).map(|r| r.id).collect()
    }

    #[test]
    fn comparisons_take_numbers_and_a_minus_keeps_what_a_term_does_not_match() {
        let runs = [run(1, 32, 1e-4, "cpu"), run(2, 64, 1e-3, "cuda:0"), run(3, 128, 3e-3, "cuda:1")];
        assert_eq!(ids(&runs, "d>32"), [2, 3]);
        assert_eq!(ids(&runs, "d>=64"), [2, 3]);
        assert_eq!(ids(&runs, "layer.d<=64"), [1, 2]);
        assert_eq!(ids(&runs, "lr<1e-3"), [1]);
        assert_eq!(ids(&runs, "lr>=0.001 d<100"), [2]);
        // A key no run has, or a section without it, matches nothing.
        assert!(ids(&runs, "task.d>1").is_empty() && ids(&runs, "depth>1").is_empty());
        // Negation of any kind of term.
        assert_eq!(ids(&runs, "-d=64"), [1, 3]);
        assert_eq!(ids(&runs, "-tag:t1"), [2, 3]);
        assert_eq!(ids(&runs, "-lr<1e-3 -t3"), [2]);
        assert_eq!(ids(&runs, "-layer:hyperset"), Vec::<i64>::new());
        // A value may hold `:` (the first of `:`, `=`, `<`, `>` decides the kind of term).
        assert_eq!(ids(&runs, "device=cuda:0"), [2]);
        assert_eq!(ids(&runs, "-device=cpu"), [2, 3]);
        // A lone `-` is a word, as before.
        assert!(check("-").is_ok());
    }

    #[test]
    fn a_comparison_with_something_other_than_a_number_is_refused() {
        let e = check("lr<abc").unwrap_err().to_string();
        assert!(e.contains("`lr<abc`") && e.contains("not a number") && e.contains("lr=abc"), "{e}");
        assert!(check("d>=nan").is_err());
        let e = check("-stauts:x").unwrap_err().to_string();
        assert!(e.contains("`stauts`"), "{e}");
    }

    /// `user:` finds the runs one user stored (`me`: the user running the filter); runs stored
    /// before users were recorded have none.
    #[test]
    fn user_finds_whose_runs_they_are() {
        let mut runs = [run(1, 32, 1e-4, "cpu"), run(2, 64, 1e-3, "cpu"), run(3, 64, 1e-3, "cpu")];
        runs[0].created_by = Some("alice".into());
        runs[1].created_by = Some(crate::store::user_name());
        assert_eq!(ids(&runs, "user:Alice"), [1]);
        assert_eq!(ids(&runs, "user:me"), [2]);
        assert_eq!(ids(&runs, "-user:alice"), [2, 3]);
        assert_eq!(ids(&runs, "alic"), [1]);
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
