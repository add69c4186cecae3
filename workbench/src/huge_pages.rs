//! Training processes keep their heap on transparent huge pages (2 MiB instead of 4 KiB).
//!
//! A training step streams through about a hundred megabytes of tensors kept for the backward
//! pass; on 4 KiB pages that is tens of thousands of pages, more than the processor's TLB
//! holds, so much of the step's memory traffic also walks page tables. Where the kernel gives
//! huge pages to the memory that asks for them (THP mode `madvise`, the default of Debian and
//! Ubuntu), glibc's allocator asks for them when the process starts with
//! `GLIBC_TUNABLES=glibc.malloc.hugetlb=1`. The dynamic loader reads that variable before
//! `main`, so a training process (`worker`, `bench`) started without it starts itself again
//! (exec: the same process id, arguments and environment) with the tunable added, then puts
//! the environment back as it was, so that the processes it starts (PyTorch's reference)
//! run as the user would run them. Measured: 2–7 % more samples a second across the layer
//! families (benchmark record (50)).
//!
//! Nothing is done where the mode is `always` (every heap already gets huge pages) or
//! `never`, outside Linux with glibc 2.35 or later, or when `GLIBC_TUNABLES` already names
//! `glibc.malloc.hugetlb`: `GLIBC_TUNABLES=glibc.malloc.hugetlb=0` keeps a training process on
//! 4 KiB pages.

use std::ffi::OsString;
use std::sync::OnceLock;

/// The glibc tunable that makes `malloc` ask for transparent huge pages.
pub const TUNABLE: &str = "glibc.malloc.hugetlb";
/// Set only across the restart: the `GLIBC_TUNABLES` the process was started with ("" for
/// none), to put back once the loader has read the tunable.
const BEFORE_VAR: &str = "WORKBENCH_GLIBC_TUNABLES_BEFORE";
/// Where the kernel says which THP mode it runs in: `always [madvise] never`.
const THP_MODE_FILE: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

/// The kernel's transparent huge page mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThpMode {
    /// Every anonymous mapping may get huge pages.
    Always,
    /// Only mappings that ask for them (`madvise`).
    Madvise,
    /// None.
    Never,
}

impl ThpMode {
    /// The bracketed word of the kernel's mode file (`always [madvise] never`).
    pub fn parse(text: &str) -> Option<ThpMode> {
        let chosen = text.split_whitespace().find(|w| w.starts_with('[') && w.ends_with(']'))?;
        match chosen.trim_matches(['[', ']']) {
            "always" => Some(ThpMode::Always),
            "madvise" => Some(ThpMode::Madvise),
            "never" => Some(ThpMode::Never),
            _ => None,
        }
    }

    /// This machine's mode, if the kernel says.
    pub fn current() -> Option<ThpMode> {
        ThpMode::parse(&std::fs::read_to_string(THP_MODE_FILE).ok()?)
    }

    fn name(self) -> &'static str {
        match self {
            ThpMode::Always => "always",
            ThpMode::Madvise => "madvise",
            ThpMode::Never => "never",
        }
    }
}

/// What a training process does about huge pages at its start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// Start again with these `GLIBC_TUNABLES`.
    Restart(String),
    /// Go on as started; the reason, for the bench report.
    AsStarted(&'static str),
}

/// The decision for a process in `mode` started with `tunables` (`GLIBC_TUNABLES`), its
/// glibc at version `glibc` (`(2, 36)`).
pub fn plan(mode: Option<ThpMode>, tunables: Option<&str>, glibc: Option<(u32, u32)>) -> Start {
    let tunables = tunables.unwrap_or("");
    if names_the_tunable(tunables) {
        return Start::AsStarted("GLIBC_TUNABLES sets glibc.malloc.hugetlb");
    }
    if mode == Some(ThpMode::Madvise) && glibc.is_none_or(|version| version < FIRST_GLIBC) {
        return Start::AsStarted("this glibc has no glibc.malloc.hugetlb (2.35 and later have)");
    }
    match mode {
        Some(ThpMode::Madvise) => Start::Restart(match tunables.is_empty() {
            true => format!("{TUNABLE}=1"),
            false => format!("{tunables}:{TUNABLE}=1"),
        }),
        Some(ThpMode::Always) => Start::AsStarted("the kernel gives every heap huge pages (THP mode always)"),
        Some(ThpMode::Never) => Start::AsStarted("the kernel gives no huge pages (THP mode never)"),
        None => Start::AsStarted("the kernel does not say its THP mode"),
    }
}

/// The first glibc with the tunable.
const FIRST_GLIBC: (u32, u32) = (2, 35);

