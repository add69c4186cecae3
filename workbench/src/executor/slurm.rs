//! The Slurm executor: one batch job per run (`sbatch`), each running `workbench worker --run
//! N` against the shared store; job states read back with `squeue` and, once a job has left
//! the queue, `sacct` (or `scontrol show job` where accounting is off); `scancel` to stop.
//!
//! The batch script is written into the run's artifacts (`runs/<id>/slurm.sh`) before it is
//! submitted, so `sbatch runs/<id>/slurm.sh` repeats the submission by hand. A store URL that
//! holds a password is not written into it: the job reads `WORKBENCH_DB` from the environment
//! `sbatch` passes on (its default, `--export=ALL`).

use anyhow::{bail, Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::store::StoreLocation;

/// Options passed through to `sbatch` as `--key=value`, from `--slurm
/// partition=gpu,time=04:00:00,gres=gpu:1,cpus-per-task=8,mem=32G`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlurmOptions {
    pub options: BTreeMap<String, String>,
}

impl SlurmOptions {
    /// The CPUs each job asks for: `cpus-per-task`, else Slurm's default of one.
    pub fn cpus_per_task(&self) -> usize {
        self.options.get("cpus-per-task").and_then(|n| n.trim().parse().ok()).filter(|&n| n > 0).unwrap_or(1)
    }

    /// The options as `--slurm` takes them: `key=value,key=value` (empty when there are none).
    pub fn to_arg(&self) -> String {
        let options: Vec<String> = self.options.iter().map(|(k, v)| format!("{k}={v}")).collect();
        options.join(",")
    }

    /// Parses `key=value[,key=value...]`; keys are sbatch long options without the dashes.
    pub fn parse(text: &str) -> Result<SlurmOptions> {
        let mut options = BTreeMap::new();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((key, value)) = item.split_once('=') else {
                bail!("--slurm item `{item}` is not key=value; e.g. --slurm partition=gpu,time=04:00:00,gres=gpu:1")
            };
            let key = key.trim().trim_start_matches("--");
            if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                bail!(
                    "--slurm key `{key}` is not an sbatch option name (letters, digits and dashes, e.g. cpus-per-task)"
                );
            }
            if matches!(key, "output" | "error" | "job-name" | "parsable" | "wrap") {
                bail!("--slurm {key}=... is set by the workbench (job name and log go with the run's artifacts)");
            }
            let value = value.trim();
            if value.contains(['\n', '\'']) {
                bail!("--slurm {key}: the value may not contain quotes or line breaks");
            }
            options.insert(key.to_string(), value.to_string());
        }
        Ok(SlurmOptions { options })
    }

    /// Whether the options ask for GPUs themselves (`gres`, `gpus`, ...).
    pub fn asks_gpus(&self) -> bool {
        ["gres", "gpus", "gpus-per-node", "gpus-per-task"].iter().any(|k| self.options.contains_key(*k))
    }

    /// The options for a run on `device`: a run asking for CUDA gets one GPU unless the
    /// options already ask for GPUs.
    pub fn for_device(&self, device: &str) -> BTreeMap<String, String> {
        let mut options = self.options.clone();
        if device.trim().starts_with("cuda") && !self.asks_gpus() {
            options.insert("gres".into(), "gpu:1".into());
        }
        options
    }
}

/// What a batch script needs to know about the run.
pub struct JobSpec<'a> {
    pub run_id: i64,
    pub device: &'a str,
    pub exe: &'a Path,
    pub location: &'a StoreLocation,
    pub artifacts: &'a Path,
    pub plugin_dirs: &'a [PathBuf],
    pub options: &'a SlurmOptions,
    /// The submission's token, recorded with the run before `sbatch` (see
    /// [`Store::begin_submission`](crate::store::Store::begin_submission)).
    pub submission: &'a str,
}

/// Single-quotes `text` for the shell.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Whether a store location can be written into a file (no password in it).
fn printable(location: &StoreLocation) -> bool {
    match location {
        StoreLocation::Sqlite(_) => true,
        StoreLocation::Postgres(url) => location.to_string() == *url,
    }
}

