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
//!    call, then one [`InterceptRecord`] goes to the writer thread and each
//!    dispatch becomes an [`InFlight`] entry on a bounded lock-free queue.
//! 2. One completion thread ([`Engine::run_completion`]) polls the signals of
//!    the in-flight dispatches through a [`CompletionBackend`], with adaptive
//!    backoff. For each finished dispatch it reads the GPU timestamps, clamps
//!    them into `[enqueue, observed completion]`, drops the signal handle
//!    (which returns it to the pool) and pushes a [`Record`] into the bounded
//!    record queue, waiting if it is full (never dropping).
//! 3. One writer thread ([`Engine::run_writer`]) drains the record queue,
//!    resolves kernel names, applies the include/exclude filters and pushes
//!    into every [`RecordSink`](crate::sink::RecordSink).
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

mod completion;
pub mod ids;
mod ring;
mod writer;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use hsa_sys::HSA_FENCE_SCOPE_SYSTEM;
use smallvec::SmallVec;

pub use ids::{boottime_ns, current_thread_id, IdAllocator, IdRange};
pub use ring::{hardware_ring_takes, hardware_slots};
pub use rprof_abi::packet::RawPacket;
pub use writer::{KernelNames, WriterOutcome};

use crate::record::{DispatchRecord, InterceptRecord, Record, RunMetadata};
use crate::wait::{poll_until, Pace, Wait, WakePoint};

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
    /// Signals available right now (approximate; not used on hot paths).
    fn available(&self) -> usize;
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
    /// packet processor would have (host forwarding).
    fn forward(&self, app_signal: u64);
}

/// One traced queue, shared by the interceptor and the in-flight entries of
/// its dispatches.
#[derive(Debug)]
pub struct QueueContext {
    /// ROCr's process-unique queue id.
    pub queue_id: u64,
    /// Index of the queue's agent in the run's agent table.
    pub agent_index: u32,
    /// The agent's `hsa_agent_t` handle (for dispatch-time queries).
    pub agent_handle: u64,
    in_flight: AtomicU64,
    /// Most ring slots rprof lets its traced packets occupy (0 = no limit).
    slot_limit: u64,
    /// Ring slots held by traced kernels and their forwarding barriers that
    /// have not been seen complete.
    slots: AtomicU64,
    /// The runtime destroyed the queue: its unfinished packets never run.
    destroyed: AtomicBool,
    /// A wait for ring space on this queue once ended without room (the
    /// device made no progress: e.g. the queue's head waits for a host
    /// signal the submitting thread sets later). From then on the queue
    /// never waits: a call without room passes its packets through
    /// untraced (counted lost).
    ring_wait_gave_up: AtomicBool,
}

impl QueueContext {
    /// A context for a newly created queue.
    pub fn new(queue_id: u64, agent_index: u32, agent_handle: u64) -> Self {
        QueueContext {
            queue_id,
            agent_index,
            agent_handle,
            in_flight: AtomicU64::new(0),
            slot_limit: 0,
            slots: AtomicU64::new(0),
            destroyed: AtomicBool::new(false),
            ring_wait_gave_up: AtomicBool::new(false),
        }
    }

    /// Whether a wait for ring space on this queue ever gave up (the queue
    /// no longer waits).
    pub fn ring_wait_gave_up(&self) -> bool {
        self.ring_wait_gave_up.load(Ordering::Acquire)
    }

    /// Tells the completion thread that the queue is gone: dispatches of it
    /// that have not completed never will (they are dropped and counted as
    /// lost, and a serialization token they hold is passed on).
    pub fn mark_destroyed(&self) {
        self.destroyed.store(true, Ordering::Release);
    }

    /// A context for a queue whose hardware ring has `ring_size` packets.
    ///
    /// ROCr 5.2.3's intercept queue copies rewritten packets into a hidden
    /// ring of the same size; if that ring is full it defers the packets,
    /// and a second deferral within one doorbell aborts the process (an
    /// assertion in `InterceptQueue::Submit`). The interceptor therefore
    /// keeps the slots of its unfinished packets below three quarters of
    /// the ring, waiting for the device when it would go above.
    pub fn with_ring(queue_id: u64, agent_index: u32, agent_handle: u64, ring_size: u32) -> Self {
        let ring = u64::from(ring_size);
        QueueContext {
            slot_limit: (ring - ring / 4).max(2),
            ..Self::new(queue_id, agent_index, agent_handle)
        }
    }

