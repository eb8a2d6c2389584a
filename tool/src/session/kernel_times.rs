//! The app's own kernel times, behind a forwarding barrier.
//!
//! By default rprof completes the app's signal of a kernel with a barrier
//! packet after the kernel (`docs/completion.md`), so the packet processor
//! writes the barrier's times into the app's signal. An app reading its
//! kernel's times from its signal (`hsa_amd_profiling_get_dispatch_time`; HIP's
//! launch events do, and on ROCm 6 some `hipEventRecord` pairs) gets the
//! kernel's times from rprof instead: the engine keeps them per app signal
//! ([`rprof_core::engine::ForwardedTimes`]). Any other signal, or one whose
//! last packet was not a forwarded kernel, goes to the runtime unchanged.

use std::time::Duration;

use hsa_sys::{
    hsa_agent_t, hsa_amd_profiling_dispatch_time_t, hsa_signal_t, hsa_status_t, HsaApiTable,
    HSA_STATUS_ERROR, HSA_STATUS_SUCCESS,
};
use rprof_core::engine::ForwardedKernel;
use rprof_core::wait::{Pace, Wait};

use super::{guarded, runtime, session, Session};
use crate::runtime::{replace_amd_entry, AmdEntry};
use crate::signals::RocrBackend;

/// The longest a query waits for its kernel to be retired (it finished on
/// the device before the app saw its signal complete; the query retires it
/// itself when it can).
const RETIRE_WAIT: Duration = Duration::from_millis(50);

/// Yields a few times, then naps 20 µs, between looks.
const RETIRE_PACE: Pace = Pace::new(16, Duration::from_micros(20));

/// Replaces `hsa_amd_profiling_get_dispatch_time` in the AMD table.
///
/// # Safety
/// As [`super::hooks::install`]: the validated `OnLoad` table, during
/// `OnLoad`.
pub(super) unsafe fn install(table: *mut HsaApiTable) {
    // SAFETY: the validated table during `OnLoad`; the replacement has the
    // entry's C signature.
    unsafe {
        replace_amd_entry(
            table,
            AmdEntry::ProfilingGetDispatchTime,
            hook_get_dispatch_time as *const () as usize,
        );
    }
}

unsafe extern "C" fn hook_get_dispatch_time(
    agent: hsa_agent_t,
    signal: hsa_signal_t,
    time: *mut hsa_amd_profiling_dispatch_time_t,
) -> hsa_status_t {
    let Some(original) = runtime().and_then(|rt| rt.amd.hsa_amd_profiling_get_dispatch_time_fn)
    else {
        return HSA_STATUS_ERROR;
    };
    if !time.is_null() {
        let kernel = session().and_then(|s| {
            guarded(
                "hsa_amd_profiling_get_dispatch_time",
                || None,
                || forwarded_kernel_times(s, signal.handle),
            )
        });
        if let Some((start, end)) = kernel {
            // SAFETY: the app's non-null out-pointer.
            unsafe { *time = hsa_amd_profiling_dispatch_time_t { start, end } };
            return HSA_STATUS_SUCCESS;
        }
    }
    // SAFETY: the runtime's own entry with the app's arguments.
    unsafe { original(agent, signal, time) }
}

/// The times of the kernel last forwarded by barrier to `signal`, once it is
/// retired (retiring finished dispatches here while the completion thread
/// has not); `None` when the signal's last packet was no such kernel.
fn forwarded_kernel_times(s: &Session, signal: u64) -> Option<(u64, u64)> {
    let mut wait: Option<Wait> = None;
    let backend = RocrBackend::new(s.rt, s.signal_memory);
    loop {
        match s.engine.forwarded_kernel(signal) {
            ForwardedKernel::Times(start, end) => return Some((start, end)),
            ForwardedKernel::Unknown => return None,
            ForwardedKernel::Pending(_) => {}
        }
        let wait = wait.get_or_insert_with(|| Wait::with_timeout(RETIRE_WAIT, RETIRE_PACE));
        if wait.expired() {
            return None;
        }
        if s.engine.lend_completion(&backend, 64) == 0 {
            wait.pause();
        }
    }
}
