//! Each update rule against the same rule written out element by element in f64, over three
//! sub-steps (so the carried state matters), on a gradient that depends on the point where
//! it is evaluated (so Nesterov's look-ahead matters), with per-element step sizes.

use super::*;
use plugin_api::candle::{Device, Tensor};

const A: [f64; 6] = [2.0, 0.5, 1.5, 3.0, 0.25, 1.0];
const B: [f64; 6] = [1.0, -2.0, 0.5, 0.0, 3.0, -1.0];
const X0: [f64; 6] = [0.3, -1.2, 2.0, 0.7, -0.4, 1.1];
const ETA: [f64; 6] = [0.1, 0.2, 0.05, 0.15, 0.3, 0.1];
const SUB_STEPS: usize = 3;

/// `g(y) = a * y - b`, element-wise (the gradient of a separable quadratic).
fn gradient_at(y: &[f64]) -> Vec<f64> {
    y.iter().zip(A.iter().zip(B)).map(|(y, (a, b))| a * y - b).collect()
}

fn tensor(values: &[f64]) -> Tensor {
    Tensor::from_slice(values, (1, 2, 3), &Device::Cpu).unwrap()
}

/// Three sub-steps of `optimizer` through `Optimizer::step`.
fn by_the_layer(optimizer: Optimizer) -> Vec<f64> {
    let (a, b) = (tensor(&A), tensor(&B));
    let eta = StepSize::Channelwise(tensor(&ETA));
    let mut state = OptimizerState::default();
    let mut y = tensor(&X0);
    for _ in 0..SUB_STEPS {
        y = optimizer.step(&mut state, &y, &eta, None, Kernels::Composed, |p| Ok(((p * &a)? - &b)?)).unwrap();
    }
    y.flatten_all().unwrap().to_vec1().unwrap()
}

/// Three sub-steps of `optimizer` written out by hand.
fn by_hand(optimizer: Optimizer) -> Vec<f64> {
    let mut y = X0.to_vec();
    let (mut p, mut v) = (vec![0.0; 6], vec![0.0; 6]);
    for k in 1..=SUB_STEPS as i32 {
        match optimizer {
            Optimizer::Gd => {
                let g = gradient_at(&y);
                (0..6).for_each(|i| y[i] -= ETA[i] * g[i]);
            }
            Optimizer::Momentum { beta } => {
                let g = gradient_at(&y);
                for i in 0..6 {
                    p[i] = beta * p[i] + g[i];
                    y[i] -= ETA[i] * p[i];
                }
            }
            Optimizer::Nesterov { beta } => {
                let lookahead: Vec<f64> = (0..6).map(|i| y[i] - ETA[i] * beta * p[i]).collect();
                let g = gradient_at(&lookahead);
                for i in 0..6 {
                    p[i] = beta * p[i] + g[i];
                    y[i] -= ETA[i] * p[i];
                }
            }
            Optimizer::RmsProp { beta2, eps } => {
                let g = gradient_at(&y);
                for i in 0..6 {
                    v[i] = beta2 * v[i] + (1.0 - beta2) * g[i] * g[i];
                    y[i] -= ETA[i] * g[i] / (v[i] + eps).sqrt();
                }
            }
            Optimizer::Adam { beta, beta2, eps } => {
                let g = gradient_at(&y);
                for i in 0..6 {
                    p[i] = beta * p[i] + (1.0 - beta) * g[i];
                    v[i] = beta2 * v[i] + (1.0 - beta2) * g[i] * g[i];
                    let (m_hat, v_hat) = (p[i] / (1.0 - beta.powi(k)), v[i] / (1.0 - beta2.powi(k)));
                    y[i] -= ETA[i] * m_hat / (v_hat + eps).sqrt();
                }
            }
        }
    }
    y
}

fn optimizers() -> [Optimizer; 5] {
    [
        Optimizer::Gd,
        Optimizer::Momentum { beta: 0.9 },
        Optimizer::Nesterov { beta: 0.8 },
        Optimizer::RmsProp { beta2: 0.9, eps: 1e-8 },
        Optimizer::Adam { beta: 0.9, beta2: 0.99, eps: 1e-8 },
    ]
}

