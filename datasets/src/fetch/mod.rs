//! Fetching the real data sets: download with resume, checksum verification, unpacking, and
//! a listing of what is in the cache.
//!
//! A data set `NAME` lives in the folder `CACHE/NAME`:
//!
//! | data set        | downloaded into `downloads/`       | unpacked files                                  |
//! |-----------------|------------------------------------|-------------------------------------------------|
//! | `cifar10`       | `cifar-10-binary.tar.gz`           | `cifar-10-batches-bin/data_batch_{1..5}.bin`, `test_batch.bin` |
//! | `cifar100`      | `cifar-100-binary.tar.gz`          | `cifar-100-binary/train.bin`, `test.bin`        |
//! | `mnist`         | the four `*-idx?-ubyte.gz` files   | `train-images-idx3-ubyte` etc. (gunzipped)       |
//! | `fashion-mnist` | the four `*-idx?-ubyte.gz` files   | `train-images-idx3-ubyte` etc. (gunzipped)       |
//! | `sudoku-hard`   | `sudoku-hard.zip` (address given)  | `sudoku-hard/train.csv`, `valid.csv`, `test.csv` |
//!
//! so that `CACHE/NAME` is a folder the image loaders of [`crate::images`] read directly
//! (they look into `cifar-10-batches-bin/` and `cifar-100-binary/` themselves), and the
//! Sudoku CSV files are `puzzle,solution` lines as [`crate::sudoku::load_csv`] reads them.
//! The downloads are kept, so that they can be checked again later.
//!
//! Each file is downloaded into `NAME.part` and resumed with an HTTP range request when an
//! earlier attempt or run was cut off (`download`). Only when the whole file is there is it
//! hashed and compared with its checksum: the one its publisher gives (MD5 for CIFAR, MNIST
//! and Fashion-MNIST; see [`registry`]), or one given by the user. A file that does not match
//! is removed and the fetch fails with both values in the message. A file with no checksum
//! (the hard Sudoku set, unless the user gives one) is trusted on first use: its SHA-256 is
//! recorded in `fetch.json` and every later download or check must match it. The record also
//! keeps MD5 and SHA-256 of every file, its address, and what it was checked against.

mod checksum;
mod download;
mod record;
pub mod registry;
mod unpack;

#[cfg(test)]
mod test_server;
#[cfg(test)]
mod tests;

pub use checksum::{Checksum, Digests};
pub use record::{FileRecord, Record, RECORD_FILE};
pub use registry::{source, Expected, Origin, RemoteFile, Source, NAMES};
pub use unpack::Format;

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Folder of a data set's downloaded archives, inside its folder.
pub const DOWNLOADS: &str = "downloads";

/// How downloads behave.
#[derive(Clone, Debug)]
pub struct FetchSettings {
    /// How many times a broken or failed download is tried again (resuming where it stopped).
    pub retries: u32,
    /// The pause before each new try.
    pub retry_delay: Duration,
    /// How long to wait for a connection, an answer, or the next bytes.
    pub read_timeout: Duration,
}

impl Default for FetchSettings {
    fn default() -> Self {
        FetchSettings { retries: 5, retry_delay: Duration::from_secs(2), read_timeout: Duration::from_secs(60) }
    }
}

/// Where a fetch reports what it does (a progress bar in the workbench).
pub trait Progress {
    /// A transfer of `file` begins: `total` bytes if the server says, `start` already on disk.
    fn start(&mut self, file: &str, total: Option<u64>, start: u64);
    /// `bytes` more bytes arrived.
    fn advance(&mut self, bytes: u64);
    /// The transfer ended (complete or not).
    fn end(&mut self);
    /// A line for the user: a resume, a retry, a verification, an unpacking.
    fn note(&mut self, text: &str);
}

/// A [`Progress`] that reports nothing.
pub struct Quiet;

impl Progress for Quiet {
    fn start(&mut self, _: &str, _: Option<u64>, _: u64) {}
    fn advance(&mut self, _: u64) {}
    fn end(&mut self) {}
    fn note(&mut self, _: &str) {}
}

