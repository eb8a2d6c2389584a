//! The emulator's own C API (`emu/include/rprof_emu.h`), exported next to the `hsaKmt*` functions.
//!
//! # Safety
//! FFI entry points: pointer arguments are checked for null; every body runs under `catch_unwind` and reports
//! failure (-1) if it panicked.

use std::ffi::CStr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;

use libc::{c_char, c_int, c_void};

use crate::emulator;
use crate::kernels::{HostKernel, HostKernelFn, HostKernelKey};

std::arch::global_asm!(
    ".symver rprof_emu_register_kernel, rprof_emu_register_kernel@@@HSAKMT_1",
    ".symver rprof_emu_register_kernel_object, rprof_emu_register_kernel_object@@@HSAKMT_1",
    ".symver rprof_emu_unregister_kernel, rprof_emu_unregister_kernel@@@HSAKMT_1",
    ".symver rprof_emu_signal_add, rprof_emu_signal_add@@@HSAKMT_1",
    ".symver rprof_emu_signal_interrupt, rprof_emu_signal_interrupt@@@HSAKMT_1",
    ".symver rprof_emu_signal_ring, rprof_emu_signal_ring@@@HSAKMT_1",
    ".symver rprof_emu_kernel_name, rprof_emu_kernel_name@@@HSAKMT_1",
    ".symver rprof_emu_get_stats, rprof_emu_get_stats@@@HSAKMT_1",
    ".symver rprof_emu_signal_interrupt_before, rprof_emu_signal_interrupt_before@@@HSAKMT_1",
);

fn guard(f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(-1)
}

fn name_key(name: *const c_char) -> Option<HostKernelKey> {
    if name.is_null() {
        return None;
    }
    // SAFETY: non-null, NUL-terminated C string from the caller.
    let s = unsafe { CStr::from_ptr(name) }.to_str().ok()?;
    Some(HostKernelKey::Name(
        s.strip_suffix(".kd").unwrap_or(s).to_string(),
    ))
}

/// Registers `func` as the host implementation of the kernel named `symbol_name` (with or without `.kd`).
/// Returns 0, or -1 on a bad argument or configuration.
///
/// # Safety
/// `symbol_name` must be a NUL-terminated string; `func` must be safe to call from the CP thread.
#[no_mangle]
pub unsafe extern "C" fn rprof_emu_register_kernel(
    symbol_name: *const c_char,
    func: Option<HostKernelFn>,
    user_data: *mut c_void,
) -> c_int {
    guard(|| {
        let (Ok(e), Some(key), Some(func)) = (emulator(), name_key(symbol_name), func) else {
            return -1;
        };
        e.host_kernels.register(
            key,
            HostKernel {
                func,
                user_data: user_data as usize,
            },
        );
        0
    })
}

/// Registers `func` for one kernel object (descriptor address). Returns 0 or -1.
///
/// # Safety
/// `func` must be safe to call from the CP thread.
#[no_mangle]
pub unsafe extern "C" fn rprof_emu_register_kernel_object(
    kernel_object: u64,
    func: Option<HostKernelFn>,
    user_data: *mut c_void,
) -> c_int {
    guard(|| {
        let (Ok(e), Some(func)) = (emulator(), func) else {
            return -1;
        };
        e.host_kernels.register(
            HostKernelKey::Object(kernel_object),
            HostKernel {
                func,
                user_data: user_data as usize,
            },
        );
        0
    })
}

/// Removes the host kernel registered under `symbol_name`. Returns 0 if one was registered, else -1.
///
/// # Safety
/// `symbol_name` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn rprof_emu_unregister_kernel(symbol_name: *const c_char) -> c_int {
    guard(|| {
        let (Ok(e), Some(key)) = (emulator(), name_key(symbol_name)) else {
            return -1;
        };
        if e.host_kernels.unregister(&key) {
            0
        } else {
            -1
        }
    })
}

/// Device-side signal update, as hardware does it: atomically adds `delta` to the signal's value, stores its
/// `event_id` to `*event_mailbox_ptr` and raises the interrupt (fires the event). Returns 0 or -1.
///
/// # Safety
/// `signal_handle` must be the handle (address of the `amd_signal_t`) of a live ROCr signal.
#[no_mangle]
pub unsafe extern "C" fn rprof_emu_signal_add(signal_handle: u64, delta: i64) -> c_int {
    guard(|| {
        let Ok(e) = emulator() else { return -1 };
        if signal_handle == 0 {
            return -1;
        }
        // SAFETY: live signal per the contract.
        unsafe { crate::cp::signal_complete(e, signal_handle, delta, None) };
        0
    })
}

/// Raises the interrupt of a signal without changing its value (mailbox store + event fire). Returns 0 or -1.
///
/// # Safety
/// `signal_handle` must be the handle of a live ROCr signal.
#[no_mangle]
pub unsafe extern "C" fn rprof_emu_signal_interrupt(signal_handle: u64) -> c_int {
    guard(|| {
        let Ok(e) = emulator() else { return -1 };
        if signal_handle == 0 {
            return -1;
        }
        // SAFETY: live signal per the contract.
        unsafe { crate::cp::signal_interrupt(e, signal_handle) };
        0
    })
}

