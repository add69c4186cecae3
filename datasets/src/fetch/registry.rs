//! The data sets that can be fetched: where their publishers put them and the checksums the
//! publishers give.
//!
//! Only checksums published by the data set's authors (or, for MNIST, by the maintainers of
//! the mirror used) are written here, each with where it is published. A file without one is
//! checked by *trust on first use*: its SHA-256 is recorded at the first download and every
//! later download or re-check must match it.

use super::checksum::Checksum;
use super::FetchError;

/// The names of the known data sets, in the order they are listed.
pub const NAMES: [&str; 5] = ["cifar10", "cifar100", "mnist", "fashion-mnist", "sudoku-hard"];

/// The page publishing the CIFAR archives and their MD5s.
const CIFAR_PAGE: &str = "https://www.cs.toronto.edu/~kriz/cifar.html";
/// A mirror of the MNIST files (the original page, yann.lecun.com/exdb/mnist, often refuses
/// downloads); its MD5s are listed with it in torchvision's MNIST data set.
const MNIST_MIRROR: &str = "https://ossci-datasets.s3.amazonaws.com/mnist";
/// Fashion-MNIST's repository, whose README publishes the MD5s of the files in `data/fashion`.
const FASHION_RAW: &str = "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion";
/// Where the Recurrent Relational Networks code (Palm et al. 2018) downloads its Sudoku set;
/// no checksum is published for it.
const SUDOKU_HARD_KNOWN_URL: &str = "https://www.dropbox.com/s/rp3hbjs91xiqdgc/sudoku-hard.zip?dl=1";

/// The four IDX files of MNIST and Fashion-MNIST, as distributed (gzip-compressed).
const IDX_FILES: [&str; 4] = [
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
];
const MNIST_MD5: [&str; 4] = [
    "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "d53e105ee54ea40749a09fcbcd1e9432",
    "9fb629c4189551a2d022fa330f9573f3",
    "ec29112dd5afa0611ce80d1b7f02629c",
];
const FASHION_MD5: [&str; 4] = [
    "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
    "25c81989df183df01b3e8a0aad5dffbe",
    "bef4ecab320f06d8554ea6380940ec79",
    "bb300cfdad3c16e7a12a480ee83cd310",
];

/// Who vouches for the checksum a file is checked against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Published with the data set; the text says where.
    Published(String),
    /// Given on the command line (`--sha256`, `--md5`).
    Given,
}

impl Origin {
    /// In words, for listings and records.
    pub fn describe(&self) -> String {
        match self {
            Origin::Published(by) => format!("published by {by}"),
            Origin::Given => "given on the command line".to_string(),
        }
    }
}

/// A checksum and who vouches for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    /// The value.
    pub checksum: Checksum,
    /// Where it comes from.
    pub origin: Origin,
}

/// One file of a data set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteFile {
    /// The file's name, in the cache and at a mirror; its ending says how it is unpacked
    /// (`.tar.gz`/`.tgz`, `.zip`, `.gz`, or anything else: kept as it is).
    pub name: String,
    /// Where it is downloaded from; `None` when the user must give it (`--url`).
    pub url: Option<String>,
    /// The checksum it must match; `None`: trust on first use.
    pub expected: Option<Expected>,
}

/// A data set that can be fetched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// Its name: the cache folder's name and the word on the command line.
    pub name: String,
    /// What it is, in words.
    pub title: String,
    /// Its files.
    pub files: Vec<RemoteFile>,
    /// What to tell the user when no download address is known (only for sources whose
    /// address the user gives).
    pub url_help: Option<String>,
}

/// The known data set called `name` (one of [`NAMES`]).
pub fn source(name: &str) -> Result<Source, FetchError> {
    let cifar = |file: &str, md5: &str, title: &str| Source {
        name: name.to_string(),
        title: title.to_string(),
        files: vec![RemoteFile {
            name: file.to_string(),
            url: Some(format!("https://www.cs.toronto.edu/~kriz/{file}")),
            expected: Some(published_md5(md5, &format!("the CIFAR page ({CIFAR_PAGE})"))),
        }],
        url_help: None,
    };
    let idx = |base: &str, md5: &[&str; 4], by: &str, title: &str| Source {
        name: name.to_string(),
        title: title.to_string(),
        files: IDX_FILES
            .iter()
            .zip(md5)
            .map(|(file, md5)| RemoteFile {
                name: file.to_string(),
                url: Some(format!("{base}/{file}")),
                expected: Some(published_md5(md5, by)),
            })
            .collect(),
        url_help: None,
    };
    Ok(match name {
        "cifar10" => cifar(
            "cifar-10-binary.tar.gz",
            "c32a1d4ab5d03f1284b67883e8d87530",
            "CIFAR-10, binary version: 50,000 + 10,000 32x32 colour images, 10 classes",
        ),
        "cifar100" => cifar(
            "cifar-100-binary.tar.gz",
            "03b5dce01913d631647c71ecec9e9cb8",
            "CIFAR-100, binary version: 50,000 + 10,000 32x32 colour images, 100 fine / 20 coarse classes",
        ),
        "mnist" => idx(
            MNIST_MIRROR,
            &MNIST_MD5,
            &format!("torchvision's MNIST resource list for the mirror {MNIST_MIRROR}"),
            "MNIST: 60,000 + 10,000 28x28 handwritten digits (IDX files)",
        ),
        "fashion-mnist" => idx(
            FASHION_RAW,
            &FASHION_MD5,
            "the Fashion-MNIST README (https://github.com/zalandoresearch/fashion-mnist)",
            "Fashion-MNIST: 60,000 + 10,000 28x28 images of clothing, 10 classes (IDX files)",
        ),
        "sudoku-hard" => Source {
            name: name.to_string(),
            title: "hard Sudoku of Palm et al. 2018 (Recurrent Relational Networks): 17-34 givens, \
                    train/valid/test CSV files"
                .to_string(),
            files: vec![RemoteFile { name: "sudoku-hard.zip".to_string(), url: None, expected: None }],
            url_help: Some(format!(
                "sudoku-hard has no stable download address with a published checksum, so give the address with \
                 --url URL (and its checksum with --sha256 HEX if you have one; without it the SHA-256 of the first \
                 download is recorded and later downloads must match it). The Recurrent Relational Networks code \
                 (github.com/rasmusbergpalm/recurrent-relational-networks, tasks/sudoku/data.py) downloads the set \
                 from {SUDOKU_HARD_KNOWN_URL}"
            )),
        },
        other => {
            return Err(FetchError::UnknownDataset { name: other.to_string() });
        }
    })
}

