//! The terminal workbench (ratatui + crossterm).
//!
//! Architecture: one UI thread owns the [`app::App`] state. Before each frame it lays the frame
//! out ([`layout::Areas`]: tabs, body, footer, the runs table's columns and scroll offset) and
//! then draws it with [`ui::draw`], which reads the state by shared reference and changes
//! nothing; mouse clicks are tested against the same layout. It draws after every key or
//! mouse event and at least ten times a second, and never waits on the database, the workers
//! or the file system. Those belong to the background [`service`], which re-reads the run
//! store twice a second, keeps the curves of the runs a screen shows, and turns the UI's
//! requests (launch, cancel, pause, export, ...) into calls of [`crate::ops`], the operations
//! the command line calls too; it answers with [`service::Update`]s the UI applies between
//! frames. It also runs the job queue: launched runs are queued in runs.db and started as
//! worker slots free up. Workers are separate processes (`workbench worker`), so quitting the
//! TUI leaves them training, and a crashing plugin never takes the TUI down.
//!
//! Screens ([`screens`]): Runs (table, filter, sort, marks, notes and tags, delete), Launch (a
//! form from the plugins' schemas), Live (progress, curves and log of a run), Compare (panels
//! side by side, and with `s` the tokens' trajectories on the sphere: [`sphere`]), Ablation
//! (mean ± std per configuration) and Plugins (loaded and refused libraries, and the
//! hot-reload log: see [`reload`]). Each is a [`component::Component`]: it
//! declares its commands once as (keys, action, help) in a [`keys::Command`] list, runs their
//! actions and draws itself. The same lists, with the global one ([`keys::GLOBAL`]), dispatch
//! the keys and generate the `?` overlay ([`screens::help`]) and the footer's hints, so the
//! help cannot drift from what the keys do. The models behind the screens: [`runs`] (filter,
//! columns, sort; [`column_fit`] fits the columns to the width, [`prefs`] keeps the hidden ones),
//! [`launch`] (the form; [`launch_file`] loads and saves it as an
//! experiment file), [`compare`] and [`chart`] (panels), [`data`] (snapshots); exports are
//! named by [`crate::ops::export_names`]; the default experiment of the welcome screen is defined once in
//! [`experiment`].

pub mod app;
pub mod chart;
pub mod column_fit;
pub mod compare;
pub mod component;
pub mod data;
pub mod draw_cache;
pub mod ended;
pub mod evaluation;
pub mod experiment;
pub mod keys;
pub mod launch;
pub mod launch_file;
pub mod layout;
pub mod monochrome;
pub mod prefs;
pub mod reload;
pub mod runs;
pub mod screens;
pub mod service;
pub mod sphere;
pub mod ui;

use crate::host::PluginHost;
use crate::store::Store;
use anyhow::{bail, Context, Result};
use app::App;
use ratatui::crossterm::event::{self, DisableMouseCapture, EnableMouseCapture};
use ratatui::crossterm::execute;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

/// Longest wait for an event before the next frame (so fresh data appears promptly).
const FRAME: Duration = Duration::from_millis(100);

/// How the TUI's queue starts runs: `jobs` workers at once with `executor`, of the runs
/// `claims` covers.
pub struct Queue {
    pub jobs: usize,
    pub claims: crate::store::Claims,
    pub executor: crate::executor::Executor,
}

/// Opens the workbench on `store` until the user quits; its queue runs as `queue` says, and
/// its exports go to `exports`.
pub async fn run(
    store: Store,
    host: PluginHost,
    plugin_dirs: Vec<PathBuf>,
    queue: Queue,
    exports: PathBuf,
) -> Result<i32> {
    let Queue { jobs, claims, executor } = queue;
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        bail!(
            "the terminal workbench needs an interactive terminal; from scripts use the commands \
             (`workbench --help`: train, runs, plot, ablation...)"
        );
    }
    let (updates_tx, updates) = std::sync::mpsc::channel();
    let watcher = reload::start(&plugin_dirs, updates_tx.clone());
    executor.check(&store)?;
    let executor_text = match &executor {
        crate::executor::Executor::Local => "local workers".to_string(),
        crate::executor::Executor::Slurm(o) => match o.to_arg() {
            options if options.is_empty() => "Slurm jobs".to_string(),
            options => format!("Slurm jobs ({options})"),
        },
    };
    let everyone = if claims == crate::store::Claims::Everyone { " · all users" } else { "" };
    let store_label = format!("{} · {}{everyone}", store.location(), executor.name());
    let requests = service::spawn(store, plugin_dirs, Queue { jobs, claims, executor }, updates_tx);
    let mut app = App::new(host, move |r| {
        let _ = requests.send(r);
    });
    app.executor = executor_text;
    app.store_label = store_label;
    app.workers = jobs;
    app.exports = exports;
    if let Some(path) = prefs::default_path() {
        app.use_prefs(path);
    }
    // The UI loop blocks on terminal events; it runs beside the runtime's worker threads.
    let result = tokio::task::block_in_place(move || ui_loop(app, updates));
    drop(watcher); // stops watching, and a rebuild in progress
    result
}

fn ui_loop(mut app: App, updates: std::sync::mpsc::Receiver<service::Update>) -> Result<i32> {
    let mut terminal = ratatui::init();
    let _ = execute!(std::io::stdout(), EnableMouseCapture);
    let result = (|| -> Result<()> {
        while !app.quit {
            while let Ok(update) = updates.try_recv() {
                app.apply(update);
            }
            // Lay the frame out first (mouse clicks are tested against it), then draw it.
            let size = terminal.size().context("cannot read the terminal size")?;
            app.layout(ratatui::layout::Rect::new(0, 0, size.width, size.height));
            terminal.draw(|f| ui::draw(f, &app)).context("cannot draw the terminal")?;
            if event::poll(FRAME).context("cannot read terminal events")? {
                app.handle(event::read().context("cannot read terminal events")?);
                // Take every queued event before drawing again (fast scrolling, pastes).
                while event::poll(Duration::ZERO)? {
                    app.handle(event::read()?);
                }
            }
        }
        Ok(())
    })();
    let _ = execute!(std::io::stdout(), DisableMouseCapture);
    ratatui::restore();
    result.map(|_| 0)
}

#[cfg(test)]
mod tests;