/// What went wrong while fetching. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The name is not one of [`NAMES`].
    #[error("unknown data set `{name}`; choose one of {}", NAMES.join(", "))]
    UnknownDataset {
        /// The name given.
        name: String,
    },
    /// The data set has no known address and none was given.
    #[error("{help}")]
    NeedsUrl {
        /// What to give and where the data set is known to be.
        help: String,
    },
    /// A command-line option does not fit the data set.
    #[error("{problem}")]
    BadOption {
        /// What is wrong and what to do.
        problem: String,
    },
    /// The server does not have the file.
    #[error(
        "`{url}` was not found on the server (HTTP 404); check the address, or the mirror given with --base-url or \
         WORKBENCH_DATA_MIRROR"
    )]
    NotFound {
        /// The address.
        url: String,
    },
    /// The server answered with an unexpected status.
    #[error("the server answered HTTP {status} for `{url}`; check the address, or try again later")]
    Status {
        /// The address.
        url: String,
        /// The HTTP status.
        status: u16,
    },
    /// The request could not be made (bad address, unknown host, TLS failure...).
    #[error("could not download `{url}`: {error}; check the address and the network connection")]
    Network {
        /// The address.
        url: String,
        /// What the HTTP client said.
        error: String,
    },
    /// The download broke off and the retries ran out.
    #[error(
        "the download of `{url}` did not finish: {why} ({attempts} attempt{}); {}",
        if *attempts == 1 { "" } else { "s" },
        resume_hint(*bytes, part)
    )]
    Interrupted {
        /// The address.
        url: String,
        /// The partial file.
        part: PathBuf,
        /// Bytes in the partial file.
        bytes: u64,
        /// Attempts made.
        attempts: u32,
        /// Why the last attempt stopped.
        why: String,
    },
    /// A downloaded file does not have its checksum; it was removed.
    #[error(
        "`{}` downloaded from `{}` does not match its checksum: expected {} ({}), got {}; the file was removed. The \
         download was corrupted or the server sent another file: run the command again, and if it fails again check \
         the address (--url, --base-url, WORKBENCH_DATA_MIRROR)",
        .0.file, .0.url, .0.expected, .0.vouched_by, .0.actual
    )]
    ChecksumMismatch(Box<Mismatch>),
    /// A file without a published checksum differs from its first download; it was removed.
    #[error(
        "`{}` downloaded from `{}` has {}, but its first download had {} ({}; no checksum is published for it); the \
         new file was removed. If the new file is the one you want, delete the data set's folder and fetch again",
        .0.file, .0.url, .0.actual, .0.expected, .0.vouched_by
    )]
    FirstUseMismatch(Box<Mismatch>),
    /// A file or folder could not be read or written.
    #[error("cannot read or write `{}`: {error}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The underlying error.
        #[source]
        error: std::io::Error,
    },
    /// A verified archive could not be unpacked.
    #[error(
        "cannot unpack `{}`: {error}; check the free disk space and the folder's permissions, and that the file is \
         the archive its name says",
        archive.display()
    )]
    Unpack {
        /// The archive.
        archive: PathBuf,
        /// What went wrong.
        error: String,
    },
    /// The record file is not readable.
    #[error("the fetch record `{}` cannot be read ({error}); delete it and fetch the data set again", path.display())]
    Record {
        /// The record file.
        path: PathBuf,
        /// What is wrong.
        error: String,
    },
}

fn resume_hint(bytes: u64, part: &Path) -> String {
    if bytes == 0 {
        "nothing was received: check the address and the network connection, then run the same command again"
            .to_string()
    } else {
        format!("the {bytes} bytes received are kept in `{}`: run the same command again to resume", part.display())
    }
}

/// A downloaded file and the checksum it failed.
#[derive(Clone, Debug)]
pub struct Mismatch {
    /// The file's name.
    pub file: String,
    /// Where it was downloaded from.
    pub url: String,
    /// The checksum it should have.
    pub expected: Checksum,
    /// The checksum it has, in the same algorithm.
    pub actual: Checksum,
    /// Who vouches for `expected` (a publisher, the command line, or the record of the first
    /// download).
    pub vouched_by: String,
}

/// The result of a fetch.
#[derive(Clone, Debug)]
pub struct Fetched {
    /// The data set's folder.
    pub dir: PathBuf,
    /// What was recorded about it.
    pub record: Record,
    /// Whether everything was already there (verified again and unpacked again, nothing
    /// downloaded).
    pub already_there: bool,
}

/// Where a downloaded file is kept: archives in `downloads/`, plain files in the data set's
/// folder itself (they are the data).
fn kept_at(file_name: &str) -> String {
    match Format::of(file_name) {
        Format::Plain => file_name.to_string(),
        _ => format!("{DOWNLOADS}/{file_name}"),
    }
}

