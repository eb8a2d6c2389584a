//! Shared by the RPC doorbell tests (`rpc_workload.rs`, `rpc_trace.rs`):
//! where the build lives, and the `rpc-doorbell` workload.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root.
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `<target>`: `CARGO_TARGET_DIR` (relative to the repository if relative),
/// else `<repo>/target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) if Path::new(&d).is_absolute() => PathBuf::from(d),
        Some(d) => repo().join(d),
        None => repo().join("target"),
    }
}

/// Builds `rpc-doorbell` and its code object with
/// `scripts/build-workloads.sh <target>/workloads` (which rebuilds only what
/// changed) and returns the program's path.
pub fn build_workload() -> PathBuf {
    let out = target_dir().join("workloads");
    let build = Command::new("bash")
        .arg(repo().join("scripts/build-workloads.sh"))
        .arg(&out)
        .output()
        .expect("bash runs scripts/build-workloads.sh");
    assert!(
        build.status.success(),
        "scripts/build-workloads.sh failed:\n{}{}",
        String::from_utf8_lossy(&build.stdout),
        String::from_utf8_lossy(&build.stderr)
    );
    let program = out.join("rpc-doorbell");
    assert!(program.is_file() && out.join("rpc_kernels.hsaco").is_file());
    program
}
