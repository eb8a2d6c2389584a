//! The writer thread: drains records into the sinks.

use std::io;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{DispatchSignal, Engine, STOP_WRITER};
use std::collections::HashMap;
use std::sync::Arc;

use crate::kernels::{KernelEntry, KernelTable, LoadedKernels};
use crate::record::{AgentInfo, Record, RunInfo, RunMetadata};
use crate::sink::{KernelInfo, RecordSink};
use crate::wait::SleepKind;

/// How long an idle writer sleeps before looking again (it is woken early
/// when the record queue fills up, and when an executable's kernels are
/// handed over): after a wake that found records.
const WRITER_IDLE: Duration = Duration::from_millis(2);

/// The longest idle sleep: each wake that finds nothing doubles the next
/// sleep up to this, so a writer with nothing to do (the app starting up,
/// between phases) wakes about 16 times a second, not 500.
const WRITER_IDLE_MAX: Duration = Duration::from_millis(64);

// Records that reach an idle writer are still on disk within FLUSH_EVERY.
const _: () = assert!(WRITER_IDLE_MAX.as_millis() < FLUSH_EVERY.as_millis());

/// Longest time records handed to the sinks stay in their buffers (plus
/// up to [`WRITER_IDLE_MAX`] for records an app thread wrote in the
/// writer's place while the writer thread slept).
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// Kernel names and the include/exclude verdict, as the writer needs them.
pub trait KernelNames {
    /// Calls `f` with the names of the kernel that dispatch `dispatch_id`
    /// ran at `kernel_object` and whether the filters keep it (an unknown
    /// kernel gets a placeholder name). The dispatch id tells a kernel from
    /// the one an earlier executable had at the same object.
    fn with_kernel(
        &mut self,
        kernel_object: u64,
        dispatch_id: u64,
        f: &mut dyn FnMut(&KernelInfo<'_>, bool),
    );

    /// Enters the kernels of an executable the app froze.
    fn learn(&mut self, kernels: &LoadedKernels);
}

/// The live table (shared with the session) behind a cache of the
/// writer's own: an entry the writer
/// has seen is found again without the table's shard lock and reference
/// count (two locked instructions each, and a tenth of the writer's time
/// on the storm). Every entry filed in the table moves its generation,
/// and the cache starts over when it sees the generation move, so an
/// object whose entry was replaced (its code object unloaded and the
/// memory reused) is looked up again.
#[derive(Debug)]
pub struct CachedKernelNames {
    /// Shared with the session: the writer's names live in the engine
    /// while the writer runs ([`Engine::lend_writer`]), beyond any borrow.
    table: Arc<KernelTable>,
    generation: u64,
    entries: HashMap<u64, Arc<KernelEntry>, foldhash::fast::RandomState>,
}

impl CachedKernelNames {
    /// An empty cache in front of `table`.
    pub fn new(table: Arc<KernelTable>) -> Self {
        CachedKernelNames {
            generation: table.generation(),
            table,
            entries: HashMap::default(),
        }
    }
}

impl KernelNames for CachedKernelNames {
    fn with_kernel(
        &mut self,
        kernel_object: u64,
        dispatch_id: u64,
        f: &mut dyn FnMut(&KernelInfo<'_>, bool),
    ) {
        let table = &*self.table;
        let generation = table.generation();
        if generation != self.generation {
            self.entries.clear();
            self.generation = generation;
        }
        let newest = self
            .entries
            .entry(kernel_object)
            .or_insert_with(|| table.resolve(kernel_object));
        let entry = table.for_dispatch(newest, dispatch_id);
        f(&entry.info(), entry.keep());
    }

    fn learn(&mut self, kernels: &LoadedKernels) {
        if let Some(why) = self.table.learn(kernels) {
            eprintln!(
                "rprof: warning: a code object's kernel metadata could not be read ({why}); its kernels' register counts are 0"
            );
        }
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
    /// ROCTx marks and ranges written (`--marker-trace`).
    pub markers: u64,
    /// `roctxRangeStartA` ranges never stopped (not written).
    pub unfinished_ranges: u64,
}

/// The sinks of a run and how each fared: a sink is called until its first
/// error, which is reported once on stderr, then skipped.
pub(super) struct Sinks {
    sinks: Vec<Box<dyn RecordSink + Send>>,
    failures: Vec<Option<String>>,
    errors: u64,
}

impl Sinks {
    /// The sinks still in use (none of their calls failed).
    fn in_use(&self) -> impl Iterator<Item = &(dyn RecordSink + Send)> {
        self.sinks
            .iter()
            .zip(&self.failures)
            .filter(|(_, failed)| failed.is_none())
            .map(|(sink, _)| sink.as_ref())
    }

    /// The room every sink still in use has before it writes to its file.
    fn spare_room(&self) -> usize {
        self.in_use()
            .map(|sink| sink.spare_room())
            .min()
            .unwrap_or(usize::MAX)
    }

    pub(super) fn new(sinks: Vec<Box<dyn RecordSink + Send>>) -> Self {
        let failures = vec![None; sinks.len()];
        Sinks {
            sinks,
            failures,
            errors: 0,
        }
    }

    /// Calls `call` on every sink that has not failed; `what` names the
    /// call in the report of a failure.
    pub(super) fn each(
        &mut self,
        what: &str,
        mut call: impl FnMut(&mut dyn RecordSink) -> io::Result<()>,
    ) {
        for (i, sink) in self.sinks.iter_mut().enumerate() {
            if self.failures[i].is_some() {
                continue;
            }
            if let Err(e) = call(sink.as_mut()) {
                self.errors += 1;
                eprintln!("rprof: output {i} failed in {what}: {e}; it is disabled for the rest of the run");
                self.failures[i] = Some(format!("{what} failed: {e}"));
            }
        }
    }

    /// A lender found a sink short of room: makes room in the sinks short of
    /// it alone ([`RecordSink::make_room`]); the others keep their buffers.
    pub(super) fn make_room_for_lenders(&mut self) {
        self.each("flush", |s| {
            if s.spare_room() < LEND_ROOM {
                s.make_room()
            } else {
                Ok(())
            }
        });
    }
}

/// What the writer counted on its way.
#[derive(Debug, Default)]
struct Tally {
    dispatches: u64,
    filtered_out: u64,
    intercept_calls: u64,
    intercept_ns: u64,
    rpc_wakes: u64,
    markers: u64,
    process_ranges: crate::marker::ProcessRanges,
    kernel_regions: crate::marker::KernelRegions,
    memory_copies: u64,
}

/// Most records the writer thread takes off the queue between two looks at
/// the lenders and the flush clock. It holds the writer's state while it
/// writes them, and a lender only tries that lock: a thread that enters a
/// lending wait while the writer thread works through a backlog takes over
/// within one batch (at 4,096, the 6.4 mix's app thread spun beside a
/// writer thread that wrote 4 ms of records on the emulated GPU's core).
const DRAIN_BATCH: usize = 256;

/// The room every sink must have left in its buffers before a lending
/// thread writes one more record (far above a record's size: a CSV row, a
/// JSON object or a Perfetto event with a kernel name of several KiB), so
/// that a lender never writes to a file.
const LEND_ROOM: usize = 16 * 1024;

/// The writer's state between records: the sinks and how each fared, the
/// kernel names and what was counted. The engine holds it while the writer
/// runs, so that an application thread that waits on the device can write
/// records too ([`Engine::lend_writer`]); whoever holds the lock writes.
pub(super) struct WriterJob {
    sinks: Sinks,
    names: Box<dyn KernelNames + Send>,
    tally: Tally,
    /// Records reached the sinks since their last flush.
    dirty: bool,
}

impl std::fmt::Debug for WriterJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriterJob")
            .field("sinks", &self.sinks.sinks.len())
            .field("tally", &self.tally)
            .field("dirty", &self.dirty)
            .finish_non_exhaustive()
    }
}

impl<S: DispatchSignal> Engine<S> {
    /// The writer loop: `start` on every sink, then every record in arrival
    /// order, then `finish` with the run metadata once
    /// [`Engine::stop_writer`] was called and the queue is empty. A sink that
    /// fails is reported once on stderr and skipped from then on. The sinks
    /// are back in `sinks` when it returns. While it runs, a thread waiting on
    /// the device may write records in its place ([`Engine::lend_writer`]).
    pub fn run_writer(
        &self,
        sinks: &mut Vec<Box<dyn RecordSink + Send>>,
        names: Box<dyn KernelNames + Send>,
        run: &RunInfo,
        agents: &[AgentInfo],
    ) -> WriterOutcome {
        let mut job = WriterJob {
            sinks: Sinks::new(std::mem::take(sinks)),
            names,
            tally: Tally::default(),
            dirty: false,
        };
        job.sinks.each("start", |s| s.start(run, agents));
        self.writer_lends
            .store(job.sinks.spare_room() > 0, Ordering::Release);
        *self.writer_job() = Some(job);
        let mut last_flush = Instant::now();
        let sleeper = self.writer_wake.sleeper();
        let mut idle = WRITER_IDLE;
        let mut lent_seen = self.counters.lent.load(Ordering::Relaxed);
        loop {
            // A lender found a sink's buffers full: write the files (only
            // this thread does). While app threads write records (one is in
            // a lending wait, or some wrote since this thread last looked),
            // leave the queued records to them until the queue is 3/4 full:
            // what this thread writes takes a core from the app or the
            // device, what they write does not.
            let wanted = self.writer_flush_wanted.swap(false, Ordering::AcqRel);
            let lent = self.counters.lent.load(Ordering::Relaxed);
            let lenders_active = lent != lent_seen || self.lenders_write();
            lent_seen = lent;
            let leave_to_lender = (wanted || lenders_active)
                && !self.lenders_fall_behind()
                && self.state.load(Ordering::Acquire) < STOP_WRITER;
            let (got, dirty) = {
                let mut held = self.writer_job();
                let job = held
                    .as_mut()
                    .expect("the writer's job is held until it finishes");
                let got = !leave_to_lender && self.drain_records(job, DRAIN_BATCH, 0) > 0;
                // Periodic flush: what reached the sinks is on disk within
                // FLUSH_EVERY (a killed process leaves a readable prefix).
                if job.dirty && last_flush.elapsed() >= FLUSH_EVERY {
                    job.sinks.each("flush", |s| s.flush());
                    job.dirty = false;
                    last_flush = Instant::now();
                } else if wanted {
                    job.sinks.make_room_for_lenders();
                }
                (got, job.dirty)
            };
            if got {
                idle = WRITER_IDLE;
                continue;
            }
            if self.state.load(Ordering::Acquire) >= STOP_WRITER && self.records.is_empty() {
                break;
            }
            // Unflushed records are flushed when due, however long the
            // idle sleep has grown.
            let nap = if dirty {
                idle.min(FLUSH_EVERY.saturating_sub(last_flush.elapsed()))
            } else {
                idle
            };
            sleeper.sleep(SleepKind::Parked, nap, || {
                self.writer_wake_due()
                    || self.writer_flush_wanted.load(Ordering::Acquire)
                    || self.state.load(Ordering::Acquire) >= STOP_WRITER
            });
            idle = (idle * 2).min(WRITER_IDLE_MAX);
        }
        let mut job = self
            .writer_job()
            .take()
            .expect("the writer's job is held until it finishes");
        // Finishing the outputs counts as progress for the flush's join.
        self.writer_progress.fetch_add(1, Ordering::Release);
        let mut metadata = self.metadata();
        let tally = &job.tally;
        metadata.dispatches = tally.dispatches;
        metadata.filtered_out = tally.filtered_out;
        metadata.rpc_wakes = tally.rpc_wakes;
        metadata.memory_copies = tally.memory_copies;
        job.sinks.each("finish", |s| s.finish(&metadata));
        let outcome = WriterOutcome {
            metadata,
            sink_errors: job.sinks.errors,
            sink_failures: job.sinks.failures,
            intercept_calls: job.tally.intercept_calls,
            intercept_ns: job.tally.intercept_ns,
            markers: job.tally.markers,
            unfinished_ranges: job.tally.process_ranges.unfinished() as u64,
        };
        *sinks = job.sinks.sinks;
        self.publish_outcome(outcome.clone());
        outcome
    }

