//! The in-flight table's entries: a traced queue ([`QueueContext`]) and a
//! dispatch on its way through the device ([`InFlight`], with its
//! [`SerialGate`] under `--serialize-kernels`).
//!
//! Owns what a dispatch holds while it runs (its signals, its ring slots,
//! its record so far) and how it lets go of them. It does not decide when:
//! the interceptor (`batch`) creates entries, the completion thread retires
//! them.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use super::ids;
use crate::record::{DispatchRecord, InterceptRecord};

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
    /// Most ring slots rprof lets its traced packets occupy (0 = no limit).
    pub(super) slot_limit: u64,
    /// Ring slots held by traced kernels and their forwarding barriers that
    /// have not been seen complete. Taken by the interceptor, given back by
    /// [`QueueContext::release_slots`].
    pub(super) slots: AtomicU64,
    /// Interceptor threads asleep (or about to sleep) waiting for ring space
    /// on this queue ([`QueueContext::ring_waiter`]).
    ring_waiters: AtomicU32,
    /// The highest slot count a ring waiter waits for: once `slots` falls to
    /// it, the completion thread wakes the waiters. Meaningful only while
    /// `ring_waiters` is not 0. All three are `SeqCst`, so that a waiter's
    /// last look at `slots` and the completion thread's look at the waiters
    /// cannot both miss the other's write.
    ring_wake_at: AtomicU64,
    /// The runtime destroyed the queue: its unfinished packets never run.
    pub(super) destroyed: AtomicBool,
    /// A wait for ring space on this queue once ended without room (the
    /// device made no progress: e.g. the queue's head waits for a host
    /// signal the submitting thread sets later). From then on the queue
    /// never waits: a call without room passes its packets through
    /// untraced (counted lost).
    pub(super) ring_wait_gave_up: AtomicBool,
    /// The thread that wrote to the queue last ([`QueueContext::writer_thread_id`]).
    last_writer: ids::LastWriter,
}

impl QueueContext {
    /// A context for a newly created queue.
    pub fn new(queue_id: u64, agent_index: u32, agent_handle: u64) -> Self {
        QueueContext {
            queue_id,
            agent_index,
            agent_handle,
            slot_limit: 0,
            slots: AtomicU64::new(0),
            ring_waiters: AtomicU32::new(0),
            ring_wake_at: AtomicU64::new(0),
            destroyed: AtomicBool::new(false),
            ring_wait_gave_up: AtomicBool::new(false),
            last_writer: ids::LastWriter::default(),
        }
    }

    /// The calling thread's OS thread id, as [`current_thread_id`](super::current_thread_id), cached on the
    /// queue for the thread that writes to it over and over (a thread-local lookup in a shared library is a
    /// `__tls_get_addr` call per dispatch).
    #[inline]
    pub fn writer_thread_id(&self) -> u32 {
        self.last_writer.thread_id()
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

    /// Gives back `n` ring slots; returns whether a ring waiter's target was
    /// reached (the caller then wakes the waiters: [`super::Engine`]'s
    /// `ring_space`).
    pub(super) fn release_slots(&self, n: u64) -> bool {
        let before = self.slots.fetch_sub(n, Ordering::SeqCst);
        self.ring_waiters.load(Ordering::SeqCst) != 0
            && before.saturating_sub(n) <= self.ring_wake_at.load(Ordering::SeqCst)
    }

    /// Registers the calling thread as waiting until the queue's slots fall
    /// to `target`, until the returned guard is dropped.
    pub(super) fn ring_waiter(&self, target: u64) -> RingWaiter<'_> {
        self.ring_waiters.fetch_add(1, Ordering::SeqCst);
        self.ring_wake_at.fetch_max(target, Ordering::SeqCst);
        RingWaiter { queue: self }
    }

    /// Whether a dispatch of this queue was submitted and not yet seen
    /// complete: every traced dispatch holds at least one ring slot (its
    /// kernel's) until it retires, so the slot count says it without a count
    /// of its own to keep.
    pub fn has_work_in_flight(&self) -> bool {
        self.slots_in_use() > 0
    }
}

/// A thread waiting for ring space on a queue ([`QueueContext::ring_waiter`]);
/// dropping it ends the wait's registration.
#[derive(Debug)]
pub(super) struct RingWaiter<'a> {
    queue: &'a QueueContext,
}

impl Drop for RingWaiter<'_> {
    fn drop(&mut self) {
        // The last waiter out resets the target. A waiter registering in
        // between may lose its target to the reset: it then wakes at its
        // wait's timeout instead of at once.
        if self.queue.ring_waiters.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.queue.ring_wake_at.store(0, Ordering::SeqCst);
        }
    }
}

/// A kernel as the interceptor submitted it: the fields of its
/// [`DispatchRecord`] that come neither from its queue (queue id, agent),
/// nor from the device (times), nor from the dispatch id (the correlation
/// id). Kept apart so that an [`InFlight`] entry, which the app's thread
/// writes and the completion thread reads at every dispatch, spans as few
/// cache lines as it can.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    /// Per-process dispatch counter ([`DispatchRecord::dispatch_id`]).
    pub dispatch_id: u64,
    /// The packet's `kernel_object`.
    pub kernel_object: u64,
    /// When the interceptor saw the packet.
    pub enqueue_ns: u64,
    /// Grid size in work-items (x, y, z).
    pub grid: [u32; 3],
    /// Private (scratch) segment bytes per work-item.
    pub private_segment_size: u32,
    /// Group (LDS) segment bytes per work-group.
    pub group_segment_size: u32,
    /// OS thread id of the thread that wrote the packet.
    pub thread_id: u32,
    /// Work-group size in work-items (x, y, z).
    pub workgroup: [u16; 3],
}

