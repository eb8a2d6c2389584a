//! Asynchronous memory copies (`--memory-copy-trace`): the tool's copy
//! hooks hand each call to [`Engine::trace_copy`], which gives the copy a
//! correlation id and a pooled signal in place of the app's completion
//! signal; the completion thread (or an app thread lending its wait,
//! [`Engine::lend_completion`]) sees the pooled signal complete, reads the
//! copy's start and end ([`CompletionBackend::copy_time`]), decrements the
//! app's signal once ([`CompletionBackend::forward`], as the copy engine
//! would have) and hands a [`MemoryCopyRecord`] to the writer.
//!
//! Owns what a copy holds while it runs ([`CopyInFlight`]) and the copy
//! side of the completion pass. The app's path allocates nothing and takes
//! no lock: one atomic reservation, a pooled signal, one push onto a
//! bounded lock-free queue. A copy rprof cannot track (no signal free, too
//! many copies in flight) runs untouched with the app's own signal and is
//! counted lost; so does every copy once recording has stopped.

use std::sync::atomic::Ordering;

use super::batch::CountedCall;
use super::{
    boottime_ns, current_thread_id, CompletionBackend, DispatchSignal, Engine, SignalSource,
    RUNNING, STOP_COMPLETION,
};
use crate::record::{MemoryCopyRecord, Record};

/// A copy on its way through a copy engine (or a blit kernel).
#[derive(Debug)]
pub struct CopyInFlight<S> {
    /// Everything but the times, filled at the call.
    pub record: MemoryCopyRecord,
    /// rprof's signal, given to the runtime as the copy's completion signal.
    pub signal: S,
    /// The app's completion signal, decremented once when `signal`
    /// completes.
    pub app_signal: u64,
    /// Whether the copy is still to be recorded (false once shutdown gave
    /// up on it: it is then only forwarded).
    pub recorded: bool,
}

impl<S: DispatchSignal> Engine<S> {
    /// One call of an async-copy entry. `call(signal)` calls the runtime
    /// with `signal` as the completion signal and returns its status;
    /// `ok(&status)` says whether the copy was accepted. When the copy is
    /// traced, `signal` is a pooled signal and the app's `app_signal` is
    /// decremented by the completion thread when the copy is done; else
    /// `call` gets `app_signal` itself. `record` carries the agents,
    /// direction, API and bytes; the id, thread and enqueue time are
    /// filled here. A zero `app_signal` (which the runtime rejects) is
    /// passed through untouched, so the app sees the runtime's own error.
    pub fn trace_copy<R>(
        &self,
        source: &dyn SignalSource<S>,
        app_signal: u64,
        mut record: MemoryCopyRecord,
        call: impl FnOnce(u64) -> R,
        ok: impl FnOnce(&R) -> bool,
    ) -> R {
        if app_signal == 0 {
            return call(app_signal);
        }
        // Announced before the state is read, as in `intercept`: either
        // shutdown waits for this call, or the call sees recording stopped.
        self.recording_calls.fetch_add(1, Ordering::SeqCst);
        let announced = CountedCall(&self.recording_calls);
        if self.state.load(Ordering::SeqCst) != RUNNING {
            drop(announced);
            return call(app_signal);
        }
        let capacity = self.copies.capacity() as u64;
        if self.copies_out.fetch_add(1, Ordering::AcqRel) >= capacity {
            self.copies_out.fetch_sub(1, Ordering::AcqRel);
            self.count_lost(1);
            return call(app_signal);
        }
        let Some(signal) = source.try_acquire() else {
            self.copies_out.fetch_sub(1, Ordering::AcqRel);
            self.count_lost(1);
            return call(app_signal);
        };
        record.correlation_id = self.ids.reserve(1).correlation_id(0);
        record.thread_id = current_thread_id();
        record.enqueue_ns = boottime_ns();
        let handle = signal.handle();
        // Counted before the engine can possibly finish it, so that the
        // flush waits for it.
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        let status = call(handle);
        record.call_end_ns = boottime_ns();
        if !ok(&status) {
            // The runtime refused the copy: it never touches the signal.
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            self.copies_out.fetch_sub(1, Ordering::AcqRel);
            drop(signal);
            return status;
        }
        let mut entry = CopyInFlight {
            record,
            signal,
            app_signal,
            recorded: true,
        };
        // Room was reserved above (`copies_out` <= capacity), so the push
        // succeeds; a racing pop may still hold the slot for a moment.
        loop {
            match self.copies.push(entry) {
                Ok(()) => break,
                Err(back) => {
                    entry = back;
                    std::thread::yield_now();
                }
            }
        }
        drop(announced);
        self.completion_wake.notify();
        status
    }