/// Downloads, verifies and unpacks `source` into `cache/<name>`, reusing files already there
/// when they still match their checksums.
pub fn fetch(
    source: &Source,
    cache: &Path,
    settings: &FetchSettings,
    progress: &mut dyn Progress,
) -> Result<Fetched, FetchError> {
    let mut urls = Vec::with_capacity(source.files.len());
    for file in &source.files {
        match &file.url {
            Some(url) => urls.push(url.clone()),
            None => {
                let help = source.url_help.clone().unwrap_or_else(|| format!("{} has no download address", file.name));
                return Err(FetchError::NeedsUrl { help });
            }
        }
    }
    let dir = cache.join(&source.name);
    let create =
        |path: &Path| std::fs::create_dir_all(path).map_err(|error| FetchError::Io { path: path.into(), error });
    create(&dir.join(DOWNLOADS))?;
    let previous = Record::read(&dir)?;
    let record_path = Record::path(&dir);

    let mut files = Vec::with_capacity(source.files.len());
    let mut reused_all = true;
    for (file, url) in source.files.iter().zip(urls) {
        let kept_at = kept_at(&file.name);
        let kept = dir.join(&kept_at);
        let first_use = previous.as_ref().and_then(|r| r.file(&file.name)).filter(|f| f.checked_against.is_none());
        // The value the file must have: the expected one, or the one recorded at its first download.
        let reference = match (&file.expected, first_use) {
            (Some(expected), _) => Some(expected.checksum),
            (None, Some(first)) => Some(
                Checksum::sha256(&first.sha256)
                    .map_err(|error| FetchError::Record { path: record_path.clone(), error })?,
            ),
            (None, None) => None,
        };
        let existing = if kept.is_file() {
            let digests = hash(&kept)?;
            match reference {
                Some(reference) if digests.matches(&reference) => {
                    progress.note(&format!("{}: already downloaded, {reference} matches", file.name));
                    Some(digests)
                }
                _ => {
                    progress.note(&format!(
                        "{}: the copy in the cache cannot be verified; downloading it again",
                        file.name
                    ));
                    remove(&kept)?;
                    None
                }
            }
        } else {
            None
        };
        let digests = match existing {
            Some(digests) => digests,
            None => {
                reused_all = false;
                let part = PathBuf::from(format!("{}.part", kept.display()));
                download::download(&url, &file.name, &part, settings, progress)?;
                let digests = hash(&part)?;
                match (&file.expected, reference) {
                    (Some(expected), _) if !digests.matches(&expected.checksum) => {
                        remove(&part)?;
                        return Err(FetchError::ChecksumMismatch(Box::new(Mismatch {
                            file: file.name.clone(),
                            url,
                            expected: expected.checksum,
                            actual: digests.in_algorithm_of(&expected.checksum),
                            vouched_by: expected.origin.describe(),
                        })));
                    }
                    (None, Some(recorded)) if !digests.matches(&recorded) => {
                        remove(&part)?;
                        return Err(FetchError::FirstUseMismatch(Box::new(Mismatch {
                            file: file.name.clone(),
                            url,
                            expected: recorded,
                            actual: Checksum::Sha256(digests.sha256),
                            vouched_by: format!("recorded in `{}`", record_path.display()),
                        })));
                    }
                    (Some(expected), _) => progress.note(&format!(
                        "{}: {} matches ({})",
                        file.name,
                        expected.checksum,
                        expected.origin.describe()
                    )),
                    (None, Some(recorded)) => {
                        progress.note(&format!("{}: {recorded} matches its first download", file.name))
                    }
                    (None, None) => progress.note(&format!(
                        "{}: no checksum is published for it; its sha256 {} is recorded (trust on first use) and later \
                         downloads must match it",
                        file.name,
                        hex::encode(digests.sha256)
                    )),
                }
                std::fs::rename(&part, &kept).map_err(|error| FetchError::Io { path: kept.clone(), error })?;
                digests
            }
        };
        let (checked_against, origin) = match (&file.expected, first_use) {
            (Some(expected), _) => (Some(expected.checksum.to_string()), expected.origin.describe()),
            (None, Some(first)) => (None, first.origin.clone()),
            (None, None) => (None, "trusted on first use: no checksum is published or given".to_string()),
        };
        files.push(FileRecord {
            name: file.name.clone(),
            url: file.url.clone().unwrap_or_default(),
            kept_at,
            bytes: digests.bytes,
            md5: hex::encode(digests.md5),
            sha256: hex::encode(digests.sha256),
            checked_against,
            origin,
        });
    }

    let mut record = Record { dataset: source.name.clone(), title: source.title.clone(), files, unpacked: false };
    let already_there = reused_all && previous.as_ref().is_some_and(|p| p.unpacked);
    // Recorded before unpacking, so that a first-use checksum is kept even if unpacking fails.
    // Unpacking is repeated on every fetch (it takes seconds), so unpacked files that were
    // deleted or changed are restored from the verified downloads.
    record.write(&dir)?;
    for file in &record.files {
        let format = Format::of(&file.name);
        if format != Format::Plain && !already_there {
            progress.note(&format!("{}: unpacking into {}", file.name, dir.display()));
        }
        unpack::unpack(&dir.join(&file.kept_at), format, &dir)?;
    }
    record.unpacked = true;
    record.write(&dir)?;
    Ok(Fetched { dir, record, already_there })
}

