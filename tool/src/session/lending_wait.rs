//! Wrappers of the core table's two signal-wait entries that let an
//! application thread spinning on the device write the tracer's records
//! while it waits.
//!
//! HIP synchronises by an `ACTIVE` wait with no timeout
//! (`hsa_signal_wait_scacquire(signal, LT, 1, UINT64_MAX, ACTIVE)`: 2-4
//! per run of the graph storm on HIP 5.2, 5.7 and 6.4), so the app's thread
//! spins in the runtime for as long as the device works, while rprof's
//! writer thread takes a core from the app's other threads (on the
//! emulated GPU, from the command processor: 1-2 µs of writer CPU per
//! dispatch). Such a wait is run here as slices of the runtime's own wait;
//! between slices the thread retires finished dispatches in the completion
//! thread's place ([`Engine::lend_completion`]) and writes queued records in
//! the writer's place ([`Engine::lend_writer`]), a few at a time, reading
//! the app's signal between them (slices of 200 µs, or 5 µs while traced
//! memory copies wait for rprof to forward their completion to the app's
//! signals); never a record that could make a sink
//! write its file (the writer thread does all file I/O, so a hung file
//! system never holds the app). What it changes for the app: a wait whose
//! signal is set meanwhile returns up to one pass and one chunk later
//! (about 16 µs each);
//! the value returned is the runtime's, from its own wait. Every other wait
//! (`BLOCKED`, or with a timeout) is the runtime's call unchanged.
//!
//! Owns the wrappers and their pacing; must not write records itself (the
//! engine does) nor wrap waits for `--rpc-trace` (`crate::rpc_wait` does,
//! around these).
//!
//! # Safety
//! The wrappers receive the application's `hsa_signal_t` and pass it to the
//! runtime's own entries, copied at `OnLoad`; reading a signal the app waits
//! on is what its wait does.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use hsa_sys::{
    hsa_signal_condition_t, hsa_signal_t, hsa_signal_value_t, hsa_wait_state_t, CoreApiTable,
    HSA_SIGNAL_CONDITION_EQ, HSA_SIGNAL_CONDITION_GTE, HSA_SIGNAL_CONDITION_LT,
    HSA_SIGNAL_CONDITION_NE, HSA_WAIT_STATE_ACTIVE,
};

use super::SESSION;
use crate::rpc_wait::WaitFn;
use crate::signals::RocrBackend;

type LoadFn = unsafe extern "C" fn(hsa_signal_t) -> hsa_signal_value_t;

/// The runtime's entries the wrappers call.
struct Originals {
    scacquire: Option<WaitFn>,
    relaxed: Option<WaitFn>,
    load: Option<LoadFn>,
}

static ORIGINALS: OnceLock<Originals> = OnceLock::new();

/// One slice of the runtime's wait, in its timeout ticks: 200 µs where the
/// runtime counts nanoseconds (ROCr on Linux); only how often the thread
/// looks for records depends on it.
const SLICE_TICKS: u64 = 200_000;
/// One slice while traced memory copies are in flight: 5 µs. A traced
/// copy completes rprof's signal, and the app's signal only when rprof
/// forwards it (the app's wait, or a kernel of the app that the device
/// holds back until the copy is done, waits for that forward), so a
/// waiting app thread looks for finished copies this often. On the
/// emulated GPU (ROCr 6.4.3, HIP's memcpy_mix, 80 copies) the kernel
/// phase's added time went from +7.9 ms with 200 µs slices to +2.6 ms at
/// 20 µs and +0.5 ms at 5 µs (command processor at real-time priority, as
/// a GPU that needs no host core; docs/performance.md).
const COPY_SLICE_TICKS: u64 = 5_000;

/// The next slice's length, in the runtime's timeout ticks: short while
/// `copies_in_flight` traced copies wait for their forward.
fn slice_ticks(copies_in_flight: u64) -> u64 {
    if copies_in_flight > 0 {
        COPY_SLICE_TICKS
    } else {
        SLICE_TICKS
    }
}

/// Records written between two reads of the app's signal (about 1 µs
/// each): what lending can add to a wait whose signal is set meanwhile.
const CHUNK: usize = 16;

/// Replaces `hsa_signal_wait_scacquire` and `hsa_signal_wait_relaxed` in
/// `core` with the lending wrappers. Call once, at `OnLoad`, before any
/// other wrapper of the same entries is installed.
pub(super) fn install(core: &mut CoreApiTable) {
    let originals = Originals {
        scacquire: core.hsa_signal_wait_scacquire_fn,
        relaxed: core.hsa_signal_wait_relaxed_fn,
        load: core.hsa_signal_load_relaxed_fn,
    };
    if originals.load.is_none() || ORIGINALS.set(originals).is_err() {
        return;
    }
    if core.hsa_signal_wait_scacquire_fn.is_some() {
        core.hsa_signal_wait_scacquire_fn = Some(wait_scacquire);
    }
    if core.hsa_signal_wait_relaxed_fn.is_some() {
        core.hsa_signal_wait_relaxed_fn = Some(wait_relaxed);
    }
}