    /// Copies in flight (traced, not yet seen complete).
    pub fn copies_in_flight(&self) -> u64 {
        self.copies_out.load(Ordering::Acquire)
    }

    /// A copy pass (the completion thread's, or a lending app thread's):
    /// takes the published copies, and retires up to `max` of those whose
    /// signal completed (the others stay listed for the next pass). Returns
    /// how many it retired.
    pub(super) fn poll_copies(
        &self,
        backend: &dyn CompletionBackend,
        copies: &mut Vec<CopyInFlight<S>>,
        max: usize,
    ) -> usize {
        while let Some(c) = self.copies.pop() {
            copies.push(c);
        }
        // The finished copies go to the back of the list first; the clock
        // is read once all of them have been seen finished, so every one
        // ended before `observed`. (Reading it at the first finished copy
        // and using it for those found later in the same pass clamped the
        // times of a copy that finished in between.)
        let mut unfinished = copies.len();
        let mut i = 0;
        while i < unfinished {
            if backend.signal_value(copies[i].signal.handle()) > 0 {
                i += 1;
            } else {
                unfinished -= 1;
                copies.swap(i, unfinished);
            }
        }
        let done = (copies.len() - unfinished).min(max);
        if done == 0 {
            return 0;
        }
        let observed = boottime_ns();
        for entry in copies.drain(unfinished..unfinished + done) {
            self.complete_copy(backend, entry, observed);
        }
        done
    }

    /// Retires one finished copy: reads its times, gives its signal back,
    /// completes the app's signal (once) and hands the record to the writer.
    fn complete_copy(
        &self,
        backend: &dyn CompletionBackend,
        entry: CopyInFlight<S>,
        observed: u64,
    ) {
        let CopyInFlight {
            mut record,
            signal,
            app_signal,
            recorded,
        } = entry;
        let times = if recorded {
            backend.copy_time(signal.handle())
        } else {
            None
        };
        drop(signal);
        backend.forward(app_signal, None);
        self.copies_out.fetch_sub(1, Ordering::AcqRel);
        if !recorded {
            return;
        }
        (record.start_ns, record.end_ns) = self.clamp_counted(record.enqueue_ns, observed, times);
        self.push_record(Record::MemoryCopy(record));
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }

    /// At shutdown, before the records close: copies still running will
    /// not be recorded (counted lost). They stay tracked, so the app's
    /// signals are still completed while the completion thread runs (the
    /// ring guard after an at-exit flush).
    pub(super) fn settle_copies(&self, copies: &mut Vec<CopyInFlight<S>>) {
        if self.state.load(Ordering::Acquire) < STOP_COMPLETION
            || self.records_closed.load(Ordering::Acquire)
        {
            return;
        }
        while let Some(c) = self.copies.pop() {
            copies.push(c);
        }
        for c in copies.iter_mut().filter(|c| c.recorded) {
            c.recorded = false;
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            self.count_lost(1);
        }
    }

    /// The completion thread returns with copies unfinished: their signals
    /// are leaked (the engine may still write them), and the app's signals
    /// are no longer completed (the runtime is shutting down).
    pub(super) fn forget_copies(&self, copies: &mut Vec<CopyInFlight<S>>) {
        for c in copies.drain(..) {
            self.copies_out.fetch_sub(1, Ordering::AcqRel);
            std::mem::forget(c.signal);
        }
    }
}
