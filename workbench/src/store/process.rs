//! Liveness of worker processes on this host, and this host's identity, used by
//! [`Store::reap_orphans`](super::Store::reap_orphans): a pid means something only on the host
//! that issued it; and the user whose command stores a run.

/// The name this process's host goes by in run leases: `WORKBENCH_HOST` if set (to tell
/// machines apart that share a host name, or to simulate several in tests), else the host
/// name.
pub fn this_host() -> String {
    if let Some(name) = std::env::var("WORKBENCH_HOST").ok().filter(|h| !h.trim().is_empty()) {
        return name.trim().to_string();
    }
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into the buffer it is given.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match rc {
        0 if end > 0 => String::from_utf8_lossy(&buf[..end]).into_owned(),
        _ => "localhost".to_string(),
    }
}

/// The login name of the user running this process, recorded with each run it stores:
/// `USER` (or `LOGNAME`) as the login shell sets it, else the name the system's user database
/// gives the process's uid, else `uid N`.
pub fn user_name() -> String {
    for var in ["USER", "LOGNAME"] {
        if let Some(name) = std::env::var(var).ok().filter(|n| !n.trim().is_empty()) {
            return name.trim().to_string();
        }
    }
    // SAFETY: getuid cannot fail; getpwuid_r writes at most `buf.len()` bytes into the buffer
    // it is given and sets `found` to `entry` or to null, and `pw_name` points into `buf`.
    unsafe {
        let uid = libc::getuid();
        let mut entry: libc::passwd = std::mem::zeroed();
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let mut buf = [0 as libc::c_char; 1024];
        let rc = libc::getpwuid_r(uid, &mut entry, buf.as_mut_ptr(), buf.len(), &mut found);
        if rc == 0 && !found.is_null() && !entry.pw_name.is_null() {
            return std::ffi::CStr::from_ptr(entry.pw_name).to_string_lossy().into_owned();
        }
        format!("uid {uid}")
    }
}

/// When process `pid` started (clock ticks after boot, `/proc/<pid>/stat` field 22), if it
/// exists and this system says: with the pid it names one process even after the pid is
/// reused.
pub fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    // Fields after the command name start at field 3 (state); field 22 is the 20th of them.
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Whether a process with this id currently exists and is not a zombie.
///
/// On Linux this reads `/proc/<pid>/stat`: the process is alive when the file exists and the
/// state field (the first field after the parenthesised command name) is neither `Z` (zombie:
/// exited, waiting to be reaped by its parent) nor `X` (dead). A missing file means the process
/// is gone. If the file exists but cannot be read (for example `/proc` mounted with
/// `hidepid`), the process is assumed alive, so a run is never declared orphaned by mistake.
///
/// On other Unix systems it asks `kill -0 <pid>` (zombies count as alive there). Where neither
/// works it returns `true`, again erring on the side of not reaping.
///
/// Pid 0 is never a worker and gives `false`. Pids are recycled by the OS, so a long-dead
/// worker's pid may belong to an unrelated process; the check then says "alive".
pub fn process_alive(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    imp::alive(pid)
}

#[cfg(target_os = "linux")]
mod imp {
    use std::io::ErrorKind;

    pub(super) fn alive(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => match stat_state(&stat) {
                Some(state) => state != 'Z' && state != 'X',
                None => true,
            },
            Err(e) if e.kind() == ErrorKind::NotFound => false,
            // ESRCH while reading: the process vanished between open and read.
            Err(e) if e.raw_os_error() == Some(3) => false,
            Err(_) => true,
        }
    }

    /// State letter of a `/proc/<pid>/stat` line: `pid (comm) S ...`. The command name can
    /// contain spaces and parentheses, so look after the last `)`.
    fn stat_state(stat: &str) -> Option<char> {
        let after = &stat[stat.rfind(')')? + 1..];
        after.trim_start().chars().next()
    }

    #[cfg(test)]
    mod tests {
        use super::stat_state;

        #[test]
        fn parses_state_after_odd_command_names() {
            assert_eq!(stat_state("42 (a) b) Z 1 2 3"), Some('Z'));
            assert_eq!(stat_state("42 (worker) S 1"), Some('S'));
            assert_eq!(stat_state("garbage"), None);
        }
    }
}

#[cfg(all(unix, not(target_os = "linux")))]
mod imp {
    pub(super) fn alive(pid: u32) -> bool {
        match std::process::Command::new("kill")
            .args(["-0", &pid.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
        {
            Ok(status) => status.success(),
            Err(_) => true,
        }
    }
}

#[cfg(not(unix))]
mod imp {
    pub(super) fn alive(_pid: u32) -> bool {
        true
    }
}
