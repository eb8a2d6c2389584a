//! What the trace says about the process: pid, name, command line, host and
//! start time, read once at `OnLoad` (the command line from
//! `/proc/self/cmdline`), and whether the GPU under the runtime is rprof's
//! emulated one (its front-end library is in the process).
//!
//! Owns reading those facts; must not touch the runtime.

use rprof_core::engine::boottime_ns;
use rprof_core::record::RunInfo;

/// The facts of this process now.
pub(super) fn of_this_process() -> RunInfo {
    let cmdline: Vec<String> = std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default();
    let process_name = cmdline
        .first()
        .map(|a| a.rsplit('/').next().unwrap_or(a).to_string())
        .unwrap_or_default();
    RunInfo {
        pid: std::process::id(),
        process_name,
        cmdline,
        hostname: rprof_core::config::hostname(),
        start_ns: boottime_ns(),
        emulated_device: emulator_loaded(),
    }
}

/// A symbol every front-end of rprof's emulated GPU exports (the thunk
/// `libhsakmt.so.1` for ROCr 5.x/6.1, `librprof_emu_kfd.so` preloaded for
/// ROCr >= 6.2); no real driver library has it.
const EMULATOR_SYMBOL: &std::ffi::CStr = c"rprof_emu_get_stats";

/// Whether the emulated GPU's front-end is loaded in this process: in the
/// global scope (preloaded, or a dependency of the app), or as the
/// runtime's `libhsakmt.so.1` loaded privately.
fn emulator_loaded() -> bool {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name; the result
    // is only compared with null.
    if !unsafe { libc::dlsym(libc::RTLD_DEFAULT, EMULATOR_SYMBOL.as_ptr()) }.is_null() {
        return true;
    }
    // SAFETY: RTLD_NOLOAD never loads anything: it returns a handle only
    // for a library already loaded, which dlclose then releases again.
    unsafe {
        let h = libc::dlopen(
            c"libhsakmt.so.1".as_ptr(),
            libc::RTLD_LAZY | libc::RTLD_NOLOAD,
        );
        if h.is_null() {
            return false;
        }
        let found = !libc::dlsym(h, EMULATOR_SYMBOL.as_ptr()).is_null();
        libc::dlclose(h);
        found
    }
}
