//! The one harness of rprof's end-to-end tests: every `tests/*.rs` that runs
//! a program on a real ROCm runtime over the emulated GPU declares
//! `mod harness;` and nothing else of its kind (in the spirit of ripgrep's
//! single `tests/util.rs`).
//!
//! What it owns, one module per job:
//! * [`runtime`]: which runtime `RPROF_TEST_ROCM` selects (5.2, 6.1, 6.4, 7.0),
//!   its root, its compilers and the emulator front-end it needs.
//! * [`artefacts`]: the Rust artefacts (`rprof`, `librprof_tool.so`, both
//!   emulator front-ends), built once per test binary by one nested `cargo
//!   build` in the test binary's own profile, so `cargo test --test X` works
//!   in a clean checkout and never runs stale libraries; and the compiled
//!   test programs (`tests/programs`, `hip-tests`, the emulator's programs,
//!   the RPC workload), built inside the selected runtime's root.
//! * [`run`]: running a command with a hang timeout ([`run::Run`]), fresh run
//!   directories, and the environment a traced run must not inherit.
//! * [`outputs`]: reading and cross-checking the outputs (CSV, JSON, the
//!   Perfetto checker) against the `LAUNCHED` report a program printed.
//! * [`trace_app`]: the raw-HSA `trace_app` runs (tool through
//!   `HSA_TOOLS_LIB`, `LD_PRELOAD` or the `rprof` command).
//! * [`hip`]: the HIP programs of `hip-tests/` under the `rprof` command.
//! * [`emu`]: the emulator's own programs, untraced (`key=value` output).
//! * [`matrix`]: the configurations a scenario runs across where that adds
//!   coverage (serialization on/off, host forwarding, each output format).
//!
//! Paths follow the test executable, `<target>/<profile>/deps/<test>-<hash>`:
//! `<target>` is where everything the harness builds or writes goes (so
//! `CARGO_TARGET_DIR` and `--release` are respected), nothing is hard-coded.
//! The harness never skips: a missing runtime, compiler or Python module
//! fails the test with the reason. It must not know what a test asserts:
//! checks shared by several binaries live in [`outputs`], a test's own
//! expectations stay in its file.

#![allow(dead_code)] // each test binary uses a different part

pub mod artefacts;
pub mod emu;
pub mod hip;
pub mod matrix;
pub mod outputs;
pub mod run;
pub mod runtime;
pub mod trace_app;

use std::path::{Path, PathBuf};

// Shorthands for what most binaries use; each binary uses some of them.
#[allow(unused_imports)]
pub use artefacts::{build, Build};
#[allow(unused_imports)]
pub use run::{fresh_dir, run_dir, run_with_timeout, Run};
#[allow(unused_imports)]
pub use runtime::{Emulator, FrontEnd, Runtime};

/// The repository root: the workspace root (tests belong to its root
/// package).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `<target>/<profile>` of the running test binary (`.../deps/<test>`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .expect("test executable lives in <target>/<profile>/deps")
}

/// `<target>`: the parent of [`profile_dir`] (what `CARGO_TARGET_DIR` named,
/// or `<repo>/target`).
pub fn target_dir() -> PathBuf {
    let profile = profile_dir();
    profile
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| repo().join("target"))
}

/// The running test binary's name (`kernel_trace` for
/// `deps/kernel_trace-0123abcd`), which keeps the run directories of two
/// binaries apart.
pub fn test_binary() -> String {
    let exe = std::env::current_exe().expect("test executable path");
    let stem = exe
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    match stem.rsplit_once('-') {
        Some((name, _hash)) => name.to_string(),
        None => stem,
    }
}
