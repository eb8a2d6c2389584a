//! A fresh driver event for each intercept queue's async doorbell (ROCr >= 6).
//!
//! ROCr's intercept queue registers an async handler on a doorbell signal of
//! its own, an interrupt signal whose driver event comes from the runtime's
//! event pool: the event a destroyed signal gave back last, with the age
//! (the driver's count of its fires) it had then. ROCr's async-events loop
//! (6.4.3 and 7.0 alike, `AsyncEventsLoop` in `runtime.cpp`) mis-tracks the
//! ages of every event listed after two adjacent handlers that share an
//! event, which every hardware queue registers (its inactive and exception
//! signals share one event): those events are passed age 1 on every wait.
//! An event that has fired before therefore satisfies each wait at once, and
//! a doorbell handler stays registered for the queue's life, so a doorbell
//! whose pooled event had fired kept that thread spinning through the whole
//! run (`docs/performance-history.md`, "ROCr 6.4.3: what is left"), taking a
//! core from the app.
//!
//! [`FreshEventHold`] takes the events the pool would hand out next, by
//! creating up to [`HELD_SIGNALS`] plain interrupt signals for the duration of
//! the queue's creation, so that the doorbell gets an event that never fired
//! (from the pool's spare ones or a new one); the signals are destroyed right
//! after and their events go back to the pool. Nothing is waited on and
//! nothing is stored to them, so none of them fires.
//!
//! It never takes the last events the driver has: once a signal comes back
//! without a driver event (the process is out of them), every held signal
//! is given back before the queue is created, so the queue gets what is left,
//! as without rprof.

use hsa_sys::{amd_signal_t, hsa_signal_t, HSA_STATUS_SUCCESS};

use crate::runtime::Runtime;

/// How many pooled events a queue's creation holds back at most. ROCr's
/// pool hands out the event given back last; an app that destroyed more
/// signals than this just before creating a queue may still hand the
/// doorbell an event that fired (the spin then comes back for that queue).
pub(super) const HELD_SIGNALS: usize = 16;

/// Interrupt signals held while an intercept queue is created; destroyed on
/// drop.
pub(super) struct FreshEventHold {
    rt: Runtime,
    signals: [hsa_signal_t; HELD_SIGNALS],
    held: usize,
}

impl FreshEventHold {
    /// Takes up to [`HELD_SIGNALS`] events from the runtime's pool (none on
    /// a runtime without `hsa_signal_create`).
    pub(super) fn take(rt: Runtime) -> Self {
        let mut hold = FreshEventHold {
            rt,
            signals: [hsa_signal_t { handle: 0 }; HELD_SIGNALS],
            held: 0,
        };
        let Some(create) = rt.core.hsa_signal_create_fn else {
            return hold;
        };
        while hold.held < HELD_SIGNALS {
            let mut signal = hsa_signal_t { handle: 0 };
            // SAFETY: the runtime's own constructor; no consumer list, so
            // the runtime makes an interrupt signal (with a driver event when
            // it has one); `signal` is a valid out-pointer.
            let status = unsafe { create(1, 0, std::ptr::null(), &mut signal) };
            if status != HSA_STATUS_SUCCESS || signal.handle == 0 {
                break;
            }
            hold.signals[hold.held] = signal;
            hold.held += 1;
            if !has_driver_event(signal) {
                // Out of driver events: the queue must get what is left.
                hold.release();
                break;
            }
        }
        hold
    }

    /// Destroys the held signals, newest first (their events go back to the
    /// pool).
    fn release(&mut self) {
        let Some(destroy) = self.rt.core.hsa_signal_destroy_fn else {
            return;
        };
        while self.held > 0 {
            self.held -= 1;
            // SAFETY: a signal created in `take`, destroyed once; nobody else
            // knows it.
            unsafe { destroy(self.signals[self.held]) };
        }
    }
}

impl Drop for FreshEventHold {
    fn drop(&mut self) {
        self.release();
    }
}

/// Whether a signal ROCr just made carries a driver event (a non-zero event
/// id in its ABI block).
fn has_driver_event(signal: hsa_signal_t) -> bool {
    // SAFETY: a live signal's handle is the address of its `amd_signal_t`
    // ABI block (the layout ROCr shares with the GPU); the signal was just
    // created and is not destroyed before this read.
    let event_id =
        unsafe { std::ptr::read_volatile(&(*(signal.handle as *const amd_signal_t)).event_id) };
    event_id != 0
}
