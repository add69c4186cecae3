use super::cholesky::{blocked_cholesky, cholesky_with_jitter};
use super::*;
use nalgebra::{DMatrix, SymmetricEigen};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn kernel(family: KernelFamily, length_scale: f64) -> Kernel {
    Kernel { family, length_scale, variance: 2.0 }
}

/// The largest absolute entry, NaN when any entry is NaN: nalgebra's `amax` keeps a NaN only
/// where it is the last entry compared, so a tolerance checked on it could pass NaNs.
fn largest_abs(m: &DMatrix<f64>) -> f64 {
    m.iter().map(|v| v.abs()).fold(0.0, |a, b| if a.is_nan() || b.is_nan() { f64::NAN } else { a.max(b) })
}

/// One of each family, with parameters that give correlated points in `[-1, 1]^10`.
fn all_kernels() -> Vec<Kernel> {
    vec![
        kernel(KernelFamily::Rbf, 2.0),
        kernel(KernelFamily::Matern(MaternNu::Half), 2.0),
        kernel(KernelFamily::Matern(MaternNu::ThreeHalves), 2.0),
        kernel(KernelFamily::Matern(MaternNu::FiveHalves), 2.0),
        kernel(KernelFamily::Periodic { period: 2.0 }, 3.0),
        kernel(KernelFamily::RationalQuadratic { alpha: 0.7 }, 2.0),
        kernel(KernelFamily::Gibbs { strength: 0.8 }, 2.0),
        kernel(KernelFamily::WarpedRbf { strength: 1.5 }, 2.0),
    ]
}

fn uniform_points(n: usize, dim: usize, seed: u64) -> DMatrix<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    DMatrix::from_fn(n, dim, |_, _| rng.random_range(-1.0..=1.0))
}

fn prior(kernel: Kernel, noise: f64) -> GpPrior {
    GpPrior { kernel, input_dim: 10, noise, jitter: 1e-8 }
}

/// Values computed by hand (with Python's `math`) at `x = (0.5, -0.25, 0)`,
/// `y = (-0.5, 0.25, 1)`: `r^2 = 2.25`, and with `l = 1.5` the scaled distance is 1.
#[test]
fn gp_kernels_match_their_closed_forms_at_hand_checked_points() {
    let (x, y) = ([0.5, -0.25, 0.0], [-0.5, 0.25, 1.0]);
    let cases = [
        (kernel(KernelFamily::Rbf, 1.5), 2.0 * (-0.5f64).exp()),
        (kernel(KernelFamily::Matern(MaternNu::Half), 1.5), 0.7357588823428847),
        (kernel(KernelFamily::Matern(MaternNu::ThreeHalves), 1.5), 0.9667154491930154),
        (kernel(KernelFamily::Matern(MaternNu::FiveHalves), 1.5), 1.0479882176636406),
        // 2 (1 + 2.25 / (2 * 2 * 2.25))^-2 = 2 / 1.25^2
        (kernel(KernelFamily::RationalQuadratic { alpha: 2.0 }, 1.5), 1.28),
        // sin^2(pi/2) + sin^2(pi/4) + sin^2(pi/2) = 2.5, so 2 exp(-2 * 2.5 / 1)
        (kernel(KernelFamily::Periodic { period: 2.0 }, 1.0), 2.0 * (-5.0f64).exp()),
        // l(x) = exp(2 ln 2 * 0.5) = 2, l(y) = 0.5: 2 (2/4.25)^(3/2) exp(-2.25 / 4.25)
        (kernel(KernelFamily::Gibbs { strength: 2.0 * 2f64.ln() }, 1.0), 0.38025154386841364),
        // sinh-warped coordinates: |w(x) - w(y)|^2 = 2.7225110455850645
        (kernel(KernelFamily::WarpedRbf { strength: 1.0 }, 1.5), 1.0921461725220285),
    ];
    for (k, expected) in cases {
        let value = k.eval(&x, &y);
        assert!((value - expected).abs() < 1e-12, "{:?}: {value} vs {expected}", k.family);
        assert!((k.eval(&y, &x) - value).abs() < 1e-15, "{:?} is not symmetric", k.family);
        assert!((k.eval(&x, &x) - 2.0).abs() < 1e-12, "{:?}: k(x, x) is not the variance", k.family);
    }
}

