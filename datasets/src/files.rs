//! Opening the data files a configuration names. Only regular files are read: a named pipe
//! would block the reader until some other process writes to it, and a device such as
//! `/dev/zero` never ends. Sizes are bounded before anything is allocated, and gzip content is
//! bounded in what it may expand to, so a decompression bomb is refused instead of filling
//! memory.

use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::path::Path;

/// The largest data file read (4 GiB; the largest real data set here, CIFAR-100's training
/// file, is 150 MB).
pub const MAX_BYTES: u64 = 4 << 30;

/// How many times its compressed size gzip content may expand to. The MNIST files expand about
/// 5 times; a run of zeros expands about 1,000 times, which is how decompression bombs are made.
pub const MAX_GZIP_RATIO: u64 = 200;

/// Opens `path` for reading if it is a regular file (links followed) of at most [`MAX_BYTES`];
/// returns it with its length. Other kinds of file are refused with what they are.
pub fn open_regular(path: &Path) -> io::Result<(File, u64)> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    // Without O_NONBLOCK, opening a named pipe waits for a writer; with it the open returns
    // at once and the pipe is refused below. It changes nothing for a regular file.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
    let file = options.open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("it is {}, not a regular file; give the path of a data file", kind_of(&meta)),
        ));
    }
    if meta.len() > MAX_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "it is {:.1} GB, more than the {:.1} GB a data file may have here",
                meta.len() as f64 / 1e9,
                MAX_BYTES as f64 / 1e9
            ),
        ));
    }
    Ok((file, meta.len()))
}

/// The whole content of the regular file at `path` (see [`open_regular`]).
pub fn read_regular(path: &Path) -> io::Result<Vec<u8>> {
    let (file, len) = open_regular(path)?;
    let mut bytes = Vec::with_capacity(len as usize);
    // A file that grows past the limit while it is read is refused, not cut short.
    file.take(MAX_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "it grew past the size a data file may have while it was read",
        ));
    }
    Ok(bytes)
}

/// Decompresses gzip `compressed`, refusing content larger than [`MAX_GZIP_RATIO`] times the
/// compressed size (and 1 MiB of slack) or than [`MAX_BYTES`].
pub fn gunzip_bounded(compressed: &[u8]) -> io::Result<Vec<u8>> {
    let limit = (compressed.len() as u64).saturating_mul(MAX_GZIP_RATIO).saturating_add(1 << 20).min(MAX_BYTES);
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(compressed).take(limit + 1).read_to_end(&mut out)?;
    if out.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "its gzip content expands past {limit} bytes, more than {MAX_GZIP_RATIO} times its {} compressed \
                 bytes: that is no data file of this kind (a decompression bomb?)",
                compressed.len()
            ),
        ));
    }
    Ok(out)
}

/// What kind of file `meta` describes, in words.
fn kind_of(meta: &Metadata) -> &'static str {
    let kind = meta.file_type();
    if kind.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a named pipe (FIFO)";
        }
        if kind.is_char_device() {
            return "a character device";
        }
        if kind.is_block_device() {
            return "a block device";
        }
        if kind.is_socket() {
            return "a socket";
        }
    }
    "a special file"
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn temp(tag: &str) -> tempfile::TempDir {
        tempfile::Builder::new().prefix(&format!("datasets-files-{tag}-")).tempdir().unwrap()
    }

    #[test]
    fn a_regular_file_is_read_whole() {
        let dir = temp("regular");
        let path = dir.path().join("a.txt");
        std::fs::write(&path, b"hello").unwrap();
        assert_eq!(read_regular(&path).unwrap(), b"hello");
    }

    #[cfg(unix)]
    #[test]
    fn pipes_devices_and_directories_are_refused_at_once() {
        let tmp = temp("special");
        let dir = tmp.path();
        let fifo = dir.join("pipe");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Reading a pipe nobody writes to would block forever: this returns at once.
        let e = read_regular(&fifo).unwrap_err().to_string();
        assert!(e.contains("a named pipe (FIFO), not a regular file"), "{e}");
        let e = read_regular(Path::new("/dev/zero")).unwrap_err().to_string();
        assert!(e.contains("a character device"), "{e}");
        let e = read_regular(dir).unwrap_err().to_string();
        assert!(e.contains("a directory"), "{e}");
    }

    #[test]
    fn gzip_expanding_far_beyond_its_size_is_refused() {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..64 {
            encoder.write_all(&zeros).unwrap(); // 64 MiB of zeros: about 64 KiB compressed
        }
        let bomb = encoder.finish().unwrap();
        let e = gunzip_bounded(&bomb).unwrap_err().to_string();
        assert!(e.contains("decompression bomb"), "{e}");
        // Ordinary content of the same kind as the data files passes.
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        let text: Vec<u8> = (0..100_000u32).flat_map(|i| i.to_le_bytes()).collect();
        encoder.write_all(&text).unwrap();
        assert_eq!(gunzip_bounded(&encoder.finish().unwrap()).unwrap(), text);
    }
}
