//! One run of a workload under `rprof`, and untraced/traced pairs of runs.

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::cli::Options;
use crate::Error;

/// rprof options of an untraced run.
pub const UNTRACED: &[&str] = &[];
/// rprof options of a kernel-traced run.
pub const TRACED: &[&str] = &["--kernel-trace"];

/// One run of a workload.
#[derive(Debug, Clone, Default)]
pub struct RunResult {
    /// The measurement's tag (names the trace files and errors).
    pub tag: String,
    /// Wall time of the whole run.
    pub wall_s: f64,
    /// Peak resident memory of the run (rprof, the app and the emulated GPU).
    pub max_rss_kb: u64,
    /// User + system CPU seconds of the run.
    pub cpu_s: f64,
    /// `key=value` lines the workload printed.
    pub values: HashMap<String, String>,
    /// Everything the workload printed on stdout.
    pub stdout: String,
    /// Size of the Perfetto trace (traced runs).
    pub trace_bytes: u64,
    /// Rows of the kernel-trace CSV (traced runs).
    pub csv_rows: u64,
    /// Rows of the memory-copy-trace CSV (runs with `--memory-copy-trace`
    /// or `--sys-trace`; 0 otherwise).
    pub copy_rows: u64,
    /// Rows of the marker-trace CSV (runs with `--marker-trace`; 0
    /// otherwise).
    pub marker_rows: u64,
}

impl RunResult {
    /// The figure the workload printed as `key=value`; an error naming the
    /// run if it printed none (or not a number).
    pub fn figure(&self, key: &str) -> Result<f64, Error> {
        self.values
            .get(key)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                Error::Failed(format!(
                    "{}: the workload printed no figure {key}= (it printed: {})",
                    self.tag,
                    self.printed()
                ))
            })
    }

    fn printed(&self) -> String {
        let mut keys: Vec<&str> = self.values.keys().map(String::as_str).collect();
        keys.sort_unstable();
        if keys.is_empty() {
            "nothing".into()
        } else {
            keys.join(", ")
        }
    }
}

/// Untraced and traced runs of one measurement, alternated.
#[derive(Debug, Clone, Default)]
pub struct Pair {
    /// Runs in the first mode (untraced unless said otherwise).
    pub a: Vec<RunResult>,
    /// Runs in the second mode (traced).
    pub b: Vec<RunResult>,
}

impl Pair {
    /// The median of the figure `key` in each mode: (first, second).
    pub fn figures(&self, key: &str) -> Result<(f64, f64), Error> {
        Ok((
            crate::stats::figure(&self.a, key)?,
            crate::stats::figure(&self.b, key)?,
        ))
    }
}

