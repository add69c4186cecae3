//! Tests of the shapes generator, the CIFAR and IDX loaders (on files written here) and the
//! crop-and-flip augmentation.

use super::shapes::{self, Split};
use super::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::io::Write;
use tempfile::TempDir;

/// A fresh, empty folder for one test's files, removed when dropped.
fn temp_dir(name: &str) -> TempDir {
    tempfile::Builder::new().prefix(&format!("datasets-images-{name}-")).tempdir().unwrap()
}

/// Writes `bytes` to `name` inside `dir`, creating its subfolders.
fn write_file(dir: &TempDir, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, bytes).unwrap();
    path
}

// ------------------------------------------------------------------------------------ shapes

#[test]
fn shapes_are_reproducible_and_prefix_stable() {
    let a = shapes::generate(7, Split::Train, 30);
    let b = shapes::generate(7, Split::Train, 30);
    assert_eq!(a, b);
    let prefix = shapes::generate(7, Split::Train, 12);
    assert_eq!(prefix.pixels[..], a.pixels[..12 * a.image_len()]);
    assert_eq!(prefix.labels[..], a.labels[..12]);
    assert_eq!((a.channels, a.height, a.width, a.classes), (3, 32, 32, 10));
    assert_eq!(a.pixels.len(), 30 * 3 * 32 * 32);
    // Another seed, or the other split, draws other images.
    let other_seed = shapes::generate(8, Split::Train, 30);
    let test_split = shapes::generate(7, Split::Test, 30);
    for other in [&other_seed, &test_split] {
        assert!((0..30).all(|i| a.image(i) != other.image(i)));
    }
}

#[test]
fn shapes_classes_are_balanced() {
    let set = shapes::generate(3, Split::Test, 2000);
    assert_eq!(set.class_counts(), vec![200; 10]);
    let uneven = shapes::generate(3, Split::Train, 25);
    assert_eq!(uneven.class_counts(), vec![3, 3, 3, 3, 3, 2, 2, 2, 2, 2]);
}

/// The shape is visible: in every image the pixels differ clearly (no blank images), and the
/// class is not given away by the mean colour (the per-class mean intensities stay close).
#[test]
fn shapes_show_a_shape_and_colour_does_not_reveal_the_class() {
    let set = shapes::generate(11, Split::Train, 500);
    let mut class_means = vec![0f64; 10];
    for i in 0..set.len() {
        let image = set.image(i);
        let (lo, hi) = (image.iter().min().unwrap(), image.iter().max().unwrap());
        assert!(hi - lo > 60, "image {i} has almost no contrast ({lo}..{hi})");
        class_means[set.labels[i] as usize] += image.iter().map(|&p| p as f64).sum::<f64>() / image.len() as f64;
    }
    for mean in &mut class_means {
        *mean /= 50.0;
    }
    let (lo, hi) = class_means.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &m| (lo.min(m), hi.max(m)));
    assert!(hi - lo < 25.0, "class mean intensities {class_means:?} differ too much");
}

// ------------------------------------------------------------------------------------- CIFAR

/// `n` CIFAR records with the given label bytes per record; pixel `k` of record `r` is
/// `(r * 7 + k) % 256`.
fn cifar_records(labels: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for (r, label) in labels.iter().enumerate() {
        out.extend_from_slice(label);
        out.extend((0..3072).map(|k| ((r * 7 + k) % 256) as u8));
    }
    out
}

fn write_cifar10(dir: &TempDir, folder: &str) {
    for k in 1..=5 {
        write_file(dir, &format!("{folder}data_batch_{k}.bin"), &cifar_records(&[&[k as u8], &[0], &[9]]));
    }
    write_file(dir, &format!("{folder}test_batch.bin"), &cifar_records(&[&[3], &[4], &[5]]));
}

#[test]
fn cifar10_batches_load() {
    let dir = temp_dir("cifar10");
    write_cifar10(&dir, "");
    check_files(FileDataset::Cifar10, dir.path()).unwrap();
    let data = load_cifar10(dir.path()).unwrap();
    assert_eq!(data.train.len(), 15);
    assert_eq!(data.train.labels[..6], [1, 0, 9, 2, 0, 9]);
    assert_eq!(data.test.labels, vec![3, 4, 5]);
    assert_eq!((data.test.channels, data.test.height, data.test.width, data.test.classes), (3, 32, 32, 10));
    // Record 2 of the test file: pixel k is (14 + k) % 256, copied in the file's order.
    assert_eq!(data.test.image(2)[..3], [14, 15, 16]);
    assert_eq!(data.test.image(2)[1024], ((14 + 1024) % 256) as u8);
}

