//! Seeded fuzzing of `key=value` overrides: random keys of every plugin pairing with values
//! at and beyond their ranges, huge, negative, not numbers at all, lists and ranges. Checking a
//! configuration must answer each within seconds, accepted or refused with a message, and never
//! panic.

use crate::common;

use plugin_api::{ParamKind, ParamSpec, PluginKind};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use workbench::run_config::{train_schema, RunConfig};

const CASES: usize = 320;

/// The longest a configuration check may take.
const LIMIT: Duration = Duration::from_secs(20);

/// A value for `spec`: often near its range, sometimes far outside it or not of its type.
fn value_for(spec: &ParamSpec, rng: &mut StdRng) -> String {
    let wild = ["", "-1", "0", "1e300", "-1e300", "NaN", "inf", "abc", "1,2,3", "1:10:log3", "√2", "0x10", " 7 "];
    if rng.random_bool(0.3) {
        return wild.choose(rng).unwrap().to_string();
    }
    match &spec.kind {
        ParamKind::Int { min, max } => {
            let candidates = [*min, *max, min.saturating_sub(1), max.saturating_add(1), (*min + *max) / 2];
            candidates.choose(rng).unwrap().to_string()
        }
        ParamKind::Float { min, max } => {
            let candidates = [*min, *max, min - 1.0, max * 2.0, (min + max) / 2.0];
            format!("{}", candidates.choose(rng).unwrap())
        }
        ParamKind::Choice(choices) => match rng.random_bool(0.8) {
            true => choices.choose(rng).unwrap().to_string(),
            false => "none-of-them".to_string(),
        },
        ParamKind::Bool => ["true", "false", "yes", "2"].choose(rng).unwrap().to_string(),
        ParamKind::Text => {
            ["", "x", "1.5,2", "1e9", "/no/such/file", "/dev/zero", "a,b"].choose(rng).unwrap().to_string()
        }
    }
}

#[test]
fn random_overrides_are_answered_quickly_and_never_panic() {
    let host = std::sync::Arc::new(common::load_plugins(
        "fuzz",
        &[
            "hyperset",
            "transformer",
            "crate_layer",
            "energy_transformer",
            "intrinsic",
            "cem",
            "sudoku",
            "language",
            "image_task",
            "masked_image",
            "gp_regression",
        ],
    ));
    assert!(host.errors.is_empty(), "{:?}", host.errors);
    let of_kind = |kind| (0..host.plugins.len()).filter(|i| host.plugins[*i].declaration.kind() == kind).collect();
    let (layers, tasks): (Vec<usize>, Vec<usize>) = (of_kind(PluginKind::Layer), of_kind(PluginKind::Task));
    let train = train_schema();
    let mut rng = StdRng::seed_from_u64(16);
    let (mut accepted, mut refused, mut slowest) = (0, 0, Duration::ZERO);
    for case in 0..CASES {
        let (layer, task) = (*layers.choose(&mut rng).unwrap(), *tasks.choose(&mut rng).unwrap());
        let (layer_decl, task_decl) = (&host.plugins[layer].declaration, &host.plugins[task].declaration);
        let scopes = [("layer", &layer_decl.params), ("task", &task_decl.params), ("train", &train)];
        let overrides: Vec<String> = (0..rng.random_range(1..=4))
            .map(|_| {
                let (scope, params) = scopes.choose(&mut rng).unwrap();
                let spec = params.choose(&mut rng).unwrap();
                format!("{scope}.{}={}", spec.name, value_for(spec, &mut rng))
            })
            .collect();
        let (sent, received) = mpsc::channel();
        let started = Instant::now();
        let (shared, given) = (host.clone(), overrides.clone());
        // A thread of its own, so a check that hangs fails the test instead of stalling it.
        std::thread::spawn(move || {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let (l, t) = (&shared.plugins[layer].declaration, &shared.plugins[task].declaration);
                RunConfig::resolve(l, t, &given).map(|_| ()).map_err(|e| format!("{e:#}"))
            }));
            let _ = sent.send(outcome);
        });
        let outcome = received.recv_timeout(LIMIT).unwrap_or_else(|_| {
            panic!("case {case}: {} on {} with {overrides:?} took over {LIMIT:?}", layer_decl.name, task_decl.name)
        });
        match outcome {
            Ok(Ok(())) => accepted += 1,
            Ok(Err(message)) => {
                assert!(!message.trim().is_empty(), "case {case}: an empty refusal for {overrides:?}");
                refused += 1;
            }
            Err(_) => panic!("case {case}: checking {overrides:?} panicked"),
        }
        slowest = slowest.max(started.elapsed());
    }
    println!("FIGURE override fuzzing: {CASES} cases: {accepted} accepted, {refused} refused, 0 panics, 0 hangs; slowest {:.1} s", slowest.as_secs_f64());
    assert_eq!(accepted + refused, CASES);
}
