//! The tracing engine: from an intercepted queue write to records in the
//! sinks, without any runtime FFI.
//!
//! Data flow (see `docs/architecture.md`):
//!
//! 1. The tool's queue interceptor hands each call's packets to
//!    [`Engine::intercept`]. It builds one [`PacketBatch`]: kernel dispatches
//!    get ids from the [`IdAllocator`] and a pooled timestamp signal in place
//!    of the application's completion signal; when the application gave a
//!    signal, a BARRIER_AND packet with the barrier bit set follows the kernel
//!    and completes it (device-side forwarding). Every other packet passes
//!    through untouched. The whole batch goes to the runtime's writer in one
//!    call, then one [`InterceptRecord`](crate::record::InterceptRecord) goes to the writer thread and each
//!    dispatch becomes an [`InFlight`] entry on a bounded lock-free queue.
//! 2. One completion thread ([`Engine::run_completion`]) polls the signals of
//!    the in-flight dispatches through a [`CompletionBackend`], with adaptive
//!    backoff. For each finished dispatch it reads the GPU timestamps, clamps
//!    them into `[enqueue, observed completion]`, drops the signal handle
//!    (which returns it to the pool) and pushes a [`Record`] into the bounded
//!    record queue, waiting if it is full (never dropping). An app thread
//!    that spins on the device may make a pass in its place
//!    ([`Engine::lend_completion`]): whoever holds the tracked list retires;
//!    the thread and a lender each only try its lock.
//! 3. One writer thread ([`Engine::run_writer`]) drains the record queue,
//!    resolves kernel names, applies the include/exclude filters and pushes
//!    into every [`RecordSink`](crate::sink::RecordSink). An app thread that
//!    spins on the device may write records in its place
//!    ([`Engine::lend_writer`]): whoever holds the writer's state writes, in
//!    queue order; a lender only tries its lock.
//!
//! Nothing on the interceptor path allocates in steady state (batches live in
//! inline `SmallVec` storage; queues are preallocated) or takes a global lock.
//! Back-pressure: when the signal pool is empty, or the queue's ring holds
//! too many unfinished traced packets ([`QueueContext::with_ring`]), the
//! interceptor wakes the completion thread and waits; kernels already
//! submitted finish on the device without the interceptor's help, so the
//! wait ends. If it lasts longer than [`EngineOptions::pool_wait`], the
//! dispatch passes through untraced and is counted as lost, so a traced app
//! can never hang on rprof.
//!
//! Options: [`EngineOptions::serialize`] puts a ready barrier and a gate
//! barrier in front of every kernel and lets the completion thread grant one
//! kernel at a time per agent ([`SerialGate`]);
//! [`EngineOptions::host_forwarding`] completes the app's signal from the
//! completion thread instead of with a barrier packet (a measured
//! alternative, `docs/completion.md`).
//!
//! The runtime-facing side (the signal pool's provider, reading signal values
//! and dispatch times) is abstracted as [`SignalSource`] and
//! [`CompletionBackend`], so this module is tested with a simulated device.
//!
//! Modules, one concern each:
//! - `batch`: the interceptor's rewrite ([`Engine::intercept`],
//!   [`PacketBatch`]); `ring`: the ring guard and ROCr's intercept-queue
//!   arithmetic; `inflight`: what a running dispatch holds
//!   ([`QueueContext`], [`InFlight`], [`SerialGate`]);
//! - `completion`: the completion thread; `writer`: the writer thread and
//!   the sinks' failure bookkeeping; [`ids`]: ids, thread id, clock.
//! - `copies`: asynchronous memory copies (`--memory-copy-trace`):
//!   [`Engine::trace_copy`] on the app's thread (a pooled signal in place of
//!   the app's completion signal, an id from the same allocator), and the
//!   completion thread's copy pass, which reads the copy's times
//!   ([`CompletionBackend::copy_time`]), decrements the app's signal once
//!   ([`CompletionBackend::forward`]) and hands a
//!   [`MemoryCopyRecord`](crate::record::MemoryCopyRecord) to the writer.
//! - This file: the shared [`Engine`] state, its options and its lifecycle
//!   (shutdown, fork, failed threads).
//!
//! The engine owns the path from an intercepted write to the sinks. It must
//! not call the runtime (no FFI: the tool implements [`SignalSource`] and
//! [`CompletionBackend`]), must not know packet layouts (they are
//! `rprof-abi`'s [`RawPacket`]), and waits only through [`crate::wait`]
//! (bounded).

