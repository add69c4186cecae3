//! Settings of the terminal workbench kept across restarts (the runs table's hidden columns),
//! in a small TOML file: `$WORKBENCH_TUI_CONFIG`, else `$XDG_CONFIG_HOME/workbench/tui.toml`,
//! else `~/.config/workbench/tui.toml`.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Names the settings file instead of the one in the user's config directory.
pub const ENV: &str = "WORKBENCH_TUI_CONFIG";

/// What is kept.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prefs {
    #[serde(default)]
    pub runs: RunsPrefs,
}

/// The Runs screen's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunsPrefs {
    /// Titles of the hidden columns.
    #[serde(default)]
    pub hidden: BTreeSet<String>,
}

/// The settings file this process uses (none without a home directory).
pub fn default_path() -> Option<PathBuf> {
    let var = |name| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(path) = var(ENV) {
        return Some(path);
    }
    let config = var("XDG_CONFIG_HOME").or_else(|| var("HOME").map(|h| h.join(".config")))?;
    Some(config.join("workbench").join("tui.toml"))
}

/// Reads the settings at `path`; a missing file is the defaults.
pub fn load(path: &Path) -> Result<Prefs> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Prefs::default()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    toml::from_str(&text).with_context(|| {
        format!(
            "{} is not valid workbench TUI settings; fix it or delete it to start from the defaults",
            path.display()
        )
    })
}

/// Writes the settings to `path`, creating its directory.
pub fn save(path: &Path, prefs: &Prefs) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let text = toml::to_string(prefs).context("cannot write the TUI settings as TOML")?;
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_round_trip_and_bad_files_name_the_fix() {
        let dir = tempfile::Builder::new().prefix("workbench-prefs-").tempdir().unwrap();
        let path = dir.path().join("sub").join("tui.toml");
        assert_eq!(load(&path).unwrap(), Prefs::default(), "a missing file is the defaults");
        let mut prefs = Prefs::default();
        prefs.runs.hidden.extend(["layer".to_string(), "lr".to_string()]);
        save(&path, &prefs).unwrap();
        assert_eq!(load(&path).unwrap(), prefs);
        std::fs::write(&path, "[runs]\nhiden = [\"layer\"]\n").unwrap();
        let e = format!("{:#}", load(&path).unwrap_err());
        assert!(e.contains("tui.toml") && e.contains("hiden") && e.contains("delete it"), "{e}");
    }
}
