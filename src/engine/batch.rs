//! The interceptor's side of the engine: one call's packets become one
//! [`PacketBatch`] (kernels get ids and a pooled timestamp signal, the app's
//! signal is forwarded, serialized kernels get their gate), written to the
//! runtime in one go, then recorded and published to the completion thread.
//! The most common call, one kernel and nothing else, does the same without
//! the batch's lists (`Engine::intercept_kernel`): its in-flight entry is
//! built once and moved once.
//!
//! Owns the rewrite and the hot path's rules: no allocation in steady state
//! (inline `SmallVec` storage, spare heap storage for large batches), no
//! global lock, every wait bounded. It does not read signals or write
//! records to sinks (completion and writer threads).

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hsa_sys::HSA_FENCE_SCOPE_SYSTEM;
use smallvec::SmallVec;

use super::{
    fast_boottime_ns, push_bounded, CallSummary, DispatchSignal, Engine, GateState, IdRange,
    InFlight, Launch, QueueContext, RawPacket, SerialGate, SignalSource, INTERCEPTOR_PACE, RUNNING,
};
use crate::record::Record;
use crate::wait::Wait;

/// Inline capacity of a batch's packet list (a kernel and its forwarding
/// barrier take two).
pub const BATCH_INLINE_PACKETS: usize = 16;
/// Inline capacity of a batch's dispatch list.
pub const BATCH_INLINE_DISPATCHES: usize = 8;

/// Batches larger than the inline capacities that may be built at the same
/// time with reused heap storage ([`SpareStorage`]); more than that many at
/// once allocate (and keep at most this many buffers for later).
pub(super) const SPARE_BATCHES: usize = 8;

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
pub(super) struct SpareStorage<S> {
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

/// The pooled signals of one batch, on the interceptor's stack.
type BatchSignals<S> = SmallVec<[S; BATCH_INLINE_DISPATCHES]>;

/// Decrements a counter when dropped (also on unwinding).
pub(super) struct CountedCall<'a>(pub(super) &'a AtomicU64);

impl Drop for CountedCall<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Who submits a batch, and when.
struct Caller<'a> {
    queue: &'a Arc<QueueContext>,
    thread_id: u32,
    enqueue_ns: u64,
}

/// How much room one call's batch can need.
struct BatchShape {
    max_packets: usize,
    max_signals: usize,
    kernels: usize,
    /// Above the inline capacities: built in spare heap storage.
    large: bool,
}

impl BatchShape {
    /// Most packets and signals the batch can need: a serialized kernel
    /// takes three signals and adds three packets (ready, gate, forward).
    fn of(packets: usize, kernels: usize, serialize: bool) -> Self {
        let (extra_packets, per_kernel) = if serialize { (3, 3) } else { (1, 1) };
        let max_packets = packets + kernels * extra_packets;
        let max_signals = kernels * per_kernel;
        BatchShape {
            max_packets,
            max_signals,
            kernels,
            large: max_packets > BATCH_INLINE_PACKETS
                || kernels > BATCH_INLINE_DISPATCHES
                || max_signals > BATCH_INLINE_DISPATCHES,
        }
    }
}

impl<S> PacketBatch<S> {
    fn inline() -> Self {
        PacketBatch {
            packets: SmallVec::new(),
            dispatches: SmallVec::new(),
            untraced: 0,
        }
    }

    /// Ring slots the batch's traced dispatches hold.
    fn slots(&self) -> u64 {
        self.dispatches.iter().map(InFlight::slots).sum()
    }
}