    /// Writes up to `max` queued records on the calling thread, in the
    /// writer's place, if the writer's state is free (never waits for it):
    /// an application thread that spins on the device lends its time, so
    /// the writer thread takes none from the app's other threads (nor, on
    /// the emulated GPU, from the command processor). Returns how many it
    /// wrote (0: nothing queued, the writer busy or not running).
    pub fn lend_writer(&self, max: usize) -> usize {
        if self.records.is_empty() || self.writer_gone.load(Ordering::Acquire) {
            return 0;
        }
        let Some(mut held) = super::try_lock_taking_back(&self.writer_job) else {
            return 0;
        };
        let n = match held.as_mut() {
            Some(job) if self.writer_lends.load(Ordering::Acquire) => {
                self.drain_records(job, max, LEND_ROOM)
            }
            _ => 0,
        };
        if n > 0 {
            self.counters.lent.fetch_add(n as u64, Ordering::Relaxed);
        }
        n
    }

    /// Whether an app thread is in a lending wait and the sinks let it
    /// write records ([`Engine::lend_writer`]).
    fn lenders_write(&self) -> bool {
        self.lenders.load(Ordering::Relaxed) > 0 && self.writer_lends.load(Ordering::Acquire)
    }

    /// Whether the record queue is 3/4 full: the writer thread then writes
    /// even while app threads lend (the queue must not fill, or the threads
    /// that queue records wait).
    fn lenders_fall_behind(&self) -> bool {
        self.records.len() * 4 >= self.records.capacity() * 3
    }

