//! Choosing a data set by name, as the image tasks' options do.

use super::shapes::{self, Split};
use super::{check_files, Cifar100Labels, FileDataset, ImageDataError, MnistVariant, TrainTest};
use std::path::PathBuf;

/// The data set names [`ImageSource::from_options`] accepts.
pub const DATASET_NAMES: [&str; 6] = ["shapes", "cifar10", "cifar100", "mnist", "fashion-mnist", "idx"];

/// Where a task's images come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageSource {
    /// The generated shapes set ([`shapes`]).
    Shapes {
        /// Seed of the images.
        seed: u64,
        /// Training images.
        train: usize,
        /// Test images.
        test: usize,
    },
    /// The files of a real data set in a folder.
    Files(FileDataset, PathBuf),
}

impl ImageSource {
    /// The source named by a task's options: `dataset` (one of [`DATASET_NAMES`]), the folder
    /// `data_dir` of a file data set (empty for shapes), `cifar100_labels` (`fine` or
    /// `coarse`) and the shapes' seed and split sizes. The error says what to change.
    pub fn from_options(
        dataset: &str,
        data_dir: &str,
        cifar100_labels: &str,
        shapes_seed: u64,
        train_images: usize,
        test_images: usize,
    ) -> Result<Self, String> {
        let files = match dataset {
            "shapes" => {
                if !data_dir.is_empty() {
                    return Err(format!(
                        "data_dir={data_dir} is only read by the file data sets, but dataset=shapes is generated; \
                         remove data_dir or choose dataset=cifar10 | cifar100 | mnist | fashion-mnist | idx"
                    ));
                }
                return Ok(ImageSource::Shapes { seed: shapes_seed, train: train_images, test: test_images });
            }
            "cifar10" => FileDataset::Cifar10,
            "cifar100" => FileDataset::Cifar100(match cifar100_labels {
                "fine" => Cifar100Labels::Fine,
                "coarse" => Cifar100Labels::Coarse,
                other => return Err(format!("cifar100_labels={other} is neither fine nor coarse")),
            }),
            "mnist" => FileDataset::Mnist(MnistVariant::Digits),
            "fashion-mnist" => FileDataset::Mnist(MnistVariant::Fashion),
            "idx" => FileDataset::Mnist(MnistVariant::Generic),
            other => return Err(format!("unknown dataset `{other}`; choose one of {}", DATASET_NAMES.join(" | "))),
        };
        if data_dir.is_empty() {
            return Err(format!(
                "dataset={dataset} is read from files: set data_dir=FOLDER to where they are ({})",
                files.expected_files()
            ));
        }
        Ok(ImageSource::Files(files, PathBuf::from(data_dir)))
    }

    /// For file data sets, checks the files' presence, headers and sizes ([`check_files`]).
    pub fn check(&self) -> Result<(), ImageDataError> {
        match self {
            ImageSource::Shapes { .. } => Ok(()),
            ImageSource::Files(dataset, dir) => check_files(*dataset, dir),
        }
    }

    /// Generates or reads both splits.
    pub fn load(&self) -> Result<TrainTest, ImageDataError> {
        match self {
            ImageSource::Shapes { seed, train, test } => Ok(TrainTest {
                train: shapes::generate(*seed, Split::Train, *train),
                test: shapes::generate(*seed, Split::Test, *test),
            }),
            ImageSource::Files(dataset, dir) => dataset.load(dir),
        }
    }

    /// What the source holds at most, known without reading or making any image, for memory
    /// estimates before a run starts.
    pub fn bounds(&self) -> SourceBounds {
        let (channels, classes, images) = match self {
            ImageSource::Shapes { train, test, .. } => (3, shapes::CLASSES, train + test),
            ImageSource::Files(FileDataset::Cifar10, _) => (3, 10, 60_000),
            ImageSource::Files(FileDataset::Cifar100(Cifar100Labels::Fine), _) => (3, 100, 60_000),
            ImageSource::Files(FileDataset::Cifar100(Cifar100Labels::Coarse), _) => (3, 20, 60_000),
            ImageSource::Files(FileDataset::Mnist(MnistVariant::Generic), dir) => {
                let (channels, images) = super::idx::announced(dir, MnistVariant::Generic).unwrap_or((4, 0));
                (channels, 256, images)
            }
            ImageSource::Files(FileDataset::Mnist(_), _) => (1, 10, 70_000),
        };
        SourceBounds { channels, classes, images }
    }

    /// Whether the images are MNIST's handwritten digits (which a mirror image changes).
    pub fn is_digits(&self) -> bool {
        matches!(self, ImageSource::Files(FileDataset::Mnist(MnistVariant::Digits), _))
    }
}

/// Upper bounds of an image source's shape: colour channels, classes, images in both splits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceBounds {
    pub channels: usize,
    pub classes: usize,
    pub images: usize,
}

impl SourceBounds {
    /// Bytes of the images once padded to `side` x `side` (8-bit pixels and a label each).
    pub fn bytes(&self, side: usize) -> u64 {
        (self.images * (self.channels * side * side + 2)) as u64
    }
}

impl FileDataset {
    /// The files this data set reads, in words, for messages.
    pub fn expected_files(self) -> &'static str {
        match self {
            FileDataset::Cifar10 => "data_batch_1.bin .. data_batch_5.bin and test_batch.bin of the CIFAR-10 binary version",
            FileDataset::Cifar100(_) => "train.bin and test.bin of the CIFAR-100 binary version",
            FileDataset::Mnist(_) => {
                "train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, raw or .gz"
            }
        }
    }
}
