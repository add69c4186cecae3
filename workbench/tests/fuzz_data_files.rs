//! Seeded fuzzing of the data files a run reads: Sudoku CSV, MNIST IDX, CIFAR binaries and text
//! corpora (raw and gzip). Each case mutates a valid file (flipped bytes, truncation, appended
//! noise, header fields set to extremes, no line breaks, gzip of the result) and loads it as a
//! run would (the generator is seeded: the same cases every time); every case must end within a time limit with the data or an error, never a panic.

use crate::common;

use datasets::images::{load_cifar10, load_mnist, MnistVariant};
use datasets::sudoku::{generate, load_csv, Difficulty};
use datasets::text::{read_text_file, TokenizedCorpus, TokenizerKind};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::io::Write;
use std::sync::mpsc;
use std::time::Duration;

/// Longest a single load may take (a debug build on a busy two-core machine).
const LIMIT: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
struct Tally {
    cases: usize,
    accepted: usize,
    refused: usize,
    panics: Vec<String>,
    hangs: Vec<String>,
}

impl Tally {
    /// Runs `load` on its own thread: Ok or Err counts, a panic or overrun is recorded.
    fn run(&mut self, label: String, load: impl FnOnce() -> Result<(), String> + Send + 'static) {
        self.cases += 1;
        let (send, receive) = mpsc::channel();
        std::thread::spawn(move || {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(load));
            let _ = send.send(outcome);
        });
        match receive.recv_timeout(LIMIT) {
            Ok(Ok(Ok(()))) => self.accepted += 1,
            Ok(Ok(Err(message))) => {
                assert!(!message.trim().is_empty(), "{label}: an empty error message");
                self.refused += 1
            }
            Ok(Err(_)) => self.panics.push(label),
            Err(_) => self.hangs.push(label),
        }
    }
}

fn scratch(tag: &str) -> common::TestDir {
    common::temp_dir(&format!("fuzz-data-{tag}"))
}

