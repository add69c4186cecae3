//! The record of a fetched data set (`fetch.json` in its folder): what was downloaded, from
//! where, its digests, what it was checked against, and whether it was unpacked.

use super::FetchError;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Name of the record file in a data set's folder.
pub const RECORD_FILE: &str = "fetch.json";

/// What `fetch` wrote about a data set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The data set's name.
    pub dataset: String,
    /// What it is, in words.
    pub title: String,
    /// Its downloaded files.
    pub files: Vec<FileRecord>,
    /// Whether every file was unpacked.
    pub unpacked: bool,
}

/// One downloaded file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    /// The file's name.
    pub name: String,
    /// Where it was downloaded from.
    pub url: String,
    /// Where it is kept, relative to the data set's folder (`downloads/NAME` for archives).
    pub kept_at: String,
    /// Its length in bytes.
    pub bytes: u64,
    /// Its MD5, in hexadecimal.
    pub md5: String,
    /// Its SHA-256, in hexadecimal.
    pub sha256: String,
    /// The checksum it was checked against (`md5:HEX` or `sha256:HEX`); `None` when none was
    /// published or given, and `sha256` was recorded on this first download instead.
    pub checked_against: Option<String>,
    /// Who vouches for `checked_against`, or that it was trusted on first use.
    pub origin: String,
}

impl Record {
    /// The record's path in the data set folder `dir`.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(RECORD_FILE)
    }

    /// Reads the record of `dir`; `None` if there is none.
    pub fn read(dir: &Path) -> Result<Option<Record>, FetchError> {
        let path = Record::path(dir);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(FetchError::Io { path, error }),
        };
        serde_json::from_str(&text).map(Some).map_err(|e| FetchError::Record { path, error: e.to_string() })
    }

    /// Writes the record into `dir` (through a temporary file, so a record is never half
    /// written).
    pub fn write(&self, dir: &Path) -> Result<(), FetchError> {
        let path = Record::path(dir);
        let temporary = dir.join(format!("{RECORD_FILE}.writing"));
        let text = serde_json::to_string_pretty(self).expect("a record serialises");
        std::fs::write(&temporary, text + "\n")
            .and_then(|_| std::fs::rename(&temporary, &path))
            .map_err(|error| FetchError::Io { path, error })
    }

    /// The record of the file called `name`, if any.
    pub fn file(&self, name: &str) -> Option<&FileRecord> {
        self.files.iter().find(|f| f.name == name)
    }
}