mod batch;
mod completion;
mod copies;
mod forwarded;
pub mod ids;
mod inflight;
mod ring;
mod writer;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use crossbeam_utils::CachePadded;

pub use batch::{PacketBatch, BATCH_INLINE_DISPATCHES, BATCH_INLINE_PACKETS};
pub use completion::Lending;
pub use copies::CopyInFlight;
pub use forwarded::{ForwardedKernel, ForwardedTimes};
pub use ids::{boottime_ns, current_thread_id, fast_boottime_ns, IdAllocator, IdRange};
pub use inflight::{CallSummary, GateState, InFlight, Launch, QueueContext, SerialGate};
pub use ring::{hardware_ring_takes, hardware_slots, SeenReadIndex};
pub use rprof_abi::packet::RawPacket;
pub use writer::{CachedKernelNames, KernelNames, WriterOutcome};

use crate::kernels::LoadedKernels;
use crate::record::{Record, RunMetadata};
use crate::wait::{poll_until, Broadcast, Pace, Wait, WakePoint};
use batch::{SpareStorage, SPARE_BATCHES};

/// A timestamp signal owned by one in-flight dispatch. Dropping it gives it
/// back to wherever it came from (the signal pool).
pub trait DispatchSignal: Send + 'static {
    /// The raw `hsa_signal_t` handle to put into the packet.
    fn handle(&self) -> u64;
}

/// Where the interceptor gets timestamp signals.
pub trait SignalSource<S: DispatchSignal> {
    /// A signal with value 1, ready for a packet, or `None` when exhausted.
    fn try_acquire(&self) -> Option<S>;
    /// Total signals the source can have out at once.
    fn capacity(&self) -> usize;
    /// True once the source can never hand out a signal again (the runtime
    /// failed to create any, or the source is closed): the interceptor then
    /// passes kernels through untraced at once instead of waiting.
    fn never_available(&self) -> bool {
        false
    }
}

/// What the completion thread needs from the device side.
pub trait CompletionBackend: Send + Sync {
    /// Current value of a signal (relaxed load).
    fn signal_value(&self, signal: u64) -> i64;
    /// `(start, end)` of the dispatch that completed `signal` on `agent`, in
    /// `CLOCK_BOOTTIME` ns, or `None` if the runtime cannot tell.
    fn dispatch_time(&self, agent_handle: u64, signal: u64) -> Option<(u64, u64)>;
    /// Stores 0 into a serialization gate signal (release).
    fn open_gate(&self, signal: u64);
    /// Decrements an application's completion signal by 1 (release), as the
    /// packet processor would have (host forwarding). For a kernel, first
    /// gives it the device timestamps the kernel left in `kernel_signal` (its
    /// timestamp signal), so that the app reads the kernel's times from its
    /// own signal; `None` for a memory copy.
    fn forward(&self, app_signal: u64, kernel_signal: Option<u64>);
    /// `(start, end)` of the async memory copy that completed `signal`, in
    /// `CLOCK_BOOTTIME` ns, or `None` if the runtime cannot tell.
    fn copy_time(&self, signal: u64) -> Option<(u64, u64)> {
        let _ = signal;
        None
    }
}

