//! What the flush tells about the output files: which were finished and
//! which are incomplete, and why.
//!
//! The `rprof` command makes a private directory for the run (`mkdtemp`,
//! mode 0700) and names it in `RPROF_REPORT_DIR`; at the flush each traced
//! process writes its report there as a new file of its own (one line per
//! output file: `done\tPATH` or `incomplete\tPATH\tREASON`), and the command
//! reads them after the app has ended and prints "wrote PATH" only for files
//! reported done. A path in the environment reaches every process the app
//! starts, whatever its launcher does with inherited descriptors (Python's
//! `subprocess` and `mpirun` close them). Without the variable (the library
//! loaded by hand), or if the report cannot be written, incomplete files are
//! named on stderr. It must not decide whether a file is finished: the
//! writer's outcome says so.
//!
//! A report file is created `O_CREAT|O_EXCL|O_NOFOLLOW` (mode 0600) under a
//! `.partial` name, written whole, then given its final `.report` name by a
//! hard link (which never replaces an existing name): the command reads
//! only whole reports.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rprof_core::config::TraceConfig;

/// The environment variable naming the run's private report directory.
pub const REPORT_DIR_VAR: &str = "RPROF_REPORT_DIR";

/// The ending of a finished report file's name in the report directory.
pub const REPORT_SUFFIX: &str = ".report";

/// The files the sinks write, in the order `outputs::open_outputs` opens
/// them (Perfetto, CSV, JSON, rocpd, statistics): the writer reports each
/// sink's outcome by this position.
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
    if config.formats.rocpd {
        v.push(config.output_path("_results.db"));
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

/// The report directory named in `RPROF_REPORT_DIR`, if it is absolute.
fn report_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os(REPORT_DIR_VAR)?);
    dir.is_absolute().then_some(dir)
}

/// Writes `body` into `dir` as a new report file of this process (see
/// [`ReportFile`]).
pub fn write_report(dir: &Path, body: &str) -> std::io::Result<PathBuf> {
    ReportFile::open_in(dir)?.finish(body)
}

/// A report file of this process, created under its `.partial` name before
/// it is written. The session opens it when it starts, so the flush only
/// writes, links and unlinks (~40 µs): creating a file in `/tmp` took
/// 0.02-0.14 ms of the app's exit on the project's machine, 0.2-0.24 ms with
/// its disk 95 % full.
#[derive(Debug)]
pub struct ReportFile {
    file: std::fs::File,
    dir: PathBuf,
    /// `PID-N.partial`, created new (never through a link, never over a
    /// file).
    partial: PathBuf,
    /// `PID-N.report`, the name it gets once whole.
    done: PathBuf,
}

impl ReportFile {
    /// The run's report file, opened in the directory the `rprof` command
    /// named (`None` without one, or if it cannot be created now: the
    /// flush then tries again and says why it could not).
    pub fn open_for_run() -> Option<ReportFile> {
        ReportFile::open_in(&report_dir()?).ok()
    }

