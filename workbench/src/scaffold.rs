//! `workbench plugin new`: a plugin crate made from a template and added to the workspace.
//!
//! The templates are files under `workbench/templates/` (`layer/`, `task/`), compiled into
//! the binary; `{{name}}` in them becomes the plugin's name. The layer template is a minimal
//! energy-derived layer (its energy, its update as a gradient step on it, the gradient
//! identity `workbench verify` checks, and tests of all three); the task template generates
//! its data (reverse a random sequence).

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Which template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TemplateKind {
    /// A layer derived from an energy.
    Layer,
    /// A generated task.
    Task,
}

impl TemplateKind {
    /// The template's files: path inside the crate, text.
    fn files(self) -> &'static [(&'static str, &'static str)] {
        match self {
            TemplateKind::Layer => &[
                ("Cargo.toml", include_str!("../templates/layer/Cargo.toml.tmpl")),
                ("src/lib.rs", include_str!("../templates/layer/lib.rs.tmpl")),
                ("src/layer.rs", include_str!("../templates/layer/layer.rs.tmpl")),
                ("src/tests.rs", include_str!("../templates/layer/tests.rs.tmpl")),
            ],
            TemplateKind::Task => &[
                ("Cargo.toml", include_str!("../templates/task/Cargo.toml.tmpl")),
                ("src/lib.rs", include_str!("../templates/task/lib.rs.tmpl")),
                ("src/task.rs", include_str!("../templates/task/task.rs.tmpl")),
                ("src/tests.rs", include_str!("../templates/task/tests.rs.tmpl")),
            ],
        }
    }

    /// The file a researcher edits first.
    pub fn main_file(self) -> &'static str {
        match self {
            TemplateKind::Layer => "src/layer.rs",
            TemplateKind::Task => "src/task.rs",
        }
    }
}

/// Words that cannot name a library crate (Rust keywords and the standard crates).
const RESERVED: &[&str] = &[
    "as",
    "async",
    "await",
    "break",
    "const",
    "continue",
    "crate",
    "dyn",
    "else",
    "enum",
    "extern",
    "false",
    "fn",
    "for",
    "gen",
    "if",
    "impl",
    "in",
    "let",
    "loop",
    "match",
    "mod",
    "move",
    "mut",
    "pub",
    "ref",
    "return",
    "self",
    "static",
    "struct",
    "super",
    "trait",
    "true",
    "try",
    "type",
    "unsafe",
    "use",
    "where",
    "while",
    "abstract",
    "become",
    "box",
    "do",
    "final",
    "macro",
    "override",
    "priv",
    "typeof",
    "unsized",
    "virtual",
    "yield",
    "std",
    "core",
    "alloc",
    "proc_macro",
    "test",
];

/// Crates every template depends on: a plugin named like one would not compile.
const TEMPLATE_DEPENDENCIES: &[&str] = &["plugin_api", "candle_core", "candle_nn", "rand", "rand_core"];

/// Checks a plugin name on its own: lower-case letters, digits, `-` and `_`, starting with
/// a letter, not a keyword.
pub fn check_name(name: &str) -> Result<()> {
    let valid_chars = name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if name.is_empty() || name.len() > 64 || !valid_chars || !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        bail!(
            "`{name}` is not a valid plugin name: use 1 to 64 lower-case letters, digits, `-` and `_`, starting with a \
             letter (e.g. `my-layer`)"
        );
    }
    if name.ends_with(['-', '_']) || name.contains("--") {
        bail!("`{name}` is not a valid plugin name: no trailing or doubled `-` (e.g. `my-layer`)");
    }
    let lib = name.replace('-', "_");
    if RESERVED.contains(&lib.as_str()) || TEMPLATE_DEPENDENCIES.contains(&lib.as_str()) {
        bail!("`{name}` is reserved (a Rust keyword or a crate the plugin depends on); choose another name");
    }
    Ok(())
}