impl Launch {
    /// The dispatch's record: this launch on `queue`, with its correlation
    /// id and its times.
    pub fn record(
        &self,
        queue: &QueueContext,
        correlation_id: u64,
        start_ns: u64,
        end_ns: u64,
    ) -> DispatchRecord {
        DispatchRecord {
            correlation_id,
            dispatch_id: self.dispatch_id,
            agent_index: queue.agent_index,
            queue_id: queue.queue_id,
            thread_id: self.thread_id,
            kernel_object: self.kernel_object,
            grid: self.grid,
            workgroup: self.workgroup,
            private_segment_size: self.private_segment_size,
            group_segment_size: self.group_segment_size,
            enqueue_ns: self.enqueue_ns,
            start_ns,
            end_ns,
        }
    }
}

/// A dispatch on its way through the device.
#[derive(Debug)]
pub struct InFlight<S> {
    /// What was submitted (its record but the queue's fields, the
    /// correlation id and the times).
    pub launch: Launch,
    /// The queue it was submitted to.
    pub queue: Arc<QueueContext>,
    /// The timestamp signal that completes with it.
    pub signal: S,
    /// Whether a forwarding barrier follows the kernel (it holds a slot).
    pub forwarded: bool,
    /// The app's completion signal (0 = none). With host forwarding (a
    /// measured alternative, see `docs/completion.md`; `forwarded` false)
    /// the completion thread decrements it once the kernel is seen complete.
    pub app_signal: u64,
    /// With `--serialize-kernels`: the two barriers in front of the kernel.
    pub serial: Option<SerialGate<S>>,
    /// Whether the dispatch is recorded. Dispatches submitted after
    /// recording stopped are still rewritten and tracked, only so that the
    /// ring guard keeps working (see [`Engine::keep_guard_after_stop`](super::Engine::keep_guard_after_stop));
    /// they produce no record and are not counted in [`Engine::in_flight`](super::Engine::in_flight).
    pub recorded: bool,
    /// On the first traced dispatch of an interceptor call: the rest of the
    /// call's [`InterceptRecord`]. The completion thread hands that record
    /// to the writer when it takes the entry, so that the app's thread
    /// pushes one item per dispatch instead of two.
    pub call: Option<CallSummary>,
}

/// What an [`InterceptRecord`] holds beyond its first dispatch's record
/// (thread, queue, agent, entry time and first correlation id are the
/// dispatch's: a call's kernels take their signals in order, so its first
/// traced kernel is its first kernel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallSummary {
    /// Return from the interceptor.
    pub end_ns: u64,
    /// Kernel dispatches in the call.
    pub dispatch_count: u32,
    /// Packets of any type in the call (a call has at least one).
    pub packet_count: NonZeroU32,
}

impl CallSummary {
    /// The call's record, given the calling thread, the queue and agent it
    /// wrote to, when it began and its first kernel's correlation id (0
    /// for none).
    pub fn record(
        &self,
        thread_id: u32,
        queue: &QueueContext,
        begin_ns: u64,
        first_correlation_id: u64,
    ) -> InterceptRecord {
        InterceptRecord {
            thread_id,
            queue_id: queue.queue_id,
            agent_index: queue.agent_index,
            begin_ns,
            end_ns: self.end_ns,
            first_correlation_id,
            dispatch_count: self.dispatch_count,
            packet_count: self.packet_count.get(),
        }
    }
}

impl<S> InFlight<S> {
    /// The record of the interceptor call this entry carries, taken once
    /// (`None` for every other entry); its first correlation id is this
    /// entry's, from `ids`.
    pub fn take_call_record(&mut self, ids: &ids::IdAllocator) -> Option<InterceptRecord> {
        let call = self.call.take()?;
        let l = &self.launch;
        let correlation_id = ids.correlation_id(l.dispatch_id);
        Some(call.record(l.thread_id, &self.queue, l.enqueue_ns, correlation_id))
    }

    /// The app's signal the completion thread decrements (host
    /// forwarding), or 0.
    pub fn host_forward(&self) -> u64 {
        if self.forwarded {
            0
        } else {
            self.app_signal
        }
    }

    /// The app's signal a forwarding barrier completes after the kernel, or
    /// 0 (the app asks rprof for its kernel's times: `ForwardedTimes`).
    pub fn forwarded_signal(&self) -> u64 {
        if self.forwarded {
            self.app_signal
        } else {
            0
        }
    }

    /// Ring slots this dispatch holds until it completes.
    pub fn slots(&self) -> u64 {
        1 + u64::from(self.forwarded) + if self.serial.is_some() { 2 } else { 0 }
    }

    /// Stops tracking a dispatch that will not be waited for: gives its
    /// queue back its ring slots and leaks its signals (the device may
    /// still write them; they must never be recycled).
    pub fn abandon(self) {
        // Rare paths (shutdown, a full hand-off queue) that wake no ring
        // waiter: one whose target this reaches wakes at its wait's tick.
        self.queue.release_slots(self.slots());
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
