//! Images for classification: a generated shapes data set and loaders for CIFAR and MNIST files.
//!
//! Every data set comes as an [`ImageSet`]: 8-bit pixels, channel-major per image (the layout
//! of the CIFAR binary files), with one class id per image.
//!
//! * [`shapes`] draws a 32×32 RGB data set of ten shape classes under random position, scale,
//!   rotation, colour, background texture, clutter and noise. Image `i` of a split depends only
//!   on `(seed, split, i)` (its own ChaCha8 stream), so the data are the same on any machine and
//!   any number of threads.
//! * [`load_cifar10`] and [`load_cifar100`] read the *binary* versions of CIFAR-10/100
//!   (`data_batch_1.bin`..`data_batch_5.bin` + `test_batch.bin`; `train.bin` + `test.bin`).
//! * [`load_mnist`] reads MNIST or Fashion-MNIST IDX files, raw or gzip-compressed.
//!
//! Loaders check what they read: a missing file, a truncated file, or a file of another format
//! (wrong IDX magic number, a size that is no multiple of the record size, labels out of
//! range) is reported by an [`ImageDataError`] that names the file and says how to fix it.
//! [`check_files`] runs the same checks on headers and sizes only, without reading pixels.
//!
//! [`ImageSource`] picks one of these by name, as the tasks' `dataset` option does.
//!
//! [`CropFlip`] is the usual training augmentation of small images: a random crop of the
//! zero-padded image and a random horizontal flip.

mod augment;
mod cifar;
mod idx;
mod patches;
pub mod shapes;
mod source;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

pub use augment::CropFlip;
pub use cifar::{cifar100_dir, cifar10_dir, load_cifar10, load_cifar100, Cifar100Labels};
pub use idx::{load_mnist, MnistVariant};
pub use patches::{patchify, unpatchify};
pub use source::{ImageSource, SourceBounds, DATASET_NAMES};

/// Labelled images of one size, stored as 8-bit pixels, channel-major within each image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageSet {
    /// Colour channels (3 for RGB, 1 for gray).
    pub channels: usize,
    /// Rows per image.
    pub height: usize,
    /// Columns per image.
    pub width: usize,
    /// Number of classes; every label is below it.
    pub classes: usize,
    /// Pixels of image `i` at `i * image_len() ..`, in the order channel, row, column.
    pub pixels: Vec<u8>,
    /// The class id of each image.
    pub labels: Vec<u16>,
}

impl ImageSet {
    /// Bytes per image: `channels * height * width`.
    pub fn image_len(&self) -> usize {
        self.channels * self.height * self.width
    }

    /// Number of images.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether the set holds no image.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The pixels of image `index` (channel, row, column).
    pub fn image(&self, index: usize) -> &[u8] {
        let n = self.image_len();
        &self.pixels[index * n..(index + 1) * n]
    }

    /// How many images each class has.
    pub fn class_counts(&self) -> Vec<usize> {
        let mut counts = vec![0; self.classes];
        for &label in &self.labels {
            counts[label as usize] += 1;
        }
        counts
    }

    /// The images brought to `side × side`: unchanged if they are that size, zero-padded
    /// evenly if they are smaller squares (MNIST's 28×28 to 32×32), else scaled (bilinear) so
    /// that their longer side is `side`, keeping their aspect, and padded to a square.
    pub fn fit_to(self, side: usize) -> Result<ImageSet, String> {
        match (self.height, self.width) {
            (h, w) if (h, w) == (side, side) => Ok(self),
            (h, w) if h == w && h < side && (side - h).is_multiple_of(2) => Ok(self.padded((side - h) / 2)),
            (0, _) | (_, 0) => Err("the images have no pixels".into()),
            _ => Ok(self.scaled_into(side)),
        }
    }

    /// Every channel of every image scaled to fit `side × side` and centred on black.
    fn scaled_into(&self, side: usize) -> ImageSet {
        let longer = self.height.max(self.width);
        let scaled = |n: usize| ((n * side) as f64 / longer as f64).round().max(1.0) as u32;
        let (h, w) = (scaled(self.height), scaled(self.width));
        let (top, left) = ((side - h as usize) / 2, (side - w as usize) / 2);
        let plane = self.height * self.width;
        let mut pixels = vec![0u8; self.len() * self.channels * side * side];
        for (i, out) in pixels.chunks_mut(self.channels * side * side).enumerate() {
            for (c, channel) in self.image(i).chunks(plane).enumerate() {
                let gray = image::GrayImage::from_raw(self.width as u32, self.height as u32, channel.to_vec())
                    .expect("a plane holds height x width pixels");
                let small = image::imageops::resize(&gray, w, h, image::imageops::FilterType::Triangle);
                for (y, row) in small.as_raw().chunks(w as usize).enumerate() {
                    let start = (c * side + top + y) * side + left;
                    out[start..start + w as usize].copy_from_slice(row);
                }
            }
        }
        ImageSet {
            channels: self.channels,
            height: side,
            width: side,
            classes: self.classes,
            pixels,
            labels: self.labels.clone(),
        }
    }

