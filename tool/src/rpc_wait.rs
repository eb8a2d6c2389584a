//! `--rpc-trace`: wrappers of the core table's signal-wait entries that
//! recognise GPU RPC doorbell waits (see `rprof_core::rpc` for the rule and
//! its limits) and turn them into `RpcWakeRecord`s.
//!
//! The wrappers are on the hot path of every host wait in the application.
//! Waits that are not doorbell-shaped (not `BLOCKED` + `NE 0`) cost two
//! integer compares before the original entry is called. Doorbell waits read
//! two fields of the signal's `amd_signal_t` (value, event mailbox), the
//! clock, and a thread-local state machine; they allocate nothing and take
//! no lock. Finished wakes go to the writer through the engine's lock-free
//! record queue. It must never call the runtime's wait twice for one app call,
//! nor change what the wait returns.
//!
//! On the emulated GPU the device-side ring time of the wake is read with
//! `rprof_emu_signal_interrupt_before` (looked up with `dlsym`); real
//! hardware reports no ring time, so wake latency is then unknown.
//!
//! # Safety
//! The wrappers receive `hsa_signal_t` handles from the application and
//! read the runtime's `amd_signal_t` behind them (the handle is its address
//! in ROCr); a wait on an invalid signal is already undefined behaviour in
//! the runtime itself. Original entries are the runtime's, copied at
//! `OnLoad`.

use std::cell::{Cell, RefCell};
use std::mem::offset_of;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use hsa_sys::{
    amd_signal_t, hsa_signal_condition_t, hsa_signal_t, hsa_signal_value_t, hsa_wait_state_t,
    CoreApiTable,
};
use rprof_core::engine::{boottime_ns, current_thread_id, Engine};
use rprof_core::rpc::{has_doorbell_shape, DoorbellTracker, RpcWakeRecord};

use crate::signals::PooledSignal;

/// The signature of the runtime's `hsa_signal_wait_*` entries.
pub(crate) type WaitFn = unsafe extern "C" fn(
    hsa_signal_t,
    hsa_signal_condition_t,
    hsa_signal_value_t,
    u64,
    hsa_wait_state_t,
) -> hsa_signal_value_t;
type RingTimeFn = unsafe extern "C" fn(u64, u64) -> u64;

struct Installed {
    scacquire: Option<WaitFn>,
    relaxed: Option<WaitFn>,
    engine: Arc<Engine<PooledSignal>>,
    ring_time: Option<RingTimeFn>,
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// Per-thread doorbell state; a thread that exits while serving (a server
/// shutting down) has its last wake flushed by the destructor.
struct ThreadDoorbell {
    tracker: DoorbellTracker,
    /// The last ring time attributed to a wake of this thread: a ring is
    /// attributed at most once.
    last_ring: u64,
}

impl Drop for ThreadDoorbell {
    fn drop(&mut self) {
        if let Some(rec) = self.tracker.flush(boottime_ns()) {
            emit(rec);
        }
    }
}

thread_local! {
    static DOORBELL: RefCell<ThreadDoorbell> = const {
        RefCell::new(ThreadDoorbell { tracker: DoorbellTracker::new(), last_ring: 0 })
    };
}

fn emit(rec: RpcWakeRecord) {
    if let Some(i) = INSTALLED.get() {
        i.engine.push_rpc_wake(rec);
    }
}

/// Replaces `hsa_signal_wait_scacquire` and `hsa_signal_wait_relaxed` in
/// `core` with the doorbell-aware wrappers. Call once, at `OnLoad`.
pub fn install(core: &mut CoreApiTable, engine: Arc<Engine<PooledSignal>>) {
    let ring_time = {
        // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name; the
        // symbol, when present, is the emulator's exported function with
        // this exact signature (emu/include/rprof_emu.h).
        let p = unsafe {
            libc::dlsym(
                libc::RTLD_DEFAULT,
                c"rprof_emu_signal_interrupt_before".as_ptr(),
            )
        };
        // SAFETY: non-null symbol of the documented signature.
        (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut libc::c_void, RingTimeFn>(p) })
    };
    let installed = Installed {
        scacquire: core.hsa_signal_wait_scacquire_fn,
        relaxed: core.hsa_signal_wait_relaxed_fn,
        engine,
        ring_time,
    };
    if INSTALLED.set(installed).is_err() {
        return;
    }
    if core.hsa_signal_wait_scacquire_fn.is_some() {
        core.hsa_signal_wait_scacquire_fn = Some(wait_scacquire);
    }
    if core.hsa_signal_wait_relaxed_fn.is_some() {
        core.hsa_signal_wait_relaxed_fn = Some(wait_relaxed);
    }
}

