//! The flush: at the last `hsa_shut_down`, at `OnUnload`, at exit or on
//! SIGTERM / SIGINT, the trace is finished once, every wait bounded.
//!
//! Owns the order of the end of a trace (packets still undelivered to the
//! interceptor, dispatches on the device, the completion and writer
//! threads, the signal pool, the report to the `rprof` command, the verbose
//! summary); must not decide when to flush (the hooks and
//! [`super::lifecycle`] do) nor write records itself (the writer thread
//! does).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hsa_sys::hsa_queue_t;
use rprof_core::engine::{join_within, WriterOutcome, WRITER_JOIN_MAX, WRITER_JOIN_STALL};
use rprof_core::wait::{poll_until, Pace};

use super::{lock, Session};
use crate::signals::RocrBackend;

/// How long the flush waits for dispatches still on the device.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(10);
/// How teardown polls what it waits for: 64 yields, then 50 µs naps (the
/// app's exit waits for it; a nap is ~100 µs with the default timer slack,
/// and the threads waited for usually finish within the yields).
const TEARDOWN_PACE: Pace = Pace::new(64, Duration::from_micros(50));
/// How long the runtime's unload waits, after an at-exit flush, for the
/// dispatches the app left running to give their signals back.
const GUARD_DRAIN: Duration = Duration::from_secs(1);
/// How long the flush waits for the completion thread to stop (or, at
/// exit, to settle the recorded dispatches).
const COMPLETION_JOIN: Duration = Duration::from_secs(2);

/// A flush [`Session::begin_finish`] began and [`Session::end_finish`] has
/// not ended yet.
pub(super) struct Ending {
    /// What began it (`exit`, `hsa_shut_down`, ...), for the summary.
    why: String,
    /// Begun at exit: the signal pool stays open.
    at_exit: bool,
    t0: Instant,
    /// How long the device took (undelivered packets, dispatches on it).
    device_done: Duration,
    /// The writer was told to finish: its outcome is to be waited for.
    writer_told: bool,
}

/// Where a flush's time went, for the verbose summary.
#[derive(Clone, Copy)]
struct FlushPhases {
    /// Undelivered packets and dispatches still on the device.
    device: Duration,
    /// The completion thread settling and the writer finishing the outputs.
    threads: Duration,
}

impl Session {
    /// Flushes the trace: waits (bounded) for dispatches on the device, lets
    /// the completion and writer threads finish, and closes the outputs.
    /// Idempotent; later calls return at once, or end a flush that
    /// [`Session::begin_finish`] began.
    pub(super) fn finish(&self, why: &str, at_exit: bool) {
        self.begin_finish(why, at_exit);
        self.end_finish();
    }

    /// The flush up to the writer's last work: waits (bounded) for
    /// dispatches on the device, settles them, and tells the writer to
    /// finish the outputs, without waiting for it. [`Session::end_finish`]
    /// waits for the writer and reports. `exit` calls only this: the
    /// writer then finishes the outputs on its own core while the runtimes'
    /// exit handlers run (HIP destroying its queues, `hsa_shut_down`), and
    /// `OnUnload`, the last `hsa_shut_down` or the library's destructor,
    /// whichever comes first, ends the flush. Idempotent.
    ///
    /// `at_exit`: the process is exiting (`exit` from any thread, possibly
    /// while other threads keep launching kernels): only packets written
    /// before the flush began are waited for, and the ring guard stays on
    /// for whatever the app submits afterwards (see
    /// [`rprof_core::engine::Engine::keep_guard_after_stop`]).
    ///
    /// Every wait is bounded: a device that never finishes, a completion
    /// thread or a writer that is stuck (a FIFO nobody reads, a hung file
    /// system) costs at most [`FLUSH_TIMEOUT`] + [`COMPLETION_JOIN`] +
    /// [`WRITER_JOIN_STALL`] after it stopped moving ([`WRITER_JOIN_MAX`] in
    /// all for a writer that keeps moving); what could not be finished is said on stderr and in
    /// the report to the `rprof` command.
    pub(super) fn begin_finish(&self, why: &str, at_exit: bool) {
        if self.finished.swap(true, Ordering::AcqRel) {
            return;
        }
        if std::process::id() != self.engine.options().pid {
            // A child of the traced process made without the fork handler
            // (a raw `clone`): rprof's threads and files are the parent's;
            // never wait for them, never report them.
            super::lifecycle::forget_in_child(self);
            return;
        }
        let t0 = Instant::now();
        self.wait_for_undelivered_packets(t0);
        if at_exit {
            self.engine.keep_guard_after_stop();
        }
        // This thread retires and settles in the completion thread's place
        // whenever it can: the flush never waits for that thread to wake.
        let left = self.engine.begin_shutdown_here(
            &RocrBackend::new(self.rt, self.signal_memory),
            FLUSH_TIMEOUT.saturating_sub(t0.elapsed()),
        );
        let device_done = t0.elapsed();
        if left > 0 {
            eprintln!("rprof: {left} dispatches or memory copies were still running after {FLUSH_TIMEOUT:?} at {why}; they are counted as lost");
        }
        let writer_told = self.stop_threads(at_exit);
        *lock(&self.ending) = Some(Ending {
            why: why.to_string(),
            at_exit,
            t0,
            device_done,
            writer_told,
        });
    }

