//! Fetching from a server on 127.0.0.1 that serves files made here: complete downloads,
//! broken ones resumed with a range request, corrupted ones rejected, and unpacked layouts
//! that the loaders of `images` and `sudoku` read.

use super::test_server::{Route, Server};
use super::*;
use crate::images::{load_cifar10, load_mnist, MnistVariant};
use crate::sudoku::{self, Difficulty};
use flate2::write::GzEncoder;
use flate2::Compression;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::time::Duration;
use tempfile::TempDir;

fn temp_cache(tag: &str) -> TempDir {
    tempfile::Builder::new().prefix(&format!("datasets-fetch-{tag}-")).tempdir().unwrap()
}

fn settings(retries: u32) -> FetchSettings {
    FetchSettings { retries, retry_delay: Duration::from_millis(10), read_timeout: Duration::from_secs(10) }
}

fn sha256_of(bytes: &[u8]) -> Checksum {
    Checksum::Sha256(Sha256::digest(bytes).into())
}

fn md5_of(bytes: &[u8]) -> Checksum {
    use md5::Md5;
    Checksum::Md5(Md5::digest(bytes).into())
}

/// Bytes that do not compress, so that cutting a transfer midway is a real cut.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

/// A one-file source served by `server` at `/NAME`, checked against `expected`.
fn one_file(name: &str, file: &str, server: &Server, expected: Option<Checksum>) -> Source {
    Source {
        name: name.to_string(),
        title: "test data".to_string(),
        files: vec![RemoteFile {
            name: file.to_string(),
            url: Some(format!("{}/{file}", server.url)),
            expected: expected.map(|checksum| Expected { checksum, origin: Origin::Published("the test".into()) }),
        }],
        url_help: None,
    }
}

/// A gzip-compressed tar archive of `(path, bytes)` entries.
fn tar_gz(entries: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
    for (path, bytes) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder.append_data(&mut header, path, &bytes[..]).unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap()
}

/// A CIFAR-10 binary archive laid out as the real one, `per_batch` records per batch file;
/// record `k` of a file has label `k % 10` and every pixel equal to `k`.
fn cifar10_archive(per_batch: usize) -> Vec<u8> {
    let batch = |offset: usize| -> Vec<u8> {
        (0..per_batch)
            .flat_map(|k| {
                let mut record = vec![((k + offset) % 10) as u8];
                record.extend(std::iter::repeat_n(k as u8, 3072));
                record
            })
            .collect()
    };
    let mut entries: Vec<(String, Vec<u8>)> =
        (1..=5).map(|i| (format!("cifar-10-batches-bin/data_batch_{i}.bin"), batch(i))).collect();
    entries.push(("cifar-10-batches-bin/test_batch.bin".into(), batch(0)));
    entries.push(("cifar-10-batches-bin/batches.meta.txt".into(), b"airplane\nautomobile\n".to_vec()));
    tar_gz(&entries)
}

#[test]
fn a_complete_download_is_verified_recorded_and_listed() {
    let body = noise(200_000, 1);
    let server = Server::start(vec![("/data.bin", Route::file(body.clone()))]);
    let tmp = temp_cache("complete");
    let cache = tmp.path();
    for expected in [md5_of(&body), sha256_of(&body)] {
        let source = one_file("plain", "data.bin", &server, Some(expected));
        let fetched = fetch(&source, cache, &settings(0), &mut Quiet).unwrap();
        assert!(!fetched.already_there);
        assert_eq!(std::fs::read(fetched.dir.join("data.bin")).unwrap(), body);
        assert!(!fetched.dir.join("data.bin.part").exists());
        let file = &fetched.record.files[0];
        assert_eq!(file.checked_against, Some(expected.to_string()));
        assert_eq!((file.bytes, file.sha256.clone()), (body.len() as u64, sha256_of(&body).hex()));
        assert_eq!(Record::read(&fetched.dir).unwrap().unwrap(), fetched.record);
        std::fs::remove_file(fetched.dir.join("data.bin")).unwrap();
    }
    // A second fetch finds the file and checks it again without downloading.
    let source = one_file("plain", "data.bin", &server, Some(md5_of(&body)));
    fetch(&source, cache, &settings(0), &mut Quiet).unwrap();
    let requests = server.log().len();
    let again = fetch(&source, cache, &settings(0), &mut Quiet).unwrap();
    assert!(again.already_there);
    assert_eq!(server.log().len(), requests, "nothing is downloaded again");

    let listed = cached(cache, true).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].name.as_str(), listed[0].state), ("plain", State::Verified));
    assert!(listed[0].bytes >= body.len() as u64);
    assert!(listed[0].detail.contains("md5 published by the test"), "{}", listed[0].detail);
    // A file changed on disk is reported, by size without re-hashing and by hash with it.
    let mut changed = body.clone();
    changed[7] ^= 1;
    std::fs::write(cache.join("plain/data.bin"), &changed).unwrap();
    assert_eq!(cached(cache, false).unwrap()[0].state, State::Verified, "same size: only a re-hash sees it");
    assert_eq!(cached(cache, true).unwrap()[0].state, State::Modified);
    std::fs::write(cache.join("plain/data.bin"), &changed[1..]).unwrap();
    assert_eq!(cached(cache, false).unwrap()[0].state, State::Modified);
    // ... and fetching again replaces it with a verified copy.
    let repaired = fetch(&source, cache, &settings(0), &mut Quiet).unwrap();
    assert!(!repaired.already_there);
    assert_eq!(std::fs::read(cache.join("plain/data.bin")).unwrap(), body);
}