/// One seeded mutation of `valid`; `header` is the length of its header (counts, sizes),
/// where fields are set to extremes.
fn mutate(rng: &mut StdRng, valid: &[u8], header: usize) -> Vec<u8> {
    let mut bytes = valid.to_vec();
    match rng.random_range(0..8) {
        0 => {
            for _ in 0..rng.random_range(1..=16) {
                let at = rng.random_range(0..bytes.len());
                bytes[at] ^= 1 << rng.random_range(0..8);
            }
        }
        1 => bytes.truncate(rng.random_range(0..bytes.len())),
        2 => bytes.extend((0..rng.random_range(1..4096)).map(|_| rng.random::<u8>())),
        3 if header >= 4 => {
            let at = rng.random_range(0..header / 4) * 4;
            let extreme = [0u32, 1, u32::MAX, 0x7fff_ffff, 0x8000_0000, 65_536][rng.random_range(0..6)];
            bytes[at..at + 4].copy_from_slice(&extreme.to_be_bytes());
        }
        4 => bytes.retain(|&b| b != b'\n'),
        5 => bytes.clear(),
        6 => {
            let at = rng.random_range(0..bytes.len());
            bytes.splice(at..at, std::iter::repeat_n(rng.random::<u8>(), rng.random_range(1..100_000)));
        }
        _ => {
            let a = rng.random_range(0..bytes.len());
            let b = rng.random_range(0..bytes.len());
            bytes.swap(a, b);
        }
    }
    bytes
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

fn sudoku_csv() -> Vec<u8> {
    let digits = |grid: &[u8; 81]| grid.iter().map(|d| char::from(b'0' + d)).collect::<String>();
    let mut text = String::from("quizzes,solutions\n");
    for p in generate(5, 4, Difficulty::Easy) {
        text.push_str(&format!("{},{}\n", digits(&p.puzzle), digits(&p.solution)));
    }
    text.into_bytes()
}

fn idx_images(n: u32) -> Vec<u8> {
    let mut bytes = [0x0803u32, n, 28, 28].iter().flat_map(|v| v.to_be_bytes()).collect::<Vec<u8>>();
    bytes.extend((0..n as usize * 784).map(|i| (i % 251) as u8));
    bytes
}

fn idx_labels(n: u32) -> Vec<u8> {
    let mut bytes = [0x0801u32, n].iter().flat_map(|v| v.to_be_bytes()).collect::<Vec<u8>>();
    bytes.extend((0..n).map(|i| (i % 10) as u8));
    bytes
}

fn cifar_batch(records: usize) -> Vec<u8> {
    (0..records)
        .flat_map(|r| std::iter::once((r % 10) as u8).chain((0..3072).map(move |i| ((i + r) % 256) as u8)))
        .collect()
}

fn corpus() -> Vec<u8> {
    "the quick brown fox jumps over the lazy dog; energy descends, tokens align.\n".repeat(40).into_bytes()
}

fn message<E: std::fmt::Display>(result: Result<impl Sized, E>) -> Result<(), String> {
    result.map(|_| ()).map_err(|e| e.to_string())
}

#[test]
fn mutated_data_files_are_loaded_or_refused_never_a_panic_or_a_hang() {
    let mut rng = StdRng::seed_from_u64(0x5eed_da7a);
    let mut tallies: Vec<(&str, Tally)> = Vec::new();

    let dir = scratch("csv");
    let mut tally = Tally::default();
    let valid = sudoku_csv();
    for case in 0..100 {
        let mut bytes = mutate(&mut rng, &valid, 0);
        let name = if case % 5 == 0 {
            bytes = gzip(&bytes);
            "p.csv.gz"
        } else {
            "p.csv"
        };
        let path = dir.join(format!("{case}-{name}"));
        std::fs::write(&path, &bytes).unwrap();
        tally.run(format!("csv case {case}"), move || message(load_csv(&path)));
    }
    tallies.push(("Sudoku CSV", tally));

    let mut tally = Tally::default();
    let files = [
        ("train-images-idx3-ubyte", idx_images(6), 16),
        ("train-labels-idx1-ubyte", idx_labels(6), 8),
        ("t10k-images-idx3-ubyte", idx_images(3), 16),
        ("t10k-labels-idx1-ubyte", idx_labels(3), 8),
    ];
    for case in 0..100 {
        let dir = scratch(&format!("idx-{case}"));
        let target = rng.random_range(0..files.len());
        for (i, (name, valid, header)) in files.iter().enumerate() {
            let bytes = if i == target { mutate(&mut rng, valid, *header) } else { valid.clone() };
            match case % 4 == 0 && i == target {
                true => std::fs::write(dir.join(format!("{name}.gz")), gzip(&bytes)).unwrap(),
                false => std::fs::write(dir.join(name), &bytes).unwrap(),
            }
        }
        tally.run(format!("idx case {case} ({})", files[target].0), move || {
            message(load_mnist(&dir, MnistVariant::Digits))
        });
    }
    tallies.push(("MNIST IDX", tally));

    let mut tally = Tally::default();
    let names = [
        "data_batch_1.bin",
        "data_batch_2.bin",
        "data_batch_3.bin",
        "data_batch_4.bin",
        "data_batch_5.bin",
        "test_batch.bin",
    ];
    let valid = cifar_batch(2);
    for case in 0..60 {
        let dir = scratch(&format!("cifar-{case}"));
        let target = rng.random_range(0..names.len());
        for (i, name) in names.iter().enumerate() {
            let bytes = if i == target { mutate(&mut rng, &valid, 0) } else { valid.clone() };
            std::fs::write(dir.join(name), bytes).unwrap();
        }
        tally.run(format!("cifar case {case} ({})", names[target]), move || message(load_cifar10(&dir)));
    }
    tallies.push(("CIFAR-10 binary", tally));

    let dir = scratch("corpus");
    let mut tally = Tally::default();
    let valid = corpus();
    for case in 0..80 {
        let mut bytes = mutate(&mut rng, &valid, 0);
        let name = if case % 4 == 0 {
            bytes = gzip(&bytes);
            "c.txt.gz"
        } else {
            "c.txt"
        };
        let path = dir.join(format!("{case}-{name}"));
        std::fs::write(&path, &bytes).unwrap();
        let kind = if case % 2 == 0 { TokenizerKind::Bpe { vocab_size: 300 } } else { TokenizerKind::Bytes };
        tally.run(format!("corpus case {case}"), move || {
            let text = read_text_file(&path).map_err(|e| e.to_string())?;
            message(TokenizedCorpus::new(&text, "corpus", kind, 0.1, 16))
        });
    }
    tallies.push(("text corpus", tally));

    let mut total = Tally::default();
    println!("| data files | cases | loaded | refused with a message | panics | hangs (> {} s) |", LIMIT.as_secs());
    println!("|---|---|---|---|---|---|");
    for (name, t) in &tallies {
        println!("| {name} | {} | {} | {} | {} | {} |", t.cases, t.accepted, t.refused, t.panics.len(), t.hangs.len());
        total.cases += t.cases;
        total.accepted += t.accepted;
        total.refused += t.refused;
        total.panics.extend(t.panics.iter().cloned());
        total.hangs.extend(t.hangs.iter().cloned());
    }
    println!(
        "FIGURE data-file fuzzing: {} cases, {} loaded, {} refused, {} panics, {} hangs",
        total.cases,
        total.accepted,
        total.refused,
        total.panics.len(),
        total.hangs.len()
    );
    assert!(total.cases >= 300);
    assert!(total.refused > 0 && total.accepted > 0, "the mutations should both break and spare files: {total:?}");
    assert!(total.panics.is_empty(), "panics: {:?}", total.panics);
    assert!(total.hangs.is_empty(), "hangs: {:?}", total.hangs);
}
