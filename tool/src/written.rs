//! After the app: which output files its traced processes wrote, as they
//! report them (each writes a report file into the run's private directory
//! named in `RPROF_REPORT_DIR`, by the library's `rprof_tool::report`), and
//! which exist unfinished.
//!
//! Owns the report directory, its reading, and what `rprof` prints about the
//! outputs; must not decide output names by its own rules (it asks
//! `rprof_core::config`, as the library does).
//!
//! The directory is made by `mkdtemp` (mode 0700, a name nobody can guess):
//! no other user can list it, create a report in it or plant a link there;
//! a process not started by this run does not know its name. It is read
//! after the app has ended and removed.

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rprof_core::config::{ProcessFacts, TraceConfig};
use rprof_tool::report::REPORT_SUFFIX;

use crate::cli::LaunchPlan;

/// The most of one report file that is read (a report is a few lines per
/// output file).
const MAX_REPORT_BYTES: u64 = 1 << 20;

/// The run's private directory into which traced processes write their
/// reports; removed (with what is in it) on drop.
pub struct ReportDir {
    dir: PathBuf,
}

impl ReportDir {
    /// A fresh `rprof-report-XXXXXX` (mode 0700) under `base`.
    pub fn create(base: &Path) -> std::io::Result<ReportDir> {
        let mut template = base.join("rprof-report-XXXXXX").into_os_string().into_vec();
        template.push(0);
        // SAFETY: mkdtemp rewrites the trailing XXXXXX of our NUL-terminated
        // buffer in place and creates the directory with mode 0700; the
        // buffer outlives the call.
        let p = unsafe { libc::mkdtemp(template.as_mut_ptr().cast()) };
        if p.is_null() {
            return Err(std::io::Error::last_os_error());
        }
        template.pop();
        let dir = PathBuf::from(OsString::from_vec(template));
        // Absolute, whatever TMPDIR says: the app may change directory.
        let dir = std::path::absolute(&dir).unwrap_or(dir);
        Ok(ReportDir { dir })
    }

    /// The directory's path (the value of `RPROF_REPORT_DIR`).
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Every line of every whole report in the directory (files named
    /// `*.report`, regular, owned by this user; never through a link), in
    /// name order.
    pub fn read_all(&self) -> Vec<String> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        let mut names: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.as_bytes().ends_with(REPORT_SUFFIX.as_bytes()))
            })
            .collect();
        names.sort();
        let mut lines = Vec::new();
        for p in names {
            let Ok(f) = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
                .open(&p)
            else {
                continue;
            };
            match f.metadata() {
                Ok(m) if m.is_file() && m.uid() == me => {}
                _ => continue,
            }
            let mut bytes = Vec::new();
            if f.take(MAX_REPORT_BYTES).read_to_end(&mut bytes).is_err() {
                continue;
            }
            lines.extend(String::from_utf8_lossy(&bytes).lines().map(str::to_string));
        }
        lines
    }
}