#[test]
fn cifar10_is_found_in_the_unpacked_archive_folder() {
    let dir = temp_dir("cifar10-nested");
    write_cifar10(&dir, "cifar-10-batches-bin/");
    assert_eq!(load_cifar10(dir.path()).unwrap().test.len(), 3);
}

#[test]
fn cifar100_records_give_fine_or_coarse_labels() {
    let dir = temp_dir("cifar100");
    write_file(&dir, "train.bin", &cifar_records(&[&[19, 99], &[0, 1], &[7, 42]]));
    write_file(&dir, "test.bin", &cifar_records(&[&[2, 50]]));
    check_files(FileDataset::Cifar100(Cifar100Labels::Fine), dir.path()).unwrap();
    let fine = load_cifar100(dir.path(), Cifar100Labels::Fine).unwrap();
    assert_eq!((fine.train.labels.clone(), fine.train.classes), (vec![99, 1, 42], 100));
    let coarse = load_cifar100(dir.path(), Cifar100Labels::Coarse).unwrap();
    assert_eq!((coarse.train.labels.clone(), coarse.train.classes), (vec![19, 0, 7], 20));
    assert_eq!(coarse.test.labels, vec![2]);
    assert_eq!(fine.train.pixels, coarse.train.pixels);
    assert_eq!(fine.train.image(1)[..2], [7, 8]);
}

