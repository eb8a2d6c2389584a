//! `rprof`: runs an application with the rprof tool library loaded and,
//! where there is no AMD GPU driver, on rprof's emulated GPU.
//!
//! The command itself never touches the HSA runtime. It maps its arguments to
//! environment variables (see `cli.rs`), starts the application as a child
//! process, waits for it, reports the files the tool library wrote and exits
//! with the application's status (128 + N if it died of signal N).
//!
//! Owns the launch (the child's environment, the report pipe, waiting) and
//! what is printed about the outputs; must not trace (the tool library
//! does) nor validate options by its own rules (it asks
//! `rprof_core::config`, as the library will).

mod cli;
mod front_end;
mod libraries;
mod merge;

use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use clap::Parser;
use rprof_core::config::{ProcessFacts, TraceConfig};
use rprof_tool::report::REPORT_FD_VAR;

use cli::{Cli, Command as CliCommand, Device, LaunchPlan};

fn main() {
    let cli = Cli::parse();
    std::process::exit(run(cli));
}

fn run(cli: Cli) -> i32 {
    if let Some(CliCommand::Merge { inputs, output }) = &cli.command {
        return merge_files(inputs, output);
    }
    if cli.app.is_empty() {
        eprintln!("rprof: error: no application given (usage: rprof [OPTIONS] [--] APP [ARGS]...)");
        return 2;
    }
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("rprof"));
    let kfd_present = Path::new("/dev/kfd").exists();
    let mut plan = LaunchPlan::from_cli(&cli.trace, kfd_present);
    let mut env = ChildEnv::default();
    plan.tracing = plan.tracing && config_is_valid(&plan) && env.load_tool(&plan, &exe);
    if !plan.tracing {
        env.remove_rprof_variables();
    }
    // Kept until the application has ended (a private directory is removed
    // on drop).
    let _emulator_dir = if plan.emulated {
        env.use_emulator(cli.trace.device, &exe)
    } else {
        None
    };
    // The tool library reports each output file as finished or incomplete
    // through this pipe (tool/src/report.rs); only finished files are
    // reported as written.
    let report = plan.tracing.then(ReportPipe::new).flatten();
    if let Some(r) = &report {
        env.set
            .push((REPORT_FD_VAR.into(), r.write_fd.to_string().into()));
    }
    let spawned = env.command(&cli.app).spawn();
    let report = report.map(ReportPipe::close_write_end);
    match spawned {
        Ok(child) => wait_and_report(child, &plan, report),
        Err(e) => cannot_run(&cli.app[0], &e),
    }
}

/// `rprof merge`: the exit status.
fn merge_files(inputs: &[PathBuf], output: &Path) -> i32 {
    let inputs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    match merge::merge(&inputs, output) {
        Ok(s) => {
            eprintln!(
                "rprof: wrote {} ({} packets from {} files, {} sequences)",
                output.display(),
                s.packets,
                inputs.len(),
                s.sequences
            );
            0
        }
        Err(e) => {
            eprintln!("rprof: error: merge failed: {e}");
            1
        }
    }
}

/// Validates the configuration exactly as the library will, so a mistake is
/// reported once, here, and the app runs untraced.
fn config_is_valid(plan: &LaunchPlan) -> bool {
    let lookup = child_env_lookup(plan);
    let facts = ProcessFacts {
        pid: 0,
        ppid: 0,
        hostname: String::new(),
    };
    match TraceConfig::from_source(&lookup, &facts) {
        Ok(_) => true,
        Err(e) => {
            eprintln!("rprof: error: {e}; running the application untraced");
            false
        }
    }
}

/// What the child's environment differs in from rprof's.
#[derive(Default)]
struct ChildEnv {
    /// Variables to set, in order.
    set: Vec<(String, OsString)>,
    /// Inherited variables to remove.
    remove: Vec<String>,
}

