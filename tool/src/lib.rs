//! `librprof_tool.so`: the rprof tool library that ROCr loads.
//!
//! Owns the FFI edge with the runtime (tables, hooks, interceptor, wait
//! wrappers); it must not hold tracing logic that tests cannot drive without
//! ROCr (that is `rprof-core`'s engine), and must not link the runtime.
//!
//! How it gets in: ROCr's `hsa_init` loads every library named in
//! `HSA_TOOLS_LIB` and calls its `OnLoad` with the runtime's API tables. The
//! `rprof` command sets that variable; when the library is only
//! `LD_PRELOAD`ed, a constructor ([`preload`]) appends the library's own path
//! to it before `hsa_init` runs. The library never links
//! `libhsa-runtime64`: every runtime function it calls comes from the tables
//! given to `OnLoad`.
//!
//! How the pieces fit:
//! - [`runtime`] checks the tables' versions and sizes and keeps copies of
//!   the original entries ([`runtime::Runtime`]).
//! - `session` is the FFI edge, one module per job: `OnLoad` reads the
//!   configuration (`rprof_core::config`: every `RPROF_*` variable, tuning
//!   knobs included, validated there), enumerates GPU agents
//!   (`session::agents`), opens the outputs, starts the completion and
//!   writer threads of the core engine (`session::threads`), and replaces
//!   five HSA entries (`session::hooks`): `hsa_queue_create` (every queue
//!   becomes an intercept queue with profiling on and rprof's interceptor,
//!   `session::interceptor`), `hsa_queue_destroy`, `hsa_executable_freeze`
//!   (kernel names, `session::kernel_symbols`), `hsa_init` /
//!   `hsa_shut_down` (flush at the last shutdown, `session::flush`). Exit,
//!   fork and SIGTERM handlers (`session::lifecycle`) flush apps that end
//!   without `hsa_shut_down`.
//! - [`roctx`] exports the ROCTx functions, so that a preloaded library
//!   sees the application's marker calls (`--marker-trace`,
//!   `--kernel-rename`) and passes them on to the real ROCTx library.
//! - [`signals`] implements the signal pool's provider (memory signals
//!   without driver events: records in rprof's own memory for kernels,
//!   [`signal_memory`], or ROCr's) and the engine's completion backend.
//! - `outputs` opens the sinks the configuration asks for; `report` tells
//!   the `rprof` command (a file in the directory named in
//!   `RPROF_REPORT_DIR`) which output files were
//!   finished and which are incomplete, and why.
//! - [`single`] keeps a second copy of this library in the same process
//!   inactive; `terminate` flushes on SIGTERM / SIGINT, then ends by the
//!   signal.
//!
//! On any problem (bad configuration, runtime too old, no GPU, panics) rprof
//! prints one line and the app runs untraced; every `extern "C"` entry point
//! catches panics.
#![deny(missing_docs)]

mod code_objects;
mod outputs;
pub mod preload;
pub mod report;
pub mod roctx;
mod rpc_wait;
pub mod runtime;
mod session;
pub mod signal_memory;
pub mod signals;
pub mod single;
mod terminate;

use std::ffi::c_char;

use hsa_sys::HsaApiTable;

/// Called by ROCr inside `hsa_init` for a library named in `HSA_TOOLS_LIB`.
/// Returns true (keep the library loaded) even when tracing is off, so the
/// application always runs.
///
/// # Safety
/// Called by the runtime with its API table.
#[no_mangle]
pub unsafe extern "C" fn OnLoad(
    table: *mut HsaApiTable,
    _runtime_version: u64,
    _failed_tool_count: u64,
    _failed_tool_names: *const *const c_char,
) -> bool {
    // SAFETY: `table` is the runtime's API table, as OnLoad's contract says.
    session::guarded("OnLoad", || true, || unsafe { session::on_load(table) })
}

/// Called by ROCr when it unloads its tools (inside `hsa_shut_down`).
#[no_mangle]
pub extern "C" fn OnUnload() {
    session::guarded("OnUnload", || (), session::on_unload)
}
