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
mod written;

use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use clap::Parser;
use rprof_core::config::{ProcessFacts, TraceConfig};
use rprof_tool::report::REPORT_DIR_VAR;

use cli::{Cli, Command as CliCommand, Device, LaunchPlan};

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => match cli::unknown_argument(&e) {
            // An option rprof does not know, before the application: a
            // usage error naming it (never taken for the application).
            Some(arg) => {
                eprintln!("{}", cli::unknown_option_message(&arg));
                std::process::exit(2);
            }
            None => e.exit(),
        },
    };
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
    if !plan.tracing {
        // Never silently untraced: without a trace option rprof is a
        // launcher (for instance onto the emulated GPU), and says so.
        eprintln!(
            "rprof: no trace option given (--kernel-trace, --sys-trace, --stats, --rpc-trace): \
             running {} untraced, nothing is recorded",
            cli.app[0].to_string_lossy()
        );
    }
    let mut env = ChildEnv::default();
    plan.tracing = plan.tracing
        && match checked_config(&plan) {
            Ok(config) => env.load_tool(&plan, &exe, config.as_ref()),
            Err(()) => false,
        };
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
    // Each traced process reports its output files as finished or
    // incomplete into this private directory (tool/src/report.rs); only
    // finished files are reported as written. Removed after the report.
    let report = if plan.tracing {
        match written::ReportDir::create(&std::env::temp_dir()) {
            Ok(r) => Some(r),
            Err(e) => {
                eprintln!(
                    "rprof: cannot create the report directory in {} ({e}): \
                     files the app writes are named incomplete",
                    std::env::temp_dir().display()
                );
                None
            }
        }
    } else {
        None
    };
    match &report {
        Some(r) => env
            .set
            .push((REPORT_DIR_VAR.into(), r.path().as_os_str().to_owned())),
        // Never an outer run's directory.
        None => env.remove.push(REPORT_DIR_VAR.into()),
    }
    let spawned = env.command(&cli.app).spawn();
    match spawned {
        Ok(child) => wait_and_report(child, &plan, report),
        Err(e) => cannot_run(&cli.app[0], &e),
    }
}

/// `rprof merge`: the exit status.
fn merge_files(inputs: &[PathBuf], output: &Path) -> i32 {
    let inputs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    let create = |p: &Path| {
        rprof_core::output::files::create_new_hinted(p, "remove it, or name another output with -o")
    };
    // rocpd databases (NAME_results.db) merge into one database; traces
    // into one trace. A mix is refused: the two are different formats.
    let databases = inputs
        .iter()
        .filter(|p| rprof_core::output::rocpd_merge::is_sqlite(p))
        .count();
    if databases > 0 {
        if databases != inputs.len() {
            eprintln!(
                "rprof: error: merge takes either rocpd databases or .pftrace traces, not both"
            );
            return 2;
        }
        return match rprof_core::output::rocpd_merge::merge_databases(&inputs, output, create) {
            Ok(s) => {
                eprintln!(
                    "rprof: wrote {} ({} tables, {} rows from {} databases)",
                    output.display(),
                    s.tables,
                    s.rows,
                    s.databases
                );
                0
            }
            Err(e) => {
                eprintln!("rprof: error: merge failed: {e}");
                1
            }
        };
    }
    match rprof_perfetto::merge::merge(&inputs, output, create) {
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

/// Reads the configuration exactly as the library will (`None`: nothing is
/// traced), so a mistake is reported once, here (`Err`), and the app runs
/// untraced; what the launch needs (the ROCTx preload) comes from it too.
fn checked_config(plan: &LaunchPlan) -> Result<Option<TraceConfig>, ()> {
    let lookup = plan.lookup();
    let facts = ProcessFacts {
        pid: 0,
        ppid: 0,
        hostname: String::new(),
    };
    TraceConfig::from_source(&lookup, &facts)
        .map_err(|e| eprintln!("rprof: error: {e}; running the application untraced"))
}

/// What the child's environment differs in from rprof's.
#[derive(Default)]
struct ChildEnv {
    /// Variables to set, in order.
    set: Vec<(String, OsString)>,
    /// Inherited variables to remove.
    remove: Vec<String>,
    /// The tool library, when it is also preloaded (`--marker-trace`,
    /// `--kernel-rename`: its ROCTx functions must come before the app's
    /// ROCTx library).
    preload_tool: Option<OsString>,
}

impl ChildEnv {
    /// Names the tool library in `HSA_TOOLS_LIB` (ahead of the user's) and
    /// sets the plan's variables; false (with one message) if the library
    /// cannot be found.
    fn load_tool(&mut self, plan: &LaunchPlan, exe: &Path, config: Option<&TraceConfig>) -> bool {
        let tool = match libraries::find(exe, libraries::TOOL_LIBRARY) {
            Ok(tool) => tool,
            Err(e) => {
                eprintln!("rprof: error: {e}; running the application untraced");
                return false;
            }
        };
        // ROCTx capture (`--marker-trace`, which `--sys-trace` implies, and
        // `--kernel-rename`) needs the library ahead of the app's ROCTx library.
        if config.is_some_and(|c| c.marker_trace || c.kernel_rename) {
            let mut preload = tool.clone().into_os_string();
            if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
                preload.push(" ");
                preload.push(existing);
            }
            self.set.push(("LD_PRELOAD".into(), preload));
            self.preload_tool = Some(tool.clone().into_os_string());
        }
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
            eprintln!("{AUTO_EMULATED_WARNING}");
        }
        match emulator_env(exe) {
            Ok((name, value, dir)) => {
                match (
                    &self.preload_tool,
                    self.set.iter_mut().find(|(k, _)| k == name),
                ) {
                    // Both preloaded: the tool first, then the emulator's
                    // value (which already holds the inherited one).
                    (Some(tool), Some(entry)) => {
                        let mut joined = tool.clone();
                        joined.push(" ");
                        joined.push(value);
                        entry.1 = joined;
                    }
                    _ => self.set.push((name.into(), value)),
                }
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

/// Said first when `--device auto` found no `/dev/kfd` (a container started
/// without it, a machine without the driver).
const AUTO_EMULATED_WARNING: &str =
    "rprof: warning: no /dev/kfd on this machine: the application runs on rprof's \
EMULATED GPU, not real hardware; kernel times are modelled (--device native to refuse)";

/// The last line of every run on the emulated GPU.
const EMULATED_SUMMARY: &str =
    "rprof: device: EMULATED GPU (no /dev/kfd); the outputs say device \"emulated\"";

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
fn wait_and_report(mut child: Child, plan: &LaunchPlan, report: Option<written::ReportDir>) -> i32 {
    // The terminal's Ctrl-C reaches the app too; rprof waits for it and
    // reports. Ignored only after the spawn, since SIG_IGN survives exec.
    ignore_interactive_signals();
    let child_pid = child.id();
    // Outputs are created O_EXCL, so a file already at an output path when
    // the app starts belongs to an earlier run (this run refuses that name):
    // it is never reported as this run's, written or incomplete. Taken right
    // after the spawn, long before the child's runtime opens anything.
    let earlier_files = if plan.tracing {
        written::earlier_files(plan, child_pid)
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
        let lines = report.as_ref().map(|r| r.read_all()).unwrap_or_default();
        written::report_outputs(plan, child_pid, &lines, &earlier_files);
    }
    if plan.emulated {
        // Said again after the app's own output, next to the file names.
        eprintln!("{EMULATED_SUMMARY}");
    }
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        _ => 1,
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
