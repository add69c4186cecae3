//! Hot reload end to end: a plugin crate in a scratch workspace is watched, edited, rebuilt
//! by cargo and swapped in while an object built from the old library keeps working; a
//! broken edit keeps the old version and reports the compiler error; libraries dropped into
//! a watched directory are checked (not a library, another fingerprint, a name clash) before
//! anything changes.
//!
//! The crate tests build a small crate against the already built dependencies (shared target
//! directory, see `scratch_workspace`): a few seconds each. They print the reload timing
//! (the benchmark figure of the README) with `--nocapture`.

use crate::common;
use crate::scratch_workspace;

use plugin_api::candle::{DType, Device, Tensor};
use plugin_api::{Config, Pass, PluginKind};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};
use workbench::host::build_id::{crate_build_id, library_build_id};
use workbench::host::{PluginCrate, PluginHost, WatchConfig, WatchEvent, Watcher};
use workbench::params::Params;
use workbench::scaffold::{self, TemplateKind};

/// Longest wait for a rebuild (cargo shares two cores with other builds here).
const BUILD_WAIT: Duration = Duration::from_secs(240);

/// What a watcher said, for failure messages.
struct Events {
    rx: Receiver<WatchEvent>,
    log: Vec<String>,
}

impl Events {
    /// The first event that `want` accepts, within `timeout`; fails with everything seen.
    fn wait(&mut self, timeout: Duration, what: &str, want: impl Fn(&WatchEvent) -> bool) -> WatchEvent {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(event) => {
                    self.log.push(format!("{event:?}"));
                    if want(&event) {
                        return event;
                    }
                }
                Err(_) => panic!("no {what} within {timeout:?}; the watcher said:\n{}", self.log.join("\n")),
            }
        }
    }

    /// Every event that arrives within `quiet`.
    fn drain(&mut self, quiet: Duration) -> Vec<WatchEvent> {
        let mut out = Vec::new();
        while let Ok(event) = self.rx.recv_timeout(quiet) {
            self.log.push(format!("{event:?}"));
            out.push(event);
        }
        out
    }
}

fn start(config: WatchConfig) -> (Watcher, Events) {
    let (tx, rx) = std::sync::mpsc::channel();
    let watcher = Watcher::start(config, move |e| {
        let _ = tx.send(e);
    })
    .expect("watching starts");
    let mut events = Events { rx, log: Vec::new() };
    events.wait(Duration::from_secs(10), "start", |e| matches!(e, WatchEvent::Watching { .. }));
    (watcher, events)
}

/// A scratch workspace with a layer plugin `name` made by `plugin new`, built and loaded:
/// the crate, the watch configuration and a host holding the plugin.
fn built_layer(tag: &str, name: &str) -> (PluginCrate, WatchConfig, PluginHost) {
    let root = scratch_workspace::create(tag);
    let created = scaffold::create(&root, name, TemplateKind::Layer, &[]).unwrap();
    let krate = PluginCrate::read(&created.dir).unwrap();
    let config = WatchConfig {
        root: root.clone(),
        crates: vec![krate.clone()],
        discover_new_crates: false,
        library_dirs: Vec::new(),
        profile: "dev".into(),
        cargo_args: Vec::new(),
        cargo_env: scratch_workspace::cargo_env(),
        debounce: workbench::host::watch::DEBOUNCE,
    };
    let mut output = Vec::new();
    let library = config.cargo_build(&krate, &mut |line| output.push(line)).unwrap_or_else(|e| {
        panic!("the template crate builds:\n{e}\n{}", output.join("\n"));
    });
    assert!(library.starts_with(scratch_workspace::target_dir()), "{}", library.display());
    let mut host = PluginHost::default();
    host.add(library);
    // Same plugin-api, rustc and candle as this test: the fingerprint matches.
    assert!(host.errors.is_empty(), "{:?}", host.errors);
    host.plugins[0].build = Some(crate_build_id(&krate, Some(&root)).unwrap());
    (krate, config, host)
}

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{} has no `{from}`", path.display());
    // Saved as editors save: a whole new file renamed over the old one, so the watcher never
    // reads a half-written file (a truncate-then-write can be seen in between on a busy
    // machine, and the sources it hashed would then not be the ones cargo built).
    let saving = path.with_extension("rs.tmp");
    std::fs::write(&saving, text.replacen(from, to, 1)).unwrap();
    std::fs::rename(&saving, path).unwrap();
}

