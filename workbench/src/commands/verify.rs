//! `workbench verify`: checks numerically, with candle's autograd in f64 on random inputs,
//! that each energy-derived layer's updates are the gradients of its energies (or, where
//! the seed only relaxes that claim, that a small fixed step does not raise the energy).

use super::text_table::TextTable;
use crate::exit_code::refused;
use crate::host::PluginHost;
use crate::params::Params;
use crate::run_config::RunConfig;
use crate::store::Store;
use anyhow::{anyhow, bail, Result};
use candle_core::{DType, Device, Tensor};
use plugin_api::{Config, GradientIdentity, PluginKind};
use rand::{rngs::StdRng, Rng, SeedableRng};

/// Largest accepted relative error `||descent + grad|| / ||grad||` of an identity.
pub const TOLERANCE: f64 = 1e-4;

/// Fixed step sizes of the descent checks.
pub const STEPS: [f64; 3] = [1e-3, 1e-2, 1e-1];

/// One printed row.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Row {
    pub layer: String,
    pub claim: String,
    /// Relative error of a gradient identity, or `after - before` of a descent check.
    pub value: f64,
    pub passed: bool,
}

/// Checks every layer plugin (or only `only`) at its defaults with `overrides`.
pub fn run(host: &PluginHost, only: Option<&str>, overrides: &[String], seed: u64, json: bool) -> Result<i32> {
    let mut rows = Vec::new();
    for plugin in host.plugins.iter().filter(|p| p.declaration.kind() == PluginKind::Layer) {
        let name = &plugin.declaration.name;
        if only.is_some_and(|o| o != name) {
            continue;
        }
        let mut config = Config::defaults(&plugin.declaration.params);
        for raw in overrides {
            let (key, value) =
                raw.split_once('=').ok_or_else(|| refused(anyhow!("expected key=value, got `{raw}`")))?;
            let spec = plugin
                .declaration
                .params
                .iter()
                .find(|p| p.name == key)
                .ok_or_else(|| refused(anyhow!("layer `{name}` has no key `{key}`")))?;
            config.set(key, spec.parse(value).map_err(|e| refused(anyhow!("`{raw}`: {e}")))?);
        }
        rows.extend(check_layer(host, name, &config, seed)?);
    }
    if only.is_some() && rows.is_empty() && !host.plugins.iter().any(|p| Some(p.declaration.name.as_str()) == only) {
        host.get(only.unwrap_or_default(), PluginKind::Layer).map_err(refused)?;
    }
    report(&rows, json)
}

/// `||descent + grad|| / ||grad||`, the gradient of the identity's energy with respect to
/// its variable taken by autograd.
pub fn relative_error(identity: &GradientIdentity) -> Result<f64> {
    let grads = identity.energy.backward()?;
    let grad = grads
        .get(&identity.variable)
        .ok_or_else(|| anyhow!("`{}`: the energy does not depend on the variable", identity.name))?;
    let residual = (&identity.descent + grad)?.sqr()?.sum_all()?.to_dtype(DType::F64)?.to_scalar::<f64>()?.sqrt();
    let scale = grad.sqr()?.sum_all()?.to_dtype(DType::F64)?.to_scalar::<f64>()?.sqrt().max(f64::MIN_POSITIVE);
    Ok(residual / scale)
}

/// The rows of one layer: its parameters moved off their initial values (so gains and step
/// sizes are not trivially 1 or 0), then its identities and descent checks on random tokens.
pub fn check_layer(host: &PluginHost, name: &str, config: &Config, seed: u64) -> Result<Vec<Row>> {
    let device = Device::Cpu;
    let params = Params::new(seed);
    let layer = host.build_layer(name, config, params.var_builder(DType::F64, &device))?;
    let mut normal = seeded_normal(seed);
    for (_, var) in params.vars() {
        let noise = normal(0.1, var.shape())?;
        var.set(&(var.as_tensor() + noise)?)?;
    }
    claims(&*layer, name, &mut normal)
}

/// Normal draws from the seed (parameters in name order, then tokens), so a given seed checks
/// the same numbers on every run and every machine.
fn seeded_normal(seed: u64) -> impl FnMut(f64, &candle_core::Shape) -> Result<Tensor> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x7665_7269_6679);
    move |scale: f64, shape: &candle_core::Shape| -> Result<Tensor> {
        let values: Vec<f64> =
            (0..shape.elem_count()).map(|_| scale * rng.sample::<f64, _>(rand_distr::StandardNormal)).collect();
        Ok(Tensor::from_vec(values, shape, &Device::Cpu)?)
    }
}