    /// Ring slots held by this queue's unfinished traced packets.
    pub fn slots_in_use(&self) -> u64 {
        self.slots.load(Ordering::Acquire)
    }

    /// Dispatches of this queue submitted and not yet seen complete.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Acquire)
    }
}

/// A dispatch on its way through the device.
#[derive(Debug)]
pub struct InFlight<S> {
    /// Everything but the times, filled at enqueue.
    pub record: DispatchRecord,
    /// The queue it was submitted to.
    pub queue: Arc<QueueContext>,
    /// The timestamp signal that completes with it.
    pub signal: S,
    /// Whether a forwarding barrier follows the kernel (it holds a slot).
    pub forwarded: bool,
    /// With host forwarding (a measured alternative, see
    /// `docs/completion.md`): the app's signal, decremented by the completion
    /// thread once the kernel is seen complete (0 = none).
    pub host_forward: u64,
    /// With `--serialize-kernels`: the two barriers in front of the kernel.
    pub serial: Option<SerialGate<S>>,
    /// Whether the dispatch is recorded. Dispatches submitted after
    /// recording stopped are still rewritten and tracked, only so that the
    /// ring guard keeps working (see [`Engine::keep_guard_after_stop`]);
    /// they produce no record and are not counted in [`Engine::in_flight`].
    pub recorded: bool,
}

impl<S> InFlight<S> {
    /// Ring slots this dispatch holds until it completes.
    pub fn slots(&self) -> u64 {
        1 + u64::from(self.forwarded) + if self.serial.is_some() { 2 } else { 0 }
    }

    /// Stops tracking a dispatch that will not be waited for: gives its
    /// queue back the in-flight count and ring slots, and leaks its signals
    /// (the device may still write them; they must never be recycled).
    pub fn abandon(self) {
        self.queue.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.queue.slots.fetch_sub(self.slots(), Ordering::AcqRel);
        std::mem::forget(self.signal);
        if let Some(g) = self.serial {
            std::mem::forget(g.ready);
            std::mem::forget(g.gate);
        }
    }
}

/// Where a serialized dispatch stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateState {
    /// Its queue has not reached it yet.
    Waiting,
    /// Its queue reached it (every earlier packet of the queue completed);
    /// it waits for the agent's token.
    Ready,
    /// It holds its agent's token: the gate is open and the kernel may run.
    Granted,
}

/// The device-side gate of one serialized dispatch: a BARRIER_AND with the
/// barrier bit that completes `ready` when the queue reaches the kernel, then
/// a BARRIER_AND that waits on `gate`, which the completion thread opens
/// (stores 0) when the agent's previous serialized kernel has finished. The
/// app's thread never waits; only ready kernels get the token, so
/// cross-queue dependencies of the app cannot deadlock with it.
#[derive(Debug)]
pub struct SerialGate<S> {
    /// Completed by the device when the queue reaches the kernel.
    pub ready: S,
    /// Opened by the completion thread to let the kernel run.
    pub gate: S,
    /// Current state.
    pub state: GateState,
    /// Order in which dispatches became ready (grants follow it).
    pub ready_seq: u64,
}

/// Inline capacity of a batch's packet list (a kernel and its forwarding
/// barrier take two).
pub const BATCH_INLINE_PACKETS: usize = 16;
/// Inline capacity of a batch's dispatch list.
pub const BATCH_INLINE_DISPATCHES: usize = 8;

/// Batches larger than the inline capacities that may be built at the same
/// time with reused heap storage ([`SpareStorage`]); more than that many at
/// once allocate (and keep at most this many buffers for later).
const SPARE_BATCHES: usize = 8;

