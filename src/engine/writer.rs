//! The writer thread: drains records into the sinks.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{DispatchSignal, Engine, SleepKind, STOP_WRITER};
use crate::kernels::KernelTable;
use crate::record::{AgentInfo, Record, RunInfo, RunMetadata};
use crate::sink::{KernelInfo, RecordSink};

/// How long an idle writer sleeps before looking again (it is woken early
/// when the record queue fills up).
const WRITER_IDLE: Duration = Duration::from_millis(2);

/// Longest time records handed to the sinks stay in their buffers.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// Kernel names and the include/exclude verdict, as the writer needs them.
pub trait KernelNames {
    /// Calls `f` with the names of the kernel at `kernel_object` and whether
    /// the filters keep it (an unknown kernel gets a placeholder name).
    fn with_kernel(&mut self, kernel_object: u64, f: &mut dyn FnMut(&KernelInfo<'_>, bool));
}

impl KernelNames for KernelTable {
    fn with_kernel(&mut self, kernel_object: u64, f: &mut dyn FnMut(&KernelInfo<'_>, bool)) {
        let entry = self.resolve(kernel_object);
        f(&entry.info(), entry.keep);
    }
}

impl KernelNames for &KernelTable {
    fn with_kernel(&mut self, kernel_object: u64, f: &mut dyn FnMut(&KernelInfo<'_>, bool)) {
        let entry = self.resolve(kernel_object);
        f(&entry.info(), entry.keep);
    }
}

/// What the writer did, for the run metadata and the caller's report.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WriterOutcome {
    /// Metadata as passed to every sink's `finish`.
    pub metadata: RunMetadata,
    /// Sink calls that failed (each failing sink is disabled after its
    /// first error).
    pub sink_errors: u64,
    /// Per sink, in the order given: `None` if it finished (every record
    /// and its `finish` written), else the first error (the file is
    /// incomplete).
    pub sink_failures: Vec<Option<String>>,
    /// Interceptor calls seen.
    pub intercept_calls: u64,
    /// Sum of their durations (entry to return, including the runtime's
    /// writer), in ns.
    pub intercept_ns: u64,
}

impl<S: DispatchSignal> Engine<S> {
    /// The writer loop: `start` on every sink, then every record in arrival
    /// order, then `finish` with the run metadata once
    /// [`Engine::stop_writer`] was called and the queue is empty. A sink that
    /// fails is reported once on stderr and skipped from then on.
    pub fn run_writer(
        &self,
        sinks: &mut [Box<dyn RecordSink + Send>],
        names: &mut dyn KernelNames,
        run: &RunInfo,
        agents: &[AgentInfo],
    ) -> WriterOutcome {
        let mut failed = vec![false; sinks.len()];
        let mut failures: Vec<Option<String>> = vec![None; sinks.len()];
        let mut errors = 0u64;
        let mut report = |i: usize, failed: &mut Vec<bool>, what: &str, e: std::io::Error| {
            errors += 1;
            if !failed[i] {
                eprintln!("rprof: output {i} failed in {what}: {e}; it is disabled for the rest of the run");
                failed[i] = true;
                failures[i] = Some(format!("{what} failed: {e}"));
            }
        };
        for (i, sink) in sinks.iter_mut().enumerate() {
            if let Err(e) = sink.start(run, agents) {
                report(i, &mut failed, "start", e);
            }
        }
        let mut dispatches = 0u64;
        let mut filtered_out = 0u64;
        let mut intercept_calls = 0u64;
        let mut intercept_ns = 0u64;
        let mut rpc_wakes = 0u64;
        let mut dirty = false;
        let mut last_flush = std::time::Instant::now();
        loop {
            let mut got = false;
            for rec in std::iter::from_fn(|| self.records.pop()).take(4096) {
                got = true;
                self.writer_progress.fetch_add(1, Ordering::Release);
                if self.writer_stalled.load(Ordering::Relaxed) {
                    self.writer_stalled.store(false, Ordering::Release);
                }
                match rec {
                    Record::Intercept(r) => {
                        intercept_calls += 1;
                        intercept_ns += r.end_ns.saturating_sub(r.begin_ns);
                        for (i, sink) in sinks.iter_mut().enumerate() {
                            if !failed[i] {
                                if let Err(e) = sink.intercept(&r) {
                                    report(i, &mut failed, "intercept", e);
                                }
                            }
                        }
                    }
                    Record::RpcWake(w) => {
                        rpc_wakes += 1;
                        for (i, sink) in sinks.iter_mut().enumerate() {
                            if !failed[i] {
                                if let Err(e) = sink.rpc_wake(&w) {
                                    report(i, &mut failed, "rpc_wake", e);
                                }
                            }
                        }
                    }
                    Record::Dispatch(d) => {
                        names.with_kernel(d.kernel_object, &mut |k, keep| {
                            if !keep {
                                filtered_out += 1;
                                return;
                            }
                            dispatches += 1;
                            for (i, sink) in sinks.iter_mut().enumerate() {
                                if !failed[i] {
                                    if let Err(e) = sink.dispatch(&d, k) {
                                        report(i, &mut failed, "dispatch", e);
                                    }
                                }
                            }
                        });
                    }
                }
            }
            // Periodic flush: what reached the sinks is on disk within
            // FLUSH_EVERY (a killed process leaves a readable prefix).
            if got {
                dirty = true;
            }
            if dirty && last_flush.elapsed() >= FLUSH_EVERY {
                for (i, sink) in sinks.iter_mut().enumerate() {
                    if !failed[i] {
                        if let Err(e) = sink.flush() {
                            report(i, &mut failed, "flush", e);
                        }
                    }
                }
                dirty = false;
                last_flush = std::time::Instant::now();
            }
            if got {
                continue;
            }
            if self.state.load(Ordering::Acquire) >= STOP_WRITER && self.records.is_empty() {
                break;
            }
            self.writer_wake.sleep(SleepKind::Parked, WRITER_IDLE, || {
                self.records.len() * 2 >= self.records.capacity()
                    || self.state.load(Ordering::Acquire) >= STOP_WRITER
            });
        }
        let mut metadata = self.metadata();
        metadata.dispatches = dispatches;
        metadata.filtered_out = filtered_out;
        metadata.rpc_wakes = rpc_wakes;
        for (i, sink) in sinks.iter_mut().enumerate() {
            if !failed[i] {
                if let Err(e) = sink.finish(&metadata) {
                    report(i, &mut failed, "finish", e);
                }
            }
        }
        WriterOutcome {
            metadata,
            sink_errors: errors,
            sink_failures: failures,
            intercept_calls,
            intercept_ns,
        }
    }
}