/// The layer output of `layer` on fixed tokens.
fn output(layer: &dyn plugin_api::Layer, width: usize) -> Vec<f32> {
    let x = Tensor::arange(0f32, (2 * 3 * width) as f32, &Device::Cpu).unwrap().reshape((2, 3, width)).unwrap();
    let x = (x / (width as f64 * 3.0)).unwrap();
    layer.forward(&x, &mut Pass::new(2)).unwrap().flatten_all().unwrap().to_vec1().unwrap()
}

#[test]
fn an_edited_plugin_is_rebuilt_and_swapped_in_while_old_objects_keep_working() {
    let name = "wb-hot-edit";
    let (krate, config, mut host) = built_layer("edit", name);
    let root = config.root.clone();
    let first_build = host.plugins[0].build.clone();
    let old_description = host.get(name, PluginKind::Layer).unwrap().declaration.description.clone();

    // An object built from the first library, used again after the swap.
    let declaration = &host.get(name, PluginKind::Layer).unwrap().declaration;
    let layer_config = Config::defaults(&declaration.params);
    let params = Params::new(7);
    let old_layer = host.build_layer(name, &layer_config, params.var_builder(DType::F32, &Device::Cpu)).unwrap();
    let width = old_layer.width();
    let before = output(&*old_layer, width);

    let (watcher, mut events) = start(config);
    // Two constants: the declared description, and the step of the update (doubled).
    edit(&krate.dir.join("src/lib.rs"), "(template of workbench plugin new)", "(edited while watched)");
    edit(
        &krate.dir.join("src/layer.rs"),
        "x = (&x - self.gradient(&x)?.broadcast_mul(&self.step)?)?;",
        "x = (&x - (self.gradient(&x)?.broadcast_mul(&self.step)? * 2.0)?)?;",
    );
    events.wait(
        Duration::from_secs(20),
        "rebuild",
        |e| matches!(e, WatchEvent::Building { package } if package == name),
    );
    let loaded = events.wait(BUILD_WAIT, "reload", |e| {
        matches!(e, WatchEvent::Loaded(_) | WatchEvent::BuildFailed { .. } | WatchEvent::LoadFailed { .. })
    });
    let WatchEvent::Loaded(reload) = loaded else { panic!("{}", events.log.join("\n")) };
    assert!(events.log.iter().any(|l| l.contains("Output")), "cargo's output is passed on");
    let activation = host.accept(&reload).expect("swapped in");
    println!("hot reload: {}", activation.line);

    let active = host.get(name, PluginKind::Layer).unwrap();
    assert_eq!(
        active.declaration.description,
        old_description.replace("(template of workbench plugin new)", "(edited while watched)")
    );
    assert_ne!(active.declaration.description, old_description);
    assert_eq!(active.build, Some(crate_build_id(&krate, Some(&root)).unwrap()));
    assert_ne!(active.build, first_build, "another build id for other sources");
    assert_eq!(host.plugins.len(), 1, "replaced, not added");

    // The old object still runs the old code; a layer built now (same weights) runs the new.
    assert_eq!(output(&*old_layer, width), before);
    let params = Params::new(7);
    let new_layer = host.build_layer(name, &layer_config, params.var_builder(DType::F32, &Device::Cpu)).unwrap();
    let after = output(&*new_layer, width);
    assert_ne!(after, before, "the doubled step changes the output");
    assert_eq!(output(&*old_layer, width), before);
    drop(old_layer);
    watcher.stop();
}

#[test]
fn a_broken_edit_keeps_the_old_version_and_reports_the_compiler_error() {
    let name = "wb-hot-broken";
    let (krate, config, host) = built_layer("broken", name);
    let description = host.plugins[0].declaration.description.clone();
    let (watcher, mut events) = start(config);
    let layer_rs = krate.dir.join("src/layer.rs");
    edit(
        &layer_rs,
        "/// The checked hyperparameters.",
        "pub const BROKEN: u32 = \"not a number\";\n\n/// The checked hyperparameters.",
    );
    let failed = events.wait(BUILD_WAIT, "build failure", |e| {
        matches!(e, WatchEvent::Loaded(_) | WatchEvent::BuildFailed { .. } | WatchEvent::LoadFailed { .. })
    });
    let WatchEvent::BuildFailed { package, summary } = &failed else { panic!("{}", events.log.join("\n")) };
    assert_eq!(package, name);
    assert!(summary.contains("error[E0308]") && summary.contains("src/layer.rs"), "{summary}");
    let text = failed.describe().unwrap();
    assert!(text.contains("the version loaded before stays active"), "{text}");
    // Nothing changed: the first build is still active and usable.
    assert_eq!(host.plugins.len(), 1);
    assert_eq!(host.plugins[0].declaration.description, description);
    let cfg = Config::defaults(&host.plugins[0].declaration.params);
    assert!(host.build_layer(name, &cfg, Params::new(0).var_builder(DType::F32, &Device::Cpu)).is_ok());
    // Saving the same broken file again does not rebuild it.
    let broken = std::fs::read_to_string(&layer_rs).unwrap();
    let saving = layer_rs.with_extension("rs.tmp");
    std::fs::write(&saving, &broken).unwrap();
    std::fs::rename(&saving, &layer_rs).unwrap();
    let again = events.drain(Duration::from_secs(2));
    assert!(!again.iter().any(|e| matches!(e, WatchEvent::Building { .. })), "{again:?}");
    watcher.stop();
}

