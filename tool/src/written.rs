//! After the app: which output files its traced processes wrote, as they
//! report them through a pipe (`RPROF_REPORT_FD`, written by the library's
//! `rprof_tool::report`), and which exist unfinished.
//!
//! Owns the pipe's read side and what `rprof` prints about the outputs;
//! must not decide output names by its own rules (it asks
//! `rprof_core::config`, as the library does).

use std::collections::HashSet;
use std::path::PathBuf;

use rprof_core::config::{ProcessFacts, TraceConfig};

use crate::cli::LaunchPlan;

/// The pipe through which traced processes report their output files.
pub struct ReportPipe {
    read_fd: libc::c_int,
    /// The end the child inherits (its number goes in `RPROF_REPORT_FD`).
    pub write_fd: libc::c_int,
}

impl ReportPipe {
    /// A pipe whose write end the child inherits (the read end is
    /// close-on-exec and non-blocking).
    pub fn new() -> Option<Self> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 writes two descriptors into `fds`.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return None;
        }
        // SAFETY: fcntl on descriptors just created: the write end is
        // inherited across exec, the read end never blocks.
        unsafe {
            libc::fcntl(fds[1], libc::F_SETFD, 0);
            libc::fcntl(fds[0], libc::F_SETFL, libc::O_NONBLOCK);
        }
        Some(ReportPipe {
            read_fd: fds[0],
            write_fd: fds[1],
        })
    }

    /// Closes rprof's copy of the write end (the child has its own).
    pub fn close_write_end(self) -> Self {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.write_fd) };
        ReportPipe {
            write_fd: -1,
            ..self
        }
    }

    /// Everything reported so far, one entry per line.
    pub fn read_all(self) -> Vec<String> {
        let mut bytes = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: reading into a local buffer from our own descriptor.
            let n = unsafe { libc::read(self.read_fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            bytes.extend_from_slice(&buf[..n as usize]);
        }
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.read_fd) };
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::to_string)
            .collect()
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
    if seen.is_empty() {
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
