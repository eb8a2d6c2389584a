//! The completion thread: polls in-flight dispatches, reads their times and
//! hands finished records to the writer.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{
    boottime_ns, clamp_times, CompletionBackend, DispatchSignal, Engine, InFlight, SleepKind,
    STOP_COMPLETION,
};
use crate::record::Record;

/// Longest a parked completion thread sleeps before looking again (it is
/// normally woken by the interceptor when work arrives).
const PARK_TIMEOUT: Duration = Duration::from_millis(50);

impl<S: DispatchSignal> Engine<S> {
    /// The completion loop. Returns after [`Engine::begin_shutdown`], once
    /// everything still tracked has been processed or given up on (counted
    /// as lost).
    pub fn run_completion(&self, backend: &dyn CompletionBackend) {
        let mut tracked: Vec<InFlight<S>> = Vec::with_capacity(self.pending.capacity());
        let min_sleep = self.options.min_backoff.min(self.options.max_backoff);
        let mut sleep = min_sleep;
        loop {
            while let Some(e) = self.pending.pop() {
                tracked.push(e);
            }
            // Find the finished ones first, then read the clock: every
            // dispatch counted here ended before `observed`.
            let mut done = 0;
            for i in 0..tracked.len() {
                if backend.signal_value(tracked[i].signal.handle()) <= 0 {
                    tracked.swap(i, done);
                    done += 1;
                }
            }
            if done > 0 {
                let observed = boottime_ns();
                for entry in tracked.drain(..done) {
                    self.complete(backend, entry, observed);
                }
                sleep = min_sleep;
                // An interceptor waits for ring space or signals: look again
                // at once. Otherwise let completions accumulate: timestamps
                // do not depend on when they are read, and nobody but rprof
                // waits on these signals.
                if !self.urgent.swap(false, Ordering::AcqRel) {
                    self.completion_wake
                        .sleep(SleepKind::Backoff, min_sleep, || {
                            self.urgent.load(Ordering::Acquire)
                        });
                }
                continue;
            }
            let stopping = self.state.load(Ordering::Acquire) >= STOP_COMPLETION;
            if stopping && self.pending.is_empty() {
                // Whatever is still tracked will not be waited for.
                let left = tracked.len() as u64;
                for entry in tracked.drain(..) {
                    entry.queue.in_flight.fetch_sub(1, Ordering::AcqRel);
                    entry.queue.slots.fetch_sub(entry.slots(), Ordering::AcqRel);
                    self.in_flight.fetch_sub(1, Ordering::AcqRel);
                    // The signal may still be written by the device; leak it
                    // rather than recycle a signal that is in use.
                    std::mem::forget(entry.signal);
                }
                self.count_lost(left);
                self.writer_wake.notify();
                return;
            }
            if tracked.is_empty() {
                self.completion_wake
                    .sleep(SleepKind::Parked, PARK_TIMEOUT, || {
                        !self.pending.is_empty()
                            || self.state.load(Ordering::Acquire) >= STOP_COMPLETION
                    });
                sleep = min_sleep;
            } else {
                self.completion_wake.sleep(SleepKind::Backoff, sleep, || {
                    self.urgent.load(Ordering::Acquire)
                });
                sleep = (sleep * 2).min(self.options.max_backoff);
            }
        }
    }

    fn complete(&self, backend: &dyn CompletionBackend, entry: InFlight<S>, observed: u64) {
        let slots = entry.slots();
        let InFlight {
            mut record,
            queue,
            signal,
            ..
        } = entry;
        let times = backend.dispatch_time(queue.agent_handle, signal.handle());
        // Back to the pool before anything that may wait.
        drop(signal);
        let ((start, end), start_moved, end_moved) =
            clamp_times(record.enqueue_ns, observed, times);
        if start_moved {
            self.counters.start_clamped.fetch_add(1, Ordering::Relaxed);
        }
        if end_moved {
            self.counters.end_clamped.fetch_add(1, Ordering::Relaxed);
        }
        record.start_ns = start;
        record.end_ns = end;
        queue.in_flight.fetch_sub(1, Ordering::AcqRel);
        queue.slots.fetch_sub(slots, Ordering::AcqRel);
        let mut rec = Record::Dispatch(record);
        let mut waited = 0u32;
        loop {
            match self.records.push(rec) {
                Ok(()) => break,
                Err(back) => {
                    // Never drop: wait for the writer.
                    rec = back;
                    self.writer_wake.notify();
                    waited += 1;
                    if waited < 16 {
                        std::thread::yield_now();
                    } else {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
            }
        }
        self.counters.completed.fetch_add(1, Ordering::Relaxed);
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        if self.records.len() * 2 >= self.records.capacity() && self.writer_wake.is_sleeping() {
            self.writer_wake.notify();
        }
    }
}