    /// Whether the record queue is full enough to wake the writer thread:
    /// half full, or while app threads write records in a lending wait,
    /// 3/4 (below that the writer thread would leave the records to them,
    /// so a wake-up would only cost a context switch).
    pub(super) fn writer_wake_due(&self) -> bool {
        if self.lenders_write() {
            self.lenders_fall_behind()
        } else {
            self.records.len() * 2 >= self.records.capacity()
        }
    }

    /// The writer's state, locked (a poisoned lock is taken back: a sink
    /// that panicked on a lending thread is that sink's failure alone).
    pub(super) fn writer_job(&self) -> std::sync::MutexGuard<'_, Option<WriterJob>> {
        super::lock_taking_back(&self.writer_job)
    }

    /// Takes up to `max` records off the queue into the sinks; returns how
    /// many. With `room` > 0 (a lender), only while every sink has that
    /// much room left in its buffers: when one has not, the writer thread is
    /// asked to flush and no more is taken. Called with the writer's state
    /// held.
    fn drain_records(&self, job: &mut WriterJob, max: usize, room: usize) -> usize {
        let mut n = 0;
        // Only the holder of the writer's state moves the counter: a plain
        // store per record, not a locked read-modify-write.
        let mut progress = self.writer_progress.load(Ordering::Relaxed);
        let has_room = |job: &WriterJob| {
            if room == 0 || job.sinks.spare_room() >= room {
                return true;
            }
            self.writer_flush_wanted.store(true, Ordering::Release);
            self.writer_wake.notify();
            false
        };
        while n < max && has_room(job) {
            let Some(rec) = self.records.pop() else { break };
            n += 1;
            progress += 1;
            self.writer_progress.store(progress, Ordering::Release);
            if self.writer_stalled.load(Ordering::Relaxed) {
                self.writer_stalled.store(false, Ordering::Release);
            }
            if let Record::KernelsLoaded = rec {
                for k in self.take_loaded_kernels() {
                    job.names.learn(&k);
                }
            }
            write_record(rec, &mut job.sinks, job.names.as_mut(), &mut job.tally);
        }
        if n > 0 {
            job.dirty = true;
        }
        n
    }
}