#[test]
fn every_rule_matches_its_hand_computation() {
    for optimizer in optimizers() {
        let (layer, hand) = (by_the_layer(optimizer), by_hand(optimizer));
        for (got, want) in layer.iter().zip(&hand) {
            assert!((got - want).abs() < 1e-12, "{optimizer:?}: {layer:?} vs {hand:?}");
        }
    }
}

/// The rules differ from one another (the hand computation is not trivially the same for
/// all), and momentum / Nesterov with `beta = 0` are gd.
#[test]
fn the_rules_differ_and_zero_beta_is_gd() {
    let results: Vec<Vec<f64>> = optimizers().into_iter().map(by_the_layer).collect();
    for i in 0..results.len() {
        for j in 0..i {
            let diff = results[i].iter().zip(&results[j]).map(|(a, b)| (a - b).abs()).fold(0.0, plugin_testkit::larger);
            assert!(diff > 1e-3, "{:?} and {:?} agree", optimizers()[i], optimizers()[j]);
        }
    }
    let gd = by_the_layer(Optimizer::Gd);
    assert_eq!(by_the_layer(Optimizer::Momentum { beta: 0.0 }), gd);
    assert_eq!(by_the_layer(Optimizer::Nesterov { beta: 0.0 }), gd);
}

/// Adam's first step is about `eta sign(g)`; RMSProp's is `eta g / sqrt((1 - beta2) g^2)`.
#[test]
fn first_steps_of_the_preconditioned_rules_are_sign_like() {
    let y = tensor(&X0);
    let g = gradient_at(&X0);
    let step = StepSize::Constant(0.1);
    let one = |optimizer: Optimizer| -> Vec<f64> {
        let moved = optimizer
            .step(&mut OptimizerState::default(), &y, &step, None, Kernels::Composed, |p| {
                Ok(((p * &tensor(&A))? - tensor(&B))?)
            })
            .unwrap();
        let moved: Vec<f64> = moved.flatten_all().unwrap().to_vec1().unwrap();
        moved.iter().zip(X0).map(|(m, x)| (x - m) / 0.1).collect()
    };
    for (i, d) in one(Optimizer::Adam { beta: 0.9, beta2: 0.99, eps: 1e-12 }).iter().enumerate() {
        assert!((d - g[i].signum()).abs() < 1e-9, "adam first direction {d} vs sign {}", g[i].signum());
    }
    for (i, d) in one(Optimizer::RmsProp { beta2: 0.99, eps: 1e-12 }).iter().enumerate() {
        assert!((d - 10.0 * g[i].signum()).abs() < 1e-7, "rmsprop first direction {d}");
    }
}

#[test]
fn bad_names_and_ranges_are_refused_naming_the_allowed_values() {
    let err = Optimizer::parse("lbfgs", 0.9, 0.99, 1e-8).unwrap_err().to_string();
    assert!(err.contains("gd | momentum | nesterov | rmsprop | adam"), "{err}");
    for (name, beta, beta2, eps, needle) in [
        ("momentum", 1.0, 0.99, 1e-8, "beta = 1"),
        ("nesterov", -0.1, 0.99, 1e-8, "beta = -0.1"),
        ("adam", 0.9, 1.0, 1e-8, "beta2 = 1"),
        ("rmsprop", 0.9, 1.5, 1e-8, "beta2 = 1.5"),
        ("adam", 0.9, 0.99, 0.0, "eps = 0"),
    ] {
        let err = Optimizer::parse(name, beta, beta2, eps).unwrap_err().to_string();
        assert!(err.contains(needle) && err.contains(name), "{name}: {err}");
    }
    // A key the optimiser does not read is not range-checked here (the config refuses it).
    assert!(Optimizer::parse("rmsprop", 1.0, 0.99, 1e-8).is_ok());
    assert!(Optimizer::parse("gd", 1.0, 1.0, 0.0).is_ok());
}