/// The rewritten packets of one interceptor call and the dispatches they
/// carry. Lives on the interceptor's stack; a batch larger than the inline
/// capacities (only when another rewriter in front of rprof hands it many
/// packets at once: ROCr itself calls the first rewriter once per packet)
/// borrows heap storage kept by the engine, so no call allocates in steady
/// state.
#[derive(Debug)]
pub struct PacketBatch<S> {
    /// Packets to hand to the runtime's writer, in order.
    pub packets: SmallVec<[RawPacket; BATCH_INLINE_PACKETS]>,
    /// The traced dispatches of the batch.
    pub dispatches: SmallVec<[InFlight<S>; BATCH_INLINE_DISPATCHES]>,
    /// Kernel dispatches passed through untraced (no signal in time).
    pub untraced: u32,
}

/// Heap storage of one large batch, kept by the engine between calls.
#[derive(Debug)]
struct SpareStorage<S> {
    packets: Vec<RawPacket>,
    dispatches: Vec<InFlight<S>>,
    signals: Vec<S>,
}

impl<S> Default for SpareStorage<S> {
    fn default() -> Self {
        SpareStorage {
            packets: Vec::new(),
            dispatches: Vec::new(),
            signals: Vec::new(),
        }
    }
}

/// Takes `v` as the storage of a `SmallVec` with room for `need` items,
/// keeping its heap buffer (a capacity above the inline one keeps it
/// spilled; `need` is above the inline capacity only on the large path).
fn adopt<A: smallvec::Array>(mut v: Vec<A::Item>, need: usize) -> SmallVec<A> {
    v.clear();
    v.reserve(need.max(A::size() + 1));
    SmallVec::from_vec(v)
}

/// Gives back the heap buffer of a `SmallVec` made by [`adopt`] (emptied).
fn release<A: smallvec::Array>(mut v: SmallVec<A>) -> Vec<A::Item> {
    v.clear();
    if v.spilled() {
        v.into_vec()
    } else {
        Vec::new()
    }
}

/// Tuning of an [`Engine`].
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Process id used in correlation ids.
    pub pid: u32,
    /// Capacity of the in-flight queue (at least the signal pool's capacity).
    pub max_in_flight: usize,
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
            record_queue: 1 << 16,
            pool_wait: Duration::from_secs(10),
            min_backoff: Duration::from_micros(100),
            max_backoff: Duration::from_millis(1),
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
}

/// The shared state of a tracing session. See the module docs.
#[derive(Debug)]
pub struct Engine<S> {
    options: EngineOptions,
    ids: IdAllocator,
    pending: ArrayQueue<InFlight<S>>,
    in_flight: AtomicU64,
    records: ArrayQueue<Record>,
    completion_wake: WakePoint,
    /// Set by an interceptor that waits for the completion thread.
    urgent: AtomicBool,
    /// The writer thread is gone (panicked).
    writer_gone: AtomicBool,
    /// The completion thread is gone (panicked).
    completion_gone: AtomicBool,
    writer_wake: WakePoint,
    counters: EngineCounters,
    state: AtomicU8,
    /// Reusable storage for batches larger than the inline capacities.
    spares: ArrayQueue<SpareStorage<S>>,
    /// Interceptor calls that passed the tracing check and may still add
    /// recorded dispatches; shutdown waits for them (bounded).
    recording_calls: AtomicU64,
    /// After recording stops, the completion thread keeps recycling the
    /// signals and ring slots of dispatches submitted later, so the ring
    /// guard goes on (the at-exit flush while app threads keep launching).
    keep_guard: AtomicBool,
    /// The completion thread has settled every recorded dispatch (recorded
    /// or counted lost) after shutdown: the writer may finish.
    records_closed: AtomicBool,
    /// Records the writer has taken off the record queue (its progress).
    writer_progress: AtomicU64,
    /// The writer made no progress for [`WRITER_STALL`] while the record
    /// queue was full (stuck on a FIFO nobody reads, a hung file system):
    /// records that do not fit are dropped (counted lost) instead of
    /// waited for, until it moves again.
    writer_stalled: AtomicBool,
}

/// Longest the completion thread waits for a writer that takes no record
/// at all before it drops records (counted lost) instead of waiting.
pub const WRITER_STALL: Duration = Duration::from_secs(2);

