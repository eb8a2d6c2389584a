//! Running a program under test: one [`run_with_timeout`] (a hang fails the
//! test with the output so far), fresh run directories under
//! `<target>/rocm-VERSION/runs/<test binary>/<label>`, and the variables a run
//! must not inherit from the test's environment.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::runtime::Runtime;
use super::{target_dir, test_binary};

/// Longest a traced raw-HSA program may run before the test calls it a hang.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// Longest a traced HIP program may run (HIP's start-up is slower).
pub const HIP_RUN_TIMEOUT: Duration = Duration::from_secs(150);

/// One finished run.
#[derive(Debug)]
pub struct Run {
    /// Exit status.
    pub status: ExitStatus,
    /// Exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// Output directory of the run.
    pub dir: PathBuf,
    /// Wall time.
    pub elapsed: Duration,
}

impl Run {
    /// The paths of the command's `rprof: wrote PATH` report lines.
    pub fn reported_written(&self) -> std::collections::BTreeSet<String> {
        self.stderr
            .lines()
            .filter_map(|l| l.strip_prefix("rprof: wrote "))
            .map(str::to_string)
            .collect()
    }

    /// Panics with the run's output unless it exited 0.
    pub fn assert_success(&self) {
        assert!(
            self.status.success(),
            "traced program failed: {}\n--- stdout\n{}\n--- stderr\n{}",
            self.status,
            tail(&self.stdout, 4000),
            tail(&self.stderr, 4000)
        );
    }

    /// `DIR/run<suffix>` (the output name the raw-HSA runs use).
    pub fn output(&self, suffix: &str) -> PathBuf {
        self.dir.join(format!("run{suffix}"))
    }
}

/// The last `max` bytes of `s` (at a character boundary).
pub fn tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// The number written right before the first `tail` in `text` (the digits
/// that end the text before it), as in rprof's verbose summary
/// `signal pool 512 created, high water ...` with `tail` = `" created"`.
/// `None` when `tail` is missing or no digits precede it.
pub fn number_before(text: &str, tail: &str) -> Option<u64> {
    let (head, _) = text.split_once(tail)?;
    let digits = head.len() - head.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    head[head.len() - digits..].parse().ok()
}

/// The number written right after the first `head` in `text` (the digits
/// that start the text after it), as in `rprof: exit: 256 idle ...` with
/// `head` = `"rprof: exit: "`. `None` when `head` is missing or no digits
/// follow it.
pub fn number_after(text: &str, head: &str) -> Option<u64> {
    let (_, tail) = text.split_once(head)?;
    let digits = tail.len() - tail.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    tail[..digits].parse().ok()
}

/// A fresh, empty run directory for `label`:
/// `<target>/rocm-VERSION/runs/<test binary>/<label>`.
pub fn fresh_dir(label: &str) -> PathBuf {
    let dir = run_dir(label);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create run directory");
    dir
}

/// The run directory for `label` as it is (created, an earlier run's files
/// kept).
pub fn run_dir(label: &str) -> PathBuf {
    let dir = Runtime::selected()
        .build_dir(&target_dir(), "runs")
        .join(test_binary())
        .join(label);
    std::fs::create_dir_all(&dir).expect("create run directory");
    dir
}

/// Removes from `cmd` every `RPROF_*` variable of the test's environment
/// and `HSA_TOOLS_LIB`, so a run sees only what the test sets.
pub fn clear_rprof_env(cmd: &mut Command) {
    cmd.env_remove("HSA_TOOLS_LIB");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("RPROF_") {
            cmd.env_remove(k);
        }
    }
}

/// Every file under `dir`, recursively (full paths).
pub fn files_under(dir: &std::path::Path) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.insert(p.display().to_string());
            }
        }
    }
    out
}

/// Runs `cmd` with piped output and no input; kills it and panics (with its
/// output so far) after `timeout`.
pub fn run_with_timeout(cmd: Command, dir: PathBuf) -> Run {
    run_with(cmd, dir, RUN_TIMEOUT)
}

/// [`run_with_timeout`] with a given timeout.
///
/// The command runs in a process group of its own, and a hang kills the
/// whole group: killing `rprof` alone left the app it started holding the
/// output pipes, and the test then waited on them for ever. It starts with
/// SIGINT and SIGTERM at their default action, as from a terminal: a shell
/// without job control starts its background jobs with SIGINT ignored, the
/// ignored disposition is inherited, and rprof rightly leaves an ignored
/// signal ignored (a test of the signal flush then waited for ever in a
/// `... &` run of `.ci/run`).
pub fn run_with(mut cmd: Command, dir: PathBuf, timeout: Duration) -> Run {
    let shown = format!("{cmd:?}");
    let start = Instant::now();
    cmd.process_group(0);
    // SAFETY: between fork and exec the closure only calls signal(2), which
    // is async-signal-safe, and allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {shown}: {e}"));
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let out_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for the program") {
            break s;
        }
        if start.elapsed() > timeout {
            // The group's id is the child's pid (process_group(0)).
            // SAFETY: kill(2) on the process group this function created.
            unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
            let _ = child.kill();
            let _ = child.wait();
            let stdout = out_reader.join().unwrap_or_default();
            let stderr = err_reader.join().unwrap_or_default();
            panic!(
                "HANG: {shown} still running after {timeout:?}; killed\n--- stdout\n{}\n--- stderr\n{}",
                tail(&stdout, 4000),
                tail(&stderr, 4000)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Run {
        status,
        code: status.code(),
        stdout: out_reader.join().expect("stdout reader"),
        stderr: err_reader.join().expect("stderr reader"),
        dir,
        elapsed: start.elapsed(),
    }
}