/// Tuning of an [`Engine`].
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Process id used in correlation ids.
    pub pid: u32,
    /// Most dispatches tracked at once (the signal pool's capacity): the
    /// completion thread's own list is sized for it.
    pub max_in_flight: usize,
    /// Capacity of the hand-off queue from interceptors to the completion
    /// thread (at most `max_in_flight`). The completion thread takes up to
    /// 512 entries a poll, so it holds what arrives between polls; an
    /// interceptor that finds it full moves the entries into the completion
    /// thread's list itself when that list is free, else wakes the thread
    /// and yields until there is room. It is built when tracing starts,
    /// inside the app's `hsa_init`, and every slot is written then: a
    /// smaller queue is a shorter start-up.
    pub handoff_queue: usize,
    /// Most memory copies traced at once (`--memory-copy-trace`; 0 when
    /// copies are not traced: the queue then takes no memory).
    pub max_copies_in_flight: usize,
    /// Capacity of the record queue between completion and writer threads.
    pub record_queue: usize,
    /// Longest the interceptor waits for a free signal before passing a
    /// dispatch through untraced.
    pub pool_wait: Duration,
    /// Sleep of the completion thread between polls while completions flow.
    pub min_backoff: Duration,
    /// Longest sleep of the completion thread while dispatches are in flight
    /// and none completes.
    pub max_backoff: Duration,
    /// Longest sleep of the completion thread while an app thread lends its
    /// wait ([`Engine::lending`]) and makes the passes in its place.
    pub lender_nap: Duration,
    /// `--serialize-kernels`: at most one traced kernel at a time per agent.
    pub serialize: bool,
    /// Forward the app's completion signal from the completion thread
    /// instead of with a barrier packet (measurement alternative).
    pub host_forwarding: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            pid: std::process::id(),
            max_in_flight: 4096,
            handoff_queue: 4096,
            max_copies_in_flight: 4096,
            record_queue: 1 << 13,
            pool_wait: Duration::from_secs(10),
            min_backoff: Duration::from_micros(100),
            max_backoff: Duration::from_millis(1),
            lender_nap: Duration::from_millis(20),
            serialize: false,
            host_forwarding: false,
        }
    }
}

/// Longest an interceptor waits for ring space while none of the queue's
/// traced packets finishes (see `Engine::wait_for_ring_space`).
pub const RING_STALL: Duration = Duration::from_secs(1);

const RUNNING: u8 = 0;
const FINALIZING: u8 = 1;
const STOP_COMPLETION: u8 = 2;
const STOP_WRITER: u8 = 3;

/// Counters that end up in [`RunMetadata`].
#[derive(Debug, Default)]
pub struct EngineCounters {
    /// Start timestamps clamped.
    pub start_clamped: AtomicU64,
    /// End timestamps clamped.
    pub end_clamped: AtomicU64,
    /// Dispatches or records that could not be recorded.
    pub lost: AtomicU64,
    /// Dispatches completed and handed to the writer.
    pub completed: AtomicU64,
    /// Doorbell-shaped waits on signals without an event (`--rpc-trace`).
    pub rpc_unrecognised: AtomicU64,
    /// Records written by app threads waiting on the device, in the
    /// writer's place ([`Engine::lend_writer`]).
    pub lent: AtomicU64,
    /// Dispatches retired by app threads waiting on the device, in the
    /// completion thread's place ([`Engine::lend_completion`]).
    pub completions_lent: AtomicU64,
    /// Memory copies retired by app threads waiting on the device, in the
    /// completion thread's place ([`Engine::lend_completion`]).
    pub copies_lent: AtomicU64,
}