/// The sbatch options of a run's job on `device`, past its name and log: the workbench's own
/// and the user's (`--slurm`).
fn job_options(options: &SlurmOptions, device: &str) -> Vec<String> {
    // A preempted or requeued job starts again and continues from the run's checkpoint.
    let mut list = vec!["--requeue".to_string()];
    // Warned before its time limit, the worker stops with a checkpoint and requeues its job,
    // which continues the run (`exec` in the script makes the worker the batch shell that
    // `B:` names).
    if !options.options.contains_key("signal") {
        list.push(format!("--signal=B:USR1@{}", TIME_LIMIT_WARNING.as_secs()));
    }
    list.extend(options.for_device(device).into_iter().map(|(key, value)| format!("--{key}={value}")));
    list
}

/// Asks Slurm whether it would take the job of a run on `device` (`sbatch --test-only`: the
/// job is checked and placed in theory, nothing is submitted), so that options it can never
/// take (an unknown option, partition or GRES, a size no node has, a malformed time) are
/// refused before a run is stored, instead of failing every run of a sweep at `sbatch`. A
/// refusal in the accounting policy's words passes: it may be a submit limit, which the queue
/// waits out.
pub fn would_take(options: &SlurmOptions, device: &str) -> Result<()> {
    let asked = job_options(options, device);
    let output = Command::new("sbatch")
        .arg("--test-only")
        .args(&asked)
        .args(["--job-name=workbench-check", "--wrap=true"])
        .output()
        .map_err(|e| missing_tool("sbatch", e))?;
    if output.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&output.stderr);
    let said: Vec<&str> = said.lines().map(str::trim).filter(|line| !line.is_empty()).collect();
    let said = said.join("; ");
    if refused_by_policy(&said) {
        return Ok(());
    }
    // sbatch's words first: a narrow status line shows the reason before it is cut.
    bail!(
        "Slurm would not take the runs' jobs: {} (`sbatch --test-only {}`); change --slurm (or \
         WORKBENCH_SLURM); nothing was stored or submitted",
        if said.is_empty() { format!("exit status {}", output.status) } else { said },
        asked.join(" ")
    )
}

/// The batch script of a run.
pub fn batch_script(spec: &JobSpec<'_>) -> String {
    let id = spec.run_id;
    let log = spec.artifacts.join("runs").join(id.to_string()).join("slurm-%j.log");
    let mut s = String::from("#!/bin/bash\n");
    s.push_str(&format!("#SBATCH --job-name=workbench-run-{id}\n"));
    s.push_str(&format!("#SBATCH --output={}\n", log.display()));
    for option in job_options(spec.options, spec.device) {
        s.push_str(&format!("#SBATCH {option}\n"));
    }
    s.push_str(&format!("# Run {id} of the workbench store {}.\n", spec.location));
    let db = if printable(spec.location) {
        quote(&spec.location.to_arg().to_string_lossy())
    } else {
        s.push_str("# The store's URL holds a password, so it is not written here: the job reads it from\n");
        s.push_str("# WORKBENCH_DB, which sbatch passes on from the submitting shell.\n");
        "\"$WORKBENCH_DB\"".to_string()
    };
    let mut command = vec![
        quote(&spec.exe.to_string_lossy()),
        "--db".into(),
        db,
        "--artifacts".into(),
        quote(&spec.artifacts.to_string_lossy()),
    ];
    for dir in spec.plugin_dirs {
        command.push("--plugin-dir".into());
        command.push(quote(&dir.to_string_lossy()));
    }
    command.extend(["worker".into(), "--run".into(), id.to_string(), "--resume".into()]);
    command.extend(["--submission".into(), quote(spec.submission)]);
    s.push_str(&format!("exec {}\n", command.join(" ")));
    s
}

/// How long before a job's time limit Slurm warns its worker (SIGUSR1), unless `--slurm
/// signal=...` says otherwise: time for a step and a checkpoint at any size. Slurm may send it
/// up to a minute early or late.
pub const TIME_LIMIT_WARNING: std::time::Duration = std::time::Duration::from_secs(300);

