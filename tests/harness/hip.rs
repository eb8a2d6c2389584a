//! The HIP programs of `hip-tests/` (built by
//! [`super::artefacts::hip_program`]) traced under the `rprof` command on
//! the selected runtime, which picks the emulator front-end by itself.

use std::path::Path;

use super::artefacts::rprof;
use super::run::{clear_rprof_env, fresh_dir, run_with, Run, HIP_RUN_TIMEOUT};
use super::runtime::Runtime;

/// Runs `rprof --kernel-trace --output-format pftrace,csv,json -d DIR
/// <extra> -- <program> <args>` with the MPI/Slurm rank variables removed and
/// `env` added; fails the test if it takes longer than [`HIP_RUN_TIMEOUT`].
pub fn run_traced(
    label: &str,
    extra: &[&str],
    program: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Run {
    run_traced_formats(label, "pftrace,csv,json", extra, program, args, env)
}

/// [`run_traced`] with the output formats `formats` (`--output-format`).
pub fn run_traced_formats(
    label: &str,
    formats: &str,
    extra: &[&str],
    program: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Run {
    let dir = fresh_dir(label);
    let mut cmd = Runtime::selected().command(rprof(), &[]);
    cmd.arg("--kernel-trace")
        .arg("--output-format")
        .arg(formats)
        .arg("-d")
        .arg(&dir)
        .args(extra)
        .arg("--")
        .arg(program)
        .args(args);
    for v in [
        "OMPI_COMM_WORLD_RANK",
        "PMIX_RANK",
        "PMI_RANK",
        "MV2_COMM_WORLD_RANK",
        "SLURM_PROCID",
    ] {
        cmd.env_remove(v);
    }
    clear_rprof_env(&mut cmd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_with(cmd, dir, HIP_RUN_TIMEOUT)
}