/// The shared state of a tracing session. See the module docs.
#[derive(Debug)]
pub struct Engine<S> {
    options: EngineOptions,
    /// Each interceptor call reserves its ids here.
    ids: CachePadded<IdAllocator>,
    pending: ArrayQueue<InFlight<S>>,
    /// Added to by every interceptor call, taken from at every retirement.
    in_flight: CachePadded<AtomicU64>,
    records: ArrayQueue<Record>,
    /// Read by an interceptor call that finds nothing in flight (is the
    /// thread parked?), written as the thread parks and wakes.
    completion_wake: CachePadded<WakePoint>,
    /// Set by an interceptor that waits for the completion thread.
    urgent: AtomicBool,
    /// App threads in a lending wait ([`Engine::lending`]): while there is
    /// one, the completion thread leaves its passes to it.
    lenders: AtomicU32,
    /// Where interceptors sleep while they wait for ring space; the
    /// completion thread wakes them when a waiting queue's slots fall to
    /// its waiters' target (`ring`).
    ring_space: Broadcast,
    /// The writer thread is gone (panicked).
    writer_gone: AtomicBool,
    /// The completion thread is gone (panicked).
    completion_gone: AtomicBool,
    /// Passes over the in-flight dispatches, by the completion thread or a
    /// lender (read by an interceptor that waits for ring space: a stall
    /// only counts against the device while someone keeps looking).
    completion_passes: CachePadded<AtomicU64>,
    /// The completion thread's tracked dispatches while
    /// [`Engine::run_completion`] runs (`None` before and after): the
    /// thread and a lending app thread ([`Engine::lend_completion`]) each
    /// only try the lock, and make a pass under it.
    completion_job: Mutex<Option<completion::CompletionJob<S>>>,
    writer_wake: WakePoint,
    /// `completed` moves at every retirement.
    counters: CachePadded<EngineCounters>,
    /// Read by every interceptor call.
    state: CachePadded<AtomicU8>,
    /// Reusable storage for batches larger than the inline capacities.
    spares: ArrayQueue<SpareStorage<S>>,
    /// Interceptor calls that passed the tracing check and may still add
    /// recorded dispatches; shutdown waits for them (bounded).
    recording_calls: CachePadded<AtomicU64>,
    /// After recording stops, the completion thread keeps recycling the
    /// signals and ring slots of dispatches submitted later, so the ring
    /// guard goes on (the at-exit flush while app threads keep launching).
    keep_guard: AtomicBool,
    /// The completion thread has settled every recorded dispatch (recorded
    /// or counted lost) after shutdown: the writer may finish.
    records_closed: AtomicBool,
    /// Records the writer has taken off the record queue (its progress).
    /// Moved only by the holder of `writer_job`.
    writer_progress: AtomicU64,
    /// The writer's sinks, names and counts while [`Engine::run_writer`]
    /// runs (`None` before and after): the writer thread and a lending app
    /// thread ([`Engine::lend_writer`], which only ever tries the lock)
    /// write records under it.
    writer_job: Mutex<Option<writer::WriterJob>>,
    /// What the writer did, published as [`Engine::run_writer`] returns
    /// (before its caller frees the sinks) or when its thread panicked
    /// ([`Engine::writer_failed`]); [`Engine::join_writer`] takes it.
    writer_outcome: Mutex<Option<WriterOutcome>>,
    /// Wakes [`Engine::join_writer`] when `writer_outcome` is published.
    writer_done: Condvar,
    /// A lender found a sink's buffers full: the writer thread flushes the
    /// sinks (writes the files) at its next look, and is woken for it.
    writer_flush_wanted: AtomicBool,
    /// Lending threads may write records: every sink had room when it
    /// started (set once, as the writer starts, before its state is
    /// published). A sink that never buffers for a lender (rocpd, split
    /// Perfetto: `spare_room` 0) leaves all writing to the writer thread, and
    /// lenders then neither write nor ask for flushes (each ask made the
    /// writer thread flush, every 200 µs of an app's wait).
    writer_lends: AtomicBool,
    /// The writer made no progress for [`WRITER_STALL`] while the record
    /// queue was full (stuck on a FIFO nobody reads, a hung file system):
    /// records that do not fit are dropped (counted lost) instead of
    /// waited for, until it moves again.
    writer_stalled: AtomicBool,
    /// Traced memory copies published to the completion thread.
    copies: ArrayQueue<CopyInFlight<S>>,
    /// Traced memory copies not yet retired (bounded by `copies`'
    /// capacity: a copy beyond it runs untraced).
    copies_out: AtomicU64,
    /// Kernels of frozen executables not yet in the writer's kernel table
    /// ([`Engine::push_loaded_kernels`]); locked once per executable, never
    /// per dispatch.
    loaded_kernels: Mutex<Vec<LoadedKernels>>,
    /// The kernel times behind app signals completed by a forwarding
    /// barrier (the tool answers the app's timestamp queries from it).
    forwarded_times: ForwardedTimes,
}

/// Longest the completion thread waits for a writer that takes no record
/// at all before it drops records (counted lost) instead of waiting.
pub const WRITER_STALL: Duration = Duration::from_secs(2);

/// How long the flush waits for the writer when it takes no record at all
/// ([`Engine::join_writer`]).
pub const WRITER_JOIN_STALL: Duration = Duration::from_secs(5);
/// The longest the flush waits for a writer that keeps taking records.
pub const WRITER_JOIN_MAX: Duration = Duration::from_secs(60);