    /// Ends a flush [`Session::begin_finish`] began: waits (bounded) for
    /// the writer to finish the outputs, closes the signal pool (not at
    /// exit), and reports. Nothing to do when no flush began here; when the
    /// writer thread is ending it ([`Session::end_finish_from_writer`]),
    /// waits until it has.
    pub(super) fn end_finish(&self) {
        self.end_finish_if(|_| true);
    }

    /// The writer thread, once it has finished the outputs: ends a flush
    /// begun at exit (the report then leaves the app's exit too). Other
    /// flushes end on the thread that began them, which waits.
    pub(super) fn end_finish_from_writer(&self) {
        self.end_finish_if(|e| e.at_exit);
    }

    /// [`Session::end_finish`] for an ending that `which` accepts. The
    /// ending's lock is held until the report is written, so that a second
    /// caller returns only once the flush has ended.
    fn end_finish_if(&self, which: impl FnOnce(&Ending) -> bool) {
        let mut slot = lock(&self.ending);
        let Some(ending) = slot.take_if(|e| which(e)) else {
            return;
        };
        // `None`: no threads to stop; `Some(None)`: the writer is stuck.
        let stopped = ending
            .writer_told
            .then(|| self.engine.join_writer(WRITER_JOIN_STALL, WRITER_JOIN_MAX));
        let phases = FlushPhases {
            device: ending.device_done,
            threads: ending.t0.elapsed().saturating_sub(ending.device_done),
        };
        let writer_stuck = matches!(stopped, Some(None));
        let outcome = stopped.flatten();
        // Destroy the timestamp signals while the runtime is still up (no
        // handle is out once the completion thread has returned, except for
        // dispatches given up on, which keep the pool open). Not at exit:
        // the completion thread still recycles them for the app's threads.
        if !ending.at_exit {
            let _ = self.close_signal_pools(self.hardware_rings_drained());
        }
        self.report(outcome.as_ref(), writer_stuck);
        if ending.at_exit {
            self.trim_signals_at_exit();
        }
        if let Some(o) = outcome {
            self.summarise(&o, &ending.why, ending.t0, phases);
        }
    }

    /// At exit, once the outputs are reported: destroys the idle timestamp
    /// signals but one batch (the burst of a run leaves thousands idle),
    /// on the thread that ends the flush (normally the writer's, beside
    /// the app's teardown), so that `OnUnload` destroys only the rest (the
    /// 6.4 mix's 5,120 took 0.5-0.6 ms of it). The batch kept serves the
    /// launches of app threads still running, recycled by the ring guard
    /// (the pool no longer grows).
    ///
    /// Only where `OnUnload` closes the pool (ROCr >= 6, where rprof knows
    /// the hardware rings): on 5.2.3 the pool stays open to the end, so
    /// destroying signals at exit would only take time from the app's
    /// teardown (the 5.2 mix's exit: 0.37 ms, 12 runs each).
    ///
    /// Signals in rprof's own memory cost nothing to give up: only pools of
    /// ROCr's signals are trimmed (the kernel pool's only with
    /// `RPROF_TIMESTAMP_SIGNALS=rocr`).
    fn trim_signals_at_exit(&self) {
        if !self.markers {
            return;
        }
        let t0 = Instant::now();
        let rocr_pools = [
            self.signal_memory.is_none().then_some(&self.source),
            self.copy_source.as_ref(),
        ];
        let trimmed: u32 = rocr_pools
            .into_iter()
            .flatten()
            .map(|source| source.pool().trim(source.pool().config().batch))
            .sum();
        if self.verbose {
            eprintln!(
                "rprof: exit: {trimmed} idle timestamp signals destroyed in {:?}",
                t0.elapsed()
            );
        }
    }

