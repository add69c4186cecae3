//! IDX files, raw or gzip-compressed: MNIST and Fashion-MNIST, and any labelled image set in
//! the same format (`dataset=idx`).
//!
//! An IDX image file is a 16-byte big-endian header (magic `0x00000803`: unsigned bytes,
//! 3 dimensions; then the image count, rows and columns) followed by the pixels, one byte
//! each, image after image, row-major. A colour image file has 4 dimensions (magic
//! `0x00000804`, a 20-byte header: count, rows, columns, channels), each image stored row by
//! row with its channels interleaved (as an `[N, H, W, C]` array is saved). A label file has an
//! 8-byte header (magic `0x00000801`, then the count) followed by one byte per label. Files may
//! be stored gzip-compressed, as they are distributed; a file is treated as gzip when it starts
//! with the gzip magic bytes, whatever its name. MNIST and Fashion-MNIST must have their
//! 28×28 gray images and 10 classes; a generic IDX set may have any size, 1 to 4 channels, and
//! as many classes as its largest label says.

use super::{read_file, ImageDataError, ImageSet, TrainTest};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Magic number of an IDX file of unsigned bytes with 3 dimensions (gray images).
const IMAGES_MAGIC: u32 = 0x0000_0803;
/// Magic number of an IDX file of unsigned bytes with 4 dimensions (images with channels).
const COLOUR_IMAGES_MAGIC: u32 = 0x0000_0804;
/// The most channels a generic IDX image may have.
const MAX_CHANNELS: usize = 4;
/// Magic number of an IDX file of unsigned bytes with 1 dimension (labels).
const LABELS_MAGIC: u32 = 0x0000_0801;
/// Both MNIST variants have 28×28 gray images and 10 classes.
const SIDE: usize = 28;
const CLASSES: usize = 10;

/// Which IDX data set: one of the two MNIST-format sets, or any set in the format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MnistVariant {
    /// Handwritten digits.
    Digits,
    /// Zalando's Fashion-MNIST: ten kinds of clothing in the same format.
    Fashion,
    /// Any labelled images in IDX files (`dataset=idx`): any size, 1 to 4 channels.
    Generic,
}

impl MnistVariant {
    fn name(self) -> &'static str {
        match self {
            MnistVariant::Digits => "MNIST",
            MnistVariant::Fashion => "Fashion-MNIST",
            MnistVariant::Generic => "IDX",
        }
    }

    fn fix(self) -> &'static str {
        match self {
            MnistVariant::Digits => {
                "put train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and \
                 t10k-labels-idx1-ubyte (raw or .gz, as distributed by the MNIST page or a mirror such as \
                 https://ossci-datasets.s3.amazonaws.com/mnist/) in one folder and set data_dir to it"
            }
            MnistVariant::Fashion => {
                "put train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and \
                 t10k-labels-idx1-ubyte (raw or .gz, from https://github.com/zalandoresearch/fashion-mnist, folder \
                 data/fashion) in one folder and set data_dir to it"
            }
            MnistVariant::Generic => {
                "put train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and \
                 t10k-labels-idx1-ubyte (raw or .gz; images with 3 dimensions, or 4 with the channels last) in one \
                 folder and set data_dir to it"
            }
        }
    }

    /// Whether this is one of the MNIST sets, whose image size and classes are fixed.
    fn is_mnist(self) -> bool {
        self != MnistVariant::Generic
    }
}

/// The four files of a split pair, by their distributed names.
const TRAIN_IMAGES: &str = "train-images-idx3-ubyte";
const TRAIN_LABELS: &str = "train-labels-idx1-ubyte";
const TEST_IMAGES: &str = "t10k-images-idx3-ubyte";
const TEST_LABELS: &str = "t10k-labels-idx1-ubyte";

/// The file of `name` in `dir`: the name itself, with `.gz`, or with its last `-` written
/// `.` (`train-images.idx3-ubyte`, another common spelling), raw or `.gz`. When none exists,
/// the plain name (so the error names the file the distribution uses).
fn find(dir: &Path, name: &str) -> PathBuf {
    let dotted = name.replacen("-idx", ".idx", 1);
    let candidates = [name.to_string(), format!("{name}.gz"), dotted.clone(), format!("{dotted}.gz")];
    candidates.iter().map(|c| dir.join(c)).find(|p| p.is_file()).unwrap_or_else(|| dir.join(name))
}

fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0x1f, 0x8b])
}

/// The content of `path`, decompressed if it is gzip.
fn read_content(variant: MnistVariant, path: &Path) -> Result<Vec<u8>, ImageDataError> {
    let bytes = read_file(variant.name(), path, variant.fix())?;
    if !is_gzip(&bytes) {
        return Ok(bytes);
    }
    crate::files::gunzip_bounded(&bytes).map_err(|error| ImageDataError::Io {
        dataset: variant.name(),
        path: path.to_path_buf(),
        error: match error.kind() {
            std::io::ErrorKind::InvalidData => error,
            kind => std::io::Error::new(kind, format!("the gzip data is corrupt or cut short ({error})")),
        },
    })
}

/// The first `n` bytes of the content of `path` (decompressed if gzip, or fewer if the
/// content is shorter) and, for a raw file, its full length.
fn read_head(variant: MnistVariant, path: &Path, n: usize) -> Result<(Vec<u8>, Option<u64>), ImageDataError> {
    let io = |error| super::io_error(variant.name(), path, variant.fix(), error);
    let (file, len) = crate::files::open_regular(path).map_err(io)?;
    let mut magic = Vec::new();
    file.take(2).read_to_end(&mut magic).map_err(io)?;
    let (file, _) = crate::files::open_regular(path).map_err(io)?;
    let mut head = Vec::with_capacity(n);
    if is_gzip(&magic) {
        flate2::read::MultiGzDecoder::new(file).take(n as u64).read_to_end(&mut head).map_err(io)?;
        Ok((head, None))
    } else {
        file.take(n as u64).read_to_end(&mut head).map_err(io)?;
        Ok((head, Some(len)))
    }
}

fn be_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// What an IDX header announces.
struct Header {
    count: usize,
    rows: usize,
    cols: usize,
    channels: usize,
    /// Bytes of the header itself.
    len: usize,
}

impl Header {
    /// Bytes to read for any header of this kind of file (a gray image file's is 16).
    fn max_len(labels: bool) -> usize {
        if labels {
            8
        } else {
            20
        }
    }

    fn total_len(&self) -> u64 {
        self.len as u64 + (self.count as u64) * (self.rows * self.cols * self.channels) as u64
    }
}

/// Parses and checks the header of an image (`labels == false`) or label file.
fn parse_header(variant: MnistVariant, path: &Path, head: &[u8], labels: bool) -> Result<Header, ImageDataError> {
    let dataset = variant.name();
    let kind = if labels { "label" } else { "image" };
    let colour = !labels && head.len() >= 4 && be_u32(head, 0) == COLOUR_IMAGES_MAGIC && !variant.is_mnist();
    let header_len = match (labels, colour) {
        (true, _) => 8,
        (false, false) => 16,
        (false, true) => 20,
    };
    if head.len() < 4 {
        return Err(ImageDataError::Size {
            dataset,
            path: path.to_path_buf(),
            problem: format!(
                "has only {} bytes, less than the {header_len}-byte header of an IDX {kind} file",
                head.len()
            ),
            fix: format!("the file is truncated; {}", variant.fix()),
        });
    }
    let (expected, other) = if labels { (LABELS_MAGIC, IMAGES_MAGIC) } else { (IMAGES_MAGIC, LABELS_MAGIC) };
    let found = be_u32(head, 0);
    if found != expected && !colour {
        let fix = if found == other {
            let actual = if labels { "an image file" } else { "a label file" };
            format!("it is {actual}: check that the image and label files are not swapped or misnamed")
        } else {
            format!("it is not an IDX file, or it is compressed other than with gzip; {}", variant.fix())
        };
        return Err(ImageDataError::Magic {
            dataset,
            path: path.to_path_buf(),
            found,
            expected: format!("an IDX {kind} file starts with {expected:#010x}"),
            fix,
        });
    }
    if head.len() < header_len {
        return Err(ImageDataError::Size {
            dataset,
            path: path.to_path_buf(),
            problem: format!(
                "has only {} bytes, less than the {header_len}-byte header of an IDX {kind} file",
                head.len()
            ),
            fix: format!("the file is truncated; {}", variant.fix()),
        });
    }
    let count = be_u32(head, 4) as usize;
    if labels {
        return Ok(Header { count, rows: 1, cols: 1, channels: 1, len: header_len });
    }
    let (rows, cols) = (be_u32(head, 8) as usize, be_u32(head, 12) as usize);
    let channels = if colour { be_u32(head, 16) as usize } else { 1 };
    if !variant.is_mnist() {
        let sides = 1..=4096;
        if !sides.contains(&rows) || !sides.contains(&cols) || !(1..=MAX_CHANNELS).contains(&channels) {
            return Err(ImageDataError::Size {
                dataset,
                path: path.to_path_buf(),
                problem: format!("announces images of {rows}×{cols} pixels with {channels} channels"),
                fix: format!(
                    "images must have 1 to 4096 rows and columns and 1 to {MAX_CHANNELS} channels; the header is \
                     damaged or the file is not an image file"
                ),
            });
        }
        return Ok(Header { count, rows, cols, channels, len: header_len });
    }
    if (rows, cols) != (SIDE, SIDE) {
        return Err(ImageDataError::Size {
            dataset,
            path: path.to_path_buf(),
            problem: format!("holds {rows}×{cols} images, but {dataset} images are {SIDE}×{SIDE}"),
            fix: format!("this is another data set; use dataset=idx for IDX images of any size, or {}", variant.fix()),
        });
    }
    Ok(Header { count, rows, cols, channels: 1, len: header_len })
}

