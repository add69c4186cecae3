//! Learning-rate schedule: linear warm-up, then cosine decay to a floor.

/// The learning rate at optimisation step `step` (0-based) of `total`.
pub fn cosine_with_warmup(step: u64, total: u64, warmup: u64, lr: f64, min_lr: f64) -> f64 {
    if warmup > 0 && step < warmup {
        return lr * (step + 1) as f64 / warmup as f64;
    }
    let decay_steps = total.saturating_sub(warmup).max(1);
    let progress = ((step - warmup.min(step)) as f64 / decay_steps as f64).min(1.0);
    min_lr + 0.5 * (lr - min_lr) * (1.0 + (std::f64::consts::PI * progress).cos())
}

/// The run log's note when the warm-up is as long as the run or longer: the rate then rises
/// until the last step and never decays, which a short run left at the default warm-up does
/// without a word otherwise.
pub fn warmup_note(steps: u64, warmup: u64, lr: f64, min_lr: f64) -> Option<String> {
    if steps == 0 || warmup < steps {
        return None;
    }
    let last = cosine_with_warmup(steps - 1, steps, warmup, lr, min_lr);
    Some(format!(
        "note: the warm-up (train.warmup={warmup}) is not shorter than the run (train.steps={steps}): the learning \
         rate rises to {last:.2e} of lr={lr:e} by the last step and never decays; set train.warmup below train.steps"
    ))
}

#[cfg(test)]
mod tests {
    use super::{cosine_with_warmup, warmup_note};

    #[test]
    fn a_warm_up_as_long_as_the_run_is_noted_with_the_rate_it_reaches() {
        assert_eq!(warmup_note(600, 50, 1e-3, 1e-5), None);
        assert_eq!(warmup_note(51, 50, 1e-3, 1e-5), None);
        let note = warmup_note(40, 50, 1e-3, 1e-5).unwrap();
        assert!(note.contains("train.warmup=50") && note.contains("train.steps=40"), "{note}");
        // Step 39 of a 50-step warm-up: 40 / 50 of lr.
        assert!(note.contains("rises to 8.00e-4 of lr=1e-3"), "{note}");
        assert!(warmup_note(50, 50, 1e-3, 1e-5).unwrap().contains("rises to 1.00e-3"));
        assert_eq!(warmup_note(0, 50, 1e-3, 1e-5), None, "nothing to train");
    }

    #[test]
    fn warms_up_then_decays_to_the_floor() {
        assert!((cosine_with_warmup(0, 100, 10, 1.0, 0.1) - 0.1).abs() < 1e-12);
        assert!((cosine_with_warmup(9, 100, 10, 1.0, 0.1) - 1.0).abs() < 1e-12);
        assert!((cosine_with_warmup(10, 100, 10, 1.0, 0.1) - 1.0).abs() < 1e-12);
        assert!((cosine_with_warmup(55, 100, 10, 1.0, 0.1) - 0.55).abs() < 1e-12);
        assert!((cosine_with_warmup(100, 100, 10, 1.0, 0.1) - 0.1).abs() < 1e-12);
        assert!(
            (cosine_with_warmup(5, 100, 0, 1.0, 0.0) - 0.5 * (1.0 + (std::f64::consts::PI * 0.05).cos())).abs() < 1e-12
        );
    }
}
