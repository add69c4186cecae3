//! HTTP downloads that resume.
//!
//! A file is downloaded into `NAME.part`. When that file already holds bytes (an earlier
//! attempt or an earlier run was cut off), the request asks for the rest with
//! `Range: bytes=N-`; a `206 Partial Content` answer starting at byte `N` is appended, and a
//! plain `200` (a server that does not do ranges) starts the file over. A connection that
//! breaks midway is retried, from where it stopped, up to `retries` times. The address of a
//! partial file is kept in `NAME.part.url`, and a partial file from another address is
//! discarded rather than completed.

use super::{FetchError, FetchSettings, Progress};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Why an attempt stopped.
enum Stop {
    /// Worth another attempt: the connection failed or broke.
    Retry(String),
    /// Not worth another attempt.
    Fatal(FetchError),
}

/// Downloads `url` into `part` (resuming from its current length) until the server has sent
/// everything; returns the length of the file.
pub(super) fn download(
    url: &str,
    file_name: &str,
    part: &Path,
    settings: &FetchSettings,
    progress: &mut dyn Progress,
) -> Result<u64, FetchError> {
    // The address a partial file came from is kept next to it: bytes from another address
    // are never completed with these.
    let marker = PathBuf::from(format!("{}.url", part.display()));
    let write_error = |error| FetchError::Io { path: marker.clone(), error };
    if part_len(part)? > 0 && std::fs::read_to_string(&marker).ok().as_deref() != Some(url) {
        progress.note(&format!("{file_name}: a partial download from another address is discarded"));
        std::fs::remove_file(part).map_err(|error| FetchError::Io { path: part.to_path_buf(), error })?;
    }
    std::fs::write(&marker, url).map_err(write_error)?;
    let agent = agent(url, settings);
    let mut failures = 0;
    loop {
        match attempt(&agent, url, file_name, part, progress) {
            Ok(bytes) => {
                std::fs::remove_file(&marker).map_err(write_error)?;
                return Ok(bytes);
            }
            Err(Stop::Fatal(error)) => return Err(error),
            Err(Stop::Retry(why)) => {
                let have = part_len(part)?;
                if failures >= settings.retries {
                    return Err(FetchError::Interrupted {
                        url: url.to_string(),
                        part: part.to_path_buf(),
                        bytes: have,
                        attempts: failures + 1,
                        why,
                    });
                }
                failures += 1;
                progress.note(&format!(
                    "{file_name}: {why}; retrying from byte {have} (attempt {} of {})",
                    failures + 1,
                    settings.retries + 1
                ));
                std::thread::sleep(settings.retry_delay);
            }
        }
    }
}

/// An HTTP agent that reports statuses as answers (not errors), asks for the bytes as they
/// are stored (no transfer compression, which would break byte ranges), and goes to a
/// loopback address directly even when a proxy is configured.
fn agent(url: &str, settings: &FetchSettings) -> ureq::Agent {
    let loopback = ["http://127.0.0.1", "http://localhost", "http://[::1]"].iter().any(|p| url.starts_with(p));
    let mut config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .accept_encoding("identity")
        .user_agent(concat!("workbench-datasets/", env!("CARGO_PKG_VERSION")))
        .timeout_connect(Some(settings.read_timeout))
        .timeout_recv_response(Some(settings.read_timeout))
        .timeout_per_read(Some(settings.read_timeout));
    if loopback {
        config = config.proxy(None);
    }
    config.build().into()
}

