//! The keys of each screen, for the `?` overlay and the footer.

use super::app::Screen;

/// Keys that work on every screen.
pub const GLOBAL: &[(&str, &str)] = &[
    ("1-6, Tab, Shift-Tab", "switch screen"),
    ("?", "this list (any key closes it)"),
    ("q, Ctrl-C", "quit (running workers go on)"),
    ("mouse", "click tabs, rows and headers; wheel scrolls"),
];

/// Keys of one screen.
pub fn keys(screen: Screen) -> &'static [(&'static str, &'static str)] {
    match screen {
        Screen::Runs => &[
            ("j/k, arrows, PgUp/PgDn, g/G", "move"),
            ("space", "mark the run for Compare / Ablation"),
            ("a", "mark all visible runs (again: unmark)"),
            ("/", "filter: status:S layer:L task:T plugin:P tag:T key=value word"),
            ("Esc", "clear the filter"),
            ("s / S", "sort by the next column / reverse (or click a header)"),
            ("Enter", "watch the run live (on an empty database: launch the default experiment)"),
            ("c / A", "compare / ablation of the marked runs"),
            ("n", "launch a new run"),
            ("e", "edit notes and tags"),
            ("d", "delete the marked runs (or the one under the cursor), after confirmation"),
            ("x", "stop a running run (it becomes interrupted), after confirmation"),
            ("r", "requeue an interrupted or failed run (it continues from its checkpoint)"),
            ("p / P", "pause or release a queued run / every queued run of its sweep"),
        ],
        Screen::Launch => &[
            ("j/k, arrows", "move between fields"),
            ("h/l, left/right", "other layer, task or choice"),
            ("Enter", "edit the field (Enter again keeps, Esc restores); on [Launch]: launch"),
            ("L", "launch from anywhere in the form"),
            ("seed", "several seeds, e.g. 0,1,2: one run each"),
            ("a,b,c in a field", "several values: one run per combination (a sweep)"),
            ("Esc", "back to Runs"),
        ],
        Screen::Live => {
            &[("j/k, arrows", "another run"), ("x", "stop the run, after confirmation"), ("Esc", "back to Runs")]
        }
        Screen::Compare => &[
            ("m", "smoothing of the step curves on / off"),
            ("w", "x axis: step or wall time"),
            ("l", "logarithmic y axis on / off"),
            ("p / P", "export the panels as PNG / SVG in the current directory"),
            ("Esc", "back to Runs"),
        ],
        Screen::Ablation => &[
            ("s / S", "sort by the next column / reverse"),
            ("M / T / C", "export Markdown / LaTeX / CSV in the current directory"),
            ("Esc", "back to Runs"),
        ],
        Screen::Plugins => &[],
    }
}