/// The running glibc's version, `(major, minor)`.
fn glibc_version() -> Option<(u32, u32)> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: glibc returns a pointer to a static NUL-terminated string.
        let text = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) }.to_str().ok()?;
        let mut parts = text.split('.').map(|p| p.parse::<u32>().ok());
        Some((parts.next()??, parts.next()??))
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    None
}

/// Whether `tunables` (`name=value` pairs separated by `:`) sets [`TUNABLE`].
fn names_the_tunable(tunables: &str) -> bool {
    tunables.split(':').any(|pair| pair.split('=').next() == Some(TUNABLE))
}

/// What happened at start, for [`report`].
static STARTED: OnceLock<String> = OnceLock::new();

/// For a training process (`trains`): restarts it with the tunable where that gives it huge
/// pages (module doc), or, in the restarted process, checks that glibc took the tunable and
/// puts `GLIBC_TUNABLES` back. Call first in `main`, while the process has one thread.
/// Returns when the process goes on as it is; what happened is noted for [`report`], and a
/// process that could not be put on huge pages goes on on small ones.
pub fn start(trains: bool) {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) || !trains {
        return;
    }
    let tunables = std::env::var("GLIBC_TUNABLES").ok();
    if let Some(before) = std::env::var_os(BEFORE_VAR) {
        let starts = std::env::var(STARTS_VAR).ok().and_then(|n| n.parse::<u32>().ok()).unwrap_or(1);
        let note = match heap_advised() {
            Some(true) => format!("{TUNABLE}=1 set at start, THP mode madvise{}", again(starts)),
            Some(false) if starts < MAX_STARTS => {
                let failure = restart(tunables.as_deref().unwrap_or_default(), before.clone(), starts + 1);
                format!("not on huge pages: could not start again with {TUNABLE}=1 ({failure})")
            }
            Some(false) => format!("not on huge pages: glibc did not take {TUNABLE}=1 in {starts} starts"),
            None => format!("{TUNABLE}=1 set at start, THP mode madvise; the heap was not found to check"),
        };
        // The environment goes back to the user's. Single-threaded here (the caller's
        // contract).
        match before.is_empty() {
            true => std::env::remove_var("GLIBC_TUNABLES"),
            false => std::env::set_var("GLIBC_TUNABLES", before),
        }
        std::env::remove_var(BEFORE_VAR);
        std::env::remove_var(STARTS_VAR);
        let _ = STARTED.set(note);
        return;
    }
    match plan(ThpMode::current(), tunables.as_deref(), glibc_version()) {
        Start::AsStarted(reason) => {
            let _ = STARTED.set(reason.to_string());
        }
        Start::Restart(with) => {
            let failure = restart(&with, tunables.unwrap_or_default().into(), 1);
            let _ = STARTED.set(format!("not on huge pages: could not start again with {TUNABLE}=1 ({failure})"));
        }
    }
}

/// How many times a process starts at most to have glibc take the tunable. glibc 2.36
/// (Debian 12's) takes it in about half of the starts of the same program, at random from
/// start to start (measured with `strace`: in the other half it never asks for the huge page
/// size), so a start where it did not is made again.
const MAX_STARTS: u32 = 16;
/// The number of the start, across restarts.
const STARTS_VAR: &str = "WORKBENCH_HEAP_STARTS";

/// `" (start N)"` past the first.
fn again(starts: u32) -> String {
    match starts {
        1 => String::new(),
        n => format!(" (start {n})"),
    }
}

/// Whether the process's heap (`[heap]`) asks for huge pages (`hg` among its flags in
/// `/proc/self/smaps`): glibc advises it at its first growth, before `main`, when it took the
/// tunable. `None` without a heap or the file.
fn heap_advised() -> Option<bool> {
    heap_advised_in(&std::fs::read_to_string("/proc/self/smaps").ok()?)
}

/// [`heap_advised`] read off the text of an `smaps` file.
fn heap_advised_in(smaps: &str) -> Option<bool> {
    let mut in_heap = false;
    for line in smaps.lines() {
        if line.ends_with("[heap]") {
            in_heap = true;
        } else if in_heap {
            if let Some(flags) = line.strip_prefix("VmFlags:") {
                return Some(flags.split_whitespace().any(|f| f == "hg"));
            }
        }
    }
    None
}

/// Replaces the process by the same program and arguments with `GLIBC_TUNABLES=with`, as its
/// `starts`-th start, `before` the user's own value; returns why it could not.
#[cfg(unix)]
fn restart(with: &str, before: OsString, starts: u32) -> String {
    use std::os::unix::process::CommandExt;
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| OsString::from("workbench"));
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return format!("the program's path: {e}"),
    };
    let error = std::process::Command::new(exe)
        .arg0(arg0)
        .args(args)
        .env("GLIBC_TUNABLES", with)
        .env(BEFORE_VAR, before)
        .env(STARTS_VAR, starts.to_string())
        .exec();
    error.to_string()
}