impl ChildEnv {
    /// Names the tool library in `HSA_TOOLS_LIB` (ahead of the user's) and
    /// sets the plan's variables; false (with one message) if the library
    /// cannot be found.
    fn load_tool(&mut self, plan: &LaunchPlan, exe: &Path) -> bool {
        let tool = match libraries::find(exe, libraries::TOOL_LIBRARY) {
            Ok(tool) => tool,
            Err(e) => {
                eprintln!("rprof: error: {e}; running the application untraced");
                return false;
            }
        };
        let mut value = tool.into_os_string();
        if let Some(existing) = std::env::var_os("HSA_TOOLS_LIB").filter(|v| !v.is_empty()) {
            value.push(" ");
            value.push(existing);
        }
        self.set.push(("HSA_TOOLS_LIB".into(), value));
        for (k, v) in &plan.env {
            self.set.push((k.clone(), v.into()));
        }
        true
    }

    /// Untraced: a bad inherited RPROF_* value must not make the library
    /// complain a second time.
    fn remove_rprof_variables(&mut self) {
        self.remove.extend(
            std::env::vars()
                .map(|(k, _)| k)
                .filter(|k| k.starts_with("RPROF_") && !k.starts_with("RPROF_EMU")),
        );
    }

    /// Puts the emulated GPU under the child's runtime; the private
    /// directory to keep until the child ends, if one was made.
    fn use_emulator(&mut self, device: Device, exe: &Path) -> Option<libraries::ThunkDir> {
        if device == Device::Auto {
            eprintln!("rprof: no /dev/kfd on this machine: using the emulated GPU (--device native to refuse)");
        }
        match emulator_env(exe) {
            Ok((name, value, dir)) => {
                self.set.push((name.into(), value));
                dir
            }
            Err(e) => {
                eprintln!("rprof: error: cannot set up the emulated GPU: {e}; running the application without it");
                None
            }
        }
    }

    /// The command running `app` with this environment.
    fn command(&self, app: &[OsString]) -> Command {
        let mut cmd = Command::new(&app[0]);
        cmd.args(&app[1..]);
        for k in &self.remove {
            cmd.env_remove(k);
        }
        for (k, v) in &self.set {
            cmd.env(k, v);
        }
        cmd
    }
}

/// The exit status when the application could not be started.
fn cannot_run(app: &OsString, e: &io::Error) -> i32 {
    eprintln!("rprof: error: cannot run {}: {e}", app.to_string_lossy());
    if e.kind() == io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

/// Waits for the application, reports the files its processes wrote, and
/// returns its exit status (128 + N if it died of signal N).
fn wait_and_report(mut child: Child, plan: &LaunchPlan, report: Option<ReportPipe>) -> i32 {
    // The terminal's Ctrl-C reaches the app too; rprof waits for it and
    // reports. Ignored only after the spawn, since SIG_IGN survives exec.
    ignore_interactive_signals();
    let child_pid = child.id();
    // Outputs are created O_EXCL, so a file already at an output path when
    // the app starts belongs to an earlier run (this run refuses that name):
    // it is never reported as this run's, written or incomplete. Taken right
    // after the spawn, long before the child's runtime opens anything.
    let earlier_files = if plan.tracing {
        existing_identities(&expected_outputs(plan, child_pid).0)
    } else {
        Vec::new()
    };
    let status = match child.wait() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rprof: error: waiting for the application failed: {e}");
            return 1;
        }
    };
    if plan.tracing {
        let lines = report.map(|r| r.read_all()).unwrap_or_default();
        report_outputs(plan, child_pid, &lines, &earlier_files);
    }
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        _ => 1,
    }
}

/// The environment the child sees: the plan's variables over rprof's own.
fn child_env_lookup(plan: &LaunchPlan) -> impl Fn(&str) -> Option<String> {
    let overrides = plan.env.clone();
    move |k: &str| {
        overrides
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var(k).ok())
    }
}

/// The pipe through which traced processes report their output files.
struct ReportPipe {
    read_fd: libc::c_int,
    write_fd: libc::c_int,
}