/// Locks `m`, taking a poisoned lock back: the engine's locks guard state
/// that a panic (a sink's, on a lending app thread) leaves whole, and that
/// panic is reported where it happened.
fn lock_taking_back<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// [`lock_taking_back`] if nobody holds `m` (`None`: held): what a lending
/// app thread does, which never waits for rprof's threads.
fn try_lock_taking_back<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(held) => Some(held),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// Joins `handle` if its thread ends within `timeout`; otherwise leaves it
/// running (detached) and returns `None`. Teardown never blocks longer.
pub fn join_within<T>(handle: std::thread::JoinHandle<T>, timeout: Duration) -> Option<T> {
    let finished = poll_until(Instant::now() + timeout, JOIN_PACE, || handle.is_finished());
    if !finished {
        return None;
    }
    handle.join().ok()
}

/// How [`join_within`] polls a thread: 64 yields, then naps of 50 µs (the
/// app's exit waits on the writer's join; a nap is ~100 µs with the default
/// timer slack, so the first rounds yield).
const JOIN_PACE: Pace = Pace::new(64, Duration::from_micros(50));
/// How often [`Engine::join_writer`] looks at the writer's progress while it
/// waits for the outcome (it is woken by the outcome itself).
const JOIN_LOOK: Duration = Duration::from_millis(5);
/// How an interceptor waits for signals from the pool: 64 yields, then naps
/// of 50 µs (each round may wake the completion thread). Waits for ring
/// space sleep until woken instead (`ring`).
const INTERCEPTOR_PACE: Pace = Pace::new(64, Duration::from_micros(50));
/// How shutdown waits for interceptor calls in progress.
const CALLS_PACE: Pace = Pace::naps(Duration::from_micros(50));
/// How shutdown waits for the dispatches in flight (waking the completion
/// thread every round).
const DRAIN_PACE: Pace = Pace::naps(Duration::from_micros(200));
/// How an app thread retries a full queue: yields only, until its deadline.
const PUSH_PACE: Pace = Pace::new(u32::MAX, Duration::ZERO);

impl<S: DispatchSignal> Engine<S> {
    /// A new engine; start [`Engine::run_completion`] and
    /// [`Engine::run_writer`] on threads of their own.
    pub fn new(options: EngineOptions) -> Self {
        Engine {
            forwarded_times: ForwardedTimes::default(),
            ids: CachePadded::new(IdAllocator::new(options.pid)),
            pending: ArrayQueue::new(options.handoff_queue.min(options.max_in_flight).max(1)),
            in_flight: CachePadded::new(AtomicU64::new(0)),
            records: ArrayQueue::new(options.record_queue.max(2)),
            completion_wake: CachePadded::new(WakePoint::new()),
            urgent: AtomicBool::new(false),
            lenders: AtomicU32::new(0),
            ring_space: Broadcast::new(),
            writer_gone: AtomicBool::new(false),
            completion_gone: AtomicBool::new(false),
            completion_passes: CachePadded::new(AtomicU64::new(0)),
            completion_job: Mutex::new(None),
            writer_wake: WakePoint::new(),
            counters: CachePadded::new(EngineCounters::default()),
            state: CachePadded::new(AtomicU8::new(RUNNING)),
            spares: ArrayQueue::new(SPARE_BATCHES),
            recording_calls: CachePadded::new(AtomicU64::new(0)),
            keep_guard: AtomicBool::new(false),
            records_closed: AtomicBool::new(false),
            writer_progress: AtomicU64::new(0),
            writer_job: Mutex::new(None),
            writer_outcome: Mutex::new(None),
            writer_done: Condvar::new(),
            writer_flush_wanted: AtomicBool::new(false),
            writer_lends: AtomicBool::new(false),
            writer_stalled: AtomicBool::new(false),
            copies: ArrayQueue::new(options.max_copies_in_flight.max(1)),
            copies_out: AtomicU64::new(0),
            loaded_kernels: Mutex::new(Vec::new()),
            options,
        }
    }

    /// The options the engine was made with.
    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    /// Dispatches submitted and not yet seen complete.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// The engine's counters.
    pub fn counters(&self) -> &EngineCounters {
        &self.counters
    }

    /// Dispatch ids handed out so far.
    pub fn dispatches_issued(&self) -> u64 {
        self.ids.issued()
    }

    /// Whether new work is still traced (false once finalization began).
    pub fn is_tracing(&self) -> bool {
        self.state.load(Ordering::Acquire) == RUNNING
    }