/// Reads the value and whether the signal has an event mailbox.
///
/// # Safety
/// `signal` is a live ROCr signal (its handle is its `amd_signal_t`).
unsafe fn signal_facts(signal: hsa_signal_t) -> (i64, bool) {
    let base = signal.handle as usize;
    // SAFETY: live signal per the contract; `value` and `event_mailbox_ptr`
    // are aligned 8-byte fields that other threads update atomically.
    unsafe {
        let value = (*((base + offset_of!(amd_signal_t, __bindgen_anon_1)) as *const AtomicI64))
            .load(Ordering::Acquire);
        let mailbox = (*((base + offset_of!(amd_signal_t, event_mailbox_ptr)) as *const AtomicU64))
            .load(Ordering::Relaxed);
        (value, mailbox != 0)
    }
}

#[cfg(test)]
thread_local! {
    /// Test-only fault injection: rprof's bookkeeping panics right after the
    /// runtime's wait returned.
    static PANIC_AFTER_WAIT: Cell<bool> = const { Cell::new(false) };
}

/// The wrapper body under `catch_unwind`: the runtime's wait runs exactly
/// once. A panic in rprof's bookkeeping before the wait falls back to the
/// plain wait; one after the wait returned gives back that wait's value
/// (waiting again would change what the app sees: the signal may have moved
/// on, and the app would block for another round).
///
/// # Safety
/// Arguments as for the runtime's wait; `original` is the runtime's entry.
unsafe fn guarded_wait(
    original: WaitFn,
    signal: hsa_signal_t,
    condition: hsa_signal_condition_t,
    compare: hsa_signal_value_t,
    timeout: u64,
    state: hsa_wait_state_t,
) -> hsa_signal_value_t {
    let waited: Cell<Option<hsa_signal_value_t>> = Cell::new(None);
    let traced = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller's arguments and the runtime's own entry.
        unsafe {
            traced_wait(
                original, &waited, signal, condition, compare, timeout, state,
            )
        }
    }));
    match (traced, waited.get()) {
        (Ok(v), _) => v,
        (Err(_), Some(v)) => v,
        // SAFETY: as above; the runtime's wait has not run yet.
        (Err(_), None) => unsafe { original(signal, condition, compare, timeout, state) },
    }
}