impl<S: DispatchSignal> Engine<S> {
    /// The whole interceptor call: builds the batch, hands all its packets to
    /// `write` exactly once, then records the call and publishes the
    /// dispatches to the completion thread (a call of one kernel, not
    /// serialized, with a signal at hand: the same without the batch's
    /// lists, see `intercept_kernel`). Once finalization has begun,
    /// packets pass through untouched (or, while the ring guard is kept,
    /// are rewritten without being recorded).
    pub fn intercept(
        &self,
        queue: &Arc<QueueContext>,
        packets: &[RawPacket],
        source: &dyn SignalSource<S>,
        write: impl FnOnce(&[RawPacket]),
    ) {
        let (kernels, codeless) = count_dispatches(packets);
        if codeless > 0 && self.is_tracing() {
            // Dispatches of no code object pass through untouched (the
            // device faults the queue on them, as without rprof): they can
            // never be timed, so they count as lost.
            self.count_lost(codeless as u64);
        }
        if kernels == 0 {
            self.write_untouched(packets, write);
            return;
        }
        // Announce the call before looking at the state (both SeqCst):
        // either shutdown sees the call and waits for it, or the call sees
        // that recording stopped. A call past this check always ends with
        // its dispatches recorded or counted lost.
        self.recording_calls.fetch_add(1, Ordering::SeqCst);
        let call = CountedCall(&self.recording_calls);
        if self.state.load(Ordering::SeqCst) != RUNNING {
            drop(call);
            self.intercept_unrecorded(queue, packets, kernels, source, write);
            return;
        }
        // Room in the ring first, for as many slots as the batch can take.
        if !self.wait_for_ring_space(queue, self.slots_needed(packets)) {
            self.count_lost(kernels as u64);
            self.write_untouched(packets, write);
            return;
        }
        // Both of the call's times come from the fast clock: two
        // `clock_gettime` calls were a quarter of the interceptor's time.
        let caller = Caller {
            queue,
            thread_id: queue.writer_thread_id(),
            enqueue_ns: fast_boottime_ns(),
        };
        // The common call: one kernel, with a signal at hand.
        if let [p] = packets {
            if kernels == 1 && !self.options.serialize {
                if let Some(signal) = source.try_acquire() {
                    self.intercept_kernel(&caller, p, signal, write);
                    drop(call);
                    return;
                }
            }
        }
        let shape = BatchShape::of(packets.len(), kernels, self.options.serialize);
        // Built here, not returned by a helper: the batch is ~2.6 KB of
        // inline storage, and a move is a copy of all of it (two such
        // copies were a quarter of the interceptor's instructions).
        let mut batch = PacketBatch::inline();
        let mut signals = BatchSignals::<S>::new();
        if shape.large {
            self.adopt_spare_storage(&shape, &mut batch, &mut signals);
        }
        let ids = self.build_batch(&mut batch, &mut signals, &caller, packets, kernels, source);
        self.note_kernel_region(&ids);
        // Count before the device can possibly finish them.
        hold_slots(queue, &batch);
        let before = self
            .in_flight
            .fetch_add(batch.dispatches.len() as u64, Ordering::AcqRel);
        write(&batch.packets);
        let end_ns = fast_boottime_ns();
        self.record_call(&caller, &mut batch, ids, packets.len(), end_ns);
        self.publish(queue, &mut batch);
        drop(call);
        if shape.large {
            self.keep_storage(batch, signals);
        }
        self.wake_for_first(before);
    }

    /// `--kernel-rename`: the writer learns the range of the call's kernels
    /// (`ids`) before any of its dispatches can complete.
    #[inline(always)]
    fn note_kernel_region(&self, ids: &IdRange) {
        if let Some(region) = crate::marker::current_region() {
            if !ids.is_empty() {
                self.push_record(Record::KernelRegion(crate::marker::KernelRegionRecord {
                    first_correlation_id: ids.correlation_id(0),
                    count: ids.len() as u32,
                    region,
                }));
            }
        }
    }

    /// The completion thread parks when nothing is in flight; wake it for
    /// the first dispatch (`before`: the in-flight count before the call's
    /// were added). Otherwise it polls on its own schedule.
    #[inline(always)]
    fn wake_for_first(&self, before: u64) {
        if before == 0 && self.completion_wake.is_parked() {
            self.completion_wake.notify();
        }
    }

    /// The common call, one traced kernel and nothing else (ROCr 5.2.3
    /// calls the interceptor once per packet, later ROCr does for an app
    /// that writes one packet at a time), not serialized, with its
    /// timestamp signal already taken: what [`Engine::intercept`]'s batch
    /// does for it, without the batch's lists, so that the entry is built
    /// once and moved once (into the hand-off queue). The caller holds the
    /// call's announcement until this returns.
    fn intercept_kernel(
        &self,
        caller: &Caller<'_>,
        p: &RawPacket,
        signal: S,
        write: impl FnOnce(&[RawPacket]),
    ) {
        let queue = caller.queue;
        let ids = self.ids.reserve(1);
        let kernel = self.rewrite_kernel(p, signal.handle(), ids.dispatch_id(0));
        self.note_kernel_region(&ids);
        let mut entry = traced_entry(p, caller, &ids, 0, signal, kernel.forwarded(), None);
        // Count before the device can possibly finish it.
        queue.slots.fetch_add(entry.slots(), Ordering::AcqRel);
        let before = self.in_flight.fetch_add(1, Ordering::AcqRel);
        write(kernel.packets());
        entry.call = Some(CallSummary {
            end_ns: fast_boottime_ns(),
            dispatch_count: 1,
            packet_count: NonZeroU32::MIN,
        });
        self.publish_entry(queue, entry);
        self.wake_for_first(before);
    }

