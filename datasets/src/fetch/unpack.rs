//! Unpacking a verified download into the data set's folder.
//!
//! The format follows the file's name: `.tar.gz`/`.tgz` (the CIFAR archives, which unpack to
//! `cifar-10-batches-bin/` and `cifar-100-binary/`), `.zip` (the hard Sudoku set, which unpacks
//! to `sudoku-hard/`), `.gz` (the MNIST IDX files, written without the `.gz`), anything else
//! kept as it is. A tar archive is read through once before anything is written: an entry with
//! an absolute path or `..` in it, or a link pointing outside the folder, refuses the whole
//! archive with the entry named (the `tar` crate would skip the first silently and write the
//! second). The `zip` crate refuses members that would land outside the folder.

use super::FetchError;
use flate2::read::MultiGzDecoder;
use std::fs::File;
use std::path::{Path, PathBuf};

/// How a downloaded file becomes data files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A gzip-compressed tar archive.
    TarGz,
    /// A zip archive.
    Zip,
    /// One gzip-compressed file.
    Gzip,
    /// Used as it is.
    Plain,
}

impl Format {
    /// The format a file name announces.
    pub fn of(file_name: &str) -> Format {
        let lower = file_name.to_ascii_lowercase();
        if lower.ends_with(".tar.gz") || lower.ends_with(".tgz") {
            Format::TarGz
        } else if lower.ends_with(".zip") {
            Format::Zip
        } else if lower.ends_with(".gz") {
            Format::Gzip
        } else {
            Format::Plain
        }
    }
}

/// Unpacks `archive` (in `format`) into `into`; for [`Format::Gzip`], writes the file without
/// its `.gz` ending; for [`Format::Plain`], does nothing (the download is the data file).
pub(super) fn unpack(archive: &Path, format: Format, into: &Path) -> Result<(), FetchError> {
    let failed = |error: String| FetchError::Unpack { archive: archive.to_path_buf(), error };
    let open = || File::open(archive).map_err(|error| FetchError::Io { path: archive.to_path_buf(), error });
    match format {
        Format::TarGz => {
            for entry in tar::Archive::new(MultiGzDecoder::new(open()?)).entries().map_err(|e| failed(e.to_string()))? {
                let entry = entry.map_err(|e| failed(e.to_string()))?;
                check_tar_entry(&entry).map_err(failed)?;
            }
            let mut tar = tar::Archive::new(MultiGzDecoder::new(open()?));
            tar.set_preserve_permissions(false);
            tar.set_overwrite(true);
            tar.unpack(into).map_err(|e| failed(e.to_string()))
        }
        Format::Zip => {
            let mut zip = zip::ZipArchive::new(open()?).map_err(|e| failed(e.to_string()))?;
            zip.extract(into).map_err(|e| failed(e.to_string()))
        }
        Format::Gzip => {
            let name = archive.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let target = into.join(&name[..name.len() - 3]);
            let temporary = PathBuf::from(format!("{}.unpacking", target.display()));
            let result = (|| {
                let mut out = File::create(&temporary)?;
                std::io::copy(&mut MultiGzDecoder::new(open().map_err(std::io::Error::other)?), &mut out)?;
                out.sync_all()?;
                std::fs::rename(&temporary, &target)
            })();
            result.map_err(|e| {
                let _ = std::fs::remove_file(&temporary);
                failed(e.to_string())
            })
        }
        Format::Plain => Ok(()),
    }
}

/// Refuses a tar entry that would write or point outside the folder it is unpacked into.
fn check_tar_entry<R: std::io::Read>(entry: &tar::Entry<R>) -> Result<(), String> {
    let path = entry.path().map_err(|e| e.to_string())?.into_owned();
    let shown = path.display();
    // Any `..` is refused, not only one that climbs out: the tar crate would skip the entry.
    let plain = path.components().all(|c| matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir));
    if !plain {
        return Err(format!(
            "entry `{shown}` has an absolute path or `..` in it, which would write outside the folder"
        ));
    }
    let depth = path.components().filter(|c| matches!(c, std::path::Component::Normal(_))).count();
    let Some(target) = entry.link_name().map_err(|e| e.to_string())? else { return Ok(()) };
    // A symbolic link is read from the entry's own folder, a hard link from the archive's root.
    let from_depth = if entry.header().entry_type().is_symlink() { depth.saturating_sub(1) } else { 0 };
    match inside_depth_from(from_depth, &target) {
        Some(_) => Ok(()),
        None => Err(format!("entry `{shown}` is a link to `{}`, outside the folder it unpacks into", target.display())),
    }
}

