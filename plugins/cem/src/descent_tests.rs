//! The layer's descent checks (`workbench verify`): a small step of each sub-layer lowers its
//! energy, in every preconditioner form, and the check notices a step the wrong way.

use super::*;
use crate::tests::{build, small};
use plugin_api::candle::{DType, Device};
use plugin_api::Layer;
use plugin_testkit::{perturb, text};

fn layer(preconditioner: &str) -> Cem {
    let (map, layer) = build(&small(&[("preconditioner", text(preconditioner))]), DType::F64);
    // Off the initial values (gains not 1, zero-initialised matrices not 0), as verify does.
    perturb(&map, 0.3);
    layer
}

#[test]
fn small_steps_lower_both_energies_and_reversed_steps_raise_them() {
    for preconditioner in ["none", "diagonal", "diagonal_low_rank"] {
        let layer = layer(preconditioner);
        let x = plugin_testkit::randn(0f64, 1.0, (2, 5, 16), &Device::Cpu).unwrap();
        let down = layer.descent_checks(&x, 1e-3).unwrap();
        assert_eq!(down.len(), 2, "{preconditioner}: one check per sub-layer");
        for check in &down {
            assert!(
                check.after < check.before,
                "{preconditioner}: {} rose: {} -> {}",
                check.name,
                check.before,
                check.after
            );
        }
        let up = layer.descent_checks(&x, -1e-3).unwrap();
        assert_eq!(up.len(), down.len(), "{preconditioner}: reversed");
        for check in up {
            assert!(check.after > check.before, "{preconditioner}: a reversed step must raise {}", check.name);
        }
    }
}