/// Puts `job` (running) back in Slurm's queue: Slurm stops it and starts it again, with the
/// same id, when it is eligible (`scontrol requeue`, which a job's owner may run).
pub fn requeue(job: &str) -> Result<()> {
    let output = Command::new("scontrol").args(["requeue", job]).output().map_err(|e| missing_tool("scontrol", e))?;
    if !output.status.success() {
        bail!("`scontrol requeue {job}` refused: {}", String::from_utf8_lossy(&output.stderr).trim());
    }
    Ok(())
}

/// Writes the script into `runs/<id>/slurm.sh` under the artifacts directory and submits it;
/// returns the job id. `db_env` is the store location for the job's environment.
pub fn submit(spec: &JobSpec<'_>) -> Result<String> {
    let dir = spec.artifacts.join("runs").join(spec.run_id.to_string());
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let script = dir.join("slurm.sh");
    std::fs::write(&script, batch_script(spec)).with_context(|| format!("cannot write {}", script.display()))?;
    let output = Command::new("sbatch")
        .arg("--parsable")
        .arg(&script)
        .env("WORKBENCH_DB", spec.location.to_arg())
        .output()
        .map_err(|e| missing_tool("sbatch", e))?;
    if !output.status.success() {
        let said = String::from_utf8_lossy(&output.stderr).trim().to_string();
        if refused_by_policy(&said) {
            if let Some(queued) = own_jobs_in_queue().filter(|&n| n > 0) {
                return Err(SubmitLimit { said, queued }.into());
            }
        }
        bail!("sbatch refused run {}: {said}", spec.run_id);
    }
    // `--parsable` prints `jobid[;cluster]`.
    let text = String::from_utf8_lossy(&output.stdout);
    let job = text.trim().split(';').next().unwrap_or("").to_string();
    if job.is_empty() || !job.chars().all(|c| c.is_ascii_digit() || c == '_') {
        bail!("sbatch did not print a job id for run {} (it printed {text:?})", spec.run_id);
    }
    Ok(job)
}

/// sbatch's refusal under a submit limit: the user (or their account) has as many jobs in
/// Slurm's queue as a limit of the lab's allows (a QOS's or association's `MaxSubmitJobs`).
/// Passing: the run can be submitted once some of those jobs leave the queue.
#[derive(Debug, thiserror::Error)]
#[error(
    "Slurm takes no more jobs from this user for now, {queued} of theirs being in its queue (a submit \
     limit); sbatch said: {said}. If no limit applies (Slurm says the same of a job over a size or time \
     limit), cancel the waiting runs and change --slurm"
)]
pub struct SubmitLimit {
    /// sbatch's own words.
    pub said: String,
    /// The user's jobs in Slurm's queue when it refused.
    pub queued: usize,
}

/// Whether sbatch refused in the accounting policy's words, which Slurm gives both for a
/// submit limit (`QOSMaxSubmitJobPerUserLimit`, `AssocMaxSubmitJobLimit`, ...) and for a job
/// over a size or time limit; [`submit`] tells them apart by the user's jobs in the queue.
fn refused_by_policy(said: &str) -> bool {
    said.contains("accounting/QOS policy") || said.contains("MaxSubmitJob")
}

/// How many jobs of this user Slurm's queue holds (`squeue --me`), `None` when it does not
/// answer. A submit limit can only be what refuses a user who has jobs queued.
fn own_jobs_in_queue() -> Option<usize> {
    let out = Command::new("squeue").args(["--me", "-h", "-o", "%i"]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.trim().is_empty()).count())
}

/// Refuses, with Slurm's own words and the fix, when no Slurm controller answers
/// (`scontrol ping`: no `slurm.conf`, or `slurmctld` down or unreachable), so that a command
/// stops before it stores or queues anything instead of every run failing at `sbatch`.
pub fn controller_answers() -> Result<()> {
    let output = Command::new("scontrol").arg("ping").output().map_err(|e| missing_tool("scontrol", e))?;
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    // With a backup controller one of the two being up is enough, whatever the exit status
    // says of the other.
    if stdout.lines().any(|line| line.trim_end().ends_with(" is UP")) {
        return Ok(());
    }
    let said: Vec<&str> = stdout
        .lines()
        .chain(stderr.lines())
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('*'))
        .collect();
    bail!(
        "no Slurm controller answers (`scontrol ping`: {}): start slurmctld, or point SLURM_CONF at the \
         cluster's slurm.conf (`scripts/services start` runs a one-node cluster on this machine); \
         or run on this machine with --executor local",
        if said.is_empty() { format!("exit status {}", output.status) } else { said.join("; ") }
    )
}