    /// A call after recording stopped: guarded if the completion thread
    /// still recycles, else passed through.
    fn intercept_unrecorded(
        &self,
        queue: &Arc<QueueContext>,
        packets: &[RawPacket],
        kernels: usize,
        source: &dyn SignalSource<S>,
        write: impl FnOnce(&[RawPacket]),
    ) {
        if self.is_guarding() {
            self.guard_only(queue, packets, kernels, source, write);
        } else {
            self.write_untouched(packets, write);
        }
    }

    /// Gives an empty batch too large for its inline storage the heap
    /// storage kept from an earlier large batch (or new storage).
    fn adopt_spare_storage(
        &self,
        shape: &BatchShape,
        batch: &mut PacketBatch<S>,
        signals: &mut BatchSignals<S>,
    ) {
        let spare = self.spares.pop().unwrap_or_default();
        batch.packets = adopt(spare.packets, shape.max_packets);
        batch.dispatches = adopt(spare.dispatches, shape.kernels);
        *signals = adopt(spare.signals, shape.max_signals);
    }

    /// Keeps the heap storage of a large batch for the next one (dropped
    /// only if more large batches than SPARE_BATCHES were built at once).
    fn keep_storage(&self, batch: PacketBatch<S>, signals: BatchSignals<S>) {
        let _ = self.spares.push(SpareStorage {
            packets: release(batch.packets),
            dispatches: release(batch.dispatches),
            signals: release(signals),
        });
    }

    /// Counts the batch's untraced kernels as lost and records the call:
    /// its [`InterceptRecord`](crate::record::InterceptRecord) rides with the batch's first traced dispatch
    /// (the completion thread hands it to the writer), or goes to the
    /// writer from here when no dispatch of the call is traced.
    fn record_call(
        &self,
        caller: &Caller<'_>,
        batch: &mut PacketBatch<S>,
        ids: IdRange,
        packets: usize,
        end_ns: u64,
    ) {
        if batch.untraced > 0 {
            self.count_lost(u64::from(batch.untraced));
        }
        // A call has at least one packet (`intercept` returns early for
        // none); a summary needs no room for "none" then.
        let Some(packet_count) = NonZeroU32::new(packets as u32) else {
            return;
        };
        let call = CallSummary {
            end_ns,
            dispatch_count: ids.len() as u32,
            packet_count,
        };
        if let Some(first) = batch.dispatches.first_mut() {
            // Kernels take the call's signals in order: the first traced
            // one is its first kernel, whose correlation id the record's is.
            debug_assert_eq!(first.launch.dispatch_id, ids.dispatch_id(0));
            first.call = Some(call);
            return;
        }
        let first_correlation_id = if ids.is_empty() {
            0
        } else {
            ids.correlation_id(0)
        };
        self.push_record(Record::Intercept(call.record(
            caller.thread_id,
            caller.queue,
            caller.enqueue_ns,
            first_correlation_id,
        )));
    }

    /// Hands the batch's dispatches to the completion thread.
    fn publish(&self, queue: &QueueContext, batch: &mut PacketBatch<S>) {
        for entry in batch.dispatches.drain(..) {
            self.publish_entry(queue, entry);
        }
    }

    /// Hands one dispatch to the completion thread.
    #[inline]
    fn publish_entry(&self, queue: &QueueContext, entry: InFlight<S>) {
        // The completion thread takes from the hand-off queue at every
        // poll; when it is full, move what is published into the thread's
        // list here if its state is free, else wake it and wait for room
        // (bounded).
        if let Err(mut b) = push_bounded(&self.pending, entry, self.options.pool_wait, || {
            if self.take_published_here() == 0 {
                self.completion_wake.notify();
            }
        }) {
            // Cannot track it: its signal is gone with it, and nobody will
            // ever complete its record. The call's record it carries still
            // goes to the writer.
            if let Some(call) = b.take_call_record(&self.ids) {
                self.push_record(Record::Intercept(call));
            }
            if queue.release_slots(b.slots()) {
                self.ring_space.notify_all();
            }
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            self.count_lost(1);
            drop(b);
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
            self.write_untouched(packets, write);
            return;
        }
        let mut batch = PacketBatch::inline();
        let mut signals = SmallVec::new();
        let caller = Caller {
            queue,
            thread_id: 0,
            enqueue_ns: fast_boottime_ns(),
        };
        self.build_batch(&mut batch, &mut signals, &caller, packets, kernels, source);
        hold_slots(queue, &batch);
        write(&batch.packets);
        for mut entry in batch.dispatches.drain(..) {
            entry.recorded = false;
            if let Err(b) = self.pending.push(entry) {
                // Nobody will see it complete: release its slots now and
                // keep its signals out of the pool (the device may still
                // write them).
                b.abandon();
            }
        }
        if self.completion_wake.is_parked() {
            self.completion_wake.notify();
        }
    }