/// The real `libtransformer.so` with the plugin-api version inside its fingerprint rewritten
/// (same length), as a stale build would carry.
fn with_another_fingerprint(library: &Path) -> Vec<u8> {
    let mut bytes = std::fs::read(library).unwrap();
    let ours = plugin_api::FINGERPRINT.as_bytes().to_vec();
    let theirs = plugin_api::FINGERPRINT.replacen("plugin-api ", "plugin-api 9", 1);
    let theirs = &theirs.as_bytes()[..ours.len()];
    let mut at = 0;
    let mut found = 0;
    while let Some(offset) = bytes[at..].windows(ours.len()).position(|w| w == ours.as_slice()) {
        bytes[at + offset..at + offset + ours.len()].copy_from_slice(theirs);
        at += offset + ours.len();
        found += 1;
    }
    assert!(found > 0, "the fingerprint string is inside the library");
    bytes
}

/// Writes `bytes` as `dir/name` in one step (a rename), as a finished copy would appear.
fn drop_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let staging = dir.join(format!(".{name}.partial"));
    std::fs::write(&staging, bytes).unwrap();
    let path = dir.join(name);
    std::fs::rename(&staging, &path).unwrap();
    path
}

#[test]
fn libraries_dropped_into_a_watched_directory_are_checked_before_anything_changes() {
    let dir = common::temp_dir("hot-dir");
    let real = std::fs::read(common::library("transformer")).unwrap();
    let config = WatchConfig {
        root: PathBuf::new(),
        crates: Vec::new(),
        discover_new_crates: false,
        library_dirs: vec![dir.to_path_buf()],
        profile: "dev".into(),
        cargo_args: Vec::new(),
        cargo_env: Vec::new(),
        debounce: Duration::from_millis(150),
    };
    let mut host = PluginHost::default();
    let (watcher, mut events) = start(config);
    let outcome = |e: &WatchEvent| matches!(e, WatchEvent::Loaded(_) | WatchEvent::LoadFailed { .. });

    drop_file(&dir, "libgarbage.so", b"not an ELF file");
    let garbage = events.wait(Duration::from_secs(10), "garbage refused", outcome);
    let WatchEvent::LoadFailed { source, reason } = &garbage else { panic!("{garbage:?}") };
    assert!(source.ends_with("libgarbage.so") && reason.contains("not a loadable library"), "{reason}");

    let path = drop_file(&dir, "libtransformer.so", &with_another_fingerprint(&common::library("transformer")));
    let stale = events.wait(Duration::from_secs(10), "fingerprint refused", outcome);
    let WatchEvent::LoadFailed { reason, .. } = &stale else { panic!("{stale:?}") };
    assert!(reason.contains("built for another host") && reason.contains("cargo build -p transformer"), "{reason}");
    assert!(host.plugins.is_empty(), "nothing loaded");

    drop_file(&dir, "libtransformer.so", &real);
    let good = events.wait(Duration::from_secs(10), "the good library", outcome);
    let WatchEvent::Loaded(reload) = &good else { panic!("{good:?}") };
    let activation = host.accept(reload).unwrap();
    println!("library reload: {}", activation.line);
    let active = host.get("transformer", PluginKind::Layer).unwrap();
    assert_eq!(active.path, path, "named after the dropped file, not the private copy");
    assert_eq!(active.build, Some(library_build_id(&path).unwrap()));

    // A stale build over the active one: refused, the loaded version stays.
    drop_file(&dir, "libtransformer.so", &with_another_fingerprint(&common::library("transformer")));
    let refused = events.wait(Duration::from_secs(10), "stale copy refused", outcome);
    assert!(matches!(refused, WatchEvent::LoadFailed { .. }), "{refused:?}");
    assert!(host.get("transformer", PluginKind::Layer).is_ok());

    // A second library declaring the same plugin loads, but is not made active.
    drop_file(&dir, "libtransformer_copy.so", &real);
    let twin = events.wait(Duration::from_secs(10), "the twin", outcome);
    let WatchEvent::Loaded(reload) = &twin else { panic!("{twin:?}") };
    let clash = host.accept(reload).unwrap_err();
    assert!(clash.contains("already loaded from") && clash.contains("libtransformer.so"), "{clash}");
    assert_eq!(host.plugins.len(), 1);
    assert_eq!(host.plugins[0].path, path);
    watcher.stop();
}

