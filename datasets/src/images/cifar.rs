//! CIFAR-10 and CIFAR-100, binary versions (<https://www.cs.toronto.edu/~kriz/cifar.html>).
//!
//! A CIFAR-10 file is a sequence of 3073-byte records: one label byte (0..9), then the
//! 32×32 image as 1024 red, 1024 green and 1024 blue bytes, each plane row-major. A CIFAR-100
//! record has two label bytes, the coarse class (0..19) then the fine class (0..99), before
//! the same 3072 pixel bytes. The pixel layout is the one of [`ImageSet`], so records are
//! copied as they are.

use super::{file_size, read_file, ImageDataError, ImageSet, TrainTest};
use std::path::{Path, PathBuf};

/// Side of a CIFAR image.
const SIDE: usize = 32;
/// Pixel bytes of one record.
const PIXELS: usize = 3 * SIDE * SIDE;

const CIFAR10_FIX: &str = "download the binary version (cifar-10-binary.tar.gz) from \
https://www.cs.toronto.edu/~kriz/cifar.html, unpack it and set data_dir to the folder holding data_batch_1.bin .. \
data_batch_5.bin and test_batch.bin (or to the folder above it)";

const CIFAR100_FIX: &str = "download the binary version (cifar-100-binary.tar.gz) from \
https://www.cs.toronto.edu/~kriz/cifar.html, unpack it and set data_dir to the folder holding train.bin and \
test.bin (or to the folder above it)";

/// Which CIFAR-100 label is the class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cifar100Labels {
    /// The 100 fine classes.
    Fine,
    /// The 20 coarse superclasses.
    Coarse,
}

/// The record layout of one CIFAR variant.
struct Layout {
    dataset: &'static str,
    /// Label bytes before the pixels.
    label_bytes: usize,
    /// Number of classes of each label byte.
    label_classes: &'static [usize],
    fix: &'static str,
}

impl Layout {
    fn record(&self) -> usize {
        self.label_bytes + PIXELS
    }
}

const CIFAR10: Layout = Layout { dataset: "CIFAR-10", label_bytes: 1, label_classes: &[10], fix: CIFAR10_FIX };
const CIFAR100: Layout = Layout { dataset: "CIFAR-100", label_bytes: 2, label_classes: &[20, 100], fix: CIFAR100_FIX };

/// The folder holding the CIFAR-10 files: `dir` itself, or `dir/cifar-10-batches-bin` when
/// that exists (the folder the archive unpacks to).
pub fn cifar10_dir(dir: &Path) -> PathBuf {
    nested_or_self(dir, "cifar-10-batches-bin")
}

/// The folder holding the CIFAR-100 files: `dir` itself, or `dir/cifar-100-binary` when
/// that exists (the folder the archive unpacks to).
pub fn cifar100_dir(dir: &Path) -> PathBuf {
    nested_or_self(dir, "cifar-100-binary")
}

fn nested_or_self(dir: &Path, nested: &str) -> PathBuf {
    let inner = dir.join(nested);
    if inner.is_dir() {
        inner
    } else {
        dir.to_path_buf()
    }
}

fn cifar10_files(dir: &Path) -> (Vec<PathBuf>, PathBuf) {
    let dir = cifar10_dir(dir);
    ((1..=5).map(|k| dir.join(format!("data_batch_{k}.bin"))).collect(), dir.join("test_batch.bin"))
}

fn cifar100_files(dir: &Path) -> (Vec<PathBuf>, PathBuf) {
    let dir = cifar100_dir(dir);
    (vec![dir.join("train.bin")], dir.join("test.bin"))
}

/// Reads CIFAR-10 (50,000 training and 10,000 test images in the full set) from `dir`.
pub fn load_cifar10(dir: &Path) -> Result<TrainTest, ImageDataError> {
    let (train, test) = cifar10_files(dir);
    Ok(TrainTest { train: read_split(&CIFAR10, &train, 0)?, test: read_split(&CIFAR10, &[test], 0)? })
}

