//! The workbench's messages on stderr, through `tracing`.
//!
//! Commands report what they did (`run 3 queued in runs.db`), warn and fail through
//! `tracing::info!`, `warn!` and `error!`; [`init`] installs the subscriber that prints them
//! as plain lines on stderr: no timestamps or targets, the message alone at `info`, prefixed
//! `warning: ` or `error: ` (as the messages always read), `debug: ` / `trace: ` below.
//! `RUST_LOG` chooses what is shown (e.g. `RUST_LOG=warn` keeps only warnings and errors,
//! `RUST_LOG=workbench=debug,sqlx=debug` adds the store's statements); the default shows
//! the workbench's own messages from `info` up and nothing from its dependencies. The
//! global flags `-v` (the workbench's debug messages), `-vv` (trace) and `-q` (errors only)
//! rewrite `RUST_LOG` for the process and the workers it starts ([`verbosity_filter`]).
//!
//! What a command produces is printed directly, not logged: results on stdout, progress
//! bars, the lines that follow a worker (`train`), and the final `error:` of a failed
//! command (`cli::main`), which no `RUST_LOG` may hide.

use std::fmt;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// What is shown when `RUST_LOG` is unset: the workbench's own messages from `info` up.
const DEFAULT_FILTER: &str = "workbench=info";

/// The variable holding the filter, read by [`init`] and inherited by workers.
pub const FILTER_VAR: &str = "RUST_LOG";

/// The filter `-v` (`verbose` times) or `-q` asks for, `None` without either flag. `-v`
/// raises the workbench's own messages and keeps what `RUST_LOG` adds (e.g. `sqlx=debug`);
/// `-q` shows errors only, whatever `RUST_LOG` says.
pub fn verbosity_filter(verbose: u8, quiet: bool) -> Option<String> {
    let level = match (verbose, quiet) {
        (_, true) => return Some("error".to_string()),
        (0, false) => return None,
        (1, false) => "debug",
        _ => "trace",
    };
    let own = format!("workbench={level}");
    match std::env::var(FILTER_VAR) {
        // A later directive for the same target replaces the earlier one.
        Ok(current) if !current.trim().is_empty() => Some(format!("{current},{own}")),
        _ => Some(own),
    }
}

/// Installs the stderr subscriber (once; a second call changes nothing).
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .event_format(PlainLines)
        .try_init();
}

/// One line per event: the level's prefix, the message, then any other fields.
struct PlainLines;

impl<S, N> FormatEvent<S, N> for PlainLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        write!(writer, "{}", prefix(*event.metadata().level()))?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// The prefix of a message at `level`.
fn prefix(level: Level) -> &'static str {
    match level {
        Level::ERROR => "error: ",
        Level::WARN => "warning: ",
        Level::INFO => "",
        Level::DEBUG => "debug: ",
        Level::TRACE => "trace: ",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::fmt::MakeWriter;

    /// A writer collecting what the subscriber prints.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    /// What `-v`, `-vv` and `-q` show, through the same filter `RUST_LOG` sets.
    #[test]
    fn verbosity_flags_choose_the_levels_shown() {
        let shown = |filter: &str| {
            let out = Captured::default();
            let subscriber = tracing_subscriber::fmt()
                .with_env_filter(EnvFilter::new(filter))
                .with_writer(out.clone())
                .with_ansi(false)
                .event_format(PlainLines)
                .finish();
            tracing::subscriber::with_default(subscriber, || {
                tracing::trace!("t");
                tracing::debug!("d");
                tracing::info!("i");
                tracing::error!("e");
                tracing::debug!(target: "sqlx::query", "dependency");
            });
            let bytes = out.0.lock().unwrap().clone();
            String::from_utf8(bytes).unwrap()
        };
        // No flag: RUST_LOG (here unset in the filter) decides.
        assert_eq!(verbosity_filter(0, false), None);
        assert_eq!(shown(&verbosity_filter(0, true).unwrap()), "error: e\n");
        // Whatever RUST_LOG holds in this test's environment, -v adds the workbench's debug
        // messages and -vv its trace messages, and no dependency's.
        let verbose = verbosity_filter(1, false).unwrap();
        assert!(shown(&verbose).starts_with("debug: d\ni\nerror: e\n"), "{verbose}");
        assert!(shown(&verbosity_filter(2, false).unwrap()).starts_with("trace: t\ndebug: d\n"));
        assert_eq!(shown("sqlx=debug,workbench=debug"), "debug: d\ni\nerror: e\ndebug: dependency\n");
    }

    /// Messages read as the plain lines they were before they went through tracing.
    #[test]
    fn messages_are_plain_lines_with_the_level_as_prefix() {
        let out = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(EnvFilter::new(DEFAULT_FILTER))
            .with_writer(out.clone())
            .with_ansi(false)
            .event_format(PlainLines)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("run 3 queued in runs.db");
            tracing::warn!("rebuilding the workspace plugins failed (why)");
            tracing::error!("it broke");
            tracing::debug!("not shown by default");
            tracing::info!(target: "sqlx::query", "not the workbench's");
        });
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text,
            "run 3 queued in runs.db\nwarning: rebuilding the workspace plugins failed (why)\nerror: it broke\n"
        );
    }
}
