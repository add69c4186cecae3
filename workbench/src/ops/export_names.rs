//! Where exports go when no file is named (the TUI's, `workbench plot` without `--out`) and
//! what they are called: a configured folder (`--exports`), names that say what was exported
//! (`compare-runs-3-4-7.png`, `ablation-sweep-2.md`,
//! `heatmap-final-cell_acc-layers-by-iterations-sweep-2.png`, `sphere-run-3.png`), and a
//! numeric suffix instead of overwriting an earlier export.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// Run ids named in a file name before the rest are only counted.
const NAMED: usize = 6;

/// `3-4-7`, with consecutive ids as `1to5` and long lists cut (`1to5-9-12-and-4-more`).
pub fn id_list(ids: &[i64]) -> String {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let mut j = i;
        while j + 1 < ids.len() && ids[j + 1] == ids[j] + 1 {
            j += 1;
        }
        parts.push(if j > i + 1 { format!("{}to{}", ids[i], ids[j]) } else { ids[i].to_string() });
        // Two in a row stay two ids: `3-4` reads better than `3to4`.
        if j == i + 1 {
            parts.push(ids[j].to_string());
        }
        i = j + 1;
    }
    if parts.len() > NAMED {
        let more = parts.len() - NAMED;
        parts.truncate(NAMED);
        parts.push(format!("and-{more}-more"));
    }
    parts.join("-")
}

/// `compare-runs-3-4-7`: the file name (without extension) of a figure of `ids`.
pub fn compare_name(ids: &[i64]) -> String {
    format!("compare-runs-{}", id_list(ids))
}

/// `sphere-run-3`: the file name (without extension) of run `id`'s tokens on the sphere.
pub fn sphere_name(id: i64) -> String {
    format!("sphere-run-{id}")
}

/// `ablation-sweep-2` when every run is of one sweep, else `ablation-runs-3-4-7`.
pub fn ablation_name(ids: &[i64], sweeps: &[Option<i64>]) -> String {
    match sweeps.first() {
        Some(Some(s)) if sweeps.iter().all(|x| *x == Some(*s)) => format!("ablation-sweep-{s}"),
        _ => format!("ablation-runs-{}", id_list(ids)),
    }
}

/// `heatmap-final-cell_acc-layers-by-iterations-sweep-2`: a heatmap of `metric` over `rows`
/// × `columns` of the runs an ablation export of them would be named `ablation` after.
pub fn heatmap_name(metric: &str, rows: &str, columns: &str, ablation: &str) -> String {
    let slug = |t: &str| -> String {
        let s: String = t.chars().map(|c| if c.is_alphanumeric() || c == '_' { c } else { '-' }).collect();
        s.split('-').filter(|p| !p.is_empty()).collect::<Vec<_>>().join("-")
    };
    let runs = ablation.strip_prefix("ablation-").unwrap_or(ablation);
    format!("heatmap-{}-{}-by-{}-{runs}", slug(metric), slug(rows), slug(columns))
}

/// The file an export wanted at `wanted` is written to: its folder created, `-2`, `-3`...
/// added to the name when the file exists, the path absolute (the status bar shows it).
pub fn prepare(wanted: &Path) -> Result<PathBuf> {
    let dir = wanted.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| {
        format!("cannot create the exports folder {}; choose another with --exports DIR", dir.display())
    })?;
    let dir = std::path::absolute(dir).with_context(|| format!("cannot resolve {}", dir.display()))?;
    let stem = wanted.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "export".into());
    let ext = wanted.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
    let mut path = dir.join(format!("{stem}{ext}"));
    let mut n = 2;
    while path.exists() {
        path = dir.join(format!("{stem}-{n}{ext}"));
        n += 1;
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_say_what_was_exported() {
        assert_eq!(compare_name(&[7, 3, 4]), "compare-runs-3-4-7");
        assert_eq!(compare_name(&[1, 2, 3, 4, 9]), "compare-runs-1to4-9");
        assert_eq!(sphere_name(3), "sphere-run-3");
        assert_eq!(id_list(&[1, 3, 5, 7, 9, 11, 13, 15]), "1-3-5-7-9-11-and-2-more");
        assert_eq!(ablation_name(&[3, 4], &[Some(2), Some(2)]), "ablation-sweep-2");
        assert_eq!(ablation_name(&[3, 4], &[Some(2), None]), "ablation-runs-3-4");
        assert_eq!(ablation_name(&[3, 5], &[Some(2), Some(3)]), "ablation-runs-3-5");
        assert_eq!(
            heatmap_name("final cell_acc", "layer.layers", "iterations", "ablation-sweep-2"),
            "heatmap-final-cell_acc-layer-layers-by-iterations-sweep-2"
        );
        assert_eq!(heatmap_name("s/step", "a b", "c", "ablation-runs-3-4"), "heatmap-s-step-a-b-by-c-runs-3-4");
    }

    #[test]
    fn exports_create_their_folder_and_never_overwrite() {
        let tmp = tempfile::Builder::new().prefix("workbench-exports-").tempdir().unwrap();
        let root = tmp.path();
        let wanted = root.join("exports").join("compare-runs-1-2.png");
        let first = prepare(&wanted).unwrap();
        assert_eq!(first, wanted);
        assert!(first.parent().unwrap().is_dir());
        std::fs::write(&first, b"x").unwrap();
        let second = prepare(&wanted).unwrap();
        assert_eq!(second, root.join("exports").join("compare-runs-1-2-2.png"));
        std::fs::write(&second, b"x").unwrap();
        assert_eq!(prepare(&wanted).unwrap(), root.join("exports").join("compare-runs-1-2-3.png"));
    }
}
