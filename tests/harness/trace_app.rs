//! The raw-HSA program `tests/programs/trace_app.cpp` traced on the selected
//! runtime: with the tool through `HSA_TOOLS_LIB` or `LD_PRELOAD`
//! ([`run_traced`]), or under the `rprof` command ([`run_rprof`]); outputs
//! `csv,json,pftrace` named `run` in a fresh run directory, and the program's
//! `LAUNCHED kernel=<name> count=<n>` / `TOTAL <n>` report.

use std::collections::BTreeMap;

use super::artefacts::{build, trace_app};
use super::run::{clear_rprof_env, fresh_dir, run_dir, run_with_timeout, Run};
use super::runtime::Runtime;

/// How the tool gets into the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Load {
    /// `HSA_TOOLS_LIB=<tool>`.
    ToolsLib,
    /// `LD_PRELOAD=<tool>` only.
    Preload,
}

impl Run {
    /// What `trace_app` said it launched: `kernel -> count`, and its `TOTAL`.
    pub fn launched(&self) -> (BTreeMap<String, u64>, u64) {
        let mut map = BTreeMap::new();
        let mut total = None;
        for line in self.stdout.lines() {
            if let Some(rest) = line.strip_prefix("LAUNCHED ") {
                let mut name = None;
                let mut count = None;
                for kv in rest.split(' ') {
                    if let Some(v) = kv.strip_prefix("kernel=") {
                        name = Some(v.to_string());
                    }
                    if let Some(v) = kv.strip_prefix("count=") {
                        count = Some(v.parse::<u64>().unwrap());
                    }
                }
                map.insert(name.unwrap(), count.unwrap());
            }
            if let Some(v) = line.strip_prefix("TOTAL ") {
                total = Some(v.trim().parse::<u64>().unwrap());
            }
        }
        (
            map,
            total.unwrap_or_else(|| panic!("no TOTAL line in:\n{}", self.stdout)),
        )
    }
}

/// Runs `trace_app <code object> <args>` with the tool, kernel tracing on,
/// outputs `csv,json,pftrace` into a fresh directory named after `label`,
/// plus `extra_env`.
pub fn run_traced(label: &str, args: &[&str], load: Load, extra_env: &[(&str, &str)]) -> Run {
    let b = build();
    let (app, kernels) = trace_app();
    let dir = fresh_dir(label);
    let emulator = b.emulator();
    let loader_env = match load {
        Load::ToolsLib => emulator.loader_env.clone(),
        Load::Preload => emulator.loader_env_preloading(&b.tool),
    };
    let mut cmd = Runtime::selected().command(app, &loader_env);
    cmd.arg(kernels)
        .args(args)
        .env_remove("HSA_TOOLS_LIB")
        .env("RPROF_KERNEL_TRACE", "1")
        .env("RPROF_OUTPUT_DIR", &dir)
        .env("RPROF_OUTPUT_NAME", "run")
        .env("RPROF_OUTPUT_FORMAT", "csv,json,pftrace");
    if load == Load::ToolsLib {
        cmd.env("HSA_TOOLS_LIB", &b.tool);
    }
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    run_with_timeout(cmd, dir)
}

/// Runs `rprof --kernel-trace -d <dir> -o run --output-format csv,json,pftrace
/// [extra] -- trace_app <code object> <args>` on the selected runtime, without
/// loader variables (the command sets up the tool library and the emulated
/// GPU itself).
pub fn run_rprof(label: &str, extra: &[&str], args: &[&str]) -> Run {
    fresh_dir(label);
    run_rprof_into(label, extra, args)
}

/// As [`run_rprof`], into the run directory `label` as it is (an earlier
/// run's files stay).
pub fn run_rprof_into(label: &str, extra: &[&str], args: &[&str]) -> Run {
    let (app, kernels) = trace_app();
    let dir = run_dir(label);
    let mut cmd = Runtime::selected().command(&build().rprof, &[]);
    cmd.args([
        "--kernel-trace",
        "-o",
        "run",
        "--output-format",
        "csv,json,pftrace",
        "-d",
    ])
    .arg(&dir)
    .args(extra)
    .arg("--")
    .arg(app)
    .arg(kernels)
    .args(args);
    clear_rprof_env(&mut cmd);
    run_with_timeout(cmd, dir)
}