/// In the terminal workbench, a reloaded plugin replaces the one in the UI's host, the
/// plugin list and the Launch form follow, and the Plugins screen shows the log (failures
/// included) without anything else changing.
#[test]
fn the_terminal_workbench_swaps_reloaded_plugins_and_shows_the_log() {
    use ratatui::backend::TestBackend;
    use workbench::host::hot::load_fresh;
    use workbench::host::Reload;
    use workbench::tui::app::{App, Screen};
    use workbench::tui::service::Update;

    let mut app = App::new(PluginHost::default(), |_| {});
    assert!(app.launch.layers.is_empty());
    let library = common::library("transformer");
    let (plugin, load_time) = load_fresh(&library).unwrap();
    let reload = Reload::new("plugins/transformer".into(), plugin, Instant::now(), load_time);
    app.apply(Update::Plugins(WatchEvent::Loaded(reload)));
    assert!(app.plugins.get("transformer").is_some());
    assert_eq!(app.launch.layers, vec!["transformer".to_string()]);
    assert!(app.launch.fields.iter().any(|f| f.spec.name == "heads"), "the form has the plugin's fields");
    let (status, error, _) = app.status.clone().expect("a status line");
    assert!(!error && status.contains("transformer 0.1.0 build ? active"), "{status}");

    let failure = WatchEvent::BuildFailed {
        package: "transformer".into(),
        summary: "error[E0425]: cannot find value `x` in this scope".into(),
    };
    app.apply(Update::Plugins(failure));
    let (status, error, _) = app.status.clone().unwrap();
    assert!(error && status.contains("build failed"), "{status}");
    assert!(app.plugins.get("transformer").is_some(), "the loaded version stays");

    app.screen = Screen::Plugins;
    let (w, h) = (150, 30);
    let mut terminal = ratatui::Terminal::new(TestBackend::new(w, h)).unwrap();
    terminal.draw(|f| workbench::tui::ui::draw(f, &app)).unwrap();
    let buffer = terminal.backend().buffer().clone();
    let screen: String =
        (0..h).map(|y| (0..w).map(|x| buffer[(x, y)].symbol().to_string()).collect::<String>() + "\n").collect();
    assert!(screen.contains("hot reload") && screen.contains("E0425") && screen.contains("active"), "{screen}");
}

/// The private copies of `library` mapped into this process (`/proc/self/maps`).
fn mapped_copies(library: &Path) -> std::collections::BTreeSet<String> {
    let name = library.file_name().unwrap().to_string_lossy().into_owned();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| p.contains("workbench-hot/") && p.ends_with(&name))
        .map(str::to_string)
        .collect()
}

/// A replaced version stays mapped while something holds its library, and is unloaded
/// after.
#[test]
fn a_replaced_library_is_unloaded_once_nothing_uses_it() {
    use workbench::host::hot::load_fresh;
    let library = common::library("sudoku");
    let mut host = PluginHost::default();
    let (first, _) = load_fresh(&library).unwrap();
    host.swap(first).unwrap();
    assert_eq!(mapped_copies(&library).len(), 1);
    let held = host.plugins[0].library(); // what an object built from it holds
    let (second, _) = load_fresh(&library).unwrap();
    drop(host.swap(second).unwrap());
    assert_eq!(mapped_copies(&library).len(), 2, "the first stays while held");
    drop(held);
    assert_eq!(mapped_copies(&library).len(), 1, "then it is unloaded");
    let (third, _) = load_fresh(&library).unwrap();
    drop(host.swap(third).unwrap());
    assert_eq!(mapped_copies(&library).len(), 1, "a replaced version nothing holds goes at once");
}
