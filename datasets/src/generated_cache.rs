//! Generated data sets kept on disk by their parameters and seed, so a run starts without
//! generating them again (minimal Sudoku puzzles take seconds to make, their file
//! milliseconds to read).
//!
//! A file holds a magic and format version, the payload and its SHA-256: a file that is
//! short, torn, of another version or altered is not used (the data are generated again and
//! the file rewritten). Files are written to a temporary name and renamed into place, so
//! concurrent runs never read a half-written file. The cache is an optimisation only: a
//! folder that cannot be created or written leaves generation as it was.
//!
//! Folder: `WORKBENCH_CACHE` (`off` turns the cache off), else
//! `$XDG_CACHE_HOME/workbench/generated`, else `~/.cache/workbench/generated`.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"WBCACHE1";

/// The cache folder, or `None` when it is turned off or no home is known.
pub fn dir() -> Option<PathBuf> {
    match std::env::var_os("WORKBENCH_CACHE") {
        Some(v) if v == "off" => return None,
        Some(v) if !v.is_empty() => return Some(PathBuf::from(v)),
        _ => {}
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("workbench").join("generated"))
}

/// The payload stored under `name` in `dir`, if a whole, unaltered file of this format is
/// there.
pub fn read(dir: &Path, name: &str) -> Option<Vec<u8>> {
    let bytes = std::fs::read(dir.join(name)).ok()?;
    let body = bytes.strip_prefix(MAGIC.as_slice())?;
    let (payload, digest) = body.split_at_checked(body.len().checked_sub(32)?)?;
    (Sha256::digest(payload).as_slice() == digest).then(|| payload.to_vec())
}

/// Stores `payload` under `name` in `dir` (created if needed); errors are ignored: the
/// cache only saves time.
pub fn write(dir: &Path, name: &str, payload: &[u8]) {
    // Unique per process and per call: two threads of one process may store the same entry.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let _ = std::fs::create_dir_all(dir);
    let call = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.{}.{call}.tmp", std::process::id()));
    let mut bytes = Vec::with_capacity(MAGIC.len() + payload.len() + 32);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(payload);
    bytes.extend_from_slice(&Sha256::digest(payload));
    if std::fs::write(&tmp, &bytes).is_ok() && std::fs::rename(&tmp, dir.join(name)).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_payload_reads_back_and_a_damaged_one_does_not() {
        let tmp = tempfile::Builder::new().prefix("wb-cache-roundtrip-").tempdir().unwrap();
        let dir = tmp.path().join("cache");
        assert_eq!(read(&dir, "x"), None);
        write(&dir, "x", b"hello puzzles");
        assert_eq!(read(&dir, "x").as_deref(), Some(&b"hello puzzles"[..]));
        let path = dir.join("x");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[10] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(read(&dir, "x"), None, "an altered payload");
        std::fs::write(&path, &bytes[..20]).unwrap();
        assert_eq!(read(&dir, "x"), None, "a torn file");
        std::fs::write(&path, b"WBCACHE0 something else entirely, 32 bytes or more...").unwrap();
        assert_eq!(read(&dir, "x"), None, "another format");
    }

    #[test]
    fn threads_storing_one_entry_at_once_never_show_a_torn_file() {
        let tmp = tempfile::Builder::new().prefix("wb-cache-threads-").tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let payloads: Vec<Vec<u8>> = (0..3u8).map(|t| vec![t; 1 << 20]).collect();
        write(&dir, "shared", &payloads[0]);
        let writing = std::sync::atomic::AtomicBool::new(true);
        std::thread::scope(|scope| {
            let writers: Vec<_> = payloads
                .iter()
                .map(|payload| {
                    let dir = &dir;
                    scope.spawn(move || (0..30).for_each(|_| write(dir, "shared", payload)))
                })
                .collect();
            let reader = scope.spawn(|| loop {
                let still_writing = writing.load(std::sync::atomic::Ordering::Relaxed);
                let stored = read(&dir, "shared").expect("a whole entry at every read");
                assert!(payloads.contains(&stored));
                if !still_writing {
                    break;
                }
            });
            writers.into_iter().for_each(|w| w.join().unwrap());
            writing.store(false, std::sync::atomic::Ordering::Relaxed);
            reader.join().unwrap();
        });
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, vec![std::ffi::OsString::from("shared")], "no temporary file is left");
    }
}
