//! Unpacking a verified download into the data set's folder.
//!
//! The format follows the file's name: `.tar.gz`/`.tgz` (the CIFAR archives, which unpack to
//! `cifar-10-batches-bin/` and `cifar-100-binary/`), `.zip` (the hard Sudoku set, which unpacks
//! to `sudoku-hard/`), `.gz` (the MNIST IDX files, written without the `.gz`), anything else
//! kept as it is. Archive members that would land outside the folder (absolute paths, `..`)
//! are not written: the `tar` and `zip` crates refuse them.

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

#[cfg(test)]
mod tests {
    use super::Format;

    #[test]
    fn formats_follow_the_file_name() {
        assert_eq!(Format::of("cifar-10-binary.tar.gz"), Format::TarGz);
        assert_eq!(Format::of("x.TGZ"), Format::TarGz);
        assert_eq!(Format::of("sudoku-hard.zip"), Format::Zip);
        assert_eq!(Format::of("train-images-idx3-ubyte.gz"), Format::Gzip);
        assert_eq!(Format::of("train.csv"), Format::Plain);
    }
}