impl ReportPipe {
    /// A pipe whose write end the child inherits (the read end is
    /// close-on-exec and non-blocking).
    fn new() -> Option<Self> {
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
    fn close_write_end(self) -> Self {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.write_fd) };
        ReportPipe {
            write_fd: -1,
            ..self
        }
    }

    /// Everything reported so far, one entry per line.
    fn read_all(self) -> Vec<String> {
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
/// RPC files with the main file of their sink (written only on the first
/// doorbell wake, so finished when that file is).
fn expected_outputs(plan: &LaunchPlan, child_pid: u32) -> (Vec<PathBuf>, Vec<(PathBuf, PathBuf)>) {
    let lookup = child_env_lookup(plan);
    let facts = ProcessFacts {
        pid: child_pid,
        ppid: std::process::id(),
        hostname: rprof_core::config::hostname(),
    };
    let mut expected = Vec::new();
    let mut rpc = Vec::new();
    if let Ok(Some(cfg)) = TraceConfig::from_source(&lookup, &facts) {
        expected = rprof_tool::report::output_files(&cfg);
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
fn report_outputs(plan: &LaunchPlan, child_pid: u32, lines: &[String], earlier: &[(u64, u64)]) {
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
    let (expected, rpc) = expected_outputs(plan, child_pid);
    let from_earlier_run = |p: &PathBuf| {
        existing_identities(std::slice::from_ref(p))
            .first()
            .is_some_and(|id| earlier.contains(id))
    };
    let mut seen = std::collections::HashSet::new();
    for p in &done {
        if seen.insert(p.clone()) {
            eprintln!("rprof: wrote {}", p.display());
        }
    }
    for (p, main) in &rpc {
        if done.contains(main) && p.exists() && seen.insert(p.clone()) {
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
        if expected.iter().any(from_earlier_run) {
            eprintln!(
                "rprof: no trace was written for process {child_pid}: its output names belong to an earlier run"
            );
        } else {
            eprintln!(
                "rprof: no trace was written for process {child_pid} (did the application use the HSA runtime?)"
            );
        }
    }
}

/// The variable that puts the emulated GPU under the runtime the child will
/// load, with its value: the front-end that runtime needs
/// ([`front_end::needed_by_runtime`]), from rprof's own libraries
/// ([`libraries`]), ahead of what the user has in that variable; and the
/// private directory to keep until the child ends, if one was made.
fn emulator_env(exe: &Path) -> io::Result<(&'static str, OsString, Option<libraries::ThunkDir>)> {
    let user_path = std::env::var_os("LD_LIBRARY_PATH").filter(|v| !v.is_empty());
    let choice =
        front_end::needed_by_runtime(&front_end::SearchPath::for_child(user_path.as_deref()))
            .map_err(io::Error::other)?;
    let (name, mut value, separator, dir) = match choice.front_end {
        front_end::FrontEnd::Thunk => {
            let dir = libraries::thunk_dir(exe)?;
            let value = dir.path().as_os_str().to_owned();
            ("LD_LIBRARY_PATH", value, ":", Some(dir))
        }
        front_end::FrontEnd::KfdPreload => {
            let lib = libraries::find(exe, libraries::KFD_LIBRARY).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "{} has the thunk built in and needs the emulator's kfd front-end: {e}",
                        choice
                            .runtime
                            .as_deref()
                            .unwrap_or(Path::new(front_end::RUNTIME_LIBRARY))
                            .display(),
                    ),
                )
            })?;
            ("LD_PRELOAD", lib.into_os_string(), " ", None)
        }
    };
    if let Some(existing) = std::env::var_os(name).filter(|v| !v.is_empty()) {
        value.push(separator);
        value.push(existing);
    }
    Ok((name, value, dir))
}

fn ignore_interactive_signals() {
    // SAFETY: `signal` with SIG_IGN installs no handler code and touches no
    // Rust state; it only changes this process's disposition.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
    }
}
