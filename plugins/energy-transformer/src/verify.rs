//! The Energy Transformer's claims, for `workbench verify`.
//!
//! - The update direction is the energy gradient with respect to the normalised tokens: the
//!   hand-derived `dE_ATT/dg`, `dE_HN/dg` and their sum equal candle's autograd of the energy
//!   in `g` (gradient identities; `descent = -dE/dg`).
//! - The step is taken in `x`, not in `g`: `x <- x - alpha dE/dg` with `g = LN(x)`. Because the
//!   LayerNorm's Jacobian is symmetric positive semi-definite (scalar gain), the energy's rate of
//!   change along the continuous dynamics is `-(dE/dg)^T (dg/dx) (dE/dg) <= 0` (Hoover et al.);
//!   for a small fixed step this is the weaker claim that `E(LN(x))` does not rise.

use crate::block::EtBlock;
use plugin_api::candle::{DType, Tensor, Var};
use plugin_api::{DescentCheck, GradientIdentity, Result};

/// The three identities at `g = LN(x)`.
pub fn gradient_identities(block: &EtBlock, x: &Tensor) -> Result<Vec<GradientIdentity>> {
    let g = block.norm().forward(x)?.detach();
    let claim = |name: &str,
                 energy: &dyn Fn(&Tensor) -> Result<Tensor>,
                 gradient: &dyn Fn(&Tensor) -> Result<Tensor>|
     -> Result<GradientIdentity> {
        let variable = Var::from_tensor(&g)?;
        Ok(GradientIdentity {
            name: name.into(),
            energy: energy(variable.as_tensor())?.sum_all()?,
            descent: gradient(&g)?.neg()?,
            variable: variable.as_tensor().clone(),
        })
    };
    Ok(vec![
        claim(
            "attention: -sum_h (P K_h Wq_h + P^T Q_h Wk_h) = dE_ATT/dg (derived by hand)",
            &|g| block.attention_energy(g),
            &|g| block.attention_gradient(g),
        )?,
        claim("Hopfield: -ReLU(g Xi^T) Xi = dE_HN/dg", &|g| block.hopfield_energy(g), &|g| block.hopfield_gradient(g))?,
        claim(
            "total: the layer's update dE/dg = d(E_ATT + E_HN)/dg",
            &|g| Ok((block.attention_energy(g)? + block.hopfield_energy(g)?)?),
            &|g| block.energy_gradient(g),
        )?,
    ])
}

fn total_energy(block: &EtBlock, x: &Tensor) -> Result<f64> {
    let g = block.norm().forward(x)?;
    let e = (block.attention_energy(&g)? + block.hopfield_energy(&g)?)?;
    Ok(e.sum_all()?.to_dtype(DType::F64)?.to_scalar::<f64>()?)
}

/// One step `x - step dE/dg(LN(x))` does not raise `E(LN(x))`.
pub fn descent_check(block: &EtBlock, x: &Tensor, step: f64) -> Result<DescentCheck> {
    let after = (x - (block.energy_gradient(&block.norm().forward(x)?)? * step)?)?;
    Ok(DescentCheck {
        name: format!("step {step}: x - s dE/dg, E(LN(x)) = E_ATT + E_HN does not rise"),
        before: total_energy(block, x)?,
        after: total_energy(block, &after)?,
    })
}
