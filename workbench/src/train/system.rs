//! System metrics of a worker process, stored as metrics of split [`SPLIT`] every [`EVERY`]
//! and at the end of a run: process CPU (100 % = one core busy), resident and peak memory,
//! the part of it on transparent huge pages, threads, the time data-parallel shards wait for
//! each other, and with the `cuda` feature the GPU's utilisation and memory (NVML).
//!
//! Read from `/proc/self` (Linux); elsewhere a sample is empty and nothing is stored.

use std::time::{Duration, Instant};

/// The split of system metrics: never a task metric, so tables and panels of task metrics
/// (which read `train` and `eval`) leave it out.
pub const SPLIT: &str = "sys";
/// How often a worker samples.
pub const EVERY: Duration = Duration::from_secs(5);

/// Metric names (split [`SPLIT`]).
pub const CPU: &str = "cpu_percent";
pub const RSS: &str = "rss_bytes";
pub const PEAK: &str = "peak_rss_bytes";
pub const THREADS: &str = "threads";
/// The part of the resident memory on transparent huge pages (module `huge_pages`).
pub const HUGE_PAGES: &str = "huge_pages_bytes";
/// The share of the shards' threads' time spent waiting for each step's slowest shard since
/// the previous sample (runs whose batches are split over several threads only).
pub const SHARD_WAIT: &str = "shard_wait_percent";
pub const GPU_UTIL: &str = "gpu_util_percent";
pub const GPU_MEMORY: &str = "gpu_memory_bytes";
/// Examples scored by each evaluation: recorded by the worker with the evaluation, not
/// sampled, and kept in this split so it is never taken for a task metric.
pub const EVAL_EXAMPLES: &str = "eval_examples";

/// What `/proc/self/status` says about memory and threads.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Status {
    pub rss_bytes: Option<u64>,
    pub peak_bytes: Option<u64>,
    pub threads: Option<u64>,
}

/// Parses `VmRSS`, `VmHWM` (kB) and `Threads` out of `/proc/<pid>/status`.
pub fn parse_status(text: &str) -> Status {
    let mut status = Status::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else { continue };
        let number = value.split_whitespace().next().and_then(|v| v.parse::<u64>().ok());
        match key {
            "VmRSS" => status.rss_bytes = number.map(|kb| kb * 1024),
            "VmHWM" => status.peak_bytes = number.map(|kb| kb * 1024),
            "Threads" => status.threads = number,
            _ => {}
        }
    }
    status
}

/// User plus system CPU time in clock ticks, fields 14 and 15 of `/proc/<pid>/stat`. The
/// fields are counted after the command name's closing parenthesis, since the name itself
/// may hold spaces and parentheses.
pub fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (the state).
    let utime: u64 = fields.get(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.get(15 - 3)?.parse().ok()?;
    Some(utime + stime)
}

/// CPU use over an interval, in percent of one core.
pub fn cpu_percent(ticks: u64, ticks_per_second: f64, wall: Duration) -> Option<f64> {
    let wall = wall.as_secs_f64();
    (wall > 0.0 && ticks_per_second > 0.0).then(|| ticks as f64 / ticks_per_second / wall * 100.0)
}

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf reads a constant of the system and has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