    /// Closes the signal pools, each on its own (a pool with signals out
    /// stays open: see `SignalPool::shutdown`), destroying ROCr's signals,
    /// and, when the kernel pool closed and `rings_drained` (no packet in a
    /// traced ring can still reference a signal), frees the memory of the
    /// kernel signals. Returns how many signals the pools held, or why one
    /// stays open.
    pub(super) fn close_signal_pools(&self, rings_drained: bool) -> Result<u32, String> {
        let kernels = self.source.pool().shutdown();
        let copies = self
            .copy_source
            .as_ref()
            .map_or(Ok(0), |c| c.pool().shutdown());
        if kernels.is_ok() && rings_drained {
            if let Some(memory) = self.signal_memory {
                memory.release_all();
            }
        }
        Ok(kernels.map_err(|e| e.to_string())? + copies.map_err(|e| e.to_string())?)
    }

    /// Packets the app wrote before now that the runtime has not handed to
    /// the interceptor yet (it defers them when the hardware ring is full)
    /// are still to be traced: waits (until [`FLUSH_TIMEOUT`] after `t0`)
    /// until each traced queue's proxy ring has delivered them.
    fn wait_for_undelivered_packets(&self, t0: Instant) {
        let snapshot = self.write_indices();
        poll_until(t0 + FLUSH_TIMEOUT, TEARDOWN_PACE, || {
            !self.undelivered_packets(&snapshot)
        });
    }

    /// The write index of every traced queue now: the packets the app has
    /// written so far.
    fn write_indices(&self) -> Vec<(usize, u64)> {
        let Some(write) = self.rt.core.hsa_queue_load_write_index_relaxed_fn else {
            return Vec::new();
        };
        let queues = super::QUEUES.lock();
        queues
            .keys()
            .map(|&q| {
                // SAFETY: queues in the map are alive: the destroy hook
                // removes them (under this lock) before the runtime
                // destroys them.
                (q, unsafe { write(q as *const hsa_queue_t) })
            })
            .collect()
    }

    /// Whether some traced queue still holds, undelivered to the
    /// interceptor, packets written before `snapshot` was taken (packets
    /// written later do not count: app threads may keep launching while the
    /// process exits).
    fn undelivered_packets(&self, snapshot: &[(usize, u64)]) -> bool {
        let Some(read) = self.rt.core.hsa_queue_load_read_index_relaxed_fn else {
            return false;
        };
        let queues = super::QUEUES.lock();
        snapshot.iter().any(|&(q, written)| {
            queues.contains_key(&q)
                // SAFETY: as in `write_indices`; still in the map.
                && unsafe { read(q as *const hsa_queue_t) } < written
        })
    }

    /// Stops the completion thread (at exit: only waits until it has
    /// settled the recorded dispatches, and keeps it recycling) and tells
    /// the writer to finish; `false` if they were not running.
    fn stop_threads(&self, at_exit: bool) -> bool {
        let Some((completion, writer)) = lock(&self.threads).take() else {
            return false;
        };
        if at_exit {
            // The completion thread keeps recycling for the app's
            // remaining launches; wait only until it has settled the
            // recorded dispatches.
            poll_until(Instant::now() + COMPLETION_JOIN, TEARDOWN_PACE, || {
                self.engine.records_closed()
            });
            *lock(&self.guard_thread) = Some(completion);
        } else if join_within(completion, COMPLETION_JOIN).is_none() {
            eprintln!("rprof: the completion thread did not stop within {COMPLETION_JOIN:?}; dispatches it still held are lost");
        }
        self.engine.stop_writer();
        // Never joined: [`Session::end_finish`] waits for its outcome; then
        // it frees its sinks' buffers and ends on its own (its CPU time is
        // read from the handle, `threads::cpu_ns`).
        *lock(&self.writer_thread) = Some(writer);
        true
    }