fn hash(path: &Path) -> Result<Digests, FetchError> {
    Digests::of_file(path).map_err(|error| FetchError::Io { path: path.to_path_buf(), error })
}

fn remove(path: &Path) -> Result<(), FetchError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(FetchError::Io { path: path.to_path_buf(), error: e })
        }
        _ => Ok(()),
    }
}

/// How far a cached data set can be trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Every file matched a published or given checksum, and everything is unpacked.
    Verified,
    /// Complete, but at least one file had no checksum to match: its SHA-256 was recorded at
    /// the first download.
    FirstUse,
    /// A download or the unpacking did not finish.
    Incomplete,
    /// A kept download no longer matches what was recorded (changed or truncated on disk).
    Modified,
}

impl State {
    /// One word for listings: `verified`, `first-use`, `incomplete` or `modified`.
    pub fn label(self) -> &'static str {
        match self {
            State::Verified => "verified",
            State::FirstUse => "first-use",
            State::Incomplete => "incomplete",
            State::Modified => "modified",
        }
    }
}

/// A data set found in the cache.
#[derive(Clone, Debug)]
pub struct Cached {
    /// Its name (the folder's).
    pub name: String,
    /// Its folder.
    pub dir: PathBuf,
    /// Bytes of everything in the folder (downloads and unpacked files).
    pub bytes: u64,
    /// How far it can be trusted.
    pub state: State,
    /// The same in words: against what it was checked, or what is missing.
    pub detail: String,
    /// The record, if the fetch got that far.
    pub record: Option<Record>,
}

/// The data sets in `cache`: every folder a fetch made (it has a `downloads/` folder or a
/// record), finished or not.
/// The kept downloads are checked by size, or, with `rehash`, by their recorded SHA-256.
pub fn cached(cache: &Path, rehash: bool) -> Result<Vec<Cached>, FetchError> {
    let entries = match std::fs::read_dir(cache) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(FetchError::Io { path: cache.to_path_buf(), error }),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|error| FetchError::Io { path: cache.to_path_buf(), error })?;
        let dir = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if !dir.join(DOWNLOADS).is_dir() && !Record::path(&dir).is_file() {
            continue;
        }
        let record = Record::read(&dir)?;
        let (state, detail) = assess(&dir, record.as_ref(), rehash)?;
        found.push(Cached { bytes: folder_bytes(&dir), name, dir, state, detail, record });
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

fn assess(dir: &Path, record: Option<&Record>, rehash: bool) -> Result<(State, String), FetchError> {
    let Some(record) = record else {
        return Ok((State::Incomplete, "no download has finished yet: fetch it again to resume".to_string()));
    };
    if !record.unpacked {
        return Ok((State::Incomplete, "downloaded but not unpacked: fetch it again to finish".to_string()));
    }
    let mut removed = Vec::new();
    for file in &record.files {
        let kept = dir.join(&file.kept_at);
        let Ok(meta) = std::fs::metadata(&kept) else {
            removed.push(file.name.clone());
            continue;
        };
        let changed = if rehash { hex::encode(hash(&kept)?.sha256) != file.sha256 } else { meta.len() != file.bytes };
        if changed {
            let how = if rehash { "its sha256 differs from the record" } else { "its size differs from the record" };
            return Ok((
                State::Modified,
                format!("{} changed since it was verified ({how}): delete the folder and fetch again", file.kept_at),
            ));
        }
    }
    let trusted = record.files.iter().all(|f| f.checked_against.is_some());
    let mut detail = if trusted {
        let mut checks: Vec<String> = record
            .files
            .iter()
            .map(|f| {
                let algorithm = f.checked_against.as_deref().and_then(|c| c.split(':').next()).unwrap_or("?");
                format!("{algorithm} {}", f.origin)
            })
            .collect();
        checks.dedup();
        checks.join("; ")
    } else {
        let sums: Vec<String> = record.files.iter().map(|f| format!("{} sha256:{}", f.name, f.sha256)).collect();
        format!("no published checksum; recorded at first download: {}", sums.join(", "))
    };
    if rehash {
        detail.push_str(if removed.len() < record.files.len() { " (re-hashed now)" } else { "" });
    }
    if !removed.is_empty() {
        detail.push_str(&format!("; downloads since removed, not re-checkable: {}", removed.join(", ")));
    }
    Ok((if trusted { State::Verified } else { State::FirstUse }, detail))
}

/// Total bytes of the files under `dir` (symbolic links are not followed).
fn folder_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => folder_bytes(&entry.path()),
            Ok(kind) if kind.is_file() => entry.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}