#[test]
fn gp_non_stationary_kernels_reduce_to_rbf_at_zero_strength() {
    let points = uniform_points(12, 10, 1);
    let rbf = kernel(KernelFamily::Rbf, 1.3).matrix(&points);
    for family in [KernelFamily::Gibbs { strength: 0.0 }, KernelFamily::WarpedRbf { strength: 0.0 }] {
        assert!(largest_abs(&(kernel(family, 1.3).matrix(&points) - &rbf)) < 1e-12, "{family:?}");
    }
    // With strength the Gibbs kernel is non-stationary: shifting both points changes it.
    let gibbs = kernel(KernelFamily::Gibbs { strength: 1.0 }, 1.0);
    let (a, b) = ([-0.8, 0.0], [-0.6, 0.0]);
    let (c, d) = ([0.6, 0.0], [0.8, 0.0]);
    assert!(gibbs.eval(&c, &d) - gibbs.eval(&a, &b) > 0.05, "longer length scale at larger x_1");
}

/// The fast Gram matrix equals the closed form entry by entry, is exactly symmetric and
/// positive semi-definite.
#[test]
fn gp_kernel_matrices_are_symmetric_psd_and_match_the_closed_form() {
    let points = uniform_points(60, 10, 2);
    for k in all_kernels() {
        let m = k.matrix(&points);
        for i in 0..60 {
            for j in 0..60 {
                let closed = k.eval(points.row(i).transpose().as_slice(), points.row(j).transpose().as_slice());
                assert!((m[(i, j)] - closed).abs() < 1e-10, "{:?} entry ({i}, {j})", k.family);
            }
        }
        assert_eq!(m, m.transpose(), "{:?} is not exactly symmetric", k.family);
        let eigenvalues = SymmetricEigen::new(m.clone()).eigenvalues;
        assert!(eigenvalues.iter().all(|e| e.is_finite()), "{:?}: eigenvalues {eigenvalues}", k.family);
        let smallest = eigenvalues.min();
        assert!(smallest > -1e-10 * m.trace(), "{:?}: eigenvalue {smallest}", k.family);
    }
}

#[test]
fn gp_blocked_cholesky_matches_the_unblocked_factor() {
    let points = uniform_points(150, 10, 3);
    let mut k = kernel(KernelFamily::Matern(MaternNu::ThreeHalves), 1.0).matrix(&points);
    for i in 0..150 {
        k[(i, i)] += 1e-6;
    }
    let reference = nalgebra::Cholesky::new(k.clone()).unwrap().unpack();
    for block in [1, 7, 64, 150, 400] {
        let lower = blocked_cholesky(&k, block).unwrap();
        assert!(largest_abs(&(&lower - &reference)) < 1e-9, "block {block}");
        assert_eq!(lower.upper_triangle(), DMatrix::from_diagonal(&lower.diagonal()), "block {block}");
        assert!(largest_abs(&(&lower * lower.transpose() - &k)) < 1e-10, "block {block}");
    }
}

#[test]
fn gp_jitter_rescues_a_singular_matrix_and_an_indefinite_one_is_refused() {
    // Two identical points: rank-deficient Gram matrix.
    let mut points = uniform_points(80, 10, 4);
    let first = points.row(0).clone_owned();
    points.row_mut(1).copy_from(&first);
    let k = kernel(KernelFamily::Rbf, 2.0).matrix(&points);
    let (lower, jitter) = cholesky_with_jitter(k.clone(), 1e-10).unwrap();
    assert!((1e-10..=1e-4).contains(&jitter), "jitter {jitter}");
    assert!(largest_abs(&(&lower * lower.transpose() - &k)) < 10.0 * jitter);
    let indefinite = DMatrix::from_diagonal(&nalgebra::DVector::from_vec(vec![1.0, -1.0, 1.0]));
    let e = cholesky_with_jitter(indefinite, 1e-8).unwrap_err();
    assert!(matches!(e, GpError::NotPositiveDefinite { points: 3, .. }), "{e}");
    assert!(e.to_string().contains("larger jitter"), "{e}");
}