/// The package and library names of the workspace's members, and its workspace dependencies.
fn taken_crate_names(root: &Path, manifest: &toml::Table) -> Vec<String> {
    let workspace = manifest.get("workspace");
    let members = workspace.and_then(|w| w.get("members")).and_then(|m| m.as_array()).cloned().unwrap_or_default();
    let mut names: Vec<String> = Vec::new();
    for member in members.iter().filter_map(|m| m.as_str()) {
        if let Some(krate) = crate::host::PluginCrate::read(&root.join(member)) {
            names.push(krate.package.replace('-', "_"));
            names.push(krate.lib.clone());
        }
    }
    let deps = workspace.and_then(|w| w.get("dependencies")).and_then(|d| d.as_table());
    names.extend(deps.into_iter().flat_map(|d| d.keys()).map(|k| k.replace('-', "_")));
    names
}

/// What [`create`] made.
#[derive(Debug, Clone)]
pub struct Created {
    /// `root/plugins/NAME`.
    pub dir: PathBuf,
    /// The files written, relative to `dir`.
    pub files: Vec<String>,
}

/// Creates `root/plugins/NAME` from the template of `kind` and adds it to the workspace
/// members. Refused, with the reason and the fix, when the name is invalid or taken: by a
/// directory, by a workspace crate or dependency, or by a loaded plugin (`plugin_names`).
pub fn create(root: &Path, name: &str, kind: TemplateKind, plugin_names: &[String]) -> Result<Created> {
    check_name(name)?;
    let manifest_path = root.join("Cargo.toml");
    let manifest_text =
        std::fs::read_to_string(&manifest_path).with_context(|| format!("reading {}", manifest_path.display()))?;
    let manifest: toml::Table =
        manifest_text.parse().with_context(|| format!("{} is not valid TOML", manifest_path.display()))?;
    if manifest.get("workspace").is_none() {
        bail!("{} has no [workspace]: run `workbench plugin new` in the workbench repository", manifest_path.display());
    }
    let dir = root.join("plugins").join(name);
    if dir.exists() {
        bail!("{} already exists; choose another name or remove it", dir.display());
    }
    let lib = name.replace('-', "_");
    if taken_crate_names(root, &manifest).contains(&lib) {
        bail!("a crate named `{name}` already exists in the workspace; choose another name");
    }
    if plugin_names.iter().any(|p| p == name) {
        bail!("a loaded plugin is already called `{name}` (`workbench plugins` lists them); choose another name");
    }
    let new_manifest = with_member(&manifest_text, &format!("plugins/{name}"))?;
    let mut files = Vec::new();
    for (path, text) in kind.files() {
        let target = dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&target, text.replace("{{name}}", name))
            .with_context(|| format!("writing {}", target.display()))?;
        files.push(path.to_string());
    }
    std::fs::write(&manifest_path, new_manifest).with_context(|| format!("writing {}", manifest_path.display()))?;
    Ok(Created { dir, files })
}