    /// Says which outputs are finished (on stderr if the writer is stuck,
    /// and to the `rprof` command). `outcome`: `None` when the writer did
    /// not finish (`writer_stuck`) or never ran.
    fn report(&self, outcome: Option<&WriterOutcome>, writer_stuck: bool) {
        let stuck_reason = format!(
            "the output writer did not finish (it took no record for {WRITER_JOIN_STALL:?}, or ran past {WRITER_JOIN_MAX:?}: stuck writing to a FIFO nobody reads, a hung file system?); {} records were still queued",
            self.engine.records_queued()
        );
        if writer_stuck {
            eprintln!("rprof: {stuck_reason}; the outputs are incomplete");
        }
        crate::report::report_outputs(
            &self.outputs,
            outcome.map(|o| &o.sink_failures[..]),
            &stuck_reason,
            lock(&self.report_file).take(),
        );
    }

    /// The records lost, and with `RPROF_VERBOSE` one summary line.
    fn summarise(&self, o: &WriterOutcome, why: &str, t0: Instant, phases: FlushPhases) {
        let m = &o.metadata;
        if crate::roctx::recording() {
            let unpopped = rprof_core::marker::unpopped_ranges();
            if let Some(w) =
                rprof_core::marker::unclosed_ranges_warning(unpopped, o.unfinished_ranges)
            {
                eprintln!("{w}");
            }
        }
        if m.records_lost > 0 {
            eprintln!(
                "rprof: {} records could not be recorded (see the run metadata)",
                m.records_lost
            );
        }
        if !self.verbose {
            return;
        }
        let stats = self.source.pool().stats();
        let (completion_cpu, writer_cpu) = super::threads::cpu_ns(
            lock(&self.guard_thread).as_ref(),
            lock(&self.writer_thread).as_ref(),
        );
        let per_dispatch = |ns: u64| ns / m.dispatches.max(1);
        eprintln!(
            "rprof: finished at {why} in {:?} (device {:?}, threads {:?}): {} dispatches written, {} filtered out, {} lost, clamps start/end {}/{}, signal pool {} created, high water {}, {} waits; {} interceptor calls, mean {} ns; thread CPU completion {} ns, writer {} ns per dispatch, {} dispatches and {} copies retired and {} records written by waiting app threads; interceptor clock: {}",
            t0.elapsed(),
            phases.device,
            phases.threads,
            m.dispatches,
            m.filtered_out,
            m.records_lost,
            m.start_clamped,
            m.end_clamped,
            stats.created,
            stats.high_water,
            stats.acquire_waits,
            o.intercept_calls,
            o.intercept_ns / o.intercept_calls.max(1),
            per_dispatch(completion_cpu),
            per_dispatch(writer_cpu),
            self.engine
                .counters()
                .completions_lent
                .load(Ordering::Relaxed),
            self.engine.counters().copies_lent.load(Ordering::Relaxed),
            self.engine.counters().lent.load(Ordering::Relaxed),
            if rprof_abi::clock::fast_clock_enabled() {
                format!(
                    "time-stamp counter, {} lines fitted",
                    rprof_abi::clock::fast_clock_lines()
                )
            } else {
                "clock_gettime".to_string()
            },
        );
    }

    /// Before the runtime shuts down after an at-exit flush (HIP and others
    /// call `hsa_shut_down` from their own exit handlers): the completion
    /// thread stops recycling, since the runtime's signals go away.
    pub(super) fn end_guard(&self) {
        if let Some(t) = lock(&self.guard_thread).take() {
            // Dispatches the app left on the device at exit finish within
            // moments; let the completion thread take their signals back
            // first (bounded), so that the pool can close before the runtime
            // counts its signals.
            let pool = self.source.pool();
            poll_until(Instant::now() + GUARD_DRAIN, TEARDOWN_PACE, || {
                pool.stats().in_use == 0
            });
            self.engine.stop_guard();
            let _ = join_within(t, COMPLETION_JOIN);
        }
    }
}