#[cfg(not(unix))]
fn restart(_with: &str, _before: OsString, _starts: u32) -> String {
    "not a Unix system".into()
}

/// The process's resident memory and the part of it on transparent huge pages, in bytes,
/// from `/proc/self/smaps_rollup` (Linux).
pub fn resident() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    let kib = |key: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(key))?;
        line[key.len()..].trim().trim_end_matches("kB").trim().parse::<u64>().ok().map(|k| k * 1024)
    };
    Some((kib("Rss:")?, kib("AnonHugePages:")?))
}

/// The bench report's line on huge pages and its JSON, read now: how much of the resident
/// memory is on huge pages, the kernel's mode and what the process did at start.
pub fn report() -> (String, serde_json::Value) {
    let started = STARTED.get().map_or("not a training process", String::as_str);
    let resident = resident();
    let mb = |bytes: u64| bytes as f64 / 1e6;
    let json = serde_json::json!({
        "resident_mb": resident.map(|(rss, _)| mb(rss)),
        "huge_pages_mb": resident.map(|(_, huge)| mb(huge)),
        "thp_mode": ThpMode::current().map(ThpMode::name),
        "start": started,
    });
    let line = match resident {
        Some((rss, huge)) => {
            format!("memory {:.0} MB resident, {:.0} MB of it on 2 MiB pages ({started})", mb(rss), mb(huge))
        }
        None => format!("memory: not read (no /proc/self/smaps_rollup; {started})"),
    };
    (line, json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_is_the_bracketed_word() {
        assert_eq!(ThpMode::parse("always [madvise] never\n"), Some(ThpMode::Madvise));
        assert_eq!(ThpMode::parse("[always] madvise never"), Some(ThpMode::Always));
        assert_eq!(ThpMode::parse("always madvise [never]"), Some(ThpMode::Never));
        assert_eq!(ThpMode::parse("always madvise never"), None);
        assert_eq!(ThpMode::parse(""), None);
    }

    #[test]
    fn only_the_madvise_mode_restarts_and_the_users_tunables_are_kept() {
        let (madvise, glibc) = (Some(ThpMode::Madvise), Some((2, 36)));
        assert_eq!(plan(madvise, None, glibc), Start::Restart("glibc.malloc.hugetlb=1".into()));
        assert_eq!(plan(madvise, Some(""), glibc), Start::Restart("glibc.malloc.hugetlb=1".into()));
        assert_eq!(
            plan(madvise, Some("glibc.malloc.arena_max=2"), glibc),
            Start::Restart("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1".into())
        );
        for mode in [Some(ThpMode::Always), Some(ThpMode::Never), None] {
            assert!(matches!(plan(mode, None, glibc), Start::AsStarted(_)), "{mode:?}");
        }
        // A glibc before the tunable, or one that does not say its version: no restart.
        for old in [Some((2, 34)), Some((1, 99)), None] {
            assert!(matches!(plan(madvise, None, old), Start::AsStarted(r) if r.contains("2.35")), "{old:?}");
        }
        assert_eq!(plan(madvise, None, Some((3, 0))), Start::Restart("glibc.malloc.hugetlb=1".into()));
    }

    #[test]
    fn the_heap_asks_for_huge_pages_when_its_flags_say_hg() {
        let smaps = |heap_flags: &str| {
            format!(
                "5611-5612 r--p 00000000 fd:01 12 /usr/bin/workbench\nRss: 4 kB\nVmFlags: rd mr mw me hg\n\
                 5613-5620 rw-p 00000000 00:00 0                          [heap]\nRss: 8 kB\nVmFlags: {heap_flags}\n\
                 7f00-7f01 rw-p 00000000 00:00 0\nVmFlags: rd wr mr mw me ac hg\n"
            )
        };
        assert_eq!(heap_advised_in(&smaps("rd wr mr mw me ac hg")), Some(true));
        // Another mapping's `hg` is not the heap's.
        assert_eq!(heap_advised_in(&smaps("rd wr mr mw me ac")), Some(false));
        assert_eq!(heap_advised_in("7f00-7f01 rw-p 00000000 00:00 0\nVmFlags: rd wr hg\n"), None);
    }

    #[test]
    fn a_tunable_the_user_set_is_left_alone() {
        for set in ["glibc.malloc.hugetlb=0", "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"] {
            assert!(matches!(plan(Some(ThpMode::Madvise), Some(set), Some((2, 36))), Start::AsStarted(_)), "{set}");
        }
        // A longer name that only begins like it is another tunable.
        assert!(!names_the_tunable("glibc.malloc.hugetlbx=1"));
    }
}