fn cpu_ticks_now() -> Option<u64> {
    parse_cpu_ticks(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

/// Takes the samples of one worker.
pub struct Sampler {
    /// CPU ticks and time of the previous sample, for the CPU use since.
    last_cpu: Option<(u64, Instant)>,
    last_sample: Instant,
    ticks_per_second: f64,
    gpu: Option<gpu::Gpu>,
}

impl Sampler {
    /// A sampler for a worker on `device` (`cpu`, `cuda:N`); the first sample's CPU use
    /// counts from now.
    pub fn new(device: &str) -> Sampler {
        Sampler {
            last_cpu: cpu_ticks_now().map(|t| (t, Instant::now())),
            last_sample: Instant::now(),
            ticks_per_second: ticks_per_second(),
            gpu: gpu::Gpu::open(device),
        }
    }

    /// Whether [`EVERY`] has passed since the last sample.
    pub fn due(&self) -> bool {
        self.last_sample.elapsed() >= EVERY
    }

    /// The metrics now, as `(name, value)`; the ones that cannot be read are left out.
    pub fn sample(&mut self) -> Vec<(&'static str, f64)> {
        self.last_sample = Instant::now();
        let mut out = Vec::new();
        if let (Some(ticks), Some((last, at))) = (cpu_ticks_now(), self.last_cpu) {
            let now = Instant::now();
            if let Some(p) = cpu_percent(ticks.saturating_sub(last), self.ticks_per_second, now - at) {
                out.push((CPU, p));
            }
            self.last_cpu = Some((ticks, now));
        }
        let status = std::fs::read_to_string("/proc/self/status").map(|t| parse_status(&t)).unwrap_or_default();
        for (name, value) in [(RSS, status.rss_bytes), (PEAK, status.peak_bytes), (THREADS, status.threads)] {
            if let Some(v) = value {
                out.push((name, v as f64));
            }
        }
        if let Some((_, huge)) = crate::huge_pages::resident() {
            out.push((HUGE_PAGES, huge as f64));
        }
        if let Some(gpu) = &self.gpu {
            out.extend(gpu.sample());
        }
        out
    }
}

/// Bytes as people read them: `512 KiB`, `3.2 MiB`, `1.50 GiB`.
pub fn format_bytes(bytes: f64) -> String {
    const KIB: f64 = 1024.0;
    if bytes >= KIB * KIB * KIB {
        format!("{:.2} GiB", bytes / (KIB * KIB * KIB))
    } else if bytes >= KIB * KIB {
        format!("{:.1} MiB", bytes / (KIB * KIB))
    } else {
        format!("{:.0} KiB", bytes / KIB)
    }
}

/// The GPU through NVML, with the `cuda` (or `nvml`) feature.
#[cfg(feature = "nvml")]
mod gpu {
    use nvml_wrapper::Nvml;

    pub struct Gpu {
        nvml: Nvml,
        index: u32,
    }

    impl Gpu {
        /// NVML for device `cuda:N` (`cuda` is device 0); `None` on the CPU or when NVML
        /// cannot start (no driver).
        pub fn open(device: &str) -> Option<Gpu> {
            let index = match device.strip_prefix("cuda") {
                Some("") => 0,
                Some(rest) => rest.strip_prefix(':')?.parse().ok()?,
                None => return None,
            };
            let nvml = Nvml::init().ok()?;
            nvml.device_by_index(index).ok()?;
            Some(Gpu { nvml, index })
        }

        /// Utilisation (percent of the last sample period) and memory in use on the device
        /// (by every process on it, as NVML reports).
        pub fn sample(&self) -> Vec<(&'static str, f64)> {
            let Ok(device) = self.nvml.device_by_index(self.index) else { return vec![] };
            let mut out = Vec::new();
            if let Ok(u) = device.utilization_rates() {
                out.push((super::GPU_UTIL, f64::from(u.gpu)));
            }
            if let Ok(m) = device.memory_info() {
                out.push((super::GPU_MEMORY, m.used as f64));
            }
            out
        }
    }
}

/// Without NVML there is no GPU to ask.
#[cfg(not(feature = "nvml"))]
mod gpu {
    pub struct Gpu;

    impl Gpu {
        pub fn open(_device: &str) -> Option<Gpu> {
            None
        }

        pub fn sample(&self) -> Vec<(&'static str, f64)> {
            vec![]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_gives_bytes_and_threads() {
        let text = "Name:\tworkbench\nVmPeak:\t  900000 kB\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t17\n";
        let s = parse_status(text);
        assert_eq!(s, Status { rss_bytes: Some(100 << 20), peak_bytes: Some(200 << 20), threads: Some(17) });
        assert_eq!(parse_status("garbage"), Status::default());
    }

    #[test]
    fn cpu_ticks_are_counted_after_the_command_name() {
        // A command name with spaces and a parenthesis; utime 250, stime 50.
        let stat = "4242 (a b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 100 1000 10";
        assert_eq!(parse_cpu_ticks(stat), Some(300));
        assert_eq!(parse_cpu_ticks("4242 (short) S 1"), None);
        // 300 ticks at 100 per second over 2 s: 1.5 cores.
        assert_eq!(cpu_percent(300, 100.0, Duration::from_secs(2)), Some(150.0));
        assert_eq!(cpu_percent(300, 100.0, Duration::ZERO), None);
    }

    #[test]
    fn a_sample_of_this_process_reads_its_memory() {
        let mut sampler = Sampler::new("cpu");
        // Burn some CPU so the first interval has some.
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let sample = sampler.sample();
        if !std::path::Path::new("/proc/self/status").exists() {
            return assert!(sample.is_empty());
        }
        let get = |n: &str| sample.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
        let (rss, peak) = (get(RSS).unwrap(), get(PEAK).unwrap());
        assert!(rss > 1e6 && peak >= rss, "{sample:?}");
        assert!(get(THREADS).unwrap() >= 1.0);
        assert!(get(CPU).unwrap() >= 0.0);
        assert!(get(GPU_UTIL).is_none(), "no GPU on the CPU device");
    }

    #[test]
    fn bytes_read_as_binary_units() {
        assert_eq!(format_bytes(512.0 * 1024.0), "512 KiB");
        assert_eq!(format_bytes(3.5 * 1024.0 * 1024.0), "3.5 MiB");
        assert_eq!(format_bytes(1.5 * 1024.0 * 1024.0 * 1024.0), "1.50 GiB");
    }
}
