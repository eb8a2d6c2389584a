//! What the trace says about the process: pid, name, command line, host and
//! start time, read once at `OnLoad` (the command line from
//! `/proc/self/cmdline`).
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
    }
}