    /// Builds the batch for one interceptor call: see the module docs.
    /// `batch` must be empty; it is filled in place (it is large, and lives
    /// on the interceptor's stack). `signals` is storage for the batch's
    /// pooled signals (emptied again on return).
    ///
    /// Intercept markers (vendor packets of format 0xFE, ROCr >= 6) pass
    /// through unchanged and stay immediately before the packet they mark:
    /// a serialized kernel's two barriers go in front of the markers that
    /// precede it, so a marker's callback still gets the kernel's hardware
    /// packet id.
    fn build_batch(
        &self,
        batch: &mut PacketBatch<S>,
        signals: &mut BatchSignals<S>,
        caller: &Caller<'_>,
        packets: &[RawPacket],
        kernels: usize,
        source: &dyn SignalSource<S>,
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
            if !is_traceable(p) {
                self.passes_through(p);
                batch.packets.push(*p);
                continue;
            }
            let i = k;
            k += 1;
            let Some((signal, serial)) = self.kernel_signals(&mut signals) else {
                batch.untraced += 1;
                self.passes_through(p);
                batch.packets.push(*p);
                continue;
            };
            if let Some(g) = &serial {
                push_gate(&mut batch.packets, g, marked);
            }
            let kernel = self.rewrite_kernel(p, signal.handle(), ids.dispatch_id(i));
            batch.packets.extend_from_slice(kernel.packets());
            let entry = traced_entry(p, caller, &ids, i, signal, kernel.forwarded(), serial);
            batch.dispatches.push(entry);
        }
        ids
    }

    /// Hands the call's packets to the runtime as the app wrote them.
    fn write_untouched(&self, packets: &[RawPacket], write: impl FnOnce(&[RawPacket])) {
        packets.iter().for_each(|p| self.passes_through(p));
        write(packets);
    }

    /// A packet reaches the device as the app wrote it: if it completes an
    /// app signal (any type the HSA specification defines; a vendor packet's
    /// field there may be something else), that signal's times are the
    /// packet's own from now on.
    #[inline]
    fn passes_through(&self, p: &RawPacket) {
        if p.packet_type() != hsa_sys::HSA_PACKET_TYPE_VENDOR_SPECIFIC {
            self.forwarded_times.forget(p.completion_signal());
        }
    }

    /// The next kernel's signals: its timestamp signal and, when
    /// serialized, its gate's two; `None` when the batch ran out (the
    /// kernel passes through untraced).
    fn kernel_signals(
        &self,
        signals: &mut impl Iterator<Item = S>,
    ) -> Option<(S, Option<SerialGate<S>>)> {
        let serial = if self.options.serialize {
            let (ready, gate) = (signals.next(), signals.next());
            Some(SerialGate {
                ready: ready?,
                gate: gate?,
                state: GateState::Waiting,
                ready_seq: 0,
            })
        } else {
            None
        };
        Some((signals.next()?, serial))
    }

    /// Kernel `p` (dispatch `dispatch_id`) with `signal` as its completion
    /// signal and, when the app gave a signal and forwarding is by barrier,
    /// the barrier that forwards it; notes whose times the app's signal
    /// will have (`ForwardedTimes`).
    #[inline(always)]
    fn rewrite_kernel(&self, p: &RawPacket, signal: u64, dispatch_id: u64) -> RewrittenKernel {
        let app_signal = p.completion_signal();
        let mut kernel = RewrittenKernel {
            packets: [*p, RawPacket::ZERO],
            len: 1,
        };
        kernel.packets[0].set_completion_signal(signal);
        if app_signal != 0 && !self.options.host_forwarding {
            kernel.packets[1] = RawPacket::forwarding_barrier(app_signal, p.release_fence_scope());
            kernel.len = 2;
            self.forwarded_times.expect(app_signal, dispatch_id);
        } else {
            // Host forwarding gives the app's signal the kernel's own times.
            self.forwarded_times.forget(app_signal);
        }
        kernel
    }

    /// `count` free signals for one batch, into `got` (empty on entry), all
    /// or nothing while the wait lasts: a call that cannot get them all
    /// gives back what it took and waits for the completion thread to
    /// recycle, so that interceptors of several queues never deadlock each
    /// holding part of the pool. After [`EngineOptions::pool_wait`] it keeps
    /// what it has (the rest of the batch passes through untraced).
    ///
    /// [`EngineOptions::pool_wait`]: super::EngineOptions::pool_wait
    fn acquire_signals(
        &self,
        count: usize,
        source: &dyn SignalSource<S>,
        got: &mut BatchSignals<S>,
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
}