/// Defines a wrapper of one of the two wait entries: the app's wait through
/// [`lending_wait`] with the runtime's original of that entry.
macro_rules! lending_entry {
    ($name:ident, $original:ident) => {
        unsafe extern "C" fn $name(
            signal: hsa_signal_t,
            condition: hsa_signal_condition_t,
            compare: hsa_signal_value_t,
            timeout_hint: u64,
            wait_state: hsa_wait_state_t,
        ) -> hsa_signal_value_t {
            let Some(original) = ORIGINALS.get().and_then(|o| o.$original) else {
                return 0;
            };
            let call = WaitCall {
                signal,
                condition,
                compare,
                timeout_hint,
                wait_state,
            };
            // SAFETY: the app's arguments, passed to the runtime's own entry.
            unsafe { lending_wait(original, call) }
        }
    };
}

/// One call of a wait entry, as the app made it.
#[derive(Debug, Clone, Copy)]
struct WaitCall {
    signal: hsa_signal_t,
    condition: hsa_signal_condition_t,
    compare: hsa_signal_value_t,
    timeout_hint: u64,
    wait_state: hsa_wait_state_t,
}

lending_entry!(wait_scacquire, scacquire);
lending_entry!(wait_relaxed, relaxed);

/// The app's wait, run by `original` (the runtime's entry): in slices with
/// records written between them for an `ACTIVE` wait without timeout while
/// a session traces, else as one call.
///
/// # Safety
/// `original` is the runtime's wait entry; the arguments are the app's.
unsafe fn lending_wait(original: WaitFn, call: WaitCall) -> hsa_signal_value_t {
    let WaitCall {
        signal,
        condition,
        compare,
        timeout_hint,
        wait_state,
    } = call;
    let lender = SESSION
        .get()
        .filter(|s| s.lends_writer())
        .zip(ORIGINALS.get().and_then(|o| o.load));
    let Some((session, load)) =
        lender.filter(|_| wait_state == HSA_WAIT_STATE_ACTIVE && timeout_hint == u64::MAX)
    else {
        // SAFETY: the runtime's own wait with the app's arguments.
        return unsafe { original(signal, condition, compare, timeout_hint, wait_state) };
    };
    let backend = RocrBackend::new(session.rt, session.signal_memory);
    // While it lends, the completion thread leaves its passes to it.
    let _lending = session.engine.lending();
    sliced_wait(
        // SAFETY: the runtime's own wait with the app's arguments, but a
        // slice's timeout (the app asked for none).
        |slice| unsafe { original(signal, condition, compare, slice, wait_state) },
        || slice_ticks(session.engine.copies_in_flight()),
        // SAFETY: a relaxed read of the signal the app waits on.
        || unsafe { load(signal) },
        // Finished dispatches retired here become records written here. A
        // panic stays here: that sink fails, the wait goes on.
        || {
            catch_unwind(AssertUnwindSafe(|| {
                session.engine.lend_completion(&backend, CHUNK) + session.engine.lend_writer(CHUNK)
            }))
            .unwrap_or(0)
        },
        condition,
        compare,
    )
}

/// A wait without timeout as slices of `wait` (the runtime's wait with the
/// given timeout, returning the value it saw), each as long as `slice`
/// says when it begins, with `lend` (records written, 0 when there were
/// none to write) called between slices while `load` finds the condition
/// unmet. Returns what the last slice returned: the runtime's own answer,
/// with its memory ordering.
fn sliced_wait(
    mut wait: impl FnMut(u64) -> hsa_signal_value_t,
    mut slice: impl FnMut() -> u64,
    mut load: impl FnMut() -> hsa_signal_value_t,
    mut lend: impl FnMut() -> usize,
    condition: hsa_signal_condition_t,
    compare: hsa_signal_value_t,
) -> hsa_signal_value_t {
    loop {
        let value = wait(slice());
        if satisfied(condition, value, compare) {
            return value;
        }
        while lend() > 0 {
            if satisfied(condition, load(), compare) {
                break;
            }
        }
    }
}