    /// Whether the completion thread still recycles slots and signals, so an
    /// interceptor may wait for them.
    fn is_guarding(&self) -> bool {
        !self.completion_gone.load(Ordering::Acquire)
            && (self.state.load(Ordering::Acquire) < STOP_COMPLETION
                || self.keep_guard.load(Ordering::Acquire))
    }

    /// Asks the completion thread to keep running after shutdown, only to
    /// recycle the signals and ring slots of dispatches submitted after
    /// recording stopped: app threads that keep launching while the process
    /// exits still get the ring guard (without it ROCr 5.2.3 aborts on a
    /// second overflow of its hidden ring). Call before
    /// [`Engine::begin_shutdown`]; then wait for
    /// [`Engine::records_closed`] instead of joining the completion thread.
    pub fn keep_guard_after_stop(&self) {
        self.keep_guard.store(true, Ordering::Release);
    }

    /// Whether the writer was found stuck (no record taken for
    /// [`WRITER_STALL`] with the record queue full) and has not moved since.
    pub fn writer_stalled(&self) -> bool {
        self.writer_stalled.load(Ordering::Acquire)
    }

    /// Records waiting in the record queue (not yet taken by the writer).
    pub fn records_queued(&self) -> usize {
        self.records.len()
    }

    /// Waits, after [`Engine::stop_writer`], for what the writer did: while
    /// it keeps taking records, and gives up (`None`, the writer thread left
    /// running) once it has taken none for `stall`, or after `max` in all. A
    /// writer slowed by a loaded machine or a disk that throttles its writes
    /// finishes the files; one stuck for good (a hung file system) costs the
    /// app's exit `stall` once it stops moving. Returns as soon as the
    /// outcome is published: the writer thread frees its sinks' buffers and
    /// ends while the exit goes on (waiting for the thread itself to end,
    /// polled, cost the 20 µs mix's exit 0.2-0.35 ms on ROCr 6.1).
    pub fn join_writer(&self, stall: Duration, max: Duration) -> Option<WriterOutcome> {
        let start = Instant::now();
        let mut seen = self.writer_progress.load(Ordering::Acquire);
        let mut until = start + stall.min(max);
        let mut held = lock_taking_back(&self.writer_outcome);
        loop {
            if let Some(outcome) = held.take() {
                return Some(outcome);
            }
            let now = Instant::now();
            if now >= until {
                return None;
            }
            held = self
                .writer_done
                .wait_timeout(held, (until - now).min(JOIN_LOOK))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            let now_seen = self.writer_progress.load(Ordering::Acquire);
            if now_seen != seen {
                seen = now_seen;
                until = (Instant::now() + stall).min(start + max);
            }
        }
    }

    /// Publishes what the writer did for [`Engine::join_writer`].
    fn publish_outcome(&self, outcome: WriterOutcome) {
        *lock_taking_back(&self.writer_outcome) = Some(outcome);
        self.writer_done.notify_all();
    }

    /// Ends what [`Engine::keep_guard_after_stop`] started: the completion
    /// thread forgets what it still tracks and returns, and interceptors
    /// pass packets through untouched. Call before the runtime shuts down
    /// (its signals go away with it).
    pub fn stop_guard(&self) {
        self.keep_guard.store(false, Ordering::Release);
        self.completion_wake.notify();
        self.ring_space.notify_all();
    }

    /// Whether the completion thread has settled every recorded dispatch
    /// after [`Engine::begin_shutdown`] (it has returned, or it only
    /// recycles unrecorded dispatches now).
    pub fn records_closed(&self) -> bool {
        self.records_closed.load(Ordering::Acquire)
    }

    /// Counts `n` records or dispatches that could not be recorded.
    pub fn count_lost(&self, n: u64) {
        self.counters.lost.fetch_add(n, Ordering::Relaxed);
    }

    /// Hands an RPC doorbell wake (from a wait wrapper on an application
    /// thread) to the writer, with the back-pressure of [`Engine::push_app_record`].
    pub fn push_rpc_wake(&self, rec: crate::rpc::RpcWakeRecord) {
        self.push_record(Record::RpcWake(rec));
    }

