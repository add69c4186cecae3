//! The Live screen's system panel: the worker's last sample of CPU, memory, threads, the
//! shards' waiting and GPU (metrics of split `sys`), with histories as sparklines.

use crate::store::MetricRow;
use crate::train::system::{self, format_bytes};
use ratatui::layout::Rect;
use ratatui::widgets::{Block, Borders, Paragraph};
use ratatui::Frame;

/// The panel's width on the Live screen.
pub const WIDTH: u16 = 32;

/// The system samples of one run, oldest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SystemView {
    pub cpu: Vec<f64>,
    pub rss: Vec<f64>,
    /// The last sample's resident memory on transparent huge pages, when not zero.
    pub huge_pages: Option<f64>,
    pub peak: Option<f64>,
    pub threads: Option<f64>,
    pub shard_wait: Vec<f64>,
    pub gpu_util: Vec<f64>,
    pub gpu_memory: Option<f64>,
}

impl SystemView {
    /// The samples among `metrics`; `None` when the run recorded none (runs from before
    /// system metrics, or one whose first sample is still to come).
    pub fn of(metrics: &[MetricRow]) -> Option<SystemView> {
        let mut rows: Vec<&MetricRow> =
            metrics.iter().filter(|m| m.split == system::SPLIT && m.value.is_finite()).collect();
        rows.sort_by(|a, b| a.step.cmp(&b.step).then(a.wall_time.total_cmp(&b.wall_time)));
        let series = |name: &str| rows.iter().filter(|m| m.name == name).map(|m| m.value).collect::<Vec<f64>>();
        let view = SystemView {
            cpu: series(system::CPU),
            rss: series(system::RSS),
            huge_pages: series(system::HUGE_PAGES).last().copied().filter(|&b| b > 0.0),
            peak: series(system::PEAK).into_iter().reduce(f64::max),
            threads: series(system::THREADS).last().copied(),
            shard_wait: series(system::SHARD_WAIT),
            gpu_util: series(system::GPU_UTIL),
            gpu_memory: series(system::GPU_MEMORY).last().copied(),
        };
        (view != SystemView::default()).then_some(view)
    }

    /// The panel's lines for an inner width of `width` columns.
    pub fn lines(&self, width: usize) -> Vec<String> {
        let with_history = |text: String, history: &[f64]| {
            let room = width.saturating_sub(text.chars().count() + 1);
            match room {
                0..=2 => text,
                _ => format!("{text} {}", sparkline(history, room)),
            }
        };
        let mut out = Vec::new();
        if let Some(cpu) = self.cpu.last() {
            out.push(with_history(format!("CPU  {cpu:>5.0} %"), &self.cpu));
        }
        if let Some(rss) = self.rss.last() {
            out.push(with_history(format!("RSS  {:>9}", format_bytes(*rss)), &self.rss));
        }
        if let Some(huge) = self.huge_pages {
            out.push(format!("huge {:>9}", format_bytes(huge)));
        }
        if let Some(peak) = self.peak {
            out.push(format!("peak {:>9}", format_bytes(peak)));
        }
        if let Some(threads) = self.threads {
            out.push(format!("threads {threads:.0}"));
        }
        // Time lost to the data-parallel step's slowest shard: high values say a sweep runs
        // sooner as one single-thread worker per core.
        if let Some(wait) = self.shard_wait.last() {
            out.push(with_history(format!("shard wait {wait:>3.0} %"), &self.shard_wait));
        }
        if let Some(util) = self.gpu_util.last() {
            out.push(with_history(format!("GPU  {util:>5.0} %"), &self.gpu_util));
        }
        if let Some(memory) = self.gpu_memory {
            out.push(format!("GPU mem {}", format_bytes(memory)));
        }
        out
    }
}