/// Reads CIFAR-100 from `dir`, taking the fine (100 classes) or coarse (20) label as the class.
pub fn load_cifar100(dir: &Path, labels: Cifar100Labels) -> Result<TrainTest, ImageDataError> {
    let (train, test) = cifar100_files(dir);
    let which = match labels {
        Cifar100Labels::Coarse => 0,
        Cifar100Labels::Fine => 1,
    };
    Ok(TrainTest { train: read_split(&CIFAR100, &train, which)?, test: read_split(&CIFAR100, &[test], which)? })
}

/// Checks that the CIFAR-10 files exist and have a whole number of records.
pub(super) fn check_cifar10(dir: &Path) -> Result<(), ImageDataError> {
    let (mut files, test) = cifar10_files(dir);
    files.push(test);
    files.iter().try_for_each(|path| check_size(&CIFAR10, path).map(|_| ()))
}

/// Checks that the CIFAR-100 files exist and have a whole number of records.
pub(super) fn check_cifar100(dir: &Path) -> Result<(), ImageDataError> {
    let (mut files, test) = cifar100_files(dir);
    files.push(test);
    files.iter().try_for_each(|path| check_size(&CIFAR100, path).map(|_| ()))
}

/// The number of records of a file whose size is a positive multiple of the record size.
fn records_in(layout: &Layout, path: &Path, bytes: u64) -> Result<usize, ImageDataError> {
    let record = layout.record() as u64;
    let problem = if bytes == 0 {
        "is empty".to_string()
    } else if !bytes.is_multiple_of(record) {
        let other = if layout.label_bytes == 1 {
            "a CIFAR-100 file has 3074-byte records"
        } else {
            "a CIFAR-10 file has 3073-byte records"
        };
        format!(
            "has {bytes} bytes, which is not a whole number of {record}-byte records ({} label byte{} + {PIXELS} \
             pixel bytes): it is truncated, or it is not a {} binary file ({other}; the python and matlab versions \
             are not read)",
            layout.label_bytes,
            if layout.label_bytes == 1 { "" } else { "s" },
            layout.dataset,
        )
    } else {
        return Ok((bytes / record) as usize);
    };
    Err(ImageDataError::Size {
        dataset: layout.dataset,
        path: path.to_path_buf(),
        problem,
        fix: layout.fix.to_string(),
    })
}

fn check_size(layout: &Layout, path: &Path) -> Result<usize, ImageDataError> {
    let bytes = file_size(layout.dataset, path, layout.fix)?;
    records_in(layout, path, bytes)
}

/// Reads and concatenates the records of `files`, taking label byte `which` as the class.
fn read_split(layout: &Layout, files: &[PathBuf], which: usize) -> Result<ImageSet, ImageDataError> {
    let classes = layout.label_classes[which];
    let mut set = ImageSet { channels: 3, height: SIDE, width: SIDE, classes, pixels: Vec::new(), labels: Vec::new() };
    for path in files {
        let bytes = read_file(layout.dataset, path, layout.fix)?;
        let count = records_in(layout, path, bytes.len() as u64)?;
        set.pixels.reserve(count * PIXELS);
        set.labels.reserve(count);
        for (record, chunk) in bytes.chunks_exact(layout.record()).enumerate() {
            for (k, &label) in chunk[..layout.label_bytes].iter().enumerate() {
                if label as usize >= layout.label_classes[k] {
                    return Err(label_error(layout, path, record, label, k));
                }
            }
            set.labels.push(chunk[which] as u16);
            set.pixels.extend_from_slice(&chunk[layout.label_bytes..]);
        }
    }
    Ok(set)
}

fn label_error(layout: &Layout, path: &Path, record: usize, label: u8, which: usize) -> ImageDataError {
    let classes = layout.label_classes[which];
    let kind = match (layout.label_bytes, which) {
        (1, _) => "its label byte",
        (_, 0) => "its coarse label byte",
        _ => "its fine label byte",
    };
    ImageDataError::Label {
        dataset: layout.dataset,
        path: path.to_path_buf(),
        record,
        label: label as u32,
        classes,
        fix: format!(
            "{kind} must be below {classes}, so this is not a {} binary file or it is corrupt; {}",
            layout.dataset, layout.fix
        ),
    }
}