fn missing_tool(tool: &str, e: std::io::Error) -> anyhow::Error {
    if e.kind() == std::io::ErrorKind::NotFound {
        anyhow::anyhow!(
            "`{tool}` is not installed or not on PATH: the Slurm executor needs Slurm's client commands \
             (Debian: slurm-client; `scripts/services start` sets up a local cluster)"
        )
    } else {
        anyhow::anyhow!("cannot run `{tool}`: {e}")
    }
}

/// A job's state as Slurm reports it (`PENDING`, `RUNNING`, `COMPLETED`, `CANCELLED`,
/// `TIMEOUT`, `NODE_FAIL`, `PREEMPTED`, `OUT_OF_MEMORY`, `FAILED`, ...) and, once ended, its
/// exit code (`code:signal`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobState {
    pub state: String,
    pub exit_code: Option<String>,
    /// Why Slurm holds a waiting job (`Resources`, `Priority`, `BeginTime`, ...), as squeue
    /// gives it; `None` for a job that is not waiting or has no reason.
    pub reason: Option<String>,
}

impl JobState {
    /// Whether the job is still in Slurm's queue (waiting, running, or about to run again).
    pub fn active(&self) -> bool {
        matches!(
            self.state.as_str(),
            "PENDING"
                | "RUNNING"
                | "CONFIGURING"
                | "COMPLETING"
                | "REQUEUED"
                | "REQUEUE_HOLD"
                | "REQUEUE_FED"
                | "RESIZING"
                | "SUSPENDED"
                | "STOPPED"
                | "SIGNALING"
                | "STAGE_OUT"
        )
    }

    /// Why the job is waiting, for the run's log: `slurm job 12 is waiting: Resources (the
    /// resources it asks for are in use)`; `None` unless it is pending with a reason.
    pub fn waiting(&self, job: &str) -> Option<String> {
        let reason = self.reason.as_deref().filter(|_| self.state == "PENDING")?;
        // Slurm's job reason codes (squeue(1), "JOB REASON CODES") that a researcher meets most.
        let meaning = match reason {
            "Resources" => Some("the resources it asks for are in use"),
            "Priority" => Some("jobs of higher priority are ahead of it"),
            "Dependency" => Some("a job it depends on has not finished"),
            "BeginTime" => Some("its start time has not come"),
            "JobHeldUser" => Some("held by its user: `scontrol release JOB` lets it start"),
            "JobHeldAdmin" => Some("held by an administrator"),
            "ReqNodeNotAvail" => Some("a node it needs is down, drained or reserved"),
            "PartitionTimeLimit" => {
                Some("its time limit is above the partition's: it will not start; cancel it and ask for less time")
            }
            "PartitionNodeLimit" => Some("it asks for more nodes than the partition allows: it will not start"),
            "PartitionDown" | "PartitionInactive" => Some("its partition does not take jobs now"),
            "NodeDown" => Some("a node it needs is down"),
            r if r.starts_with("QOS") || r.starts_with("AssocGrp") || r.starts_with("AssocMax") => {
                Some("a limit of its QOS or account is reached")
            }
            _ => None,
        };
        Some(match meaning {
            Some(meaning) => format!("slurm job {job} is waiting: {reason} ({meaning})"),
            None => format!("slurm job {job} is waiting: {reason}"),
        })
    }

    /// The state as a run's cause: `slurm: CANCELLED (exit 0:15)`.
    pub fn cause(&self) -> String {
        if self.forgotten() {
            return "slurm: the job has ended; Slurm no longer knows how".to_string();
        }
        match &self.exit_code {
            Some(code) => format!("slurm: {} (exit {code})", self.state),
            None => format!("slurm: {}", self.state),
        }
    }

