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

#[cfg(test)]
mod tests {
    use super::cosine_with_warmup;

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
