//! Where a run store lives: an SQLite file (the default, one machine) or a PostgreSQL server
//! (shared by the machines of a cluster).

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

/// The two database engines a store can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// One SQLite file on a local disk.
    Sqlite,
    /// A PostgreSQL database reached by URL.
    Postgres,
}

/// A store's address, as given to `--db` / `WORKBENCH_DB`: a `postgres://` (or
/// `postgresql://`) URL, or else the path of an SQLite file.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// Path of the SQLite database file.
    Sqlite(PathBuf),
    /// Connection URL of a PostgreSQL database (may hold a password; never displayed).
    Postgres(String),
}

impl StoreLocation {
    /// Reads a `--db` value: URLs with a PostgreSQL scheme name a server, `sqlite://PATH` or
    /// `sqlite:PATH` (sqlx's spelling) a file, anything else the path of a file.
    pub fn parse(text: &str) -> StoreLocation {
        let lower = text.trim_start().to_ascii_lowercase();
        if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            return StoreLocation::Postgres(text.trim().to_string());
        }
        let sqlite = ["sqlite://", "sqlite:"].into_iter().find(|p| lower.starts_with(p));
        match sqlite {
            Some(prefix) => StoreLocation::Sqlite(PathBuf::from(&text.trim_start()[prefix.len()..])),
            None => StoreLocation::Sqlite(PathBuf::from(text)),
        }
    }

    /// For clap: a `--db` value, refused when it is a URL of another database engine (a
    /// path of that name would only fail later, as a directory that does not exist); a bad
    /// PostgreSQL URL is reported when connecting.
    pub fn parse_arg(text: &str) -> Result<StoreLocation, String> {
        if let Some((scheme, _)) = text.trim_start().split_once("://") {
            let is_scheme =
                !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
            let known = ["postgres", "postgresql", "sqlite"].contains(&scheme.to_ascii_lowercase().as_str());
            if is_scheme && !known {
                return Err(format!(
                    "`{}` is a {scheme} URL: a run store is an SQLite file (a path, or sqlite://PATH) or a \
                     PostgreSQL database (postgres://user:password@host:port/db)",
                    redacted(text)
                ));
            }
        }
        Ok(StoreLocation::parse(text))
    }

    /// Which engine serves this location.
    pub fn backend(&self) -> Backend {
        match self {
            StoreLocation::Sqlite(_) => Backend::Sqlite,
            StoreLocation::Postgres(_) => Backend::Postgres,
        }
    }

    /// The SQLite file, if this is one.
    pub fn sqlite_path(&self) -> Option<&Path> {
        match self {
            StoreLocation::Sqlite(path) => Some(path),
            StoreLocation::Postgres(_) => None,
        }
    }

    /// The value to pass as `--db` to another workbench process (a worker), password included.
    pub fn to_arg(&self) -> OsString {
        match self {
            StoreLocation::Sqlite(path) => path.clone().into_os_string(),
            StoreLocation::Postgres(url) => url.into(),
        }
    }

    /// Where artifacts go when no artifacts directory is given: next to an SQLite file (so
    /// `runs/<id>/` sits beside `runs.db`, as it always has); a server has no such place.
    pub fn default_artifacts_dir(&self) -> Option<PathBuf> {
        let path = self.sqlite_path()?;
        Some(match path.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(parent) => parent.to_path_buf(),
            None => PathBuf::from("."),
        })
    }
}

/// The URL with its password replaced by `***`, for messages and logs.
fn redacted(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else { return url.to_string() };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match (authority.rfind('@'), authority.find(':')) {
        (Some(at), Some(colon)) if colon < at => {
            format!("{}{}:***{}", &url[..scheme_end + 3], &authority[..colon], &rest[at..])
        }
        _ => url.to_string(),
    }
}

impl fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Sqlite(path) => write!(f, "{}", path.display()),
            StoreLocation::Postgres(url) => f.write_str(&redacted(url)),
        }
    }
}

impl fmt::Debug for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Sqlite(path) => write!(f, "Sqlite({path:?})"),
            StoreLocation::Postgres(_) => write!(f, "Postgres({self})"),
        }
    }
}

impl From<&Path> for StoreLocation {
    fn from(path: &Path) -> StoreLocation {
        StoreLocation::Sqlite(path.to_path_buf())
    }
}

impl From<PathBuf> for StoreLocation {
    fn from(path: PathBuf) -> StoreLocation {
        StoreLocation::Sqlite(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_servers_and_everything_else_a_file() {
        assert_eq!(StoreLocation::parse("runs.db").backend(), Backend::Sqlite);
        assert_eq!(StoreLocation::parse("/data/postgres/runs.db").backend(), Backend::Sqlite);
        assert_eq!(StoreLocation::parse("postgres://h/db").backend(), Backend::Postgres);
        assert_eq!(StoreLocation::parse("PostgreSQL://h/db").backend(), Backend::Postgres);
        assert_eq!(StoreLocation::parse("sqlite:///data/runs.db"), StoreLocation::Sqlite("/data/runs.db".into()));
        assert_eq!(StoreLocation::parse("sqlite:runs.db"), StoreLocation::Sqlite("runs.db".into()));
        assert_eq!(StoreLocation::parse_arg("./a:b/runs.db").unwrap(), StoreLocation::Sqlite("./a:b/runs.db".into()));
        let refused = StoreLocation::parse_arg("mysql://lab:s3cret@db/runs").unwrap_err();
        assert!(refused.contains("is a mysql URL") && refused.contains("postgres://"), "{refused}");
        assert!(!refused.contains("s3cret"), "{refused}");
    }

    #[test]
    fn passwords_are_never_displayed() {
        let loc = StoreLocation::parse("postgres://lab:s3cret@db.lab:5432/runs?sslmode=disable");
        assert_eq!(loc.to_string(), "postgres://lab:***@db.lab:5432/runs?sslmode=disable");
        assert!(!format!("{loc:?}").contains("s3cret"));
        assert_eq!(loc.to_arg(), "postgres://lab:s3cret@db.lab:5432/runs?sslmode=disable");
        assert_eq!(StoreLocation::parse("postgres://lab@h/db").to_string(), "postgres://lab@h/db");
    }

    #[test]
    fn artifacts_default_next_to_an_sqlite_file_only() {
        assert_eq!(StoreLocation::parse("runs.db").default_artifacts_dir(), Some(PathBuf::from(".")));
        assert_eq!(StoreLocation::parse("/a/b/runs.db").default_artifacts_dir(), Some(PathBuf::from("/a/b")));
        assert_eq!(StoreLocation::parse("postgres://h/db").default_artifacts_dir(), None);
    }
}