    /// The same images with a border of `border` zero (black) pixels on every side, e.g. to
    /// bring 28×28 MNIST digits to the 32×32 of the other data sets.
    pub fn padded(&self, border: usize) -> ImageSet {
        let (h, w) = (self.height + 2 * border, self.width + 2 * border);
        let mut pixels = vec![0u8; self.len() * self.channels * h * w];
        for (i, out) in pixels.chunks_mut(self.channels * h * w).enumerate() {
            let image = self.image(i);
            for c in 0..self.channels {
                for y in 0..self.height {
                    let src = &image[(c * self.height + y) * self.width..][..self.width];
                    let start = (c * h + y + border) * w + border;
                    out[start..start + self.width].copy_from_slice(src);
                }
            }
        }
        ImageSet {
            channels: self.channels,
            height: h,
            width: w,
            classes: self.classes,
            pixels,
            labels: self.labels.clone(),
        }
    }
}

/// The training and test images of a data set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrainTest {
    /// The training split.
    pub train: ImageSet,
    /// The test (evaluation) split.
    pub test: ImageSet,
}

/// A data set read from files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileDataset {
    /// CIFAR-10, binary version.
    Cifar10,
    /// CIFAR-100, binary version, with fine (100) or coarse (20) labels.
    Cifar100(Cifar100Labels),
    /// MNIST or Fashion-MNIST, IDX files.
    Mnist(MnistVariant),
}

impl FileDataset {
    /// Reads both splits from `dir`.
    pub fn load(self, dir: &Path) -> Result<TrainTest, ImageDataError> {
        match self {
            FileDataset::Cifar10 => load_cifar10(dir),
            FileDataset::Cifar100(labels) => load_cifar100(dir, labels),
            FileDataset::Mnist(variant) => load_mnist(dir, variant),
        }
    }
}

/// Checks that the files of `dataset` exist under `dir` and that their headers and sizes are
/// right, without reading the pixels: the fast check to run before a training run is stored.
pub fn check_files(dataset: FileDataset, dir: &Path) -> Result<(), ImageDataError> {
    match dataset {
        FileDataset::Cifar10 => cifar::check_cifar10(dir),
        FileDataset::Cifar100(_) => cifar::check_cifar100(dir),
        FileDataset::Mnist(variant) => idx::check_mnist(dir, variant),
    }
}

/// What went wrong while reading image files. Each message names the file and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ImageDataError {
    /// An expected file is not there.
    #[error("{dataset} file `{}` does not exist; {fix}", path.display())]
    NotFound {
        /// The data set being read (`CIFAR-10`, `MNIST`...).
        dataset: &'static str,
        /// The missing path (for IDX files: the uncompressed name; `.gz` is accepted too).
        path: PathBuf,
        /// Where to get the files and where to put them.
        fix: String,
    },
    /// A file could not be read.
    #[error("could not read {dataset} file `{}`: {error}; check that it is a readable file", path.display())]
    Io {
        /// The data set being read.
        dataset: &'static str,
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        error: std::io::Error,
    },
    /// A file's size does not fit its format: truncated, or a file of another kind.
    #[error("{dataset} file `{}` {problem}; {fix}", path.display())]
    Size {
        /// The data set being read.
        dataset: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with the size, e.g. "has 9000 bytes, not a multiple of ...".
        problem: String,
        /// How to fix it.
        fix: String,
    },
    /// An IDX file starts with the wrong magic number.
    #[error("{dataset} file `{}` starts with the magic number {found:#010x}, but {expected}; {fix}", path.display())]
    Magic {
        /// The data set being read.
        dataset: &'static str,
        /// The file.
        path: PathBuf,
        /// The first four bytes, big-endian.
        found: u32,
        /// What was expected, in words.
        expected: String,
        /// How to fix it.
        fix: String,
    },
    /// A record holds a label outside the data set's classes.
    #[error("{dataset} file `{}`: record {record} has label {label}, but there are only {classes} classes; {fix}", path.display())]
    Label {
        /// The data set being read.
        dataset: &'static str,
        /// The file.
        path: PathBuf,
        /// 0-based record index.
        record: usize,
        /// The label found.
        label: u32,
        /// Number of classes of the data set.
        classes: usize,
        /// Which file it probably is and what to do.
        fix: String,
    },
    /// An image file and its label file disagree on the number of records or image size.
    #[error("{dataset}: `{}` holds {images} images but `{}` holds {labels} labels; {fix}", images_path.display(), labels_path.display())]
    CountMismatch {
        /// The data set being read.
        dataset: &'static str,
        /// The image file.
        images_path: PathBuf,
        /// The label file.
        labels_path: PathBuf,
        /// Number of images.
        images: usize,
        /// Number of labels.
        labels: usize,
        /// How to fix it.
        fix: String,
    },
}

/// Reads a whole file, mapping "not found" to [`ImageDataError::NotFound`] with `fix`.
fn read_file(dataset: &'static str, path: &Path, fix: &str) -> Result<Vec<u8>, ImageDataError> {
    crate::files::read_regular(path).map_err(|error| io_error(dataset, path, fix, error))
}

/// The size of a file, mapping "not found" to [`ImageDataError::NotFound`] with `fix`.
fn file_size(dataset: &'static str, path: &Path, fix: &str) -> Result<u64, ImageDataError> {
    std::fs::metadata(path).map(|m| m.len()).map_err(|error| io_error(dataset, path, fix, error))
}

fn io_error(dataset: &'static str, path: &Path, fix: &str, error: std::io::Error) -> ImageDataError {
    if error.kind() == std::io::ErrorKind::NotFound {
        ImageDataError::NotFound { dataset, path: path.to_path_buf(), fix: fix.to_string() }
    } else {
        ImageDataError::Io { dataset, path: path.to_path_buf(), error }
    }
}