/// Joins `handle` if its thread ends within `timeout`; otherwise leaves it
/// running (detached) and returns `None`. Teardown never blocks longer.
pub fn join_within<T>(handle: std::thread::JoinHandle<T>, timeout: Duration) -> Option<T> {
    let finished = poll_until(Instant::now() + timeout, JOIN_PACE, || handle.is_finished());
    if !finished {
        return None;
    }
    handle.join().ok()
}

/// How [`join_within`] polls a thread: naps of 0.5 ms.
const JOIN_PACE: Pace = Pace::naps(Duration::from_micros(500));
/// How an interceptor waits for ring space or signals: 64 yields, then
/// naps of 50 µs (each round may wake the completion thread).
const INTERCEPTOR_PACE: Pace = Pace::new(64, Duration::from_micros(50));
/// How shutdown waits for interceptor calls in progress.
const CALLS_PACE: Pace = Pace::naps(Duration::from_micros(50));
/// How shutdown waits for the dispatches in flight (waking the completion
/// thread every round).
const DRAIN_PACE: Pace = Pace::naps(Duration::from_micros(200));
/// How an app thread retries a full queue: yields only, until its deadline.
const PUSH_PACE: Pace = Pace::new(u32::MAX, Duration::ZERO);

/// Decrements a counter when dropped (also on unwinding).
struct CountedCall<'a>(&'a AtomicU64);