/// What a wave ringing an RPC doorbell does: adds `delta` to the signal's value and raises the interrupt if
/// the value was 0; the ring time is noted before the new value is visible. Stores the old value in `*old`
/// (when not null). Returns 0 or -1.
///
/// # Safety
/// `signal_handle` must be the handle of a live ROCr signal; `old` null or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rprof_emu_signal_ring(
    signal_handle: u64,
    delta: i64,
    old: *mut i64,
) -> c_int {
    guard(|| {
        let Ok(e) = emulator() else { return -1 };
        if signal_handle == 0 {
            return -1;
        }
        // SAFETY: live signal per the contract.
        let was = unsafe { crate::cp::signal_ring(e, signal_handle, delta) };
        if !old.is_null() {
            // SAFETY: non-null and writable per the contract.
            unsafe { old.write(was) };
        }
        0
    })
}

/// `CLOCK_BOOTTIME` ns of the latest interrupt the device raised on this
/// signal at or before `t_ns` (among the last few; what
/// [`rprof_emu_signal_add`] / [`rprof_emu_signal_interrupt`] and completing
/// packets do), or 0 if none or if the signal has no event. Tracers use it
/// as the ring time of an RPC doorbell, which real hardware does not report.
///
/// # Safety
/// `signal_handle` must be the handle of a live ROCr signal.
#[no_mangle]
pub unsafe extern "C" fn rprof_emu_signal_interrupt_before(signal_handle: u64, t_ns: u64) -> u64 {
    catch_unwind(AssertUnwindSafe(|| {
        let Ok(e) = emulator() else { return 0 };
        if signal_handle == 0 {
            return 0;
        }
        // SAFETY: live signal per the contract.
        unsafe { crate::cp::signal_interrupt_slot(e, signal_handle) }
            .map_or(0, |slot| e.events.interrupt_before(slot, t_ns))
    }))
    .unwrap_or(0)
}

/// Writes the symbol name (without `.kd`) of the kernel at `kernel_object` into `buf` (NUL-terminated, truncated
/// to `len`). Returns the name's length, or -1 if the object is not in a loaded code object.
///
/// # Safety
/// `buf` must have room for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn rprof_emu_kernel_name(
    kernel_object: u64,
    buf: *mut c_char,
    len: usize,
) -> c_int {
    guard(|| {
        let Ok(e) = emulator() else { return -1 };
        let Some(name) = crate::kernels::kernel_symbol(&e.memory, kernel_object) else {
            return -1;
        };
        if !buf.is_null() && len > 0 {
            let n = name.len().min(len - 1);
            // SAFETY: `buf` has room for `len` bytes and `n + 1 <= len`.
            unsafe {
                std::ptr::copy_nonoverlapping(name.as_ptr(), buf as *mut u8, n);
                *buf.add(n) = 0;
            }
        }
        name.len() as c_int
    })
}

/// Counters of the emulator (see `struct rprof_emu_stats` in the header).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct RprofEmuStats {
    /// Kernel dispatches retired.
    pub dispatches: u64,
    /// Barrier packets retired.
    pub barriers: u64,
    /// Vendor-specific / agent-dispatch packets retired.
    pub vendor_packets: u64,
    /// ROCr blit kernels executed on the host.
    pub blits: u64,
    /// Blits skipped (untracked memory).
    pub blits_skipped: u64,
    /// Host kernels run.
    pub host_kernels: u64,
    /// Queue faults raised.
    pub faults: u64,
    /// Live queues.
    pub queues: u64,
    /// Live allocations.
    pub allocations: u64,
    /// Bytes in live allocations.
    pub allocated_bytes: u64,
    /// Live user-memory registrations.
    pub registrations: u64,
    /// Live events.
    pub events: u64,
    /// Events fired so far.
    pub events_fired: u64,
    /// SDMA copies and fills executed.
    pub sdma_copies: u64,
}

/// Fills `*out`. Returns 0 or -1.
///
/// # Safety
/// `out` must point to a writable `struct rprof_emu_stats`.
#[no_mangle]
pub unsafe extern "C" fn rprof_emu_get_stats(out: *mut RprofEmuStats) -> c_int {
    guard(|| {
        let Ok(e) = emulator() else { return -1 };
        if out.is_null() {
            return -1;
        }
        let s = &e.cp.stats;
        let m = e.memory.stats();
        let (events, fired) = e.events.stats();
        let stats = RprofEmuStats {
            dispatches: s.dispatches.load(Ordering::Relaxed),
            barriers: s.barriers.load(Ordering::Relaxed),
            vendor_packets: s.vendor_packets.load(Ordering::Relaxed),
            blits: s.blits.load(Ordering::Relaxed),
            blits_skipped: s.blits_skipped.load(Ordering::Relaxed),
            host_kernels: s.host_kernels.load(Ordering::Relaxed),
            faults: s.faults.load(Ordering::Relaxed),
            queues: s.queues.load(Ordering::Relaxed),
            allocations: m.allocations as u64,
            allocated_bytes: m.allocated_bytes as u64,
            registrations: m.registrations as u64,
            events: events as u64,
            events_fired: fired,
            sdma_copies: s.sdma_copies.load(Ordering::Relaxed),
        };
        // SAFETY: non-null, caller-provided struct of this layout.
        unsafe { *out = stats };
        0
    })
}