/// Checks that the content length matches what the header announces.
fn check_length(
    variant: MnistVariant,
    path: &Path,
    header: &Header,
    labels: bool,
    len: u64,
) -> Result<(), ImageDataError> {
    let expected = header.total_len();
    if len == expected {
        return Ok(());
    }
    let what = if labels {
        format!("{} labels", header.count)
    } else {
        format!("{} images of {}×{}×{} values", header.count, header.rows, header.cols, header.channels)
    };
    let state = if len < expected { "truncated" } else { "followed by stray bytes" };
    Err(ImageDataError::Size {
        dataset: variant.name(),
        path: path.to_path_buf(),
        problem: format!("has {len} bytes of content, but its header announces {what}, {expected} bytes in all"),
        fix: format!("the file is {state}; download it again: {}", variant.fix()),
    })
}

/// Reads an IDX image file: its header and pixels, channel-major within each image.
fn read_images(variant: MnistVariant, path: &Path) -> Result<(Header, Vec<u8>), ImageDataError> {
    let content = read_content(variant, path)?;
    let header = parse_header(variant, path, &content, false)?;
    check_length(variant, path, &header, false, content.len() as u64)?;
    let pixels = &content[header.len..];
    let pixels = if header.channels == 1 { pixels.to_vec() } else { channels_first(pixels, &header) };
    Ok((header, pixels))
}

/// Images stored with their channels interleaved (`[N, H, W, C]`), rearranged channel by
/// channel (`[N, C, H, W]`) as `ImageSet` keeps them.
fn channels_first(pixels: &[u8], header: &Header) -> Vec<u8> {
    let (plane, c) = (header.rows * header.cols, header.channels);
    let mut out = vec![0u8; pixels.len()];
    for (image, out) in pixels.chunks(plane * c).zip(out.chunks_mut(plane * c)) {
        for (p, values) in image.chunks(c).enumerate() {
            for (k, &v) in values.iter().enumerate() {
                out[k * plane + p] = v;
            }
        }
    }
    out
}

/// Reads an IDX label file; for MNIST, checks that every label is one of its classes.
fn read_labels(variant: MnistVariant, path: &Path) -> Result<Vec<u16>, ImageDataError> {
    let content = read_content(variant, path)?;
    let header = parse_header(variant, path, &content, true)?;
    check_length(variant, path, &header, true, content.len() as u64)?;
    content[8..]
        .iter()
        .enumerate()
        .map(|(record, &label)| {
            if !variant.is_mnist() || (label as usize) < CLASSES {
                Ok(label as u16)
            } else {
                Err(ImageDataError::Label {
                    dataset: variant.name(),
                    path: path.to_path_buf(),
                    record,
                    label: label as u32,
                    classes: CLASSES,
                    fix: format!("the file is corrupt or of another data set; {}", variant.fix()),
                })
            }
        })
        .collect()
}