fn published_md5(digits: &str, by: &str) -> Expected {
    Expected {
        checksum: Checksum::md5(digits).expect("the registry's MD5s are 32 hexadecimal digits"),
        origin: Origin::Published(by.to_string()),
    }
}

impl Source {
    /// The same data set downloaded from a mirror: every file from `base_url/<file name>`.
    /// The checksums stay those of the publisher.
    pub fn with_mirror(mut self, base_url: &str) -> Self {
        let base = base_url.trim_end_matches('/');
        for file in &mut self.files {
            file.url = Some(format!("{base}/{}", file.name));
        }
        self
    }

    /// The same data set downloaded from `url`. Only for a data set of one file; for a source
    /// whose address the user gives, the file takes the name the URL ends with (which says
    /// how it is unpacked).
    pub fn with_url(mut self, url: &str) -> Result<Self, FetchError> {
        let user_given = self.url_help.is_some();
        let [file] = self.files.as_mut_slice() else {
            return Err(FetchError::BadOption {
                problem: format!(
                    "--url names one file, but {} has {} files; use --base-url to download them all from a mirror",
                    self.name,
                    self.files.len()
                ),
            });
        };
        if user_given {
            file.name = file_name_of(url)?;
        }
        file.url = Some(url.to_string());
        Ok(self)
    }

    /// The same data set with its file checked against `checksum` (given by the user) instead
    /// of the published one. Only for a data set of one file.
    pub fn with_checksum(mut self, checksum: Checksum) -> Result<Self, FetchError> {
        let [file] = self.files.as_mut_slice() else {
            return Err(FetchError::BadOption {
                problem: format!(
                    "--sha256 and --md5 give the checksum of one file, but {} has {} files, whose published \
                     checksums are used",
                    self.name,
                    self.files.len()
                ),
            });
        };
        file.expected = Some(Expected { checksum, origin: Origin::Given });
        Ok(self)
    }
}

/// The last segment of a URL's path, without query or fragment: the name the file is stored
/// under.
fn file_name_of(url: &str) -> Result<String, FetchError> {
    let without_query = url.split(['?', '#']).next().unwrap_or("");
    let after_scheme = without_query.split_once("://").map_or(without_query, |(_, rest)| rest);
    let name = after_scheme.split_once('/').map_or("", |(_, path)| path).rsplit('/').next().unwrap_or("");
    let plain = !name.is_empty() && name != "." && name != ".." && !name.contains('\\');
    if plain {
        Ok(name.to_string())
    } else {
        Err(FetchError::BadOption {
            problem: format!(
                "the URL `{url}` does not end with a file name (such as sudoku-hard.zip), which says how to unpack it"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_come_from_the_url_path_without_query() {
        assert_eq!(file_name_of(SUDOKU_HARD_KNOWN_URL).unwrap(), "sudoku-hard.zip");
        assert_eq!(file_name_of("http://127.0.0.1:9/a/b/train.csv.gz").unwrap(), "train.csv.gz");
        assert!(file_name_of("http://127.0.0.1:9/").is_err());
        assert!(file_name_of("http://127.0.0.1:9").is_err());
    }

    #[test]
    fn every_known_name_has_a_source_and_every_published_checksum_parses() {
        for name in NAMES {
            let source = source(name).unwrap();
            assert_eq!(source.name, name);
            assert!(!source.files.is_empty());
            // A file without an address is exactly one whose address the user gives.
            assert_eq!(source.files.iter().any(|f| f.url.is_none()), source.url_help.is_some(), "{name}");
        }
        assert!(matches!(super::source("imagenet"), Err(FetchError::UnknownDataset { .. })));
    }

    #[test]
    fn options_for_one_file_are_refused_for_several() {
        let mnist = source("mnist").unwrap();
        assert!(mnist.clone().with_url("http://127.0.0.1:9/x.gz").is_err());
        assert!(mnist.with_checksum(Checksum::md5(MNIST_MD5[0]).unwrap()).is_err());
        // A mirror keeps the published checksums.
        let cifar = source("cifar10").unwrap().with_mirror("http://127.0.0.1:9/m/");
        assert_eq!(cifar.files[0].url.as_deref(), Some("http://127.0.0.1:9/m/cifar-10-binary.tar.gz"));
        assert!(matches!(cifar.files[0].expected, Some(Expected { origin: Origin::Published(_), .. })));
    }
}
