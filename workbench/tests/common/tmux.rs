//! The real binary's terminal workbench in a tmux session: keys in, the screen out.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A `workbench` TUI running in its own tmux session, killed when dropped.
pub struct Tmux {
    session: String,
    /// Where the workbench's exit code is written when it quits.
    exit_file: PathBuf,
}

impl Tmux {
    /// Opens the TUI in `dir` on the store `runs.db` there, with its own settings file and the
    /// workspace's plugins; `vars` (`KEY=value`) are set after those, so they may replace them.
    pub fn start(dir: &Path, tag: &str, vars: &[String]) -> Tmux {
        Tmux::start_with(dir, tag, vars, "")
    }

    /// [`Tmux::start`] with the workbench's command line arguments `args` (`tui --jobs 2`).
    pub fn start_with(dir: &Path, tag: &str, vars: &[String], args: &str) -> Tmux {
        let available = Command::new("tmux").arg("-V").output().is_ok_and(|o| o.status.success());
        assert!(available, "tmux is needed for this test: apt-get install tmux (.ci/run installs it)");
        let session = format!("wb-{tag}-{}", std::process::id());
        let exit_file = dir.join("exit-code");
        let _ = std::fs::remove_file(&exit_file);
        // The exit code goes to a file, so the test can tell a clean quit from a crash. The
        // variables are given to `env`, not taken from this process: a tmux server already
        // running would start the session with its own environment.
        let script = format!("{} {args}; echo $? > {}", env!("CARGO_BIN_EXE_workbench"), exit_file.display());
        let defaults = [
            "WORKBENCH_NO_BUILD=1".to_string(),
            "RAYON_NUM_THREADS=1".to_string(),
            format!("WORKBENCH_DB={}", dir.join("runs.db").display()),
            format!("WORKBENCH_TUI_CONFIG={}", dir.join("tui.toml").display()),
        ];
        let ok = Command::new("tmux")
            .args(["new-session", "-d", "-s", &session, "-x", "200", "-y", "100", "-c"])
            .arg(dir)
            .args(["env", "-u", "WORKBENCH_PLUGIN_PATH"])
            .args(defaults.iter().chain(vars))
            .args(["sh", "-c", &script])
            .status()
            .unwrap()
            .success();
        assert!(ok, "tmux could not start a session");
        Tmux { session, exit_file }
    }

    pub fn screen(&self) -> String {
        let out = Command::new("tmux").args(["capture-pane", "-p", "-t", &self.session]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn keys(&self, keys: &[&str]) {
        for k in keys {
            Command::new("tmux").args(["send-keys", "-t", &self.session, k]).status().unwrap();
            std::thread::sleep(Duration::from_millis(60));
        }
    }

    /// Waits until the screen contains `text`; fails with the last screen after `secs`.
    pub fn wait_for(&self, text: &str, secs: u64) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if screen.contains(text) {
                return screen;
            }
            assert!(start.elapsed() < Duration::from_secs(secs), "`{text}` did not appear in {secs} s:\n{screen}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Presses `q` and returns the workbench's exit code (fails if it has not quit in 10 s).
    pub fn quit(&self) -> String {
        self.keys(&["q"]);
        let start = Instant::now();
        while !self.exit_file.is_file() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(100));
        }
        let code = std::fs::read_to_string(&self.exit_file);
        code.unwrap_or_else(|_| panic!("the workbench did not quit:\n{}", self.screen())).trim().to_string()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["kill-session", "-t", &self.session]).status();
    }
}