    /// Creates `dir/PID-N.partial` for the first N whose names are free (a
    /// process that flushes twice, a reused pid).
    pub fn open_in(dir: &Path) -> std::io::Result<ReportFile> {
        let pid = std::process::id();
        for n in 0..1000u32 {
            let partial = dir.join(format!("{pid}-{n}.partial"));
            let done = dir.join(format!("{pid}-{n}{REPORT_SUFFIX}"));
            if std::fs::symlink_metadata(&done).is_ok() {
                continue;
            }
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&partial)
            {
                Ok(file) => {
                    return Ok(ReportFile {
                        file,
                        dir: dir.to_path_buf(),
                        partial,
                        done,
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other("no free report name"))
    }

    /// Writes `body` whole, then gives the file its `.report` name by a
    /// hard link (which never replaces an existing name: if one appeared
    /// meanwhile, the next free name is used) and removes the partial name.
    pub fn finish(self, body: &str) -> std::io::Result<PathBuf> {
        let mut this = self;
        loop {
            let ReportFile {
                mut file,
                dir,
                partial,
                done,
            } = this;
            let written = file.write_all(body.as_bytes());
            drop(file);
            let linked = written.and_then(|()| std::fs::hard_link(&partial, &done));
            let _ = std::fs::remove_file(&partial);
            match linked {
                Ok(()) => return Ok(done),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    this = ReportFile::open_in(&dir)?;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Sends the report to the `rprof` command, or names incomplete files on
/// stderr when there is no command listening (or the report cannot be
/// written).
///
/// `opened`: the report file the session opened when it started, if any
/// (else one is created now).
pub fn report_outputs(
    files: &[PathBuf],
    failures: Option<&[Option<String>]>,
    stuck_reason: &str,
    opened: Option<ReportFile>,
) {
    let lines = report_lines(files, failures, stuck_reason);
    if let Some(dir) = opened.as_ref().map(|f| f.dir.clone()).or_else(report_dir) {
        let body = lines.concat();
        let written = match opened {
            Some(f) => f.finish(&body),
            None => write_report(&dir, &body),
        };
        match written {
            Ok(_) => return,
            Err(e) => eprintln!(
                "rprof: cannot report the outputs to the rprof command ({}: {e})",
                dir.display()
            ),
        }
    }
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

    /// An empty directory of this test process's own under the temp dir.
    fn fresh_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        dir
    }

    /// The names in `dir`, sorted.
    fn names_in(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn reports_are_new_whole_files_never_through_a_link() {
        use std::os::unix::fs::PermissionsExt;
        let dir = fresh_dir("rprof-report-test");
        let pid = std::process::id();
        // Someone planted a link at the first partial name: it is not
        // followed, its target is untouched, the next name is used.
        let victim = dir.join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join(format!("{pid}-0.partial"))).unwrap();
        let a = write_report(&dir, "done\t/o/a.csv\n").unwrap();
        let b = write_report(&dir, "incomplete\t/o/b.csv\twhy\n").unwrap();
        assert_eq!(a, dir.join(format!("{pid}-1.report")));
        assert_eq!(b, dir.join(format!("{pid}-2.report")));
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "done\t/o/a.csv\n");
        assert_eq!(
            std::fs::read_to_string(&b).unwrap(),
            "incomplete\t/o/b.csv\twhy\n"
        );
        let m = std::fs::symlink_metadata(&a).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
        // No partial file of ours is left (only the planted link).
        let left = names_in(&dir);
        let mut want = vec![
            format!("{pid}-0.partial"),
            format!("{pid}-1.report"),
            format!("{pid}-2.report"),
            "victim".to_string(),
        ];
        want.sort();
        assert_eq!(left, want);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_report_opened_at_the_start_is_written_whole_at_the_flush() {
        let dir = fresh_dir("rprof-report-open");
        let pid = std::process::id();
        let names = || names_in(&dir);
        let opened = ReportFile::open_in(&dir).unwrap();
        // Until the flush, only the partial name: the command reads nothing.
        assert_eq!(names(), [format!("{pid}-0.partial")]);
        // A process with a reused pid took the final name meanwhile: the
        // report goes to the next free name, the other is untouched.
        let taken = dir.join(format!("{pid}-0{REPORT_SUFFIX}"));
        std::fs::write(&taken, "other").unwrap();
        let done = opened.finish("done\t/o/a.csv\n").unwrap();
        assert_eq!(done, dir.join(format!("{pid}-1{REPORT_SUFFIX}")));
        assert_eq!(std::fs::read_to_string(&done).unwrap(), "done\t/o/a.csv\n");
        assert_eq!(std::fs::read_to_string(&taken).unwrap(), "other");
        assert_eq!(
            names(),
            [
                format!("{pid}-0{REPORT_SUFFIX}"),
                format!("{pid}-1{REPORT_SUFFIX}")
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