#[test]
fn a_broken_download_is_resumed_with_a_range_request_in_the_same_run() {
    let body = noise(300_000, 2);
    let cut = 123_457;
    let server = Server::start(vec![("/data.bin", Route::cut(body.clone(), cut, 1))]);
    let tmp = temp_cache("resume-same-run");
    let cache = tmp.path();
    let source = one_file("plain", "data.bin", &server, Some(sha256_of(&body)));
    let mut notes = Notes::default();
    fetch(&source, cache, &settings(2), &mut notes).unwrap();
    assert_eq!(std::fs::read(cache.join("plain/data.bin")).unwrap(), body);
    let ranges: Vec<_> = server.log().into_iter().map(|l| l.range).collect();
    assert_eq!(ranges, vec![None, Some(format!("bytes={cut}-"))]);
    assert_eq!(notes.starts, vec![(Some(body.len() as u64), 0), (Some(body.len() as u64), cut as u64)]);
    assert_eq!(notes.advanced, body.len() as u64, "every byte is reported once");
    assert!(notes.lines.iter().any(|l| l.contains(&format!("retrying from byte {cut}"))), "{:?}", notes.lines);
}

#[test]
fn a_broken_download_is_kept_and_resumed_by_the_next_run() {
    let body = noise(250_000, 3);
    let cut = 99_999;
    let server = Server::start(vec![("/data.bin", Route::cut(body.clone(), cut, 1))]);
    let tmp = temp_cache("resume-next-run");
    let cache = tmp.path();
    let source = one_file("plain", "data.bin", &server, Some(md5_of(&body)));
    let error = fetch(&source, cache, &settings(0), &mut Quiet).unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, FetchError::Interrupted { bytes, attempts: 1, .. } if bytes == cut as u64), "{message}");
    assert!(message.contains("run the same command again to resume"), "{message}");
    assert_eq!(std::fs::metadata(cache.join("plain/data.bin.part")).unwrap().len(), cut as u64);
    assert_eq!(cached(cache, false).unwrap()[0].state, State::Incomplete);

    fetch(&source, cache, &settings(0), &mut Quiet).unwrap();
    assert_eq!(std::fs::read(cache.join("plain/data.bin")).unwrap(), body);
    assert_eq!(server.log()[1].range, Some(format!("bytes={cut}-")));
}

#[test]
fn a_partial_download_from_another_address_is_not_completed() {
    let body = noise(60_000, 8);
    let server = Server::start(vec![("/new/data.bin", Route::file(body.clone()))]);
    let tmp = temp_cache("other-address");
    let cache = tmp.path();
    std::fs::create_dir_all(cache.join("plain")).unwrap();
    std::fs::write(cache.join("plain/data.bin.part"), noise(1000, 9)).unwrap();
    std::fs::write(cache.join("plain/data.bin.part.url"), format!("{}/old/data.bin", server.url)).unwrap();
    let mut source = one_file("plain", "data.bin", &server, None);
    source.files[0].url = Some(format!("{}/new/data.bin", server.url));
    let mut notes = Notes::default();
    fetch(&source, cache, &settings(0), &mut notes).unwrap();
    assert_eq!(std::fs::read(cache.join("plain/data.bin")).unwrap(), body);
    assert_eq!(server.log()[0].range, None, "the whole file is asked for");
    assert!(notes.lines.iter().any(|l| l.contains("another address is discarded")), "{:?}", notes.lines);
    assert!(!cache.join("plain/data.bin.part.url").exists());
}

#[test]
fn a_server_without_ranges_makes_the_download_start_over() {
    let body = noise(150_000, 4);
    let server = Server::start(vec![(
        "/data.bin",
        Route { body: body.clone(), cut_after: Some(50_000), cut_times: 1, ignore_range: true },
    )]);
    let tmp = temp_cache("no-ranges");
    let cache = tmp.path();
    let source = one_file("plain", "data.bin", &server, Some(sha256_of(&body)));
    let mut notes = Notes::default();
    fetch(&source, cache, &settings(1), &mut notes).unwrap();
    assert_eq!(std::fs::read(cache.join("plain/data.bin")).unwrap(), body);
    assert!(notes.lines.iter().any(|l| l.contains("starting over")), "{:?}", notes.lines);
}

