//! The default experiment offered on an empty database, defined once: the welcome screen's
//! description and the status line after launching it are derived from this definition.

/// Layers, task and overrides of an experiment launched as one run per layer.
pub struct Experiment {
    pub layers: &'static [&'static str],
    pub task: &'static str,
    pub overrides: &'static [&'static str],
}

/// Hyper-SET against the Transformer on generated easy Sudoku, sized to learn within minutes
/// on a CPU (the README's "what to expect" settings).
pub const DEFAULT_EXPERIMENT: Experiment = Experiment {
    layers: &["hyperset", "transformer"],
    task: "sudoku",
    overrides: &[
        "d=64",
        "heads=4",
        "iterations=2",
        "layer.init_std=0.15",
        "positions=row_col_box",
        "difficulty=easy",
        "task.train_puzzles=2000",
        "task.eval_puzzles=128",
        "steps=300",
        "lr=3e-3",
        "warmup=20",
        "eval_every=50",
        "eval_depths=4",
    ],
};

impl Experiment {
    /// The value of override `key` (`d`, or a scoped `task.train_puzzles`).
    pub fn value(&self, key: &str) -> Option<&'static str> {
        self.overrides.iter().find_map(|o| {
            let (k, v) = o.split_once('=')?;
            (k == key || k.rsplit('.').next() == Some(key)).then_some(v)
        })
    }

    /// The overrides as owned strings, as `ops::launch::resolve_run` takes them.
    pub fn override_list(&self) -> Vec<String> {
        self.overrides.iter().map(|s| s.to_string()).collect()
    }

    /// `hyperset vs transformer on sudoku (difficulty=easy)`.
    pub fn what(&self) -> String {
        let difficulty = self.value("difficulty").map(|d| format!(" (difficulty={d})")).unwrap_or_default();
        format!("{} on {}{difficulty}", self.layers.join(" vs "), self.task)
    }

    /// `d=64, heads=4, iterations=2, 300 steps each`.
    pub fn size(&self) -> String {
        let mut parts: Vec<String> =
            ["d", "heads", "iterations"].iter().filter_map(|k| Some(format!("{k}={}", self.value(k)?))).collect();
        if let Some(steps) = self.value("steps") {
            parts.push(format!("{steps} steps each"));
        }
        parts.join(", ")
    }

    /// Its declaration, stored with its sweep: the layers, the task and one value per key.
    pub fn grid(&self) -> crate::ops::grid::Spec {
        let axes = self
            .overrides
            .iter()
            .filter_map(|o| o.split_once('='))
            .map(|(key, value)| crate::ops::grid::Axis { key: key.to_string(), values: vec![value.to_string()] })
            .collect();
        crate::ops::grid::Spec {
            layers: self.layers.iter().map(|l| l.to_string()).collect(),
            task: self.task.to_string(),
            axes,
        }
    }

    /// The name of the sweep it queues, so the runs list says where it came from.
    pub fn sweep_name(&self) -> String {
        format!("welcome experiment: {} ({})", self.what(), self.size())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_comes_from_the_overrides() {
        assert_eq!(DEFAULT_EXPERIMENT.what(), "hyperset vs transformer on sudoku (difficulty=easy)");
        assert_eq!(DEFAULT_EXPERIMENT.size(), "d=64, heads=4, iterations=2, 300 steps each");
        assert_eq!(DEFAULT_EXPERIMENT.value("train_puzzles"), Some("2000"));
        assert_eq!(
            DEFAULT_EXPERIMENT.sweep_name(),
            "welcome experiment: hyperset vs transformer on sudoku (difficulty=easy) \
             (d=64, heads=4, iterations=2, 300 steps each)"
        );
    }
}