    /// Whether Slurm no longer knows the job: it has left the queue and its end is in no
    /// record (a cluster without accounting keeps ended jobs for MinJobAge only).
    pub fn forgotten(&self) -> bool {
        self.state == FORGOTTEN
    }

    fn forgotten_one() -> JobState {
        JobState { state: FORGOTTEN.to_string(), exit_code: None, reason: None }
    }
}

/// The state [`states`] gives a job Slurm no longer knows; not one of Slurm's own.
const FORGOTTEN: &str = "FORGOTTEN";

/// Of `jobs`, those still in Slurm's queue (waiting, running, or about to run again), from one
/// `squeue` call; `None` when squeue does not answer. A job squeue no longer lists has ended
/// for good (a requeued job stays listed), so a caller need not ask about it again.
pub fn in_queue(jobs: &[String]) -> Option<BTreeSet<String>> {
    if jobs.is_empty() {
        return Some(BTreeSet::new());
    }
    Some(queued(squeue(jobs)?))
}

/// The jobs of a listing whose state is [active](JobState::active).
fn queued(listing: BTreeMap<String, JobState>) -> BTreeSet<String> {
    listing.into_iter().filter(|(_, state)| state.active()).map(|(job, _)| job).collect()
}

/// The jobs of `jobs` that `squeue` still holds, with their state: empty when it knows none of
/// them (it refuses such a list), `None` when it does not answer.
fn squeue(jobs: &[String]) -> Option<BTreeMap<String, JobState>> {
    let out = Command::new("squeue").args(["-h", "-o", "%i|%T|%r", "-j", &jobs.join(",")]).output().ok()?;
    if !out.status.success() {
        return String::from_utf8_lossy(&out.stderr).contains("Invalid job id").then(BTreeMap::new);
    }
    Some(parse_squeue(&String::from_utf8_lossy(&out.stdout)))
}

/// `squeue -o '%i|%T|%r'` lines as job -> state (the reason `None` counts as none).
fn parse_squeue(listing: &str) -> BTreeMap<String, JobState> {
    listing
        .lines()
        .filter_map(|line| {
            let mut fields = line.trim().splitn(3, '|');
            let (job, state) = (fields.next()?, fields.next()?);
            let reason = fields.next().map(str::trim).filter(|r| !r.is_empty() && *r != "None").map(String::from);
            Some((job.to_string(), JobState { state: state.to_string(), exit_code: None, reason }))
        })
        .collect()
}

/// States of `jobs`: from `squeue` while queued or running, else from `sacct`, else from
/// `scontrol show job` (finished jobs stay there for MinJobAge). A job that squeue does not
/// list and that sacct and scontrol do not know (a cluster without accounting forgets a job
/// MinJobAge after its end) is [forgotten](JobState::forgotten); one that no source could be
/// asked about (squeue does not answer) is missing from the map.
pub fn states(jobs: &[String]) -> Result<BTreeMap<String, JobState>> {
    if jobs.is_empty() {
        return Ok(BTreeMap::new());
    }
    // Jobs squeue does not list (or all of them, when it does not answer) are looked up below.
    let listed = squeue(jobs);
    let squeue_answered = listed.is_some();
    let mut found = listed.unwrap_or_default();
    let rest: Vec<&String> = jobs.iter().filter(|j| !found.contains_key(*j)).collect();
    if rest.is_empty() {
        return Ok(found);
    }
    let rest_list: Vec<&str> = rest.iter().map(|j| j.as_str()).collect();
    let sacct = Command::new("sacct")
        .args(["-n", "-P", "-X", "-o", "JobID,State,ExitCode", "-j", &rest_list.join(",")])
        .output();
    if let Some(out) = sacct.ok().filter(|o| o.status.success()) {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let fields: Vec<&str> = line.trim().split('|').collect();
            if let [job, state, code] = fields[..] {
                // `CANCELLED by 0` -> `CANCELLED`
                let state = state.split_whitespace().next().unwrap_or(state).to_string();
                found.insert(job.to_string(), JobState { state, exit_code: Some(code.to_string()), reason: None });
            }
        }
    }
    for job in rest {
        if found.contains_key(job) {
            continue;
        }
        let Ok(out) = Command::new("scontrol").args(["show", "job", "-o", job]).output() else { continue };
        if let Some(state) = parse_scontrol(&String::from_utf8_lossy(&out.stdout)) {
            found.insert(job.clone(), state);
        } else if squeue_answered && String::from_utf8_lossy(&out.stderr).contains("Invalid job id") {
            found.insert(job.clone(), JobState::forgotten_one());
        }
    }
    Ok(found)
}