#[test]
fn a_corrupted_download_is_rejected_and_removed() {
    let body = noise(80_000, 5);
    let mut corrupted = body.clone();
    corrupted[40_000] ^= 0x5a;
    let server = Server::start(vec![("/data.bin", Route::file(corrupted.clone()))]);
    let tmp = temp_cache("corrupted");
    let cache = tmp.path();
    let source = one_file("plain", "data.bin", &server, Some(md5_of(&body)));
    let error = fetch(&source, cache, &settings(0), &mut Quiet).unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, FetchError::ChecksumMismatch(_)), "{message}");
    assert!(message.contains(&md5_of(&body).to_string()) && message.contains(&md5_of(&corrupted).to_string()));
    assert!(message.contains("the file was removed"), "{message}");
    assert!(!cache.join("plain/data.bin").exists() && !cache.join("plain/data.bin.part").exists());
    assert_eq!(cached(cache, false).unwrap()[0].state, State::Incomplete, "never listed as verified");
}

#[test]
fn missing_files_and_missing_addresses_are_reported() {
    let server = Server::start(vec![]);
    let tmp = temp_cache("missing");
    let cache = tmp.path();
    let error = fetch(&one_file("plain", "nothing.bin", &server, None), cache, &settings(3), &mut Quiet).unwrap_err();
    assert!(matches!(error, FetchError::NotFound { .. }), "{error}");
    assert_eq!(server.log().len(), 1, "a missing file is not retried");
    let error = fetch(&registry::source("sudoku-hard").unwrap(), cache, &settings(0), &mut Quiet).unwrap_err();
    let message = error.to_string();
    assert!(message.contains("--url") && message.contains("recurrent-relational-networks"), "{message}");
}

#[test]
fn a_file_without_checksum_is_trusted_on_first_use_and_checked_afterwards() {
    let first = noise(30_000, 6);
    let server = Server::start(vec![("/train.csv", Route::file(first.clone()))]);
    let tmp = temp_cache("first-use");
    let cache = tmp.path();
    let source = one_file("sudoku-hard", "train.csv", &server, None);
    let fetched = fetch(&source, cache, &settings(0), &mut Quiet).unwrap();
    assert_eq!(fetched.record.files[0].checked_against, None);
    assert_eq!(fetched.record.files[0].sha256, sha256_of(&first).hex());
    let listed = &cached(cache, false).unwrap()[0];
    assert_eq!(listed.state, State::FirstUse);
    assert!(listed.detail.contains(&sha256_of(&first).hex()), "{}", listed.detail);

    // The same file again is accepted against the record...
    std::fs::remove_file(cache.join("sudoku-hard/train.csv")).unwrap();
    fetch(&source, cache, &settings(0), &mut Quiet).unwrap();
    // ... a different one is refused and removed, and the record keeps the first value.
    std::fs::remove_file(cache.join("sudoku-hard/train.csv")).unwrap();
    server.set("/train.csv", Route::file(noise(30_000, 7)));
    let error = fetch(&source, cache, &settings(0), &mut Quiet).unwrap_err();
    assert!(matches!(error, FetchError::FirstUseMismatch(_)), "{error}");
    assert!(error.to_string().contains("its first download had"), "{error}");
    assert!(!cache.join("sudoku-hard/train.csv").exists());
    let record = Record::read(&cache.join("sudoku-hard")).unwrap().unwrap();
    assert_eq!(record.files[0].sha256, sha256_of(&first).hex());
}

#[test]
fn cifar10_unpacks_into_the_folder_the_image_loader_reads() {
    let archive = cifar10_archive(3);
    let server = Server::start(vec![("/cifar-10-binary.tar.gz", Route::file(archive.clone()))]);
    let tmp = temp_cache("cifar10");
    let cache = tmp.path();
    // The registry's source, from the test server as a mirror, with the test archive's checksum.
    let source =
        registry::source("cifar10").unwrap().with_mirror(&server.url).with_checksum(sha256_of(&archive)).unwrap();
    let fetched = fetch(&source, cache, &settings(0), &mut Quiet).unwrap();
    assert_eq!(fetched.dir, cache.join("cifar10"));
    assert!(fetched.dir.join("downloads/cifar-10-binary.tar.gz").is_file());
    assert!(fetched.dir.join("cifar-10-batches-bin/batches.meta.txt").is_file());
    let data = load_cifar10(&fetched.dir).unwrap();
    assert_eq!((data.train.len(), data.test.len()), (15, 3));
    assert_eq!(&data.train.labels[..3], &[1, 2, 3], "batch 1's records, in order");
    assert_eq!(data.test.labels, vec![0, 1, 2]);
    assert!(data.test.image(2).iter().all(|&p| p == 2));
    // Unpacked files that go missing are restored from the kept archive, without a download.
    std::fs::remove_file(fetched.dir.join("cifar-10-batches-bin/test_batch.bin")).unwrap();
    let again = fetch(&source, cache, &settings(0), &mut Quiet).unwrap();
    assert!(again.already_there);
    assert_eq!(load_cifar10(&again.dir).unwrap(), data);
    assert_eq!(server.log().len(), 1);
}