#[test]
fn cifar_errors_name_the_file_and_the_fix() {
    let dir = temp_dir("cifar-errors");
    // Missing files.
    let err = load_cifar10(dir.path()).unwrap_err();
    assert!(matches!(err, ImageDataError::NotFound { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("data_batch_1.bin") && text.contains("cifar-10-binary.tar.gz"), "{text}");

    // A truncated batch.
    write_cifar10(&dir, "");
    let full = cifar_records(&[&[1], &[2], &[3]]);
    write_file(&dir, "data_batch_3.bin", &full[..full.len() - 100]);
    for err in [load_cifar10(dir.path()).unwrap_err(), check_files(FileDataset::Cifar10, dir.path()).unwrap_err()] {
        assert!(matches!(err, ImageDataError::Size { .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains("data_batch_3.bin") && text.contains("truncated"), "{text}");
    }

    // A CIFAR-100 file where a CIFAR-10 batch belongs: its records are one byte longer.
    write_file(&dir, "data_batch_3.bin", &cifar_records(&[&[1, 2], &[3, 4], &[5, 6]]));
    let text = load_cifar10(dir.path()).unwrap_err().to_string();
    assert!(text.contains("not a whole number of 3073-byte records") && text.contains("CIFAR-100"), "{text}");

    // A label that is no CIFAR-10 class.
    write_file(&dir, "data_batch_3.bin", &cifar_records(&[&[1], &[12], &[3]]));
    match load_cifar10(dir.path()).unwrap_err() {
        ImageDataError::Label { record, label, classes, path, .. } => {
            assert_eq!((record, label, classes), (1, 12, 10));
            assert!(path.ends_with("data_batch_3.bin"));
        }
        other => panic!("expected a label error, got {other}"),
    }

    // An empty CIFAR-100 test file.
    write_file(&dir, "train.bin", &cifar_records(&[&[1, 2]]));
    write_file(&dir, "test.bin", &[]);
    let text = load_cifar100(dir.path(), Cifar100Labels::Fine).unwrap_err().to_string();
    assert!(text.contains("test.bin") && text.contains("is empty"), "{text}");
}

// --------------------------------------------------------------------------------------- IDX

fn idx_images(count: usize, magic: u32) -> Vec<u8> {
    let mut out = Vec::new();
    for v in [magic, count as u32, 28, 28] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out.extend((0..count * 784).map(|k| (k % 251) as u8));
    out
}

fn idx_labels(labels: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&0x0801u32.to_be_bytes());
    out.extend_from_slice(&(labels.len() as u32).to_be_bytes());
    out.extend_from_slice(labels);
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

fn write_mnist(dir: &TempDir, compressed: bool) {
    let files = [
        ("train-images-idx3-ubyte", idx_images(3, 0x0803)),
        ("train-labels-idx1-ubyte", idx_labels(&[5, 0, 4])),
        ("t10k-images-idx3-ubyte", idx_images(2, 0x0803)),
        ("t10k-labels-idx1-ubyte", idx_labels(&[7, 2])),
    ];
    for (name, bytes) in files {
        if compressed {
            write_file(dir, &format!("{name}.gz"), &gzip(&bytes));
        } else {
            write_file(dir, name, &bytes);
        }
    }
}

#[test]
fn idx_files_load_raw_and_gzipped() {
    for compressed in [false, true] {
        let dir = temp_dir(if compressed { "idx-gz" } else { "idx-raw" });
        write_mnist(&dir, compressed);
        check_files(FileDataset::Mnist(MnistVariant::Digits), dir.path()).unwrap();
        let data = load_mnist(dir.path(), MnistVariant::Fashion).unwrap();
        assert_eq!(data.train.labels, vec![5, 0, 4]);
        assert_eq!(data.test.labels, vec![7, 2]);
        assert_eq!((data.train.channels, data.train.height, data.train.width, data.train.classes), (1, 28, 28, 10));
        assert_eq!(data.train.image(1)[0], (784 % 251) as u8);
    }
}

#[test]
fn idx_errors_name_the_file_and_the_fix() {
    let dir = temp_dir("idx-errors");
    let err = load_mnist(dir.path(), MnistVariant::Digits).unwrap_err();
    assert!(matches!(err, ImageDataError::NotFound { .. }));
    assert!(err.to_string().contains("train-images-idx3-ubyte") && err.to_string().contains("data_dir"), "{err}");

    // A label file where the images belong.
    write_mnist(&dir, false);
    write_file(&dir, "train-images-idx3-ubyte", &idx_labels(&[1, 2, 3]));
    for err in [
        load_mnist(dir.path(), MnistVariant::Digits).unwrap_err(),
        check_files(FileDataset::Mnist(MnistVariant::Digits), dir.path()).unwrap_err(),
    ] {
        match &err {
            ImageDataError::Magic { found, path, .. } => {
                assert_eq!(*found, 0x0801);
                assert!(path.ends_with("train-images-idx3-ubyte"));
            }
            other => panic!("expected a magic-number error, got {other}"),
        }
        assert!(err.to_string().contains("swapped"), "{err}");
    }

    // Not an IDX file at all (gzip-compressed garbage is decompressed first).
    write_file(&dir, "train-images-idx3-ubyte", &gzip(b"<html>not found</html>"));
    let text = load_mnist(dir.path(), MnistVariant::Fashion).unwrap_err().to_string();
    assert!(text.contains("Fashion-MNIST") && text.contains("not an IDX file"), "{text}");

    // A truncated image file.
    let full = idx_images(3, 0x0803);
    write_file(&dir, "train-images-idx3-ubyte", &full[..full.len() - 10]);
    for err in [
        load_mnist(dir.path(), MnistVariant::Digits).unwrap_err(),
        check_files(FileDataset::Mnist(MnistVariant::Digits), dir.path()).unwrap_err(),
    ] {
        assert!(matches!(err, ImageDataError::Size { .. }), "{err}");
        assert!(err.to_string().contains("truncated"), "{err}");
    }

    // Images and labels of different splits.
    write_file(&dir, "train-images-idx3-ubyte", &full);
    write_file(&dir, "train-labels-idx1-ubyte", &idx_labels(&[1, 2]));
    let err = load_mnist(dir.path(), MnistVariant::Digits).unwrap_err();
    assert!(matches!(err, ImageDataError::CountMismatch { images: 3, labels: 2, .. }), "{err}");

    // A label above 9.
    write_file(&dir, "train-labels-idx1-ubyte", &idx_labels(&[1, 10, 2]));
    let err = load_mnist(dir.path(), MnistVariant::Digits).unwrap_err();
    assert!(matches!(err, ImageDataError::Label { record: 1, label: 10, .. }), "{err}");
}

#[test]
fn padding_centres_the_image() {
    let dir = temp_dir("idx-pad");
    write_mnist(&dir, false);
    let test = load_mnist(dir.path(), MnistVariant::Digits).unwrap().test;
    let padded = test.padded(2);
    assert_eq!((padded.height, padded.width, padded.len()), (32, 32, 2));
    for i in 0..2 {
        let (image, small) = (padded.image(i), test.image(i));
        for y in 0..32 {
            for x in 0..32 {
                let inner = (2..30).contains(&y) && (2..30).contains(&x);
                let expected = if inner { small[(y - 2) * 28 + x - 2] } else { 0 };
                assert_eq!(image[y * 32 + x], expected);
            }
        }
    }
}

// ----------------------------------------------------------------------------------- patches

#[test]
fn patchify_orders_rows_columns_channels_within_a_patch() {
    // A 2-channel 4×4 image whose pixel (c, y, x) is 100 c + 10 y + x; a 2×2 grid of patches.
    let image: Vec<u8> =
        (0..2).flat_map(|c| (0..4).flat_map(move |y| (0..4).map(move |x| 100 * c + 10 * y + x))).collect();
    let mut out = Vec::new();
    patchify(&image, 2, 4, 2, &mut out);
    let values: Vec<u32> = out.iter().map(|v| (v * 255.0).round() as u32).collect();
    // Patch 1 is the top-right one: rows 0-1, columns 2-3; per pixel the two channels.
    assert_eq!(values[8..16], [2, 102, 3, 103, 12, 112, 13, 113]);
    // Patch 2 is the bottom-left one.
    assert_eq!(values[16..18], [20, 120]);
    assert_eq!(out.len(), 32);
    let back: Vec<u8> = unpatchify(&out, 2, 4, 2).iter().map(|v| (v * 255.0).round() as u8).collect();
    assert_eq!(back, image);
}

// ------------------------------------------------------------------------------ augmentation

/// A 2-channel 5×4 image with distinct non-zero pixels.
fn test_image() -> Vec<u8> {
    (1..=40).collect()
}

/// The image shifted by (dy, dx), optionally mirrored, with zero fill: the reference the
/// augmentation must match.
fn shifted(image: &[u8], dy: isize, dx: isize, flipped: bool) -> Vec<u8> {
    let (c, h, w) = (2, 5, 4);
    let mut out = vec![0; c * h * w];
    for ch in 0..c {
        for y in 0..h {
            for x in 0..w {
                let cx = if flipped { w - 1 - x } else { x };
                let (sy, sx) = (y as isize + dy, cx as isize + dx);
                if (0..h as isize).contains(&sy) && (0..w as isize).contains(&sx) {
                    out[(ch * h + y) * w + x] = image[(ch * h + sy as usize) * w + sx as usize];
                }
            }
        }
    }
    out
}

#[test]
fn crop_and_flip_are_deterministic_shifts_and_mirrors() {
    let image = test_image();
    let augment = CropFlip { padding: 2, flip: true };
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..200 {
        let a = augment.apply(&image, 2, 5, 4, &mut ChaCha8Rng::seed_from_u64(seed));
        let b = augment.apply(&image, 2, 5, 4, &mut ChaCha8Rng::seed_from_u64(seed));
        assert_eq!(a, b, "seed {seed}");
        let matches: Vec<(isize, isize, bool)> = (-2..=2)
            .flat_map(|dy| (-2..=2).flat_map(move |dx| [false, true].map(|f| (dy, dx, f))))
            .filter(|&(dy, dx, f)| shifted(&image, dy, dx, f) == a)
            .collect();
        assert_eq!(matches.len(), 1, "seed {seed}: not exactly one shift/mirror of the input");
        seen.insert(matches[0]);
    }
    // 5 × 5 offsets × 2 mirrors: 200 draws reach nearly all of them.
    assert!(seen.len() > 40, "only {} of 50 crops seen", seen.len());

    let identity = CropFlip { padding: 0, flip: false };
    assert!(identity.is_identity());
    assert_eq!(identity.apply(&image, 2, 5, 4, &mut ChaCha8Rng::seed_from_u64(1)), image);
}

// ------------------------------------------------------------------------------------ source

#[test]
fn sources_are_chosen_by_name() {
    let shapes = ImageSource::from_options("shapes", "", "fine", 1, 20, 10).unwrap();
    let data = shapes.load().unwrap();
    assert_eq!((data.train.len(), data.test.len()), (20, 10));
    assert_eq!(data.train, shapes::generate(1, Split::Train, 20));
    let cifar = ImageSource::from_options("cifar100", "/data", "coarse", 1, 20, 10).unwrap();
    assert_eq!(cifar, ImageSource::Files(FileDataset::Cifar100(Cifar100Labels::Coarse), PathBuf::from("/data")));
    assert!(ImageSource::from_options("mnist", "/data", "fine", 0, 1, 1).unwrap().is_digits());
    assert!(!ImageSource::from_options("fashion-mnist", "/data", "fine", 0, 1, 1).unwrap().is_digits());
    let err = ImageSource::from_options("cifar10", "", "fine", 0, 1, 1).unwrap_err();
    assert!(err.contains("data_dir") && err.contains("test_batch.bin"), "{err}");
    let err = ImageSource::from_options("shapes", "/data", "fine", 0, 1, 1).unwrap_err();
    assert!(err.contains("remove data_dir"), "{err}");
}

#[test]
fn fitting_pads_small_squares_and_scales_the_rest() {
    let set = shapes::generate(0, Split::Train, 2);
    assert_eq!(set.clone().fit_to(32).unwrap(), set);
    assert_eq!(set.clone().fit_to(36).unwrap(), set.padded(2));
    let smaller = set.clone().fit_to(30).unwrap();
    assert_eq!((smaller.height, smaller.width, smaller.len()), (30, 30, 2));
    assert_eq!(smaller.labels, set.labels);
    // Scaling keeps the picture: the mean brightness moves by little.
    let mean = |s: &ImageSet| s.pixels.iter().map(|&p| p as f64).sum::<f64>() / s.pixels.len() as f64;
    assert!((mean(&smaller) - mean(&set)).abs() < 2.0, "{} vs {}", mean(&smaller), mean(&set));
}

/// An IDX image file of `count` images of `rows` x `cols` with `channels` interleaved channels
/// (4 dimensions) or gray (3 dimensions, `channels == 0`), pixel value = its position.
fn generic_idx_images(count: usize, rows: usize, cols: usize, channels: usize) -> Vec<u8> {
    let mut dims = vec![if channels == 0 { 0x0803u32 } else { 0x0804 }, count as u32, rows as u32, cols as u32];
    if channels > 0 {
        dims.push(channels as u32);
    }
    let mut out: Vec<u8> = dims.iter().flat_map(|v| v.to_be_bytes()).collect();
    out.extend((0..count * rows * cols * channels.max(1)).map(|k| (k % 251) as u8));
    out
}

#[test]
fn generic_idx_sets_of_any_size_and_channels_load_and_fit_the_task() {
    let dir = temp_dir("idx-generic");
    write_file(&dir, "train-images-idx3-ubyte", &generic_idx_images(3, 20, 12, 3));
    write_file(&dir, "train-labels-idx1-ubyte", &idx_labels(&[0, 4, 2]));
    write_file(&dir, "t10k-images-idx3-ubyte.gz", &gzip(&generic_idx_images(2, 20, 12, 3)));
    write_file(&dir, "t10k-labels-idx1-ubyte", &idx_labels(&[1, 1]));
    check_files(FileDataset::Mnist(MnistVariant::Generic), dir.path()).unwrap();
    let data = load_mnist(dir.path(), MnistVariant::Generic).unwrap();
    // Classes: the largest label of either split, plus one.
    assert_eq!((data.train.channels, data.train.height, data.train.width, data.train.classes), (3, 20, 12, 5));
    assert_eq!(data.test.classes, 5);
    // Interleaved channels are stored channel by channel: pixel (0, 1) of channel 2 was byte 5.
    assert_eq!(data.train.image(0)[2 * 240 + 1], 5);
    let fitted = data.train.fit_to(32).unwrap();
    assert_eq!((fitted.height, fitted.width, fitted.len()), (32, 32, 3));
    // 20 x 12 scaled to 32 x 19 (the longer side fills the square), centred: columns 0..6 stay black.
    let first = fitted.image(0);
    assert!((0..32).all(|y| first[y * 32] == 0 && first[y * 32 + 31] == 0));
    assert!(first[16 * 32 + 16] > 0);

    // The MNIST sets keep their shape check, naming the generic set as the way out.
    write_file(&dir, "train-images-idx3-ubyte", &generic_idx_images(3, 20, 12, 0));
    let err = load_mnist(dir.path(), MnistVariant::Digits).unwrap_err().to_string();
    assert!(err.contains("dataset=idx"), "{err}");
    // Headers announcing impossible images are refused with the reason.
    write_file(&dir, "train-images-idx3-ubyte", &generic_idx_images(1, 4, 4, 9));
    let err = load_mnist(dir.path(), MnistVariant::Generic).unwrap_err().to_string();
    assert!(err.contains("9 channels") && err.contains("1 to 4 channels"), "{err}");
}