    /// Counts a doorbell-shaped wait on a signal without an event.
    pub fn count_rpc_unrecognised(&self) {
        self.counters
            .rpc_unrecognised
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Hands a record made on an application thread (a ROCTx marker, see
    /// [`crate::marker`]) to the writer, unless recording has stopped.
    /// Waits while the record queue is full and the writer takes records
    /// (back-pressure, no loss); drops the record (counted) only once the
    /// writer took none for [`WRITER_STALL`], and then no thread waits again.
    pub fn push_app_record(&self, rec: Record) {
        if self.is_tracing() {
            self.push_record(rec);
        }
    }

    /// Hands the kernels of an executable the app froze to the writer, which
    /// enters them in its kernel table before it writes any record queued
    /// after this call (so before any dispatch of them). Dispatches submitted
    /// before this call keep the names their kernel objects had then, even
    /// when their records come later (an executable unloaded and this one
    /// loaded at the same address). The caller's thread only queues them:
    /// parsing and demangling are the writer's.
    pub fn push_loaded_kernels(&self, mut kernels: LoadedKernels) {
        if !self.is_tracing() {
            return;
        }
        // Every dispatch submitted before the freeze returned has a lower
        // id: the app got these kernels' objects only after it.
        kernels.first_dispatch_id = self.ids.issued() + 1;
        lock_taking_back(&self.loaded_kernels).push(kernels);
        self.push_record(Record::KernelsLoaded);
        // Learn them now, while the app is still loading (the device idle),
        // not at the writer's next look (its idle nap grows to
        // WRITER_IDLE_MAX): else the learning, and the backlog of records
        // queued meanwhile, land in one burst amid the app's first kernels.
        self.writer_wake.notify();
    }

    /// The kernel last forwarded by barrier to the app's completion signal
    /// `signal`, and its times once retired ([`ForwardedTimes`]).
    pub fn forwarded_kernel(&self, signal: u64) -> ForwardedKernel {
        self.forwarded_times.lookup(signal)
    }

    /// The kernels queued by [`Engine::push_loaded_kernels`] so far, in
    /// call order (the writer's).
    fn take_loaded_kernels(&self) -> Vec<LoadedKernels> {
        std::mem::take(&mut *lock_taking_back(&self.loaded_kernels))
    }

    /// Stops tracing new work, waits up to `timeout` for the dispatches in
    /// flight, and asks the completion thread to finish. Returns the
    /// dispatches still in flight when it gave up.
    pub fn begin_shutdown(&self, timeout: Duration) -> u64 {
        self.shut_down_completion(None, timeout)
    }

    /// As [`Engine::begin_shutdown`], but the calling thread also does the
    /// completion thread's work whenever that thread's state is free: it
    /// retires what finished while it waits, and settles the recorded
    /// dispatches once it has asked the thread to stop. The flush then
    /// never waits for the completion thread to wake (it may be napping up
    /// to its longest backoff, or have no core: at exit, 0.1-0.4 ms on the
    /// 2-core machine). `backend` is the one the thread completes with.
    pub fn begin_shutdown_here(&self, backend: &dyn CompletionBackend, timeout: Duration) -> u64 {
        self.shut_down_completion(Some(backend), timeout)
    }

    fn shut_down_completion(
        &self,
        backend: Option<&dyn CompletionBackend>,
        timeout: Duration,
    ) -> u64 {
        let _ =
            self.state
                .compare_exchange(RUNNING, FINALIZING, Ordering::SeqCst, Ordering::SeqCst);
        // The writer drains what it holds while the completion thread
        // settles, instead of sleeping through it to its next wake-up.
        self.writer_wake.notify();
        let deadline = Instant::now() + timeout;
        // Calls that passed the tracing check before it changed add their
        // dispatches to the in-flight count shortly; wait for them first.
        poll_until(deadline, CALLS_PACE, || {
            self.recording_calls.load(Ordering::SeqCst) == 0
        });
        let mut wait = Wait::until(deadline, DRAIN_PACE);
        while self.in_flight() > 0 && !self.completion_gone.load(Ordering::Acquire) {
            // Progress is looked for again at once, but only until the
            // deadline: app threads that keep launching after the stop (the
            // ring guard) give every turn something to retire.
            if backend.is_some_and(|b| self.complete_here(b)) && Instant::now() < deadline {
                continue;
            }
            self.completion_wake.notify();
            if !wait.pause() {
                break;
            }
        }
        let left = self.in_flight();
        self.state.fetch_max(STOP_COMPLETION, Ordering::AcqRel);
        if let Some(b) = backend {
            self.complete_here(b);
        }
        self.completion_wake.notify();
        self.ring_space.notify_all();
        left
    }

    /// The completion thread died: nothing new is traced and shutdown does
    /// not wait for dispatches nobody will complete.
    pub fn completion_failed(&self) {
        self.completion_gone.store(true, Ordering::Release);
        self.stop_tracing_now();
        self.writer_wake.notify();
        self.ring_space.notify_all();
    }

    /// The writer thread died: records are dropped (counted) instead of
    /// waited for, nothing new is traced, and the flush gets an empty
    /// outcome (every output unfinished) at once.
    pub fn writer_failed(&self) {
        self.writer_gone.store(true, Ordering::Release);
        self.stop_tracing_now();
        self.publish_outcome(WriterOutcome::default());
    }

    /// Stops tracing new work at once, without waiting or taking any lock
    /// (safe in a forked child, where rprof's threads do not exist).
    /// The completion and writer threads keep running until
    /// [`Engine::begin_shutdown`] / [`Engine::stop_writer`].
    pub fn stop_tracing_now(&self) {
        let _ =
            self.state
                .compare_exchange(RUNNING, FINALIZING, Ordering::AcqRel, Ordering::Acquire);
    }

    /// In a child created by `fork`: rprof's threads do not exist there, so
    /// nothing is traced or guarded and nobody waits for them.
    pub fn forked_child(&self) {
        self.completion_gone.store(true, Ordering::Release);
        self.writer_gone.store(true, Ordering::Release);
        self.stop_tracing_now();
    }

    /// Tells the writer that no more records will come (call after the
    /// completion thread has returned).
    pub fn stop_writer(&self) {
        self.state.fetch_max(STOP_WRITER, Ordering::AcqRel);
        self.writer_wake.notify();
    }

    /// The run's counters so far, as [`RunMetadata`] (the writer fills
    /// `dispatches` and `filtered_out`).
    pub fn metadata(&self) -> RunMetadata {
        RunMetadata {
            dispatches: 0,
            filtered_out: 0,
            start_clamped: self.counters.start_clamped.load(Ordering::Relaxed),
            end_clamped: self.counters.end_clamped.load(Ordering::Relaxed),
            records_lost: self.counters.lost.load(Ordering::Relaxed),
            rpc_wakes: 0,
            rpc_unrecognised_waits: self.counters.rpc_unrecognised.load(Ordering::Relaxed),
            end_ns: boottime_ns(),
            memory_copies: 0,
        }
    }
}

/// Clamps a dispatch's `(start, end)` into `[enqueue, observed]` with
/// `start <= end`. Returns the times and whether start and end moved.
pub fn clamp_times(
    enqueue_ns: u64,
    observed_ns: u64,
    times: Option<(u64, u64)>,
) -> ((u64, u64), bool, bool) {
    let hi = observed_ns.max(enqueue_ns);
    let (start, end) = times.unwrap_or((0, u64::MAX));
    let s = start.clamp(enqueue_ns, hi);
    let e = end.clamp(s, hi);
    ((s, e), s != start, e != end)
}

/// Pushes `item`, retrying (after `wake`, which asks the consumer to drain,
/// and a yield) for up to `timeout`; gives the item back if the queue stayed
/// full. An app thread never waits longer than that for rprof.
fn push_bounded<T>(
    queue: &ArrayQueue<T>,
    item: T,
    timeout: Duration,
    wake: impl Fn(),
) -> Result<(), T> {
    let mut item = match queue.push(item) {
        Ok(()) => return Ok(()),
        Err(back) => back,
    };
    // The clock is read only once the queue was full (not per dispatch).
    let mut wait = Wait::with_timeout(timeout, PUSH_PACE);
    loop {
        wake();
        if !wait.pause() {
            return queue.push(item);
        }
        match queue.push(item) {
            Ok(()) => return Ok(()),
            Err(back) => item = back,
        }
    }
}

#[cfg(test)]
mod tests;