/// `rprof --kernel-trace --output-format csv,json,pftrace -d <fresh dir>
/// <rprof_args> -- <command>` on the selected runtime, with `env` set after
/// the inherited `RPROF_*` variables are cleared: any command (a launcher,
/// valgrind), outputs named by rprof's default unless `rprof_args` says
/// otherwise.
pub fn rprof_traced(
    label: &str,
    rprof_args: &[&str],
    command: &[&str],
    env: &[(&str, &str)],
) -> Run {
    let dir = fresh_dir(label);
    let mut cmd = Runtime::selected().command(&build().rprof, &[]);
    cmd.args([
        "--kernel-trace",
        "--output-format",
        "csv,json,pftrace",
        "-d",
    ])
    .arg(&dir)
    .args(rprof_args)
    .arg("--")
    .args(command);
    clear_rprof_env(&mut cmd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_with_timeout(cmd, dir)
}

/// Runs `rprof -d <dir> -o run <rprof_args> -- trace_app <code object>
/// <args>` on the selected runtime in a fresh run directory: the options are
/// exactly `rprof_args` (no trace option or format added).
pub fn run_rprof_raw(label: &str, rprof_args: &[&str], args: &[&str]) -> Run {
    run_rprof_raw_with_env(label, rprof_args, args, &[])
}

/// [`run_rprof_raw`] with `env` set for the run (after the inherited
/// `RPROF_*` variables are cleared), e.g. the emulated GPU's kernel time.
pub fn run_rprof_raw_with_env(
    label: &str,
    rprof_args: &[&str],
    args: &[&str],
    env: &[(&str, &str)],
) -> Run {
    let (app, kernels) = trace_app();
    let dir = fresh_dir(label);
    let mut cmd = Runtime::selected().command(&build().rprof, &[]);
    cmd.arg("-d")
        .arg(&dir)
        .args(["-o", "run"])
        .args(rprof_args)
        .arg("--")
        .arg(app)
        .arg(kernels)
        .args(args);
    clear_rprof_env(&mut cmd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_with_timeout(cmd, dir)
}

/// Runs `trace_app <code object> <args>` untraced on the emulated GPU of
/// the selected runtime (no tool library, no `RPROF_*` variable).
pub fn run_untraced(label: &str, args: &[&str]) -> Run {
    let (app, kernels) = trace_app();
    let dir = fresh_dir(label);
    let mut cmd = Runtime::selected().command(app, &build().emulator().loader_env);
    cmd.arg(kernels).args(args).env_remove("HSA_TOOLS_LIB");
    clear_rprof_env(&mut cmd);
    run_with_timeout(cmd, dir)
}

/// The command [`run_traced`] runs (tool through `HSA_TOOLS_LIB`, kernel
/// tracing on, output name `run`), not started, for tests that control the
/// process themselves (kill it); and its fresh run directory.
pub fn trace_app_command(
    label: &str,
    args: &[&str],
    extra_env: &[(&str, &str)],
) -> (std::process::Command, std::path::PathBuf) {
    let b = build();
    let (app, kernels) = trace_app();
    let dir = fresh_dir(label);
    let emulator = b.emulator();
    let mut cmd = Runtime::selected().command(app, &emulator.loader_env);
    cmd.arg(kernels)
        .args(args)
        .env("HSA_TOOLS_LIB", &b.tool)
        .env("RPROF_KERNEL_TRACE", "1")
        .env("RPROF_OUTPUT_DIR", &dir)
        .env("RPROF_OUTPUT_NAME", "run")
        .env("RPROF_OUTPUT_FORMAT", "csv,json,pftrace");
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    (cmd, dir)
}
