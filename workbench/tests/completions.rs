//! `workbench completions SHELL` and `workbench man` describe the real command line.

use crate::common;

use common::{run, temp_dir, workbench};

#[test]
fn completions_name_the_commands_and_global_options_for_each_shell() {
    let dir = temp_dir("completions");
    for shell in ["bash", "zsh", "fish"] {
        let (code, out, err) = run(workbench(&dir).args(["completions", shell]));
        assert_eq!(code, 0, "{shell}: {err}");
        for word in ["runs", "sweep", "db", "verbose"] {
            assert!(out.contains(word), "{shell}: `{word}` missing from the script");
        }
        assert!(!dir.join("runs.db").exists(), "completions opened the store");
    }
    let (code, _, err) = run(workbench(&dir).args(["completions", "tcsh"]));
    assert_eq!(code, 2, "an unknown shell is a usage error: {err}");
    assert!(err.contains("bash"), "the shells are listed: {err}");
}

#[test]
fn the_man_page_is_roff_with_the_commands() {
    let dir = temp_dir("man");
    let (code, out, err) = run(workbench(&dir).args(["man"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(".TH workbench 1"), "{}", &out[..out.len().min(300)]);
    assert!(out.contains("train") && out.contains("completions"), "the commands are listed");
    let pages = dir.join("man1");
    let (code, _, err) = run(workbench(&dir).args(["man", "--out", pages.to_str().unwrap()]));
    assert_eq!(code, 0, "{err}");
    let train = std::fs::read_to_string(pages.join("workbench-train.1")).expect("a page per command");
    assert!(train.contains(".TH workbench-train 1"), "{train}");
    assert!(pages.join("workbench.1").is_file());
}

/// A command's help lists its own options first and the options of every command apart,
/// under their own heading.
#[test]
fn help_keeps_a_command_s_options_apart_from_the_global_ones() {
    let dir = temp_dir("help-headings");
    let (code, out, err) = run(workbench(&dir).args(["runs", "diff", "--help"]));
    assert_eq!(code, 0, "{err}");
    let global = out.find("Global options:").expect("a heading for the global options");
    let own = |option: &str| out.find(option).unwrap_or_else(|| panic!("{option} missing: {out}"));
    assert!(own("--filter") < global && own("--json") < global, "{out}");
    assert!(own("--db <DB>") > global && own("--exports") > global && own("--quiet") > global, "{out}");
}