/// The gradient identities and descent checks of `layer` on random tokens.
fn claims(
    layer: &dyn plugin_api::Layer,
    name: &str,
    normal: &mut impl FnMut(f64, &candle_core::Shape) -> Result<Tensor>,
) -> Result<Vec<Row>> {
    let x = normal(1.0, &candle_core::Shape::from((2, 12, layer.width())))?;
    let mut rows = Vec::new();
    let identities = layer.gradient_identities(&x).map_err(|e| anyhow!("layer `{name}`: {e}"))?;
    for identity in identities {
        let error = relative_error(&identity)?;
        rows.push(Row { layer: name.into(), claim: identity.name, value: error, passed: error <= TOLERANCE });
    }
    for step in STEPS {
        for check in layer.descent_checks(&x, step).map_err(|e| anyhow!("layer `{name}`: {e}"))? {
            let rise = check.after - check.before;
            rows.push(Row { layer: name.into(), claim: check.name, value: rise, passed: rise <= 0.0 });
        }
    }
    if rows.is_empty() {
        rows.push(Row {
            layer: name.into(),
            claim: "no energy claims (not derived from an energy)".into(),
            value: 0.0,
            passed: true,
        });
    }
    Ok(rows)
}

/// The rows of a stored run's layer with the parameters of its checkpoint (trained or
/// imported), on random tokens from `seed`.
pub async fn check_run(store: &Store, host: &PluginHost, run: i64, seed: u64) -> Result<Vec<Row>> {
    let record = store.run(run).await?;
    let config = RunConfig::from_json(&record.config)?;
    let path = crate::train::worker::checkpoint_path(store, run)?;
    if !path.is_file() {
        bail!("run {run} has no checkpoint at {} (checkpoint=false, or it never evaluated)", path.display());
    }
    let saved = candle_core::safetensors::load(&path, &Device::Cpu)
        .map_err(|e| anyhow!("cannot read the checkpoint {}: {e}", path.display()))?;
    let params = Params::new(seed);
    let layer = host.build_layer(&config.layer, &config.layer_config, params.var_builder(DType::F64, &Device::Cpu))?;
    for (name, var) in params.vars() {
        let key = format!("param.layer.{name}");
        let value = saved.get(&key).ok_or_else(|| anyhow!("the checkpoint of run {run} has no `{key}`"))?;
        var.set(&value.to_dtype(DType::F64)?)?;
    }
    claims(&*layer, &config.layer, &mut seeded_normal(seed))
}

/// Prints `rows` and returns the exit code: 0 when every claim holds.
pub fn report(rows: &[Row], json: bool) -> Result<i32> {
    if json {
        println!("{}", serde_json::to_string_pretty(rows)?);
    } else {
        let mut table = TextTable::new(["", "layer", "value", "claim"]).right([2]);
        for r in rows {
            let verdict = if r.passed { "ok" } else { "FAIL" };
            table.row([verdict.to_string(), r.layer.clone(), format!("{:.3e}", r.value), r.claim.clone()]);
        }
        table.print();
        let failed = rows.iter().filter(|r| !r.passed).count();
        println!("{} passed, {} failed", rows.len() - failed, failed);
    }
    Ok(if rows.iter().all(|r| r.passed) { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Var;

    /// E = 1/2 ||v||^2 has gradient v: descent -v passes, +v is caught (error 2).
    #[test]
    fn relative_error_accepts_true_and_rejects_false_claims() -> Result<()> {
        let v = Var::new(&[1.0f64, -2.0, 3.0], &Device::Cpu)?;
        let claim = |descent: Tensor| -> Result<GradientIdentity> {
            Ok(GradientIdentity {
                name: "test".into(),
                variable: v.as_tensor().clone(),
                energy: (v.as_tensor().sqr()?.sum_all()? * 0.5)?,
                descent,
            })
        };
        assert!(relative_error(&claim(v.as_tensor().neg()?)?)? < 1e-15);
        assert!((relative_error(&claim(v.as_tensor().detach())?)? - 2.0).abs() < 1e-12);
        Ok(())
    }
}