/// One record into every sink (a dispatch only if the filters keep its
/// kernel), counted in `tally`.
fn write_record(rec: Record, sinks: &mut Sinks, names: &mut dyn KernelNames, tally: &mut Tally) {
    match rec {
        Record::Intercept(r) => {
            tally.intercept_calls += 1;
            tally.intercept_ns += r.end_ns.saturating_sub(r.begin_ns);
            sinks.each("intercept", |s| s.intercept(&r));
        }
        Record::RpcWake(w) => {
            tally.rpc_wakes += 1;
            sinks.each("rpc_wake", |s| s.rpc_wake(&w));
        }
        Record::Marker(m) => {
            tally.markers += 1;
            sinks.each("marker", |s| s.marker(&m));
        }
        Record::RangeStart(r) => tally.process_ranges.start(r),
        Record::RangeStop(r) => {
            if let Some(m) = tally.process_ranges.stop(&r) {
                tally.markers += 1;
                sinks.each("marker", |s| s.marker(&m));
            }
        }
        Record::MemoryCopy(c) => {
            tally.memory_copies += 1;
            sinks.each("memory_copy", |s| s.memory_copy(&c));
        }
        // Taken from the engine's inbox by `drain_records`.
        Record::KernelsLoaded => {}
        Record::KernelRegion(r) => tally.kernel_regions.add(&r),
        Record::ThreadName(t) => sinks.each("thread_name", |s| s.thread_name(t.thread_id, t.name)),
        Record::Dispatch(d) => {
            let region = tally.kernel_regions.take(d.correlation_id);
            names.with_kernel(d.kernel_object, d.dispatch_id, &mut |k, keep| {
                if !keep {
                    tally.filtered_out += 1;
                    return;
                }
                tally.dispatches += 1;
                match region {
                    // --kernel-rename: shown under its range's name.
                    Some(r) => sinks.each("dispatch", |s| s.dispatch_renamed(&d, k, r)),
                    None => sinks.each("dispatch", |s| s.dispatch(&d, k)),
                }
            })
        }
    }
}
