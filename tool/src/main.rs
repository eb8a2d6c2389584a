//! `rprof`: runs an application with the rprof tool library loaded and,
//! where there is no AMD GPU driver, on rprof's emulated GPU.
//!
//! The command itself never touches the HSA runtime. It maps its arguments to
//! environment variables (see `cli.rs`), starts the application as a child
//! process, waits for it, reports the files the tool library wrote and exits
//! with the application's status (128 + N if it died of signal N).

mod cli;
mod front_end;
mod merge;

use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Parser;
use rprof_core::config::{ProcessFacts, TraceConfig};

use cli::{sibling_of_exe, Cli, Command as CliCommand, Device, LaunchPlan};

/// Name of the tool library that `cargo build` puts next to `rprof`.
const TOOL_LIBRARY: &str = "librprof_tool.so";
/// Name of the emulator's thunk front-end that `cargo build` puts next to
/// `rprof` (for ROCr up to 6.1).
const EMULATOR_LIBRARY: &str = "libhsakmt.so";
/// Name of the emulator's kfd front-end that `cargo build` puts next to
/// `rprof` (for ROCr from 6.2, which has the thunk built in).
const EMULATOR_KFD_LIBRARY: &str = "librprof_emu_kfd.so";

fn main() {
    let cli = Cli::parse();
    std::process::exit(run(cli));
}

fn run(cli: Cli) -> i32 {
    if let Some(CliCommand::Merge { inputs, output }) = &cli.command {
        let inputs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
        return match merge::merge(&inputs, output) {
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
        };
    }
    if cli.app.is_empty() {
        eprintln!("rprof: error: no application given (usage: rprof [OPTIONS] [--] APP [ARGS]...)");
        return 2;
    }
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("rprof"));
    let kfd_present = Path::new("/dev/kfd").exists();
    let mut plan = LaunchPlan::from_cli(&cli.trace, kfd_present);

    let mut child_env: Vec<(String, OsString)> = Vec::new();
    let mut remove: Vec<String> = Vec::new();

    if plan.tracing {
        // Validate exactly as the library will, so a mistake is reported once,
        // here, and the app runs untraced.
        let lookup = child_env_lookup(&plan);
        let facts = ProcessFacts {
            pid: 0,
            ppid: 0,
            hostname: String::new(),
        };
        if let Err(e) = TraceConfig::from_source(&lookup, &facts) {
            eprintln!("rprof: error: {e}; running the application untraced");
            plan.tracing = false;
        }
    }
    if plan.tracing {
        match sibling_of_exe(&exe, TOOL_LIBRARY) {
            Some(tool) => {
                let tool = tool.canonicalize().unwrap_or(tool);
                let mut value = tool.into_os_string();
                if let Some(existing) = std::env::var_os("HSA_TOOLS_LIB").filter(|v| !v.is_empty())
                {
                    value.push(" ");
                    value.push(existing);
                }
                child_env.push(("HSA_TOOLS_LIB".into(), value));
                for (k, v) in &plan.env {
                    child_env.push((k.clone(), v.into()));
                }
            }
            None => {
                eprintln!(
                    "rprof: error: {TOOL_LIBRARY} not found next to {} (build with `cargo build --release`); running the application untraced",
                    exe.display()
                );
                plan.tracing = false;
            }
        }
    }
    if !plan.tracing {
        // A bad inherited RPROF_* value must not make the library complain a
        // second time.
        remove.extend(
            std::env::vars()
                .map(|(k, _)| k)
                .filter(|k| k.starts_with("RPROF_") && !k.starts_with("RPROF_EMU")),
        );
    }

    if plan.emulated {
        if cli.trace.device == Device::Auto {
            eprintln!("rprof: no /dev/kfd on this machine: using the emulated GPU (--device native to refuse)");
        }
        match emulator_env(&exe) {
            Ok((name, value)) => child_env.push((name.into(), value)),
            Err(e) => eprintln!("rprof: error: cannot set up the emulated GPU: {e}; running the application without it"),
        }
    }

    let mut cmd = Command::new(&cli.app[0]);
    cmd.args(&cli.app[1..]);
    for k in &remove {
        cmd.env_remove(k);
    }
    for (k, v) in &child_env {
        cmd.env(k, v);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "rprof: error: cannot run {}: {e}",
                cli.app[0].to_string_lossy()
            );
            return if e.kind() == io::ErrorKind::NotFound {
                127
            } else {
                126
            };
        }
    };
    // The terminal's Ctrl-C reaches the app too; rprof waits for it and
    // reports. Ignored only after the spawn, since SIG_IGN survives exec.
    ignore_interactive_signals();
    let child_pid = child.id();
    let status = match child.wait() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rprof: error: waiting for the application failed: {e}");
            return 1;
        }
    };
    if plan.tracing {
        report_outputs(&plan, child_pid);
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

/// Prints the files the child's tool library wrote.
fn report_outputs(plan: &LaunchPlan, child_pid: u32) {
    let lookup = child_env_lookup(plan);
    let facts = ProcessFacts {
        pid: child_pid,
        ppid: std::process::id(),
        hostname: rprof_core::config::hostname(),
    };
    let Ok(Some(cfg)) = TraceConfig::from_source(&lookup, &facts) else {
        return;
    };
    let mut wanted = Vec::new();
    if cfg.formats.pftrace {
        wanted.push(cfg.output_path(".pftrace"));
    }
    if cfg.formats.csv {
        wanted.push(cfg.output_path("_kernel_trace.csv"));
    }
    if cfg.formats.json {
        wanted.push(cfg.output_path("_results.json"));
    }
    if cfg.stats {
        wanted.push(cfg.output_path("_kernel_stats.csv"));
    }
    if cfg.rpc_trace {
        // Written on the first doorbell wake only.
        if cfg.formats.csv {
            wanted.push(cfg.output_path("_rpc_trace.csv"));
        }
        if cfg.stats {
            wanted.push(cfg.output_path("_rpc_stats.csv"));
        }
    }
    let mut any = false;
    for p in wanted {
        if p.exists() {
            eprintln!("rprof: wrote {}", p.display());
            any = true;
        }
    }
    if !any {
        eprintln!(
            "rprof: no trace was written for process {child_pid} (did the application use the HSA runtime?)"
        );
    }
}

/// The variable that puts the emulated GPU under the runtime the child will
/// load, with its value: the front-end that runtime needs
/// ([`front_end::needed_by_runtime`]), found next to `rprof`, ahead of what
/// the user has in that variable.
fn emulator_env(exe: &Path) -> io::Result<(&'static str, OsString)> {
    let user_path = std::env::var_os("LD_LIBRARY_PATH").filter(|v| !v.is_empty());
    let choice =
        front_end::needed_by_runtime(&front_end::SearchPath::for_child(user_path.as_deref()))
            .map_err(io::Error::other)?;
    let (name, mut value, separator) = match choice.front_end {
        front_end::FrontEnd::Thunk => ("LD_LIBRARY_PATH", emulator_dir(exe)?.into_os_string(), ":"),
        front_end::FrontEnd::KfdPreload => {
            let lib = sibling_of_exe(exe, EMULATOR_KFD_LIBRARY).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "{} has the thunk built in and needs the emulator's kfd front-end, but \
                         {EMULATOR_KFD_LIBRARY} is not next to {} (build with `cargo build --release`)",
                        choice.runtime.as_deref().unwrap_or(Path::new(front_end::RUNTIME_LIBRARY)).display(),
                        exe.display()
                    ),
                )
            })?;
            ("LD_PRELOAD", lib.canonicalize()?.into_os_string(), " ")
        }
    };
    if let Some(existing) = std::env::var_os(name).filter(|v| !v.is_empty()) {
        value.push(separator);
        value.push(existing);
    }
    Ok((name, value))
}

