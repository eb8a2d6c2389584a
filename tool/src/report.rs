//! What the flush tells about the output files: which were finished and
//! which are incomplete, and why.
//!
//! The `rprof` command passes the write end of a pipe in `RPROF_REPORT_FD`;
//! at the flush each traced process writes one line per output file to it
//! (`done\tPATH` or `incomplete\tPATH\tREASON`), and the command prints
//! "wrote PATH" only for files reported done. Without the variable (the
//! library loaded by hand) incomplete files are named on stderr. It must not
//! decide whether a file is finished: the writer's outcome says so.
//!
//! # Safety
//! Writing to the inherited descriptor is a `write(2)` on a number taken
//! from the environment, checked first to be an open pipe.

use std::io::Write;
use std::path::PathBuf;

use rprof_core::config::TraceConfig;

/// The environment variable naming the report pipe's write end.
pub const REPORT_FD_VAR: &str = "RPROF_REPORT_FD";

/// The files the sinks write, in the order `outputs::open_outputs` opens
/// them (Perfetto, CSV, JSON, statistics).
pub fn output_files(config: &TraceConfig) -> Vec<PathBuf> {
    let mut v = Vec::new();
    if config.formats.pftrace {
        v.push(config.output_path(".pftrace"));
    }
    if config.formats.csv {
        v.push(config.output_path("_kernel_trace.csv"));
    }
    if config.formats.json {
        v.push(config.output_path("_results.json"));
    }
    if config.stats {
        v.push(config.output_path("_kernel_stats.csv"));
    }
    v
}

/// One report line per file. `failures` is the writer's per-sink outcome,
/// or `None` if the writer did not finish (then every file is incomplete
/// for `stuck_reason`).
pub fn report_lines(
    files: &[PathBuf],
    failures: Option<&[Option<String>]>,
    stuck_reason: &str,
) -> Vec<String> {
    files
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let path = p.display().to_string().replace(['\t', '\n'], " ");
            let failure = match failures {
                None => Some(stuck_reason.to_string()),
                Some(f) => f.get(i).cloned().flatten(),
            };
            match failure {
                None => format!("done\t{path}\n"),
                Some(why) => format!("incomplete\t{path}\t{}\n", why.replace(['\t', '\n'], " ")),
            }
        })
        .collect()
}

/// The report pipe, if `RPROF_REPORT_FD` names an open pipe.
fn report_fd() -> Option<libc::c_int> {
    let fd: libc::c_int = std::env::var(REPORT_FD_VAR).ok()?.parse().ok()?;
    if fd < 3 {
        return None;
    }
    // SAFETY: fstat on a descriptor number into a local stat buffer; an
    // invalid number only makes it fail.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFIFO {
        return None;
    }
    Some(fd)
}

/// Sends the report to the `rprof` command, or names incomplete files on
/// stderr when there is no command listening.
pub fn report_outputs(files: &[PathBuf], failures: Option<&[Option<String>]>, stuck_reason: &str) {
    let lines = report_lines(files, failures, stuck_reason);
    match report_fd() {
        Some(fd) => {
            // One write per line: a pipe write of at most PIPE_BUF bytes is
            // atomic, so reports of several processes never interleave.
            for line in &lines {
                let b = line.as_bytes();
                // SAFETY: writing a local buffer to the checked pipe.
                let _ = unsafe { libc::write(fd, b.as_ptr().cast(), b.len()) };
            }
        }
        None => {
            let mut err = std::io::stderr().lock();
            for line in &lines {
                let mut parts = line.trim_end().splitn(3, '\t');
                if parts.next() == Some("incomplete") {
                    let path = parts.next().unwrap_or("");
                    let why = parts.next().unwrap_or("");
                    let _ = writeln!(err, "rprof: {path} is incomplete: {why}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_say_which_files_are_finished() {
        let files = [
            PathBuf::from("/o/a.pftrace"),
            PathBuf::from("/o/a_results.json"),
        ];
        let ok = report_lines(
            &files,
            Some(&[None, Some("finish failed: disk full".into())]),
            "x",
        );
        assert_eq!(
            ok,
            [
                "done\t/o/a.pftrace\n",
                "incomplete\t/o/a_results.json\tfinish failed: disk full\n"
            ]
        );
        let stuck = report_lines(&files, None, "writer stuck");
        assert_eq!(
            stuck,
            [
                "incomplete\t/o/a.pftrace\twriter stuck\n",
                "incomplete\t/o/a_results.json\twriter stuck\n"
            ]
        );
    }
}