/// The common wrapper body. Every call of `original` stores its result in
/// `waited` before anything else runs.
///
/// # Safety
/// Arguments as for the runtime's wait; `original` is the runtime's entry.
unsafe fn traced_wait(
    original: WaitFn,
    waited: &Cell<Option<hsa_signal_value_t>>,
    signal: hsa_signal_t,
    condition: hsa_signal_condition_t,
    compare: hsa_signal_value_t,
    timeout: u64,
    state: hsa_wait_state_t,
) -> hsa_signal_value_t {
    // Fast exit for every wait that cannot be a doorbell wait.
    if signal.handle == 0 || !has_doorbell_shape(condition, compare, state) {
        // SAFETY: forwarding the caller's arguments to the runtime.
        let v = unsafe { original(signal, condition, compare, timeout, state) };
        waited.set(Some(v));
        return v;
    }
    // SAFETY: the caller waits on this signal, so it is live.
    let (value_now, has_mailbox) = unsafe { signal_facts(signal) };
    if !has_mailbox {
        if let Some(i) = INSTALLED.get() {
            i.engine.count_rpc_unrecognised();
        }
        // SAFETY: as above.
        let v = unsafe { original(signal, condition, compare, timeout, state) };
        waited.set(Some(v));
        return v;
    }
    let enter = boottime_ns();
    let done = DOORBELL
        .try_with(|d| {
            d.borrow_mut()
                .tracker
                .wait_enter(signal.handle, enter, value_now)
        })
        .ok()
        .flatten();
    if let Some(rec) = done {
        emit(rec);
    }
    // SAFETY: as above.
    let value = unsafe { original(signal, condition, compare, timeout, state) };
    waited.set(Some(value));
    #[cfg(test)]
    if PANIC_AFTER_WAIT.with(Cell::get) {
        panic!("injected bookkeeping failure after the wait");
    }
    let now = boottime_ns();
    let ring = INSTALLED
        .get()
        .and_then(|i| i.ring_time)
        // SAFETY: the emulator's function, on a live signal.
        .map_or(0, |f| unsafe { f(signal.handle, now) });
    let thread_id = current_thread_id();
    let _ = DOORBELL.try_with(|d| {
        let mut d = d.borrow_mut();
        // The latest ring at or before the wake, unless an earlier wake of
        // this thread already took it.
        let ring = if value != 0 && ring > d.last_ring {
            ring
        } else {
            0
        };
        if ring != 0 {
            d.last_ring = ring;
        }
        d.tracker
            .wait_exit(thread_id, signal.handle, now, value, ring);
    });
    value
}

macro_rules! wrapper {
    ($name:ident, $field:ident) => {
        unsafe extern "C" fn $name(
            signal: hsa_signal_t,
            condition: hsa_signal_condition_t,
            compare: hsa_signal_value_t,
            timeout: u64,
            state: hsa_wait_state_t,
        ) -> hsa_signal_value_t {
            let Some(original) = INSTALLED.get().and_then(|i| i.$field) else {
                return compare;
            };
            // SAFETY: the runtime's own entry with the caller's arguments.
            unsafe { guarded_wait(original, signal, condition, compare, timeout, state) }
        }
    };
}

wrapper!(wait_scacquire, scacquire);
wrapper!(wait_relaxed, relaxed);

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    static WAITS: AtomicU32 = AtomicU32::new(0);

    unsafe extern "C" fn counting_wait(
        _signal: hsa_signal_t,
        _condition: hsa_signal_condition_t,
        _compare: hsa_signal_value_t,
        _timeout: u64,
        _state: hsa_wait_state_t,
    ) -> hsa_signal_value_t {
        WAITS.fetch_add(1, Ordering::SeqCst);
        7
    }

    #[test]
    fn a_panic_after_the_wait_returned_never_waits_a_second_time() {
        // A doorbell-shaped signal: value 1, an event mailbox.
        // SAFETY: amd_signal_t is plain data; all-zero is a valid value.
        let mut sig: Box<amd_signal_t> = Box::new(unsafe { std::mem::zeroed() });
        sig.event_mailbox_ptr = 0x1000;
        sig.__bindgen_anon_1.value = 1;
        let handle = hsa_signal_t {
            handle: &*sig as *const amd_signal_t as u64,
        };
        let (ne, blocked) = (1, 0);
        assert!(has_doorbell_shape(ne, 0, blocked));
        PANIC_AFTER_WAIT.with(|p| p.set(true));
        // SAFETY: a live fake signal and a fake wait that only counts.
        let v = unsafe { guarded_wait(counting_wait, handle, ne, 0, u64::MAX, blocked) };
        PANIC_AFTER_WAIT.with(|p| p.set(false));
        assert_eq!(v, 7);
        assert_eq!(
            WAITS.load(Ordering::SeqCst),
            1,
            "the runtime's wait ran twice"
        );
        // Without the fault: still exactly one wait per call.
        // SAFETY: as above.
        let v = unsafe { guarded_wait(counting_wait, handle, ne, 0, u64::MAX, blocked) };
        assert_eq!((v, WAITS.load(Ordering::SeqCst)), (7, 2));
    }
}
