//! `workbench datasets fetch` and `workbench datasets` against a server on 127.0.0.1 serving
//! files made here (never the network): a verified and unpacked download, a corrupted one
//! rejected and removed, a broken one resumed by the next run, and the listing.

use crate::{common, test_server};

use common::{run, temp_dir, workbench};
use datasets::fetch::Digests;
use flate2::write::GzEncoder;
use flate2::Compression;
use std::path::Path;
use std::process::Command;
use test_server::{Route, Server};

/// The workbench in `dir`, with no data cache or mirror from the environment.
fn datasets_command(dir: &Path) -> Command {
    let mut cmd = workbench(dir);
    cmd.env_remove("WORKBENCH_DATA").env_remove("WORKBENCH_DATA_MIRROR").arg("datasets");
    cmd
}

fn tar_gz(entries: &[(&str, Vec<u8>)]) -> Vec<u8> {
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

/// The SHA-256 of `bytes` in hexadecimal, by the library's own hashing of a file.
fn sha256_hex(dir: &Path, bytes: &[u8]) -> String {
    let path = dir.join("to-hash");
    std::fs::write(&path, bytes).unwrap();
    let digests = Digests::of_file(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    digests.sha256.iter().map(|b| format!("{b:02x}")).collect()
}

/// A CIFAR-10 binary archive with `per_batch` records in each of the six batch files.
fn cifar10_archive(per_batch: usize) -> Vec<u8> {
    let batch: Vec<u8> = (0..per_batch)
        .flat_map(|k| std::iter::once((k % 10) as u8).chain(std::iter::repeat_n(k as u8, 3072)))
        .collect();
    let names: Vec<String> = (1..=5)
        .map(|i| format!("cifar-10-batches-bin/data_batch_{i}.bin"))
        .chain(["cifar-10-batches-bin/test_batch.bin".to_string()])
        .collect();
    tar_gz(&names.iter().map(|n| (n.as_str(), batch.clone())).collect::<Vec<_>>())
}

#[test]
fn cifar10_is_downloaded_verified_unpacked_and_listed() {
    let dir = temp_dir("datasets-cifar10");
    let cache = dir.join("cache");
    let archive = cifar10_archive(2);
    let sha256 = sha256_hex(&dir, &archive);
    let server = Server::start(vec![("/cifar-10-binary.tar.gz", Route::file(archive))]);
    let fetch = |dir: &Path| {
        run(datasets_command(dir)
            .args(["fetch", "cifar10", "--base-url", &server.url, "--sha256", &sha256, "--cache"])
            .arg(&cache))
    };
    let (code, stdout, stderr) = fetch(&dir);
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let data_dir = cache.join("cifar10");
    assert!(stdout.contains(&format!("task.dataset=cifar10 task.data_dir={}", data_dir.display())), "{stdout}");
    assert!(stderr.contains(&format!("sha256:{sha256} matches (given on the command line)")), "{stderr}");
    let loaded = datasets::images::load_cifar10(&data_dir).unwrap();
    assert_eq!((loaded.train.len(), loaded.test.len()), (10, 2));

    // Fetching again downloads nothing and checks the kept archive again.
    let (code, stdout, _) = fetch(&dir);
    assert_eq!(code, 0);
    assert!(stdout.contains("already in the cache"), "{stdout}");
    assert_eq!(server.log().len(), 1);

    let (code, stdout, stderr) = run(datasets_command(&dir).arg("--cache").arg(&cache));
    assert_eq!(code, 0, "{stderr}");
    let row = stdout.lines().find(|l| l.starts_with("cifar10")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(row.contains("verified") && row.contains(&data_dir.display().to_string()), "{row}");
    assert!(stdout.contains("sha256 given on the command line"), "{stdout}");
    assert!(stdout.contains("not cached: cifar100, mnist, fashion-mnist, sudoku-hard"), "{stdout}");
}

#[test]
fn a_download_that_fails_the_published_checksum_is_rejected_and_removed() {
    let dir = temp_dir("datasets-corrupt");
    let archive = tar_gz(&[("cifar-100-binary/train.bin", vec![0u8; 3074])]);
    let server = Server::start(vec![("/cifar-100-binary.tar.gz", Route::file(archive))]);
    // The cache and the mirror come from the environment this time.
    let (code, stdout, stderr) = run(datasets_command(&dir)
        .env("WORKBENCH_DATA", dir.join("cache"))
        .env("WORKBENCH_DATA_MIRROR", &server.url)
        .args(["fetch", "cifar100"]));
    assert_eq!(code, 1, "stdout: {stdout}\nstderr: {stderr}");
    // The archive made here cannot have the MD5 the CIFAR page publishes for the real one.
    assert!(stderr.contains("does not match its checksum"), "{stderr}");
    assert!(stderr.contains("expected md5:03b5dce01913d631647c71ecec9e9cb8 (published by the CIFAR page"), "{stderr}");
    assert!(stderr.contains("the file was removed"), "{stderr}");
    let downloads = dir.join("cache/cifar100/downloads");
    assert_eq!(std::fs::read_dir(&downloads).unwrap().count(), 0, "nothing is left in {}", downloads.display());
    assert!(!dir.join("cache/cifar100/cifar-100-binary").exists(), "nothing is unpacked");

    let (code, stdout, _) = run(datasets_command(&dir).arg("--json").arg("--cache").arg(dir.join("cache")));
    assert_eq!(code, 0);
    let listing: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let row = &listing["datasets"][0];
    assert_eq!(
        (row["name"].as_str(), row["state"].as_str(), row["verified"].as_bool()),
        (Some("cifar100"), Some("incomplete"), Some(false))
    );
}

#[test]
fn a_broken_download_is_resumed_with_a_range_request_by_the_next_run() {
    let dir = temp_dir("datasets-resume");
    let cache = dir.join("cache");
    let puzzles = datasets::sudoku::generate(5, 40, datasets::sudoku::Difficulty::Easy);
    let digits = |grid: &[u8; 81]| grid.iter().map(|d| char::from(b'0' + d)).collect::<String>();
    let csv: String = puzzles.iter().map(|p| format!("{},{}\n", digits(&p.puzzle), digits(&p.solution))).collect();
    let archive =
        tar_gz(&[("sudoku-hard/train.csv", csv.clone().into_bytes()), ("sudoku-hard/test.csv", csv.into_bytes())]);
    let cut = archive.len() / 2;
    let server = Server::start(vec![("/data/sudoku-hard.tar.gz", Route::cut(archive.clone(), cut, 1))]);
    let url = format!("{}/data/sudoku-hard.tar.gz", server.url);
    let fetch = || {
        run(datasets_command(&dir)
            .args(["fetch", "sudoku-hard", "--url", &url, "--retries", "0", "--cache"])
            .arg(&cache))
    };
    let (code, _, stderr) = fetch();
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains(&format!("the {cut} bytes received are kept")), "{stderr}");
    assert!(stderr.contains("run the same command again to resume"), "{stderr}");
    let (code, stdout, _) = run(datasets_command(&dir).arg("--cache").arg(&cache));
    assert_eq!(code, 0);
    assert!(stdout.lines().any(|l| l.starts_with("sudoku-hard") && l.contains("incomplete")), "{stdout}");

    let (code, stdout, stderr) = fetch();
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let ranges: Vec<Option<String>> = server.log().into_iter().map(|l| l.range).collect();
    assert_eq!(ranges, vec![None, Some(format!("bytes={cut}-"))]);
    // No checksum is published for this set: the first download's is recorded.
    assert!(stderr.contains("trust on first use"), "{stderr}");
    let train = cache.join("sudoku-hard/sudoku-hard/train.csv");
    let test = cache.join("sudoku-hard/sudoku-hard/test.csv");
    let usage = format!("task.train_csv={} task.eval_csv={}", train.display(), test.display());
    assert!(stdout.contains(&usage), "{stdout}");
    assert_eq!(datasets::sudoku::load_csv(&train).unwrap(), puzzles);

    let (code, stdout, _) = run(datasets_command(&dir).args(["--verify", "--cache"]).arg(&cache));
    assert_eq!(code, 0);
    let row = stdout.lines().find(|l| l.starts_with("sudoku-hard")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(row.contains("first-use"), "{row}");
    assert!(stdout.contains(&format!("sha256:{}", sha256_hex(&dir, &archive))), "{stdout}");
}

#[test]
fn sudoku_hard_needs_an_address_and_a_missing_file_is_reported() {
    let dir = temp_dir("datasets-address");
    let (code, _, stderr) = run(datasets_command(&dir).args(["fetch", "sudoku-hard", "--cache"]).arg(dir.join("c")));
    assert_eq!(code, 1);
    assert!(stderr.contains("--url URL") && stderr.contains("sudoku-hard.zip"), "{stderr}");
    assert!(!dir.join("c/sudoku-hard").exists(), "nothing is created before there is an address");

    let server = Server::start(vec![]);
    let (code, _, stderr) = run(datasets_command(&dir)
        .env("WORKBENCH_DATA_MIRROR", &server.url)
        .args(["fetch", "sudoku-hard", "--cache"])
        .arg(dir.join("c")));
    assert_eq!(code, 1);
    assert!(stderr.contains("sudoku-hard.zip` was not found on the server (HTTP 404)"), "{stderr}");
    assert_eq!(server.log()[0].path, "/sudoku-hard.zip");
}
