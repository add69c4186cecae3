//! End to end: the real binary in tmux. Launch a tiny run from the Launch form, see it reach
//! `finished` on the Runs screen, score its checkpoint again with `E`, and quit.

use crate::common;

use common::temp_dir;
use common::tmux::Tmux;

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
    let tmux = Tmux::start(&dir, "e2e", &[]);
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
    // E queues an evaluation of its checkpoint, deeper; the TUI's queue runs it.
    tmux.keys(&["E"]);
    tmux.wait_for("Evaluate run 1's checkpoint again", 5);
    tmux.keys(&["eval_depths=4", "Enter"]);
    tmux.wait_for("run 2 finished (best cell_acc", 60);
    let code = tmux.quit();
    assert_eq!(code, "0", "the workbench exited with {code}");

    // The run is stored with the form's values.
    let (status, stdout, stderr) = common::run(common::workbench(&dir).args(["runs", "show", "1", "--json"]));
    assert_eq!(status, 0, "{stderr}");
    let shown: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let run = &shown["run"];
    assert_eq!(run["status"], "finished", "{stdout}");
    assert_eq!(run["total_steps"], 4, "{stdout}");
    let config = run["config"].to_string();
    assert!(config.contains("easy") && !config.contains("hard"), "{config}");
    let (_, stdout, _) = common::run(common::workbench(&dir).args(["runs", "show", "2", "--json"]));
    let shown: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (shown["run"]["status"].clone(), shown["run"]["tags"].clone()),
        ("finished".into(), serde_json::json!(["eval"]))
    );
    assert_eq!(shown["run"]["config"]["train"]["eval_depths"], "4", "{stdout}");
}

/// A store several researchers share: the TUI's queue starts its user's runs and says so once
/// as it opens, naming whose queued runs it leaves; `tui --all-users` starts everyone's.
#[test]
fn the_tui_s_queue_starts_its_user_s_runs_unless_told_all_users() {
    let dir = temp_dir("tui-users");
    let mut args = vec!["sweep", "--layer", "hyperset", "--task", "sudoku", "--detach", "d=16", "heads=2"];
    args.extend(["iterations=2", "difficulty=easy", "task.train_puzzles=32", "task.eval_puzzles=8"]);
    args.extend(["steps=2", "eval_every=2", "eval_examples=8", "eval_depths="]);
    let (code, _, err) = common::run(common::workbench(&dir).env("USER", "grace-elsewhere").args(&args));
    assert_eq!(code, 0, "{err}");
    let tmux = Tmux::start(&dir, "users", &[]);
    tmux.wait_for("the queue starts your runs; 1 queued run is other users' (grace-elsewhere)", 30);
    std::thread::sleep(std::time::Duration::from_secs(2));
    let screen = tmux.screen();
    let row = screen.lines().find(|l| l.contains("hyperset sudoku")).expect("run 1's row");
    assert_eq!(row.split_whitespace().nth(1), Some("queued"), "not this user's to start:\n{screen}");
    assert_eq!(tmux.quit(), "0");
    drop(tmux);
    let tmux = Tmux::start_with(&dir, "all-users", &[], "tui --all-users");
    tmux.wait_for("· all users", 30);
    tmux.wait_for("run 1 finished", 120);
    assert_eq!(tmux.quit(), "0");
}