fn part_len(part: &Path) -> Result<u64, FetchError> {
    match std::fs::metadata(part) {
        Ok(meta) => Ok(meta.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(error) => Err(FetchError::Io { path: part.to_path_buf(), error }),
    }
}

/// One request: asks for the bytes after those already in `part` and appends what comes.
fn attempt(
    agent: &ureq::Agent,
    url: &str,
    file_name: &str,
    part: &Path,
    progress: &mut dyn Progress,
) -> Result<u64, Stop> {
    let io = |error| Stop::Fatal(FetchError::Io { path: part.to_path_buf(), error });
    let have = part_len(part).map_err(Stop::Fatal)?;
    let mut request = agent.get(url);
    if have > 0 {
        request = request.header("Range", format!("bytes={have}-"));
    }
    let response = request.call().map_err(|error| classify(url, error))?;
    let status = response.status().as_u16();
    let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    let length = response.body().content_length();
    let start = match status {
        200 => {
            if have > 0 {
                progress.note(&format!("{file_name}: the server does not resume downloads; starting over"));
            }
            0
        }
        206 if have > 0 => match header("content-range").as_deref().and_then(parse_content_range) {
            Some((first, _)) if first == have => have,
            other => {
                // Bytes from elsewhere cannot be appended: start the file over.
                std::fs::remove_file(part).map_err(io)?;
                let got = other.map_or("no valid Content-Range".to_string(), |(first, _)| format!("byte {first}"));
                return Err(Stop::Retry(format!("the server resumed at {got} instead of byte {have}")));
            }
        },
        416 if have > 0 => {
            // Range not satisfiable: the part is as long as the file, or longer (then stale).
            let total =
                header("content-range").as_deref().and_then(|v| v.strip_prefix("bytes */")?.parse::<u64>().ok());
            if total == Some(have) {
                return Ok(have);
            }
            std::fs::remove_file(part).map_err(io)?;
            return Err(Stop::Retry("the partial file was longer than the file on the server".to_string()));
        }
        404 | 410 => return Err(Stop::Fatal(FetchError::NotFound { url: url.to_string() })),
        500..=599 => return Err(Stop::Retry(format!("the server answered HTTP {status}"))),
        _ => return Err(Stop::Fatal(FetchError::Status { url: url.to_string(), status })),
    };
    let total = length.map(|n| start + n);
    let mut file = if start == 0 {
        File::create(part).map_err(io)?
    } else {
        OpenOptions::new().append(true).open(part).map_err(io)?
    };
    progress.start(file_name, total, start);
    let mut body = response.into_body().into_reader();
    let mut buffer = vec![0u8; 1 << 16];
    let mut written = start;
    let outcome = loop {
        match body.read(&mut buffer) {
            Ok(0) => break Ok(()),
            Ok(n) => {
                if let Err(error) = file.write_all(&buffer[..n]) {
                    break Err(io(error));
                }
                written += n as u64;
                progress.advance(n as u64);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => break Err(Stop::Retry(format!("the connection broke after {written} bytes ({e})"))),
        }
    };
    progress.end();
    file.flush().map_err(io)?;
    outcome?;
    match total {
        Some(total) if written < total => {
            Err(Stop::Retry(format!("the server closed the connection after {written} of {total} bytes")))
        }
        _ => Ok(written),
    }
}

/// `bytes FIRST-LAST/TOTAL` (TOTAL may be `*`) as (FIRST, LAST).
fn parse_content_range(value: &str) -> Option<(u64, u64)> {
    let range = value.trim().strip_prefix("bytes ")?.split('/').next()?;
    let (first, last) = range.split_once('-')?;
    Some((first.trim().parse().ok()?, last.trim().parse().ok()?))
}

/// Connection-level failures are retried; a bad address or a TLS failure is not.
fn classify(url: &str, error: ureq::Error) -> Stop {
    match error {
        ureq::Error::Io(_)
        | ureq::Error::Timeout(_)
        | ureq::Error::ConnectionFailed
        | ureq::Error::Protocol(_)
        | ureq::Error::BodyStalled => Stop::Retry(format!("the request failed ({error})")),
        other => Stop::Fatal(FetchError::Network { url: url.to_string(), error: other.to_string() }),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_content_range;

    #[test]
    fn content_ranges_are_read() {
        assert_eq!(parse_content_range("bytes 100-199/200"), Some((100, 199)));
        assert_eq!(parse_content_range("bytes 0-0/*"), Some((0, 0)));
        assert_eq!(parse_content_range("bytes */200"), None);
        assert_eq!(parse_content_range("items 1-2/3"), None);
    }
}