impl Drop for ReportDir {
    fn drop(&mut self) {
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The output files a traced process with this pid would write, and the
/// RPC and memory-copy files with the main file of their sink (written only
/// on the first doorbell wake or copy, so finished when that file is).
fn expected_outputs(plan: &LaunchPlan, child_pid: u32) -> (Vec<PathBuf>, Vec<(PathBuf, PathBuf)>) {
    let lookup = plan.lookup();
    let facts = ProcessFacts {
        pid: child_pid,
        ppid: std::process::id(),
        hostname: rprof_core::config::hostname(),
    };
    let mut expected = Vec::new();
    let mut rpc = Vec::new();
    if let Ok(Some(cfg)) = TraceConfig::from_source(&lookup, &facts) {
        expected = rprof_tool::report::output_files(&cfg);
        // --pftrace-split-seconds: NAME_part1.pftrace, ... were written by
        // the sink of NAME.pftrace (finished when it is), as far as they go.
        if cfg.formats.pftrace && cfg.pftrace_split_ns.is_some() {
            let first = cfg.output_path(".pftrace");
            for k in 1.. {
                let part = rprof_core::output::split::part_path(&first, k);
                if std::fs::symlink_metadata(&part).is_err() {
                    break;
                }
                rpc.push((part, first.clone()));
            }
        }
        if cfg.marker_trace && cfg.stats {
            rpc.push((
                cfg.output_path("_marker_api_stats.csv"),
                cfg.output_path("_kernel_stats.csv"),
            ));
        }
        if cfg.marker_trace && cfg.formats.csv {
            rpc.push((
                cfg.output_path("_marker_api_trace.csv"),
                cfg.output_path("_kernel_trace.csv"),
            ));
        }
        if cfg.rpc_trace {
            if cfg.formats.csv {
                rpc.push((
                    cfg.output_path("_rpc_trace.csv"),
                    cfg.output_path("_kernel_trace.csv"),
                ));
            }
            if cfg.stats {
                rpc.push((
                    cfg.output_path("_rpc_stats.csv"),
                    cfg.output_path("_kernel_stats.csv"),
                ));
            }
        }
        // The memory-copy files are created at the first copy, by the same
        // sinks: finished when their sink's main file is.
        if cfg.memory_copy_trace {
            if cfg.formats.csv {
                rpc.push((
                    cfg.output_path("_memory_copy_trace.csv"),
                    cfg.output_path("_kernel_trace.csv"),
                ));
            }
            if cfg.stats {
                rpc.push((
                    cfg.output_path("_memory_copy_stats.csv"),
                    cfg.output_path("_kernel_stats.csv"),
                ));
            }
        }
    }
    (expected, rpc)
}

/// (device, inode) of each of `paths` that exists now (symlinks not followed).
fn existing_identities(paths: &[PathBuf]) -> Vec<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    paths
        .iter()
        .filter_map(|p| std::fs::symlink_metadata(p).ok())
        .map(|m| (m.dev(), m.ino()))
        .collect()
}

/// Prints the files the traced processes finished, and names the ones
/// that exist but were not finished. `lines` is what the tool libraries
/// reported (`done\tPATH` / `incomplete\tPATH\tREASON`); `earlier` holds the
/// identities of files that were at an output path before the app started
/// (an earlier run's, never this run's).
pub fn report_outputs(plan: &LaunchPlan, child_pid: u32, lines: &[String], earlier: &[(u64, u64)]) {
    let (done, incomplete) = parse_report(lines);
    let (expected, rpc) = expected_outputs(plan, child_pid);
    let from_earlier_run = |p: &PathBuf| {
        existing_identities(std::slice::from_ref(p))
            .first()
            .is_some_and(|id| earlier.contains(id))
    };
    // Each file is named once, first as written, then as incomplete.
    let mut seen = HashSet::new();
    let written = done.iter().chain(
        rpc.iter()
            .filter(|(p, main)| done.contains(main) && p.exists())
            .map(|(p, _)| p),
    );
    for p in written {
        if seen.insert(p.clone()) {
            eprintln!("rprof: wrote {}", p.display());
        }
    }
    for (p, why) in &incomplete {
        if seen.insert(p.clone()) {
            eprintln!("rprof: {} is incomplete: {why}", p.display());
        }
    }
    for p in &expected {
        if p.exists() && !from_earlier_run(p) && seen.insert(p.clone()) {
            eprintln!(
                "rprof: {} is incomplete: process {child_pid} ended before rprof could finish it (killed, or _exit)",
                p.display()
            );
        }
    }
    if seen.is_empty() && !summary_only(plan, child_pid) {
        let earlier_run = expected.iter().any(from_earlier_run);
        print_nothing_written(child_pid, earlier_run);
    }
}

/// The finished files, and the incomplete ones with why, from the report
/// lines.
fn parse_report(lines: &[String]) -> (Vec<PathBuf>, Vec<(PathBuf, String)>) {
    let mut done: Vec<PathBuf> = Vec::new();
    let mut incomplete: Vec<(PathBuf, String)> = Vec::new();
    for line in lines {
        let mut parts = line.splitn(3, '\t');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("done"), Some(p), _) => done.push(PathBuf::from(p)),
            (Some("incomplete"), Some(p), why) => {
                incomplete.push((PathBuf::from(p), why.unwrap_or("").to_string()))
            }
            _ => {}
        }
    }
    (done, incomplete)
}

/// Whether the run asked for the summary alone (`--output-format none` with
/// `--summary`, no `--stats` file): then no file is the expected outcome,
/// and the summary on stderr says the process was traced.
fn summary_only(plan: &LaunchPlan, child_pid: u32) -> bool {
    let facts = ProcessFacts {
        pid: child_pid,
        ppid: std::process::id(),
        hostname: rprof_core::config::hostname(),
    };
    matches!(
        TraceConfig::from_source(&plan.lookup(), &facts),
        Ok(Some(cfg)) if cfg.formats.is_none() && !cfg.stats
    )
}

fn print_nothing_written(child_pid: u32, earlier_run: bool) {
    if earlier_run {
        eprintln!(
            "rprof: no trace was written for process {child_pid}: its output names belong to an earlier run"
        );
    } else {
        eprintln!(
            "rprof: no trace was written for process {child_pid} (did the application use the HSA runtime?)"
        );
    }
}

/// Identities of the files at `plan`'s output paths for this pid now:
/// an earlier run's (outputs are created new, so this run refuses them).
pub fn earlier_files(plan: &LaunchPlan, child_pid: u32) -> Vec<(u64, u64)> {
    existing_identities(&expected_outputs(plan, child_pid).0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_dir_is_private_reads_whole_reports_only_and_is_removed() {
        use std::os::unix::fs::PermissionsExt;
        let r = ReportDir::create(&std::env::temp_dir()).unwrap();
        let other = ReportDir::create(&std::env::temp_dir()).unwrap();
        assert_ne!(r.path(), other.path());
        let m = std::fs::symlink_metadata(r.path()).unwrap();
        assert!(m.is_dir());
        assert_eq!(m.permissions().mode() & 0o777, 0o700);
        let d = r.path().to_path_buf();
        std::fs::write(d.join("1-0.report"), "done\t/o/a.csv\n").unwrap();
        std::fs::write(
            d.join("2-0.report"),
            "incomplete\t/o/b.csv\twhy\ndone\t/o/c.csv\n",
        )
        .unwrap();
        // Unfinished, a link, a directory: never read.
        std::fs::write(d.join("3-0.partial"), "done\t/o/partial.csv\n").unwrap();
        std::fs::write(other.path().join("x"), "done\t/o/linked.csv\n").unwrap();
        std::os::unix::fs::symlink(other.path().join("x"), d.join("4-0.report")).unwrap();
        std::fs::create_dir(d.join("5-0.report")).unwrap();
        assert_eq!(
            r.read_all(),
            [
                "done\t/o/a.csv",
                "incomplete\t/o/b.csv\twhy",
                "done\t/o/c.csv"
            ]
        );
        std::fs::remove_dir(d.join("5-0.report")).unwrap();
        drop(r);
        assert!(!d.exists());
        drop(other);
    }
}