/// A directory holding `libhsakmt.so.1` → the emulator library next to
/// `rprof`, for `LD_LIBRARY_PATH`. Created next to the library, or in the
/// temporary directory when that is read-only.
fn emulator_dir(exe: &Path) -> io::Result<PathBuf> {
    let lib = sibling_of_exe(exe, EMULATOR_LIBRARY).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{EMULATOR_LIBRARY} not found next to {} (build with `cargo build --release`)",
                exe.display()
            ),
        )
    })?;
    let lib = lib.canonicalize()?;
    let beside = lib.parent().map(|d| d.join("rprof-emu"));
    let uid = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap_or(0);
    let fallback = std::env::temp_dir().join(format!("rprof-emu-{uid}"));
    let mut last_err = None;
    for dir in beside.into_iter().chain(std::iter::once(fallback)) {
        match link_into(&dir, &lib) {
            Ok(()) => return Ok(dir),
            Err(e) => last_err = Some(e),
        }
    }
    Err(last_err.unwrap_or_else(|| io::Error::other("no directory for the emulator link")))
}

fn link_into(dir: &Path, lib: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let link = dir.join("libhsakmt.so.1");
    if std::fs::read_link(&link).ok().as_deref() == Some(lib) {
        return Ok(());
    }
    // Create under a unique name and rename over, so concurrent runs never
    // see a missing or half-made link.
    let tmp = dir.join(format!(".libhsakmt.so.1.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(lib, &tmp)?;
    std::fs::rename(&tmp, &link)
}

fn ignore_interactive_signals() {
    // SAFETY: `signal` with SIG_IGN installs no handler code and touches no
    // Rust state; it only changes this process's disposition.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
    }
}