/// How many folders deep `path` reaches when followed from `depth` folders below the top, or
/// `None` where it is absolute or climbs above the top with `..`.
fn inside_depth_from(mut depth: usize, path: &Path) -> Option<usize> {
    use std::path::Component;
    for component in path.components() {
        match component {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => depth = depth.checked_sub(1)?,
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(depth)
}

#[cfg(test)]
mod tests {
    use super::{unpack, Format};
    use flate2::{write::GzEncoder, Compression};

    /// A tar.gz holding `data.bin` and the entry `name` of `kind` (linking to `link`), with
    /// the name written straight into the header, as a hostile archive would.
    fn archive_with(name: &str, kind: tar::EntryType, link: Option<&str>) -> Vec<u8> {
        let mut builder = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
        let mut header = tar::Header::new_gnu();
        header.set_size(4);
        header.set_mode(0o644);
        header.set_path("data.bin").unwrap();
        header.set_cksum();
        builder.append(&header, &b"data"[..]).unwrap();
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_size(if kind == tar::EntryType::Regular { 4 } else { 0 });
        header.set_mode(0o644);
        header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        if let Some(link) = link {
            header.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
        }
        header.set_cksum();
        let body: &[u8] = if kind == tar::EntryType::Regular { b"evil" } else { b"" };
        builder.append(&header, body).unwrap();
        builder.into_inner().unwrap().finish().unwrap()
    }

    /// Unpacks `bytes` into the folder `set` of a fresh folder, which the returned guard removes.
    fn unpack_archive(tag: &str, bytes: &[u8]) -> (Result<(), String>, std::path::PathBuf, tempfile::TempDir) {
        let dir = tempfile::Builder::new().prefix(&format!("datasets-unpack-{tag}-")).tempdir().unwrap();
        let into = dir.path().join("set");
        std::fs::create_dir_all(&into).unwrap();
        let archive = dir.path().join("a.tar.gz");
        std::fs::write(&archive, bytes).unwrap();
        (unpack(&archive, Format::TarGz, &into).map_err(|e| e.to_string()), into, dir)
    }

    #[test]
    fn links_out_of_the_folder_and_dot_dot_entries_refuse_the_archive() {
        let cases = [
            ("outside", "train.csv", tar::EntryType::Symlink, Some("/etc/hostname"), "is a link to `/etc/hostname`"),
            ("climbing", "sub/x", tar::EntryType::Symlink, Some("../../up"), "is a link to `../../up`"),
            ("hard", "h", tar::EntryType::Link, Some("../secret"), "is a link to `../secret`"),
            (
                "dotdot",
                "../evil.bin",
                tar::EntryType::Regular,
                None,
                "entry `../evil.bin` has an absolute path or `..`",
            ),
            ("inner-dotdot", "a/../b", tar::EntryType::Regular, None, "entry `a/../b`"),
        ];
        for (tag, name, kind, link, expected) in cases {
            let (result, into, _dir) = unpack_archive(tag, &archive_with(name, kind, link));
            let e = result.expect_err(tag);
            assert!(e.contains(expected), "{tag}: {e}");
            assert!(!into.join("data.bin").exists(), "{tag}: nothing is written before the check");
        }
        // A link that stays inside is unpacked like any entry.
        let (result, into, _dir) =
            unpack_archive("inside", &archive_with("sub/link", tar::EntryType::Symlink, Some("../data.bin")));
        result.unwrap();
        assert_eq!(std::fs::read(into.join("sub/link")).unwrap(), b"data");
    }

    #[test]
    fn formats_follow_the_file_name() {
        assert_eq!(Format::of("cifar-10-binary.tar.gz"), Format::TarGz);
        assert_eq!(Format::of("x.TGZ"), Format::TarGz);
        assert_eq!(Format::of("sudoku-hard.zip"), Format::Zip);
        assert_eq!(Format::of("train-images-idx3-ubyte.gz"), Format::Gzip);
        assert_eq!(Format::of("train.csv"), Format::Plain);
    }
}