/// Whether rprof rewrites and records `p`: a kernel dispatch of a code
/// object. Every other packet — barriers, vendor-specific packets, packets
/// of an invalid or unknown type, dispatches of kernel object 0 — reaches
/// the device exactly as the app wrote it. (A dispatch of a non-zero object
/// rprof has no name for is traced; the writer names it as unknown.)
#[inline]
pub(super) fn is_traceable(p: &RawPacket) -> bool {
    p.is_kernel_dispatch() && p.kernel_object() != 0
}

/// `(traceable dispatches, dispatches of kernel object 0)` among `packets`.
#[inline]
fn count_dispatches(packets: &[RawPacket]) -> (usize, usize) {
    let mut kernels = 0;
    let mut codeless = 0;
    for p in packets.iter().filter(|p| p.is_kernel_dispatch()) {
        if p.kernel_object() == 0 {
            codeless += 1;
        } else {
            kernels += 1;
        }
    }
    (kernels, codeless)
}

/// Counts a batch's ring slots on their queue.
fn hold_slots<S>(queue: &QueueContext, batch: &PacketBatch<S>) {
    queue.slots.fetch_add(batch.slots(), Ordering::AcqRel);
}

/// Pushes a serialized kernel's two barriers (ready, gate), in front of the
/// run of intercept markers that precede the kernel (from `marked`).
fn push_gate<S: DispatchSignal>(
    packets: &mut SmallVec<[RawPacket; BATCH_INLINE_PACKETS]>,
    g: &SerialGate<S>,
    marked: Option<usize>,
) {
    packets.push(RawPacket::forwarding_barrier(
        g.ready.handle(),
        HSA_FENCE_SCOPE_SYSTEM,
    ));
    packets.push(RawPacket::gate_barrier(g.gate.handle()));
    if let Some(from) = marked {
        // [markers.., ready, gate] -> [ready, gate, markers..]
        packets[from..].rotate_right(2);
    }
}

/// A kernel as rewritten ([`Engine::rewrite_kernel`]): the kernel and, when
/// forwarded by barrier, the barrier after it.
struct RewrittenKernel {
    packets: [RawPacket; 2],
    len: usize,
}

impl RewrittenKernel {
    /// The packets to write, in order.
    fn packets(&self) -> &[RawPacket] {
        &self.packets[..self.len]
    }

    /// Whether a forwarding barrier follows the kernel.
    fn forwarded(&self) -> bool {
        self.len == 2
    }
}

/// The in-flight entry of traced kernel `i` of a call, `p` as the app wrote
/// it.
#[inline(always)]
fn traced_entry<S>(
    p: &RawPacket,
    caller: &Caller<'_>,
    ids: &IdRange,
    i: u64,
    signal: S,
    forwarded: bool,
    serial: Option<SerialGate<S>>,
) -> InFlight<S> {
    InFlight {
        launch: launch(p, caller, ids, i),
        queue: caller.queue.clone(),
        signal,
        forwarded,
        app_signal: p.completion_signal(),
        serial,
        recorded: true,
        call: None,
    }
}

/// Kernel `i` of a call as submitted.
fn launch(p: &RawPacket, caller: &Caller<'_>, ids: &IdRange, i: u64) -> Launch {
    Launch {
        dispatch_id: ids.dispatch_id(i),
        kernel_object: p.kernel_object(),
        enqueue_ns: caller.enqueue_ns,
        grid: p.grid_size(),
        private_segment_size: p.private_segment_size(),
        group_segment_size: p.group_segment_size(),
        thread_id: caller.thread_id,
        workgroup: p.workgroup_size(),
    }
}