fn mismatch(
    variant: MnistVariant,
    images_path: &Path,
    labels_path: &Path,
    images: usize,
    labels: usize,
) -> ImageDataError {
    ImageDataError::CountMismatch {
        dataset: variant.name(),
        images_path: images_path.to_path_buf(),
        labels_path: labels_path.to_path_buf(),
        images,
        labels,
        fix: "the two files must belong to the same split (train-* with train-*, t10k-* with t10k-*)".into(),
    }
}

fn read_split(variant: MnistVariant, dir: &Path, images: &str, labels: &str) -> Result<ImageSet, ImageDataError> {
    let (images_path, labels_path) = (find(dir, images), find(dir, labels));
    let (header, pixels) = read_images(variant, &images_path)?;
    let labels = read_labels(variant, &labels_path)?;
    if labels.len() != header.count {
        return Err(mismatch(variant, &images_path, &labels_path, header.count, labels.len()));
    }
    let classes = match variant.is_mnist() {
        true => CLASSES,
        false => labels.iter().map(|&l| l as usize + 1).max().unwrap_or(1),
    };
    let (height, width, channels) = (header.rows, header.cols, header.channels);
    Ok(ImageSet { channels, height, width, classes, pixels, labels })
}

/// Reads MNIST or Fashion-MNIST (60,000 training and 10,000 test images of 28×28 gray
/// pixels), or any IDX image set, from the four IDX files in `dir`.
pub fn load_mnist(dir: &Path, variant: MnistVariant) -> Result<TrainTest, ImageDataError> {
    let (mut train, mut test) =
        (read_split(variant, dir, TRAIN_IMAGES, TRAIN_LABELS)?, read_split(variant, dir, TEST_IMAGES, TEST_LABELS)?);
    if (train.height, train.width, train.channels) != (test.height, test.width, test.channels) {
        return Err(ImageDataError::Size {
            dataset: variant.name(),
            path: find(dir, TEST_IMAGES),
            problem: format!(
                "holds {}×{}×{} images, but the training images are {}×{}×{}",
                test.height, test.width, test.channels, train.height, train.width, train.channels
            ),
            fix: "both splits must hold images of one size and channel count".into(),
        });
    }
    // A class may be missing from one split; both count every class either has.
    let classes = train.classes.max(test.classes);
    (train.classes, test.classes) = (classes, classes);
    Ok(TrainTest { train, test })
}

/// The channels and the number of images (both splits) that the image files in `dir` announce
/// in their headers, read without the pixels; `None` if a header cannot be read.
pub(super) fn announced(dir: &Path, variant: MnistVariant) -> Option<(usize, usize)> {
    let mut total = (1, 0);
    for name in [TRAIN_IMAGES, TEST_IMAGES] {
        let path = find(dir, name);
        let (head, _) = read_head(variant, &path, Header::max_len(false)).ok()?;
        let header = parse_header(variant, &path, &head, false).ok()?;
        total = (total.0.max(header.channels), total.1 + header.count);
    }
    Some(total)
}

/// Checks the four files' headers (and, for raw files, their lengths) without reading pixels.
pub(super) fn check_mnist(dir: &Path, variant: MnistVariant) -> Result<(), ImageDataError> {
    for (images, labels) in [(TRAIN_IMAGES, TRAIN_LABELS), (TEST_IMAGES, TEST_LABELS)] {
        let mut counts = [0usize; 2];
        let paths = [find(dir, images), find(dir, labels)];
        for (k, path) in paths.iter().enumerate() {
            let is_labels = k == 1;
            let (head, raw_len) = read_head(variant, path, Header::max_len(is_labels))?;
            let header = parse_header(variant, path, &head, is_labels)?;
            if let Some(len) = raw_len {
                check_length(variant, path, &header, is_labels, len)?;
            }
            counts[k] = header.count;
        }
        if counts[0] != counts[1] {
            return Err(mismatch(variant, &paths[0], &paths[1], counts[0], counts[1]));
        }
    }
    Ok(())
}