impl Drop for CountedCall<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<S: DispatchSignal> Engine<S> {
    /// A new engine; start [`Engine::run_completion`] and
    /// [`Engine::run_writer`] on threads of their own.
    pub fn new(options: EngineOptions) -> Self {
        Engine {
            ids: IdAllocator::new(options.pid),
            pending: ArrayQueue::new(options.max_in_flight.max(1)),
            in_flight: AtomicU64::new(0),
            records: ArrayQueue::new(options.record_queue.max(2)),
            completion_wake: WakePoint::new(),
            urgent: AtomicBool::new(false),
            writer_gone: AtomicBool::new(false),
            completion_gone: AtomicBool::new(false),
            writer_wake: WakePoint::new(),
            counters: EngineCounters::default(),
            state: AtomicU8::new(RUNNING),
            spares: ArrayQueue::new(SPARE_BATCHES),
            recording_calls: AtomicU64::new(0),
            keep_guard: AtomicBool::new(false),
            records_closed: AtomicBool::new(false),
            writer_progress: AtomicU64::new(0),
            writer_stalled: AtomicBool::new(false),
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

    /// Ends what [`Engine::keep_guard_after_stop`] started: the completion
    /// thread forgets what it still tracks and returns, and interceptors
    /// pass packets through untouched. Call before the runtime shuts down
    /// (its signals go away with it).
    pub fn stop_guard(&self) {
        self.keep_guard.store(false, Ordering::Release);
        self.completion_wake.notify();
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

    /// Builds the batch for one interceptor call: see the module docs.
    /// `now_ns` is the enqueue time, `thread_id` the calling thread.
    /// `batch` must be empty; it is filled in place (it is large, and lives
    /// on the interceptor's stack). `signals` is storage for the batch's
    /// pooled signals (emptied again on return).
    ///
    /// Intercept markers (vendor packets of format 0xFE, ROCr >= 6) pass
    /// through unchanged and stay immediately before the packet they mark:
    /// a serialized kernel's two barriers go in front of the markers that
    /// precede it, so a marker's callback still gets the kernel's hardware
    /// packet id.
    #[allow(clippy::too_many_arguments)]
    fn build_batch(
        &self,
        batch: &mut PacketBatch<S>,
        signals: &mut SmallVec<[S; BATCH_INLINE_DISPATCHES]>,
        queue: &Arc<QueueContext>,
        packets: &[RawPacket],
        kernels: usize,
        source: &dyn SignalSource<S>,
        now_ns: u64,
        thread_id: u32,
    ) -> IdRange {
        let ids = self.ids.reserve(kernels as u64);
        let per_kernel = if self.options.serialize { 3 } else { 1 };
        self.acquire_signals(kernels * per_kernel, source, signals);
        let mut signals = signals.drain(..);
        let mut k = 0u64;
        // Where the run of markers right before the current packet begins.
        let mut markers_from: Option<usize> = None;
        for p in packets {
            if p.is_intercept_marker() {
                markers_from.get_or_insert(batch.packets.len());
                batch.packets.push(*p);
                continue;
            }
            let marked = markers_from.take();
            if !p.is_kernel_dispatch() {
                batch.packets.push(*p);
                continue;
            }
            let i = k;
            k += 1;
            let serial = if self.options.serialize {
                match (signals.next(), signals.next()) {
                    (Some(ready), Some(gate)) => Some(SerialGate {
                        ready,
                        gate,
                        state: GateState::Waiting,
                        ready_seq: 0,
                    }),
                    _ => None,
                }
            } else {
                None
            };
            let signal = if self.options.serialize && serial.is_none() {
                None
            } else {
                signals.next()
            };
            let Some(signal) = signal else {
                batch.untraced += 1;
                batch.packets.push(*p);
                continue;
            };
            if let Some(g) = &serial {
                batch.packets.push(RawPacket::forwarding_barrier(
                    g.ready.handle(),
                    HSA_FENCE_SCOPE_SYSTEM,
                ));
                batch.packets.push(RawPacket::gate_barrier(g.gate.handle()));
                if let Some(from) = marked {
                    // [markers.., ready, gate] -> [ready, gate, markers..]
                    batch.packets[from..].rotate_right(2);
                }
            }
            let mut kernel = *p;
            kernel.set_completion_signal(signal.handle());
            batch.packets.push(kernel);
            let app_signal = p.completion_signal();
            let by_barrier = app_signal != 0 && !self.options.host_forwarding;
            if by_barrier {
                batch.packets.push(RawPacket::forwarding_barrier(
                    app_signal,
                    p.release_fence_scope(),
                ));
            }
            batch.dispatches.push(InFlight {
                record: DispatchRecord {
                    correlation_id: ids.correlation_id(i),
                    dispatch_id: ids.dispatch_id(i),
                    agent_index: queue.agent_index,
                    queue_id: queue.queue_id,
                    thread_id,
                    kernel_object: p.kernel_object(),
                    grid: p.grid_size(),
                    workgroup: p.workgroup_size(),
                    private_segment_size: p.private_segment_size(),
                    group_segment_size: p.group_segment_size(),
                    enqueue_ns: now_ns,
                    start_ns: 0,
                    end_ns: 0,
                },
                queue: queue.clone(),
                signal,
                forwarded: by_barrier,
                host_forward: if by_barrier { 0 } else { app_signal },
                serial,
                recorded: true,
            });
        }
        ids
    }

    /// The whole interceptor call: builds the batch, hands all its packets to
    /// `write` exactly once, then records the call and publishes the
    /// dispatches to the completion thread. Once finalization has begun,
    /// packets pass through untouched.
    pub fn intercept(
        &self,
        queue: &Arc<QueueContext>,
        packets: &[RawPacket],
        source: &dyn SignalSource<S>,
        write: impl FnOnce(&[RawPacket]),
    ) {
        let kernels = packets.iter().filter(|p| p.is_kernel_dispatch()).count();
        if kernels == 0 {
            write(packets);
            return;
        }
        // Announce the call before looking at the state (both SeqCst):
        // either shutdown sees the call and waits for it, or the call sees
        // that recording stopped. A call past this check always ends with
        // its dispatches recorded or counted lost.
        self.recording_calls.fetch_add(1, Ordering::SeqCst);
        let call = CountedCall(&self.recording_calls);
        let recorded = self.state.load(Ordering::SeqCst) == RUNNING;
        if !recorded {
            drop(call);
            if !self.is_guarding() {
                write(packets);
                return;
            }
            self.guard_only(queue, packets, kernels, source, write);
            return;
        }
        // Room in the ring first, for as many slots as the batch can take.
        if !self.wait_for_ring_space(queue, self.slots_needed(packets)) {
            self.count_lost(kernels as u64);
            write(packets);
            return;
        }
        let begin_ns = boottime_ns();
        let thread_id = current_thread_id();
        // Most packets and signals the batch can need: a serialized kernel
        // takes three signals and adds three packets (ready, gate, forward).
        let (extra_packets, per_kernel) = if self.options.serialize {
            (3, 3)
        } else {
            (1, 1)
        };
        let max_packets = packets.len() + kernels * extra_packets;
        let max_signals = kernels * per_kernel;
        let large = max_packets > BATCH_INLINE_PACKETS
            || kernels > BATCH_INLINE_DISPATCHES
            || max_signals > BATCH_INLINE_DISPATCHES;
        let (mut batch, mut signals) = if large {
            let spare = self.spares.pop().unwrap_or_default();
            (
                PacketBatch {
                    packets: adopt(spare.packets, max_packets),
                    dispatches: adopt(spare.dispatches, kernels),
                    untraced: 0,
                },
                adopt(spare.signals, max_signals),
            )
        } else {
            (
                PacketBatch {
                    packets: SmallVec::new(),
                    dispatches: SmallVec::new(),
                    untraced: 0,
                },
                SmallVec::new(),
            )
        };
        let ids = self.build_batch(
            &mut batch,
            &mut signals,
            queue,
            packets,
            kernels,
            source,
            begin_ns,
            thread_id,
        );
        let traced = batch.dispatches.len() as u64;
        let slots: u64 = batch.dispatches.iter().map(InFlight::slots).sum();
        // Count before the device can possibly finish them.
        queue.slots.fetch_add(slots, Ordering::AcqRel);
        queue.in_flight.fetch_add(traced, Ordering::AcqRel);
        let before = self.in_flight.fetch_add(traced, Ordering::AcqRel);
        write(&batch.packets);
        let end_ns = boottime_ns();
        if batch.untraced > 0 {
            self.count_lost(u64::from(batch.untraced));
        }
        self.push_record_from_app_thread(Record::Intercept(InterceptRecord {
            thread_id,
            queue_id: queue.queue_id,
            agent_index: queue.agent_index,
            begin_ns,
            end_ns,
            first_correlation_id: if ids.is_empty() {
                0
            } else {
                ids.correlation_id(0)
            },
            dispatch_count: ids.len() as u32,
            packet_count: packets.len() as u32,
        }));
        for entry in batch.dispatches.drain(..) {
            // Capacity >= signal pool size, so this succeeds unless the
            // completion thread is far behind; then wait for it (bounded).
            let deadline = Instant::now() + self.options.pool_wait;
            if let Err(b) = push_bounded(&self.pending, entry, deadline, || {
                self.completion_wake.notify()
            }) {
                // Cannot track it: its signal is gone with it, and nobody
                // will ever complete its record.
                queue.in_flight.fetch_sub(1, Ordering::AcqRel);
                queue.slots.fetch_sub(b.slots(), Ordering::AcqRel);
                self.in_flight.fetch_sub(1, Ordering::AcqRel);
                self.count_lost(1);
                drop(b);
            }
        }
        drop(call);
        if large {
            // Keep the heap storage for the next large batch (dropped only
            // if more large batches than SPARE_BATCHES were built at once).
            let _ = self.spares.push(SpareStorage {
                packets: release(batch.packets),
                dispatches: release(batch.dispatches),
                signals: release(signals),
            });
        }
        // The completion thread parks when nothing is in flight; wake it for
        // the first dispatch. Otherwise it polls on its own schedule.
        if before == 0 && self.completion_wake.is_parked() {
            self.completion_wake.notify();
        }
    }

    /// An interceptor call after recording stopped, while the completion
    /// thread still recycles: the kernels are rewritten and tracked as
    /// before (so the ring guard holds), but nothing is recorded and
    /// nothing is counted. Kernels that cannot be tracked pass through.
    fn guard_only(
        &self,
        queue: &Arc<QueueContext>,
        packets: &[RawPacket],
        kernels: usize,
        source: &dyn SignalSource<S>,
        write: impl FnOnce(&[RawPacket]),
    ) {
        if kernels > BATCH_INLINE_DISPATCHES
            || packets.len() + kernels * 3 > BATCH_INLINE_PACKETS
            || !self.wait_for_ring_space(queue, self.slots_needed(packets))
        {
            write(packets);
            return;
        }
        let mut batch = PacketBatch {
            packets: SmallVec::new(),
            dispatches: SmallVec::new(),
            untraced: 0,
        };
        let mut signals = SmallVec::new();
        self.build_batch(
            &mut batch,
            &mut signals,
            queue,
            packets,
            kernels,
            source,
            boottime_ns(),
            0,
        );
        let slots: u64 = batch.dispatches.iter().map(InFlight::slots).sum();
        queue.slots.fetch_add(slots, Ordering::AcqRel);
        queue
            .in_flight
            .fetch_add(batch.dispatches.len() as u64, Ordering::AcqRel);
        write(&batch.packets);
        for mut entry in batch.dispatches.drain(..) {
            entry.recorded = false;
            if let Err(b) = self.pending.push(entry) {
                // Nobody will see it complete: release its slots now and
                // keep its signals out of the pool (the device may still
                // write them).
                queue.in_flight.fetch_sub(1, Ordering::AcqRel);
                queue.slots.fetch_sub(b.slots(), Ordering::AcqRel);
                let InFlight { signal, serial, .. } = b;
                std::mem::forget(signal);
                std::mem::forget(serial);
            }
        }
        if self.completion_wake.is_parked() {
            self.completion_wake.notify();
        }
    }

    /// Asks the completion thread to poll now (an interceptor is waiting):
    /// on the first round of a wait and every 16th after.
    fn wake_urgently(&self, round: u32) {
        if round % 16 == 0 {
            self.urgent.store(true, Ordering::Release);
            self.completion_wake.notify();
        }
    }

    /// Ring slots the traced form of `packets` takes at most: each kernel,
    /// its forwarding barrier when the app gave a signal, and the two gate
    /// barriers when serialized.
    fn slots_needed(&self, packets: &[RawPacket]) -> u64 {
        let per_kernel = 1 + if self.options.serialize { 2 } else { 0 };
        packets
            .iter()
            .filter(|p| p.is_kernel_dispatch())
            .map(|p| {
                per_kernel + u64::from(p.completion_signal() != 0 && !self.options.host_forwarding)
            })
            .sum()
    }

    /// Waits until the queue's ring has room for `slots` more traced slots
    /// (see [`QueueContext::with_ring`]); returns whether there is room.
    ///
    /// The wait ends without room after [`RING_STALL`] in which none of the
    /// queue's traced packets finished (or [`EngineOptions::pool_wait`] in
    /// all): the device cannot make progress on this queue by itself (its
    /// head waits for something the app does later). Such a queue never
    /// waits again: later calls without room return `false` at once.
    fn wait_for_ring_space(&self, queue: &QueueContext, slots: u64) -> bool {
        if queue.slot_limit == 0 || slots == 0 {
            return true;
        }
        let need = slots.min(queue.slot_limit);
        if queue.slots_in_use() + need <= queue.slot_limit {
            return true;
        }
        if queue.ring_wait_gave_up() {
            return false;
        }
        // Hysteresis: once full, wait for an eighth of the ring to drain, so
        // that a full queue costs one wake-up per many dispatches. A batch
        // that needs more than that can only wait for the queue's earlier
        // traced packets to finish (its own are not written yet; ROCr >= 6
        // submits what fits of it and the rest after a retry barrier).
        let low_water = queue.slot_limit - queue.slot_limit / 8;
        let target = low_water.saturating_sub(need);
        let mut wait = Wait::with_timeout(self.options.pool_wait, INTERCEPTOR_PACE);
        let mut progress = Instant::now();
        let mut last = queue.slots_in_use();
        loop {
            let now_in_use = queue.slots_in_use();
            if now_in_use <= target {
                return true;
            }
            if !self.is_guarding() {
                // Nothing traced any more: the completion thread is gone.
                return queue.slots_in_use() + need <= queue.slot_limit;
            }
            if now_in_use < last {
                last = now_in_use;
                progress = Instant::now();
            }
            if progress.elapsed() >= RING_STALL || wait.expired() {
                queue.ring_wait_gave_up.store(true, Ordering::Release);
                return queue.slots_in_use() + need <= queue.slot_limit;
            }
            self.wake_urgently(wait.rounds());
            wait.pause();
        }
    }

    /// `count` free signals for one batch, into `got` (empty on entry), all
    /// or nothing while the wait lasts: a call that cannot get them all
    /// gives back what it took and waits for the completion thread to
    /// recycle, so that interceptors of several queues never deadlock each
    /// holding part of the pool. After [`EngineOptions::pool_wait`] it keeps
    /// what it has (the rest of the batch passes through untraced).
    fn acquire_signals(
        &self,
        count: usize,
        source: &dyn SignalSource<S>,
        got: &mut SmallVec<[S; BATCH_INLINE_DISPATCHES]>,
    ) {
        let mut wait: Option<Wait> = None;
        loop {
            while got.len() < count {
                match source.try_acquire() {
                    Some(s) => got.push(s),
                    None => break,
                }
            }
            if got.len() == count {
                return;
            }
            let wait = wait.get_or_insert_with(|| {
                Wait::with_timeout(self.options.pool_wait, INTERCEPTOR_PACE)
            });
            // A batch larger than the whole pool can never be served whole:
            // trace what fits, the rest passes through (counted lost).
            if count > source.capacity()
                || source.never_available()
                || wait.expired()
                || !self.is_tracing()
            {
                return;
            }
            got.clear();
            self.wake_urgently(wait.rounds());
            wait.pause();
        }
    }

    /// Hands an RPC doorbell wake (from a wait wrapper on an application
    /// thread) to the writer. Never blocks for long: see
    /// `push_record_from_app_thread`.
    pub fn push_rpc_wake(&self, rec: crate::rpc::RpcWakeRecord) {
        self.push_record_from_app_thread(Record::RpcWake(rec));
    }

    /// Counts a doorbell-shaped wait on a signal without an event.
    pub fn count_rpc_unrecognised(&self) {
        self.counters
            .rpc_unrecognised
            .fetch_add(1, Ordering::Relaxed);
    }

    fn push_record_from_app_thread(&self, rec: Record) {
        if self.writer_stalled.load(Ordering::Acquire) {
            // A stuck writer: no app thread waits for it.
            if self.records.push(rec).is_err() {
                self.count_lost(1);
            }
            return;
        }
        let deadline = Instant::now() + Duration::from_millis(100);
        if push_bounded(&self.records, rec, deadline, || self.writer_wake.notify()).is_err() {
            self.count_lost(1);
        }
    }

    /// Stops tracing new work, waits up to `timeout` for the dispatches in
    /// flight, and asks the completion thread to finish. Returns the
    /// dispatches still in flight when it gave up.
    pub fn begin_shutdown(&self, timeout: Duration) -> u64 {
        let _ =
            self.state
                .compare_exchange(RUNNING, FINALIZING, Ordering::SeqCst, Ordering::SeqCst);
        let deadline = Instant::now() + timeout;
        // Calls that passed the tracing check before it changed add their
        // dispatches to the in-flight count shortly; wait for them first.
        poll_until(deadline, CALLS_PACE, || {
            self.recording_calls.load(Ordering::SeqCst) == 0
        });
        let mut wait = Wait::until(deadline, DRAIN_PACE);
        while self.in_flight() > 0 && !self.completion_gone.load(Ordering::Acquire) {
            self.completion_wake.notify();
            if !wait.pause() {
                break;
            }
        }
        let left = self.in_flight();
        self.state.fetch_max(STOP_COMPLETION, Ordering::AcqRel);
        self.completion_wake.notify();
        left
    }

    /// The completion thread died: nothing new is traced and shutdown does
    /// not wait for dispatches nobody will complete.
    pub fn completion_failed(&self) {
        self.completion_gone.store(true, Ordering::Release);
        self.stop_tracing_now();
        self.writer_wake.notify();
    }

    /// The writer thread died: records are dropped (counted) instead of
    /// waited for, and nothing new is traced.
    pub fn writer_failed(&self) {
        self.writer_gone.store(true, Ordering::Release);
        self.stop_tracing_now();
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
/// and a yield) until `deadline`; gives the item back if the queue stayed
/// full. An app thread never waits longer than that for rprof.
fn push_bounded<T>(
    queue: &ArrayQueue<T>,
    item: T,
    deadline: Instant,
    wake: impl Fn(),
) -> Result<(), T> {
    let mut item = match queue.push(item) {
        Ok(()) => return Ok(()),
        Err(back) => back,
    };
    let mut wait = Wait::until(deadline, PUSH_PACE);
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