/// The sample covariance of 8000 draws at five fixed points is within 0.15 of the kernel
/// (variance 2: the standard error of each entry is at most 2 sqrt(2 / 8000) = 0.032).
#[test]
fn gp_sample_covariance_approaches_the_kernel() {
    let points = uniform_points(5, 10, 5);
    let draws = 8000;
    for k in all_kernels() {
        let p = prior(k, 0.0);
        let mut rng = ChaCha8Rng::seed_from_u64(6);
        let mut second_moment = DMatrix::<f64>::zeros(5, 5);
        for _ in 0..draws {
            let (f, _) = p.sample_values(&points, &mut rng).unwrap();
            second_moment += &f * f.transpose();
        }
        let covariance = second_moment / draws as f64;
        let error = largest_abs(&(&covariance - k.matrix(&points)));
        assert!(error < 0.15, "{:?}: sample covariance off by {error}", k.family);
        // The check can tell kernels apart: half the length scale is far off.
        let shorter = Kernel { length_scale: k.length_scale / 2.0, ..k };
        let wrong = largest_abs(&(&covariance - shorter.matrix(&points)));
        assert!(wrong > 0.3, "{:?}: half the length scale is only {wrong} away", k.family);
    }
}

#[test]
fn gp_draws_are_deterministic_per_seed_and_index() {
    let p = prior(kernel(KernelFamily::Rbf, 2.0), 0.1);
    let a = p.draw(40, 11).unwrap();
    assert_eq!(a, p.draw(40, 11).unwrap());
    assert_ne!(a.targets, p.draw(40, 12).unwrap().targets);
    assert_eq!((a.len(), a.inputs.len()), (40, 400));
    assert!(a.inputs.iter().all(|x| (-1.0..=1.0).contains(x)));
    let f = function(&p, 16, 3, Stream::Train, 7).unwrap();
    assert_eq!(f, function(&p, 16, 3, Stream::Train, 7).unwrap());
    assert_ne!(f.targets, function(&p, 16, 3, Stream::Eval, 7).unwrap().targets);
    assert_ne!(f.targets, function(&p, 16, 3, Stream::Train, 8).unwrap().targets);
    assert_ne!(f.targets, function(&p, 16, 4, Stream::Train, 7).unwrap().targets);
}

/// The training and test sets are one joint draw cut in two, so they see the same function.
#[test]
fn gp_fit_data_splits_one_joint_draw() {
    let p = prior(kernel(KernelFamily::Periodic { period: 2.0 }, 3.0), 0.0);
    let data = fit_data(&p, 30, 10, 9).unwrap();
    let joint = p.draw(40, mix_seed(9, FIT_TAG, 0)).unwrap();
    assert_eq!(data.train.inputs, joint.inputs[..300]);
    assert_eq!(data.test.inputs, joint.inputs[300..]);
    assert_eq!([data.train.values.clone(), data.test.values.clone()].concat(), joint.values);
    assert_eq!(data.test.input(2), joint.input(32));
    assert_eq!(data, fit_data(&p, 30, 10, 9).unwrap());
}

#[test]
fn gp_noise_has_the_requested_standard_deviation() {
    let p = prior(kernel(KernelFamily::Rbf, 2.0), 0.1);
    let d = p.draw(600, 13).unwrap();
    let residuals: Vec<f64> = d.targets.iter().zip(&d.values).map(|(y, f)| y - f).collect();
    let std = (residuals.iter().map(|r| r * r).sum::<f64>() / residuals.len() as f64).sqrt();
    assert!((std - 0.1).abs() < 0.015, "noise std {std}");
    let noiseless = prior(kernel(KernelFamily::Rbf, 2.0), 0.0).draw(20, 13).unwrap();
    assert_eq!(noiseless.targets, noiseless.values);
}

#[test]
fn gp_bad_parameters_are_refused() {
    let bad = [
        GpPrior { kernel: kernel(KernelFamily::Rbf, 0.0), ..prior(kernel(KernelFamily::Rbf, 1.0), 0.0) },
        GpPrior { input_dim: 0, ..prior(kernel(KernelFamily::Rbf, 1.0), 0.0) },
        prior(kernel(KernelFamily::Rbf, 1.0), -0.1),
        prior(kernel(KernelFamily::Periodic { period: 0.0 }, 1.0), 0.0),
        prior(kernel(KernelFamily::RationalQuadratic { alpha: -1.0 }, 1.0), 0.0),
        GpPrior { jitter: 0.0, ..prior(kernel(KernelFamily::Rbf, 1.0), 0.0) },
    ];
    for p in bad {
        assert!(matches!(p.draw(3, 0), Err(GpError::Parameter(_))), "{p:?} was accepted");
    }
}
