//! End to end: the real binary in tmux. Launch a tiny run from the Launch form, see it reach
//! `finished` on the Runs screen, and quit.

mod common;

use common::temp_dir;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

struct Tmux {
    session: String,
}

impl Tmux {
    fn start(dir: &Path) -> Tmux {
        let available = Command::new("tmux").arg("-V").output().is_ok_and(|o| o.status.success());
        assert!(available, "tmux is needed for this test: apt-get install tmux (.ci/run installs it)");
        let session = format!("wb-e2e-{}", std::process::id());
        let exe = env!("CARGO_BIN_EXE_workbench");
        // The exit code is written to a file so the test can tell a clean quit from a crash;
        // the TUI's settings file is the test's own, not the user's.
        let script = format!(
            "WORKBENCH_NO_BUILD=1 RAYON_NUM_THREADS=1 WORKBENCH_DB={db} WORKBENCH_TUI_CONFIG={config} {exe}; \
             echo $? > {exit}",
            db = dir.join("runs.db").display(),
            config = dir.join("tui.toml").display(),
            exit = dir.join("exit-code").display(),
        );
        let ok = Command::new("tmux")
            .args(["new-session", "-d", "-s", &session, "-x", "200", "-y", "100", "-c"])
            .arg(dir)
            .args(["env", "-u", "WORKBENCH_PLUGIN_PATH", "sh", "-c", &script])
            .status()
            .unwrap()
            .success();
        assert!(ok, "tmux could not start a session");
        Tmux { session }
    }

    fn screen(&self) -> String {
        let out = Command::new("tmux").args(["capture-pane", "-p", "-t", &self.session]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        for k in keys {
            Command::new("tmux").args(["send-keys", "-t", &self.session, k]).status().unwrap();
            std::thread::sleep(Duration::from_millis(60));
        }
    }

    /// Waits until the screen contains `text`; fails with the last screen after `secs`.
    fn wait_for(&self, text: &str, secs: u64) -> String {
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
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["kill-session", "-t", &self.session]).status();
    }
}

/// The form row of `key` (0 = the layer selector), read off the screen.
fn row_of(screen: &str, key: &str) -> usize {
    let lines: Vec<&str> = screen.lines().collect();
    let first = lines.iter().position(|l| l.starts_with("│layer ")).expect("the form is on screen");
    let at = lines
        .iter()
        .position(|l| l.starts_with(&format!("│{key} ")))
        .unwrap_or_else(|| panic!("no row {key}:\n{screen}"));
    at - first
}

#[test]
fn launch_a_tiny_run_from_the_form_and_watch_it_finish() {
    let dir = temp_dir("tui-e2e");
    // Plugins come from the workspace's build output, like every test's.
    let tmux = Tmux::start(&dir);
    tmux.wait_for("There are no runs in this database yet", 30);
    tmux.keys(&["n"]);
    let screen = tmux.wait_for("[ Launch ]", 10);
    assert!(screen.contains("hyperset") && screen.contains("sudoku"), "{screen}");

    let values = [
        ("layer.d", "16"),
        ("layer.heads", "2"),
        ("layer.iterations", "2"),
        ("task.train_puzzles", "32"),
        ("task.eval_puzzles", "8"),
        ("train.steps", "4"),
        ("train.eval_every", "2"),
        ("train.eval_examples", "8"),
        ("train.eval_depths", "2"),
    ];
    let mut cursor = 0;
    for (key, value) in values {
        let row = row_of(&screen, key);
        for _ in cursor..row {
            tmux.keys(&["j"]);
        }
        cursor = row;
        tmux.keys(&["Enter"]);
        tmux.keys(&["BSpace"; 12]);
        tmux.keys(&[value, "Enter"]);
        cursor += 1; // a kept value moves to the next row
    }
    // difficulty is a choice: the arrows cycle it.
    let row = row_of(&screen, "task.difficulty");
    let key = if row > cursor { "j" } else { "k" };
    for _ in 0..row.abs_diff(cursor) {
        tmux.keys(&[key]);
    }
    tmux.keys(&["l"]);
    let screen = tmux.wait_for("easy", 5);
    assert!(!screen.contains('✗'), "a value was refused:\n{screen}");

    tmux.keys(&["L"]);
    let screen = tmux.wait_for("finished", 120);
    assert!(screen.contains("hyperset") && screen.contains("4/4"), "{screen}");
    tmux.keys(&["q"]);
    let exit = dir.join("exit-code");
    let start = Instant::now();
    while !exit.is_file() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let code = std::fs::read_to_string(&exit).expect("the workbench exited");
    assert_eq!(code.trim(), "0", "the workbench exited with {code}");

    // The run is stored with the form's values.
    let (status, stdout, stderr) = common::run(common::workbench(&dir).args(["runs", "show", "1", "--json"]));
    assert_eq!(status, 0, "{stderr}");
    let shown: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let run = &shown["run"];
    assert_eq!(run["status"], "finished", "{stdout}");
    assert_eq!(run["total_steps"], 4, "{stdout}");
    let config = run["config"].to_string();
    assert!(config.contains("easy") && !config.contains("hard"), "{config}");
}