#[test]
fn mnist_files_are_gunzipped_into_the_folder_the_idx_loader_reads() {
    let idx_images = |count: u32| {
        let mut bytes = [0x0803u32, count, 28, 28].iter().flat_map(|v| v.to_be_bytes()).collect::<Vec<u8>>();
        bytes.extend((0..count as usize * 784).map(|i| (i % 251) as u8));
        bytes
    };
    let idx_labels = |count: u32| {
        let mut bytes = [0x0801u32, count].iter().flat_map(|v| v.to_be_bytes()).collect::<Vec<u8>>();
        bytes.extend((0..count).map(|i| (i % 10) as u8));
        bytes
    };
    let files = [
        ("train-images-idx3-ubyte.gz", gzip(&idx_images(6))),
        ("train-labels-idx1-ubyte.gz", gzip(&idx_labels(6))),
        ("t10k-images-idx3-ubyte.gz", gzip(&idx_images(4))),
        ("t10k-labels-idx1-ubyte.gz", gzip(&idx_labels(4))),
    ];
    let paths: Vec<String> = files.iter().map(|(name, _)| format!("/{name}")).collect();
    let server = Server::start(
        paths.iter().zip(&files).map(|(path, (_, bytes))| (path.as_str(), Route::file(bytes.clone()))).collect(),
    );
    let tmp = temp_cache("mnist");
    let cache = tmp.path();
    let mut source = registry::source("fashion-mnist").unwrap().with_mirror(&server.url);
    for (file, (_, bytes)) in source.files.iter_mut().zip(&files) {
        file.expected = Some(Expected { checksum: md5_of(bytes), origin: Origin::Given });
    }
    let fetched = fetch(&source, cache, &settings(0), &mut Quiet).unwrap();
    for (name, _) in &files {
        assert!(fetched.dir.join(DOWNLOADS).join(name).is_file());
        assert!(fetched.dir.join(name.trim_end_matches(".gz")).is_file(), "{name} is unpacked");
    }
    let data = load_mnist(&fetched.dir, MnistVariant::Fashion).unwrap();
    assert_eq!((data.train.len(), data.test.len(), data.train.labels[5]), (6, 4, 5));
}

#[test]
fn a_zip_of_sudoku_csv_files_unpacks_into_files_the_csv_loader_reads() {
    let puzzles = sudoku::generate(3, 4, Difficulty::Easy);
    let digits = |grid: &[u8; 81]| grid.iter().map(|d| char::from(b'0' + d)).collect::<String>();
    let csv: String = puzzles.iter().map(|p| format!("{},{}\n", digits(&p.puzzle), digits(&p.solution))).collect();
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for split in ["train", "valid", "test"] {
        zip.start_file(format!("sudoku-hard/{split}.csv"), zip::write::SimpleFileOptions::default()).unwrap();
        zip.write_all(csv.as_bytes()).unwrap();
    }
    let archive = zip.finish().unwrap().into_inner();
    let server = Server::start(vec![("/files/sudoku-hard.zip", Route::file(archive.clone()))]);
    let tmp = temp_cache("sudoku");
    let cache = tmp.path();
    let source = registry::source("sudoku-hard")
        .unwrap()
        .with_url(&format!("{}/files/sudoku-hard.zip?dl=1", server.url))
        .unwrap()
        .with_checksum(sha256_of(&archive))
        .unwrap();
    let fetched = fetch(&source, cache, &settings(0), &mut Quiet).unwrap();
    let loaded = sudoku::load_csv(&fetched.dir.join("sudoku-hard/test.csv")).unwrap();
    assert_eq!(loaded, puzzles);
}

/// A [`Progress`] that remembers what it was told.
#[derive(Default)]
struct Notes {
    starts: Vec<(Option<u64>, u64)>,
    advanced: u64,
    lines: Vec<String>,
}

impl Progress for Notes {
    fn start(&mut self, _: &str, total: Option<u64>, start: u64) {
        self.starts.push((total, start));
    }
    fn advance(&mut self, bytes: u64) {
        self.advanced += bytes;
    }
    fn end(&mut self) {}
    fn note(&mut self, text: &str) {
        self.lines.push(text.to_string());
    }
}