/// Whether `value` meets the wait's condition (an unknown condition counts
/// as met: the runtime's last answer goes back to the app).
fn satisfied(
    condition: hsa_signal_condition_t,
    value: hsa_signal_value_t,
    compare: hsa_signal_value_t,
) -> bool {
    match condition {
        HSA_SIGNAL_CONDITION_EQ => value == compare,
        HSA_SIGNAL_CONDITION_NE => value != compare,
        HSA_SIGNAL_CONDITION_LT => value < compare,
        HSA_SIGNAL_CONDITION_GTE => value >= compare,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A device that sets the signal (HIP's completion: 1 -> 0) in the
    /// `slices`-th slice of the wait, and a writer with `queued` records,
    /// written `per_lend` at a time. Returns (value returned, slices waited,
    /// records written).
    fn run(slices: u32, queued: usize, per_lend: usize) -> (i64, u32, usize) {
        let value = Cell::new(1i64);
        let waited = Cell::new(0u32);
        let left = Cell::new(queued);
        let got = sliced_wait(
            |slice| {
                assert_eq!(slice, SLICE_TICKS);
                waited.set(waited.get() + 1);
                if waited.get() >= slices {
                    value.set(0);
                }
                value.get()
            },
            || SLICE_TICKS,
            || value.get(),
            || {
                let n = per_lend.min(left.get());
                left.set(left.get() - n);
                n
            },
            HSA_SIGNAL_CONDITION_LT,
            1,
        );
        (got, waited.get(), queued - left.get())
    }

    #[test]
    fn a_wait_that_ends_in_its_first_slice_lends_nothing() {
        assert_eq!(run(1, 100, 16), (0, 1, 0));
    }

    #[test]
    fn records_are_written_between_slices_until_none_is_left() {
        // 100 records, 16 per lend: all written after the first slice; the
        // next slices find none and only wait.
        assert_eq!(run(5, 100, 16), (0, 5, 100));
    }

    #[test]
    fn lending_stops_once_the_signal_is_met() {
        // The device sets the signal while records are written: the chunk
        // in progress ends, no other starts, and the runtime's wait gives
        // the answer.
        let value = Cell::new(1i64);
        let lends = Cell::new(0u32);
        let waits = Cell::new(0u32);
        let got = sliced_wait(
            |_| {
                waits.set(waits.get() + 1);
                value.get()
            },
            || SLICE_TICKS,
            || value.get(),
            || {
                lends.set(lends.get() + 1);
                if lends.get() == 3 {
                    value.set(0);
                }
                16
            },
            HSA_SIGNAL_CONDITION_LT,
            1,
        );
        assert_eq!((got, lends.get(), waits.get()), (0, 3, 2));
    }

    #[test]
    fn slices_are_short_while_copies_are_in_flight() {
        assert_eq!(slice_ticks(0), SLICE_TICKS);
        assert_eq!(slice_ticks(1), COPY_SLICE_TICKS);
        assert_eq!(slice_ticks(4096), COPY_SLICE_TICKS);
    }

    #[test]
    fn each_slice_is_as_long_as_the_copies_in_flight_say_when_it_begins() {
        // Two copies in flight for the first two slices, none after; the
        // device sets the signal in the fourth slice.
        let value = Cell::new(1i64);
        let slices = std::cell::RefCell::new(Vec::new());
        let copies = Cell::new(2u64);
        let got = sliced_wait(
            |ticks| {
                slices.borrow_mut().push(ticks);
                if slices.borrow().len() == 2 {
                    copies.set(0);
                }
                if slices.borrow().len() == 4 {
                    value.set(0);
                }
                value.get()
            },
            || slice_ticks(copies.get()),
            || value.get(),
            || 0,
            HSA_SIGNAL_CONDITION_LT,
            1,
        );
        assert_eq!(got, 0);
        assert_eq!(
            *slices.borrow(),
            [COPY_SLICE_TICKS, COPY_SLICE_TICKS, SLICE_TICKS, SLICE_TICKS]
        );
    }

    #[test]
    fn conditions_are_the_runtime_s() {
        assert!(satisfied(HSA_SIGNAL_CONDITION_LT, 0, 1));
        assert!(!satisfied(HSA_SIGNAL_CONDITION_LT, 1, 1));
        assert!(satisfied(HSA_SIGNAL_CONDITION_EQ, 5, 5));
        assert!(!satisfied(HSA_SIGNAL_CONDITION_EQ, 4, 5));
        assert!(satisfied(HSA_SIGNAL_CONDITION_NE, 4, 5));
        assert!(!satisfied(HSA_SIGNAL_CONDITION_NE, 5, 5));
        assert!(satisfied(HSA_SIGNAL_CONDITION_GTE, 5, 5));
        assert!(!satisfied(HSA_SIGNAL_CONDITION_GTE, 4, 5));
        assert!(satisfied(99, 0, 1));
    }
}
