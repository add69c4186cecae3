//! The host's plugin builds: in a scratch workspace with a plugin that builds and one that
//! does not, one build makes the good one (which loads) and names the other's compiler
//! error with its location; the libraries built are recorded, so the next start builds only
//! the crate whose sources still differ from its last build.
//!
//! It compiles two small crates against the already built dependencies (see
//! `scratch_workspace`): a few seconds.

use crate::scratch_workspace;

use workbench::host::build::BuildSettings;
use workbench::host::{build_stale_plugins, BuildOutcome, LoadError, PluginHost};
use workbench::scaffold::{self, TemplateKind};

#[test]
fn a_plugin_that_does_not_build_is_named_with_its_error_and_the_others_still_build_and_load() {
    let root = scratch_workspace::create("plugin-build");
    scaffold::create(&root, "wb-good", TemplateKind::Layer, &[]).unwrap();
    let broken = scaffold::create(&root, "wb-broken", TemplateKind::Layer, &[]).unwrap();
    let lib = broken.dir.join("src/lib.rs");
    let text = std::fs::read_to_string(&lib).unwrap();
    std::fs::write(&lib, format!("{text}\nfn broken() -> u32 {{ not_defined_anywhere }}\n")).unwrap();

    let settings = BuildSettings {
        root: root.clone(),
        profile: "dev".into(),
        cargo_args: Vec::new(),
        cargo_env: scratch_workspace::cargo_env(),
    };
    let out_dir = scratch_workspace::target_dir().join("debug");
    let good = out_dir.join(format!("{}wb_good{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX));
    let _ = std::fs::remove_file(&good);
    let mut output = Vec::new();
    let outcome = build_stale_plugins(&settings, &out_dir, &mut |line| output.push(line));
    let BuildOutcome::Built { rebuilt, failed } = outcome else { panic!("{outcome:?}\n{}", output.join("\n")) };
    assert_eq!(rebuilt, vec!["wb-good".to_string()], "{}", output.join("\n"));
    assert_eq!(failed.len(), 1, "{failed:?}");
    let (krate, errors) = &failed[0];
    assert_eq!(krate.package, "wb-broken");
    assert!(errors.contains("not_defined_anywhere") && errors.contains("src/lib.rs"), "{errors}");
    assert!(!errors.contains("wb-good") && !errors.contains("wb_good"), "only its own errors: {errors}");

    // The good one loads; the broken one is listed with its compiler error.
    let mut host = PluginHost::default();
    host.add(good.clone());
    assert!(host.errors.is_empty(), "{:?}", host.errors);
    host.errors.push(LoadError::Build { path: krate.dir.clone(), errors: errors.clone() });
    let message = host.get("wb-broken", plugin_api::PluginKind::Layer).unwrap_err().to_string();
    assert!(message.contains("does not build") && message.contains("not_defined_anywhere"), "{message}");

    // Built libraries are recorded: the next start builds only the crate that still fails.
    let mut output = Vec::new();
    let again = build_stale_plugins(&settings, &out_dir, &mut |line| output.push(line));
    let BuildOutcome::Built { rebuilt, failed } = again else { panic!("{again:?}") };
    assert!(rebuilt.is_empty(), "{rebuilt:?}");
    assert_eq!(failed.iter().map(|(c, _)| c.package.as_str()).collect::<Vec<_>>(), vec!["wb-broken"]);
    assert!(!output.iter().any(|l| l.contains("Compiling wb-good")), "{}", output.join("\n"));
}
