//! Shared by the RPC doorbell tests (`rpc_workload.rs`, `rpc_trace.rs`):
//! where the build lives, the `rpc-doorbell` workload, and how it runs on the
//! runtime `RPROF_TEST_ROCM` selects (`rocm_runtime`).

#![allow(dead_code)] // each test binary uses a different part

#[path = "../rocm_runtime/mod.rs"]
pub mod rocm_runtime;

use std::path::PathBuf;

pub use rocm_runtime::Runtime;

/// The repository root.
pub fn repo() -> PathBuf {
    rocm_runtime::repo()
}

/// `<target>`: `CARGO_TARGET_DIR` (relative to the repository if relative),
/// else the test binary's.
pub fn target_dir() -> PathBuf {
    rocm_runtime::target_dir()
}

/// `<target>/<profile>`, where cargo put `rprof` and the libraries.
pub fn profile_dir() -> PathBuf {
    rocm_runtime::profile_dir()
}

/// Builds `rpc-doorbell` and its code object with
/// `scripts/build-workloads.sh <target>/rocm-VERSION/workloads` inside the
/// selected runtime's root, with its `g++` and clang (the script rebuilds
/// only what changed), and returns the program's path.
pub fn build_workload() -> PathBuf {
    let runtime = Runtime::selected();
    let out = runtime.build_dir(&target_dir(), "workloads");
    let build = runtime
        .tool("bash")
        .arg(repo().join("scripts/build-workloads.sh"))
        .arg(&out)
        .env("CLANG", runtime.kernel_clang())
        .env("CXX", "g++")
        .output()
        .expect("bash runs scripts/build-workloads.sh");
    assert!(
        build.status.success(),
        "scripts/build-workloads.sh on ROCm {} failed:\n{}{}",
        runtime.version(),
        String::from_utf8_lossy(&build.stdout),
        String::from_utf8_lossy(&build.stderr)
    );
    let program = out.join("rpc-doorbell");
    assert!(program.is_file() && out.join("rpc_kernels.hsaco").is_file());
    program
}

/// The `rprof` binary cargo built; fails the test with the reason when it,
/// or the emulator front-end the selected runtime needs, is missing.
pub fn rprof() -> PathBuf {
    let rprof = profile_dir().join("rprof");
    assert!(
        rprof.is_file(),
        "{} is missing: run `cargo build --workspace` first",
        rprof.display()
    );
    if let Err(e) = Runtime::selected().emulator(&profile_dir()) {
        panic!("{e}");
    }
    rprof
}