/// One run of `app` under `rprof --device emulated MODE`; an empty `mode`
/// is the untraced run.
pub fn run(
    o: &Options,
    mode: &[&str],
    tag: &str,
    env: &[(&str, &str)],
    app: &[&str],
) -> Result<RunResult, Error> {
    let rprof = o.bin_dir.join("rprof");
    let mut cmd = match o.root() {
        Some(v) => {
            let mut c = Command::new("bash");
            c.arg("scripts/rocm-env.sh").arg(v).arg("--").arg(&rprof);
            c
        }
        None => Command::new(&rprof),
    };
    let out_dir = o.work_dir.join("out");
    let traced = !mode.is_empty();
    cmd.args(["--device", "emulated"]).args(mode);
    if traced {
        cmd.arg("-d").arg(&out_dir).args(["-o", tag]);
        // rprof never overwrites an output (it would run the app untraced):
        // remove the previous run's `TAG.*` / `TAG_*` files, which also keeps
        // a mode without a trace from counting the previous mode's CSV.
        remove_outputs(&out_dir, tag);
    }
    cmd.arg("--").args(app);
    for (k, v) in env {
        cmd.env(k, v);
    }
    for (k, v) in &o.extra {
        cmd.env(k, v);
    }
    let err_path = o.work_dir.join("last-stderr.txt");
    let err_file = std::fs::File::create(&err_path)
        .map_err(|e| Error::Failed(format!("cannot create {}: {e}", err_path.display())))?;
    cmd.stdout(Stdio::piped()).stderr(err_file);
    let start = Instant::now();
    // Reaped below by wait4, which also gives this run's own rusage.
    #[allow(clippy::zombie_processes)]
    let mut child = cmd
        .spawn()
        .map_err(|e| Error::Failed(format!("cannot run {}: {e}", rprof.display())))?;
    let mut stdout = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut out, &mut stdout);
    }
    let (exit, ru) = wait_with_rusage(&child);
    let wall_s = start.elapsed().as_secs_f64();
    if !exit.success() {
        return Err(Error::Failed(format!(
            "{tag} ({}) failed: status {:?}/{:?}\n{}",
            if traced { "traced" } else { "untraced" },
            exit.code(),
            exit.signal(),
            std::fs::read_to_string(&err_path).unwrap_or_default()
        )));
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    let mut r = RunResult {
        tag: tag.to_string(),
        wall_s,
        max_rss_kb: ru.ru_maxrss as u64,
        cpu_s: tv(ru.ru_utime) + tv(ru.ru_stime),
        ..Default::default()
    };
    for line in stdout.lines() {
        if let Some((k, v)) = line.split_once('=') {
            r.values.insert(k.trim().to_string(), v.trim().to_string());
        }
    }
    r.stdout = stdout;
    if traced {
        r.trace_bytes = std::fs::metadata(out_dir.join(format!("{tag}.pftrace")))
            .map(|m| m.len())
            .unwrap_or(0);
        // Streamed: reading a large CSV into memory would raise this
        // process's peak RSS, which forked children inherit as the floor of
        // their own `ru_maxrss`.
        let rows = |suffix: &str| {
            std::fs::File::open(out_dir.join(format!("{tag}{suffix}")))
                .map(|f| {
                    std::io::BufRead::lines(std::io::BufReader::new(f))
                        .count()
                        .saturating_sub(1) as u64
                })
                .unwrap_or(0)
        };
        r.csv_rows = rows("_kernel_trace.csv");
        r.copy_rows = rows("_memory_copy_trace.csv");
        r.marker_rows = rows("_marker_api_trace.csv");
    }
    Ok(r)
}

/// Removes `dir`'s files named `TAG.*` or `TAG_*` (a previous run's outputs).
fn remove_outputs(dir: &std::path::Path, tag: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(tag)) else {
            continue;
        };
        if rest.starts_with('.') || rest.starts_with('_') {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Alternates untraced and traced runs.
pub fn pair(o: &Options, tag: &str, env: &[(&str, &str)], app: &[&str]) -> Result<Pair, Error> {
    pair_modes(o, tag, UNTRACED, TRACED, env, app)
}

/// Alternates runs in modes `a` and `b`, `o.reps` times each.
pub fn pair_modes(
    o: &Options,
    tag: &str,
    a: &[&str],
    b: &[&str],
    env: &[(&str, &str)],
    app: &[&str],
) -> Result<Pair, Error> {
    let mut p = Pair::default();
    for i in 0..o.reps {
        // Alternate which goes first so drift in machine load cancels out.
        if i % 2 == 0 {
            p.a.push(run(o, a, tag, env, app)?);
            p.b.push(run(o, b, tag, env, app)?);
        } else {
            p.b.push(run(o, b, tag, env, app)?);
            p.a.push(run(o, a, tag, env, app)?);
        }
    }
    Ok(p)
}

/// Runs in each of `modes`, `o.reps` times each, rotating which mode goes
/// first every repetition (the alternating scheme of [`pair_modes`] for more
/// than two modes). Returns the runs of each mode, in `modes`' order.
pub fn rotate(
    o: &Options,
    tag: &str,
    modes: &[&[&str]],
    env: &[(&str, &str)],
    app: &[&str],
) -> Result<Vec<Vec<RunResult>>, Error> {
    let mut out = vec![Vec::new(); modes.len()];
    for i in 0..o.reps {
        for k in 0..modes.len() {
            let m = (i + k) % modes.len();
            out[m].push(run(o, modes[m], tag, env, app)?);
        }
    }
    Ok(out)
}

/// Reaps `child` with `wait4`: its exit status and the rusage of that child
/// and the descendants it waited for (the app), so `ru_maxrss` is this
/// run's peak, not the maximum over all runs.
pub fn wait_with_rusage(child: &std::process::Child) -> (std::process::ExitStatus, libc::rusage) {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: wait4 on our own child with valid out-pointers.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::wait4(pid, &mut status, 0, &mut ru);
        ru
    };
    (std::process::ExitStatus::from_raw(status), ru)
}