/// `JobState=X ... ExitCode=a:b` of a `scontrol show job -o` line.
fn parse_scontrol(text: &str) -> Option<JobState> {
    let field = |name: &str| {
        text.split_whitespace().find_map(|kv| kv.strip_prefix(name).and_then(|v| v.strip_prefix('='))).map(String::from)
    };
    Some(JobState { state: field("JobState")?, exit_code: field("ExitCode"), reason: None })
}

/// Cancels a job (Slurm signals it with SIGTERM, then SIGKILL after its KillWait).
pub fn cancel(job: &str) -> Result<()> {
    let out = Command::new("scancel").arg(job).output().map_err(|e| missing_tool("scancel", e))?;
    if !out.status.success() {
        bail!("scancel {job}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Whether `path` is on a network file system, where SQLite's locking and WAL files do not
/// work for processes on several machines.
pub fn on_network_file_system(path: &Path) -> bool {
    // Magic numbers of statfs(2) f_type: NFS, SMB/CIFS (two), Lustre, GPFS, BeeGFS, Ceph,
    // GlusterFS/FUSE, 9p.
    const NETWORK: [i64; 9] =
        [0x6969, 0x517B, 0xFF53_4D42, 0x0BD0_0BD0, 0x4750_4653, 0x1916_9904, 0x00C3_6400, 0x6573_5546, 0x0102_1997];
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let Ok(c_path) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else { return false };
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: statfs writes into the struct it is given; the path is a valid C string.
    if unsafe { libc::statfs(c_path.as_ptr(), &mut stat) } != 0 {
        return false;
    }
    NETWORK.contains(&(stat.f_type as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queued_jobs_are_those_in_an_active_state() {
        let listing = "12|RUNNING|None\n13|PENDING|Resources\n14|COMPLETED|None\n15|REQUEUED|None\nnot a line\n";
        let parsed = parse_squeue(listing);
        assert_eq!(parsed["13"].reason.as_deref(), Some("Resources"));
        assert_eq!(parsed["12"].reason, None);
        let queued: Vec<String> = queued(parsed).into_iter().collect();
        assert_eq!(queued, ["12", "13", "15"]);
        assert!(in_queue(&[]).is_some_and(|q| q.is_empty()));
    }

    #[test]
    fn options_parse_and_refuse_what_the_workbench_sets() {
        let o = SlurmOptions::parse("partition=gpu, time=04:00:00,gres=gpu:1,cpus-per-task=8,mem=32G").unwrap();
        assert_eq!(o.options["partition"], "gpu");
        assert_eq!(o.options["cpus-per-task"], "8");
        assert!(SlurmOptions::parse("partition").unwrap_err().to_string().contains("key=value"));
        assert!(SlurmOptions::parse("output=x.log").unwrap_err().to_string().contains("set by the workbench"));
        assert!(SlurmOptions::parse("a b=1").is_err());
    }

    #[test]
    fn cuda_runs_ask_for_one_gpu_unless_told_otherwise() {
        let none = SlurmOptions::default();
        assert_eq!(none.for_device("cuda").get("gres").map(String::as_str), Some("gpu:1"));
        assert_eq!(none.for_device("cpu").get("gres"), None);
        let two = SlurmOptions::parse("gpus=2").unwrap();
        assert_eq!(two.for_device("cuda:0").get("gres"), None);
    }

    #[test]
    fn scripts_never_hold_a_password() {
        let options = SlurmOptions::parse("partition=debug").unwrap();
        let with_password = StoreLocation::parse("postgres://lab:s3cret@db/runs");
        let spec = JobSpec {
            run_id: 7,
            device: "cpu",
            exe: Path::new("/opt/workbench"),
            location: &with_password,
            artifacts: Path::new("/shared/art"),
            plugin_dirs: &[],
            options: &options,
            submission: "5eed",
        };
        let script = batch_script(&spec);
        assert!(!script.contains("s3cret"), "{script}");
        assert!(script.contains("\"$WORKBENCH_DB\"") && script.contains("#SBATCH --partition=debug"), "{script}");
        assert!(script.contains("worker --run 7 --resume --submission '5eed'"), "{script}");
        assert!(script.contains("#SBATCH --requeue"), "{script}");
        let file = StoreLocation::parse("/data/runs.db");
        let script = batch_script(&JobSpec { location: &file, ..spec });
        assert!(script.contains("--db '/data/runs.db'"), "{script}");
    }

    #[test]
    fn jobs_are_warned_before_their_time_limit_unless_the_options_say_otherwise() {
        let location = StoreLocation::parse("/data/runs.db");
        let script = |options: &str| {
            let options = SlurmOptions::parse(options).unwrap();
            let spec = JobSpec {
                run_id: 7,
                device: "cpu",
                exe: Path::new("/opt/workbench"),
                location: &location,
                artifacts: Path::new("/shared/art"),
                plugin_dirs: &[],
                options: &options,
                submission: "5eed",
            };
            batch_script(&spec)
        };
        let default = script("time=04:00:00");
        assert!(default.contains("#SBATCH --signal=B:USR1@300\n"), "{default}");
        assert!(default.contains("\nexec '/opt/workbench'"), "the worker is the batch shell: {default}");
        let own = script("signal=B:USR1@900");
        assert!(own.contains("#SBATCH --signal=B:USR1@900\n") && !own.contains("@300"), "{own}");
    }

    #[test]
    fn scontrol_lines_give_state_and_exit_code() {
        let line = "JobId=12 JobName=w UserId=root(0) JobState=CANCELLED Reason=None ExitCode=0:15 RunTime=00:00:03";
        let cancelled = JobState { state: "CANCELLED".into(), exit_code: Some("0:15".into()), reason: None };
        assert_eq!(parse_scontrol(line), Some(cancelled));
        let state = JobState { state: "TIMEOUT".into(), exit_code: Some("0:0".into()), reason: None };
        assert_eq!(state.cause(), "slurm: TIMEOUT (exit 0:0)");
        assert!(!state.active());
        assert!(JobState { state: "PENDING".into(), exit_code: None, reason: None }.active());
    }

    #[test]
    fn only_the_accounting_policy_s_words_may_be_a_submit_limit() {
        let qos = "sbatch: error: QOSMaxSubmitJobPerUserLimit\nsbatch: error: Batch job submission failed: \
                   Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)";
        assert!(refused_by_policy(qos));
        assert!(refused_by_policy("sbatch: error: AssocMaxSubmitJobLimit"));
        assert!(!refused_by_policy("sbatch: error: Batch job submission failed: Invalid partition name specified"));
        assert!(!refused_by_policy("sbatch: error: Batch job submission failed: Requested time limit is invalid"));
    }

    #[test]
    fn a_waiting_job_says_why_in_words() {
        let pending = |reason: &str| JobState { state: "PENDING".into(), exit_code: None, reason: Some(reason.into()) };
        assert_eq!(
            pending("Resources").waiting("12").as_deref(),
            Some("slurm job 12 is waiting: Resources (the resources it asks for are in use)")
        );
        assert!(pending("QOSMaxJobsPerUserLimit").waiting("3").unwrap().contains("limit of its QOS or account"));
        assert_eq!(pending("Licenses").waiting("4").as_deref(), Some("slurm job 4 is waiting: Licenses"));
        let running = JobState { state: "RUNNING".into(), exit_code: None, reason: Some("Resources".into()) };
        assert_eq!(running.waiting("12"), None);
        assert_eq!(JobState { reason: None, ..pending("x") }.waiting("12"), None);
    }
}
