//! Checksums: the value a file must have, and the digests of a file on disk.

use md5::Md5;
use sha2::{Digest, Sha256};
use std::fmt;
use std::io::Read;
use std::path::Path;

/// The checksum a downloaded file must match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checksum {
    /// MD5, the only checksum the CIFAR, MNIST and Fashion-MNIST publishers give.
    Md5([u8; 16]),
    /// SHA-256.
    Sha256([u8; 32]),
}

impl Checksum {
    /// An MD5 checksum from its 32 hexadecimal digits.
    pub fn md5(hex_digits: &str) -> Result<Self, String> {
        let mut bytes = [0u8; 16];
        decode(hex_digits, &mut bytes, "an MD5")?;
        Ok(Checksum::Md5(bytes))
    }

    /// A SHA-256 checksum from its 64 hexadecimal digits.
    pub fn sha256(hex_digits: &str) -> Result<Self, String> {
        let mut bytes = [0u8; 32];
        decode(hex_digits, &mut bytes, "a SHA-256")?;
        Ok(Checksum::Sha256(bytes))
    }

    /// The algorithm's name as written in records: `md5` or `sha256`.
    pub fn algorithm(&self) -> &'static str {
        match self {
            Checksum::Md5(_) => "md5",
            Checksum::Sha256(_) => "sha256",
        }
    }

    /// The value in lowercase hexadecimal.
    pub fn hex(&self) -> String {
        match self {
            Checksum::Md5(bytes) => hex::encode(bytes),
            Checksum::Sha256(bytes) => hex::encode(bytes),
        }
    }

    /// Reads `md5:HEX` or `sha256:HEX` (the form [`Checksum`] displays itself in).
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.split_once(':') {
            Some(("md5", digits)) => Checksum::md5(digits),
            Some(("sha256", digits)) => Checksum::sha256(digits),
            _ => Err(format!("`{text}` is not a checksum; write md5:HEX or sha256:HEX")),
        }
    }
}

impl fmt::Display for Checksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algorithm(), self.hex())
    }
}

/// Decodes `digits` into `out`; `a_checksum` names the kind ("an MD5") in messages.
fn decode(digits: &str, out: &mut [u8], a_checksum: &str) -> Result<(), String> {
    let digits = digits.trim();
    if digits.len() != 2 * out.len() {
        return Err(format!(
            "{a_checksum} checksum has {} hexadecimal digits, but `{digits}` has {}",
            2 * out.len(),
            digits.len()
        ));
    }
    hex::decode_to_slice(digits, out)
        .map_err(|e| format!("`{digits}` is not {a_checksum} checksum in hexadecimal ({e})"))
}

/// The digests of a file, computed in one pass: both algorithms, so that the record holds a
/// SHA-256 even where only an MD5 is published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Digests {
    /// Length of the file in bytes.
    pub bytes: u64,
    /// MD5 of the content.
    pub md5: [u8; 16],
    /// SHA-256 of the content.
    pub sha256: [u8; 32],
}

impl Digests {
    /// Hashes the file at `path`.
    pub fn of_file(path: &Path) -> std::io::Result<Digests> {
        let mut file = std::fs::File::open(path)?;
        let (mut md5, mut sha256) = (Md5::new(), Sha256::new());
        let mut buffer = vec![0u8; 1 << 20];
        let mut bytes = 0u64;
        loop {
            let n = file.read(&mut buffer)?;
            if n == 0 {
                break;
            }
            md5.update(&buffer[..n]);
            sha256.update(&buffer[..n]);
            bytes += n as u64;
        }
        Ok(Digests { bytes, md5: md5.finalize().into(), sha256: sha256.finalize().into() })
    }

    /// This file's value in the algorithm of `expected`.
    pub fn in_algorithm_of(&self, expected: &Checksum) -> Checksum {
        match expected {
            Checksum::Md5(_) => Checksum::Md5(self.md5),
            Checksum::Sha256(_) => Checksum::Sha256(self.sha256),
        }
    }

    /// Whether the file has the checksum `expected`.
    pub fn matches(&self, expected: &Checksum) -> bool {
        self.in_algorithm_of(expected) == *expected
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_parse_print_and_refuse_wrong_lengths_or_digits() {
        let md5 = Checksum::parse("md5:C32A1D4AB5D03F1284B67883E8D87530").unwrap();
        assert_eq!(md5.to_string(), "md5:c32a1d4ab5d03f1284b67883e8d87530");
        assert_eq!(
            Checksum::parse(&Checksum::sha256(&"ab".repeat(32)).unwrap().to_string()).unwrap().hex(),
            "ab".repeat(32)
        );
        assert!(Checksum::md5("c32a").unwrap_err().contains("32 hexadecimal digits"));
        assert!(Checksum::sha256(&"zz".repeat(32)).unwrap_err().contains("is not a SHA-256 checksum in hexadecimal"));
        assert!(Checksum::parse("crc32:1234").is_err());
    }

    #[test]
    fn digests_of_a_known_content() {
        let file = tempfile::Builder::new().prefix("datasets-digest-").tempfile().unwrap();
        std::fs::write(file.path(), b"abc").unwrap();
        let digests = Digests::of_file(file.path()).unwrap();
        // The test vectors of RFC 1321 and FIPS 180-2 for "abc".
        assert!(digests.matches(&Checksum::md5("900150983cd24fb0d6963f7d28e17f72").unwrap()));
        assert!(digests
            .matches(&Checksum::sha256("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad").unwrap()));
        assert_eq!(digests.bytes, 3);
    }
}