/// The workspace manifest with `member` added to `[workspace] members`, after the last
/// `plugins/` entry and formatted like it; everything else (comments, order) unchanged.
pub fn with_member(manifest: &str, member: &str) -> Result<String> {
    let mut doc: toml_edit::DocumentMut = manifest.parse().context("the workspace Cargo.toml is not valid TOML")?;
    let members = doc
        .get_mut("workspace")
        .and_then(|w| w.get_mut("members"))
        .and_then(|m| m.as_array_mut())
        .context("the workspace Cargo.toml has no `[workspace] members` list")?;
    if members.iter().any(|m| m.as_str() == Some(member)) {
        return Ok(manifest.to_string());
    }
    let last_plugin = members
        .iter()
        .enumerate()
        .filter(|(_, m)| m.as_str().is_some_and(|s| s.starts_with("plugins/")))
        .map(|(i, _)| i)
        .last();
    let at = last_plugin.map_or(members.len(), |i| i + 1);
    let neighbour = last_plugin.or(members.len().checked_sub(1)).and_then(|i| members.get(i));
    // The neighbour's spacing (a new line and indent in a multi-line list), unless it has
    // none (the first item of a one-line list): then the default `, ` spacing.
    let decor = neighbour
        .map(|v| v.decor().clone())
        .filter(|d| d.prefix().and_then(|p| p.as_str()).is_some_and(|p| !p.is_empty()));
    match decor {
        Some(decor) => {
            let mut value = toml_edit::Value::from(member);
            *value.decor_mut() = decor;
            members.insert_formatted(at, value);
        }
        None => members.insert(at, member),
    }
    Ok(doc.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_with_the_reason() {
        for good in ["my-layer", "ring2", "a_b"] {
            check_name(good).unwrap();
        }
        for (bad, reason) in [
            ("", "not a valid plugin name"),
            ("My", "lower-case"),
            ("2d", "starting with a"),
            ("a b", "lower-case"),
            ("layer-", "trailing"),
            ("fn", "reserved"),
            ("plugin-api", "reserved"),
        ] {
            let err = check_name(bad).unwrap_err().to_string();
            assert!(err.contains(reason), "{bad}: {err}");
        }
    }

    #[test]
    fn a_member_is_added_after_the_plugins_keeping_the_rest() {
        let manifest = "[workspace]\nresolver = \"2\"\nmembers = [\n    \"workbench\",\n    \"plugins/a\",\n    \"plugins/b\",\n    \"tests/fixture\",\n]\n# a comment\n[workspace.package]\nedition = \"2021\"\n";
        let out = with_member(manifest, "plugins/c").unwrap();
        assert_eq!(
            out,
            "[workspace]\nresolver = \"2\"\nmembers = [\n    \"workbench\",\n    \"plugins/a\",\n    \"plugins/b\",\n    \"plugins/c\",\n    \"tests/fixture\",\n]\n# a comment\n[workspace.package]\nedition = \"2021\"\n"
        );
        assert_eq!(with_member(&out, "plugins/c").unwrap(), out, "added once");
        let inline = with_member("[workspace]\nmembers = [\"a\"]\n", "plugins/x").unwrap();
        assert_eq!(inline, "[workspace]\nmembers = [\"a\", \"plugins/x\"]\n");
        assert!(with_member("[package]\nname = \"x\"\n", "plugins/x").is_err());
    }

    #[test]
    fn taken_names_and_existing_directories_are_refused() {
        let tmp = tempfile::Builder::new().prefix("wb-scaffold-").tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("plugins/old/src")).unwrap();
        std::fs::write(root.join("plugins/old/Cargo.toml"), "[package]\nname = \"old\"\n").unwrap();
        std::fs::create_dir_all(root.join("plugins/stray")).unwrap();
        std::fs::write(
            root.join("Cargo.toml"),
            "[workspace]\nmembers = [\"plugins/old\"]\n[workspace.dependencies]\nserde = \"1\"\n",
        )
        .unwrap();
        let refuse =
            |name: &str, plugins: &[String]| create(root, name, TemplateKind::Layer, plugins).unwrap_err().to_string();
        assert!(refuse("old", &[]).contains("already exists"), "{}", refuse("old", &[]));
        assert!(refuse("stray", &[]).contains("already exists"));
        assert!(refuse("serde", &[]).contains("a crate named `serde`"));
        assert!(refuse("hyperset", &["hyperset".to_string()]).contains("a loaded plugin"));
        let created = create(root, "fresh", TemplateKind::Task, &[]).unwrap();
        assert_eq!(created.files, ["Cargo.toml", "src/lib.rs", "src/task.rs", "src/tests.rs"]);
        let lib = std::fs::read_to_string(created.dir.join("src/lib.rs")).unwrap();
        assert!(lib.contains("\"fresh\"") && !lib.contains("{{"), "{lib}");
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        assert!(manifest.contains("\"plugins/old\", \"plugins/fresh\""), "{manifest}");
        assert!(refuse("fresh", &[]).contains("already exists"));
    }
}