/// The last `width` values as block characters, scaled from 0 to their maximum.
pub fn sparkline(values: &[f64], width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let shown = &values[values.len().saturating_sub(width)..];
    let max = shown.iter().copied().fold(0.0, f64::max);
    shown
        .iter()
        .map(|v| match max > 0.0 {
            true => BARS[((v / max).clamp(0.0, 1.0) * 7.0).round() as usize],
            false => BARS[0],
        })
        .collect()
}

/// Draws the panel of `view` into `area`.
pub fn draw(frame: &mut Frame, area: Rect, view: &SystemView) {
    let lines = view.lines(area.width.saturating_sub(2) as usize).join("\n");
    frame.render_widget(Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title("system")), area);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(step: u64, name: &str, value: f64) -> MetricRow {
        MetricRow { step, split: "sys".into(), name: name.into(), value, wall_time: step as f64 }
    }

    #[test]
    fn the_view_keeps_the_history_in_step_order_and_the_largest_peak() {
        let mib = 1024.0 * 1024.0;
        let rows = [
            row(10, system::CPU, 200.0),
            row(5, system::CPU, 100.0),
            row(5, system::PEAK, 300.0 * mib),
            row(10, system::PEAK, 250.0 * mib),
            row(10, system::THREADS, 9.0),
            row(10, system::RSS, 200.0 * mib),
            row(10, system::HUGE_PAGES, 0.0),
            MetricRow { split: "eval".into(), ..row(10, "cell_acc", 0.5) },
        ];
        let view = SystemView::of(&rows).unwrap();
        assert_eq!(view.cpu, [100.0, 200.0]);
        assert_eq!((view.peak, view.threads), (Some(300.0 * mib), Some(9.0)));
        assert_eq!(
            view.lines(28),
            ["CPU    200 % ▅█", "RSS  200.0 MiB █", "peak 300.0 MiB", "threads 9"].map(String::from)
        );
        // Task metrics and the evaluation size alone are no samples.
        assert_eq!(SystemView::of(&rows[7..]), None);
        // Memory on huge pages has a line when there is some.
        let huge = [row(10, system::RSS, 200.0 * mib), row(10, system::HUGE_PAGES, 150.0 * mib)];
        assert_eq!(SystemView::of(&huge).unwrap().lines(14), ["RSS  200.0 MiB", "huge 150.0 MiB"].map(String::from));
        assert_eq!(SystemView::of(&[row(4, system::EVAL_EXAMPLES, 256.0)]), None);
    }

    /// GPU samples (recorded with NVML only) get their own lines.
    #[test]
    fn gpu_samples_are_shown_when_present() {
        let gib = 1024.0 * 1024.0 * 1024.0;
        let rows =
            [row(5, system::GPU_UTIL, 40.0), row(10, system::GPU_UTIL, 80.0), row(10, system::GPU_MEMORY, 3.0 * gib)];
        let view = SystemView::of(&rows).unwrap();
        assert_eq!(view.lines(20), ["GPU     80 % ▅█", "GPU mem 3.00 GiB"].map(String::from));
    }

    /// Runs with several shards record how long they waited for the slowest one.
    #[test]
    fn the_shards_waiting_gets_a_line_with_its_history() {
        let rows = [row(5, system::SHARD_WAIT, 4.0), row(10, system::SHARD_WAIT, 8.0), row(10, system::THREADS, 3.0)];
        let view = SystemView::of(&rows).unwrap();
        assert_eq!(view.shard_wait, [4.0, 8.0]);
        assert_eq!(view.lines(20), ["threads 3", "shard wait   8 % ▅█"].map(String::from));
    }

    #[test]
    fn sparklines_scale_to_the_maximum_and_keep_the_latest() {
        assert_eq!(sparkline(&[0.0, 50.0, 100.0], 10), "▁▅█");
        assert_eq!(sparkline(&[100.0, 0.0, 0.0, 7.0], 2), "▁█");
        assert_eq!(sparkline(&[0.0, 0.0], 5), "▁▁");
    }
}
