//! The queue interceptor: ROCr calls it, on the app's thread and under the
//! queue's lock, with every batch of packets the app writes to a traced
//! queue; it hands them to the engine and writes the rewritten batch.
//!
//! Owns the per-queue state given to the runtime ([`QueueState`]), the
//! `extern "C"` interceptor, and (ROCr >= 6) learning each queue's hardware
//! ring and waiting for room in it before a write. Must not rewrite packets
//! itself (that is `rprof_core::engine::Engine::intercept`) nor create or
//! destroy queues (the hooks do).

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hsa_sys::hsa_queue_t;
use rprof_core::engine::{
    hardware_ring_takes, hardware_slots, QueueContext, RawPacket, SeenReadIndex,
};
use rprof_core::wait::{Pace, Wait};

use super::{session, Session};

/// How long a write waits for room in the hardware ring while the device
/// makes no progress at all (a head packet blocked on the host), before it
/// lets the runtime defer it.
const HARDWARE_ROOM_STALL: Duration = Duration::from_secs(1);
/// How the wait for hardware-ring room paces itself: 64 yields (the ring usually
/// drains within microseconds), then 50 µs naps.
const ROOM_PACE: Pace = Pace::new(64, Duration::from_micros(50));

/// What the interceptor gets as its `data` pointer.
#[derive(Debug)]
pub(super) struct QueueState {
    pub(super) ctx: Arc<QueueContext>,
    /// The runtime's hardware queue under this intercept queue (ROCr >= 6,
    /// learnt from an intercept marker's callback; null until then).
    hardware: AtomicPtr<hsa_queue_t>,
    /// The marker that asks for `hardware` was written.
    marker_sent: AtomicBool,
    /// The highest read index of `hardware` loaded so far: a write that
    /// fits by it loads none ([`SeenReadIndex`]).
    hardware_read: SeenReadIndex,
}

impl QueueState {
    /// The state of a new traced queue.
    pub(super) fn new(ctx: QueueContext) -> Self {
        QueueState {
            ctx: Arc::new(ctx),
            hardware: AtomicPtr::new(std::ptr::null_mut()),
            marker_sent: AtomicBool::new(false),
            hardware_read: SeenReadIndex::default(),
        }
    }
}

impl Session {
    /// Whether the device has taken every packet out of every traced
    /// queue's hardware ring (read index at the write index). Known only on
    /// ROCr >= 6, where the hardware queue under each intercept queue is
    /// learnt; `false` elsewhere, and when a queue's is not known.
    ///
    /// Once the ring guard has stopped, new packets reference none of the
    /// pool's signals; drained rings then mean that no packet the device
    /// has yet to process does (a forwarding barrier can linger in a ring
    /// after its kernel's signal came back), so the pool's signals may be
    /// destroyed.
    pub(super) fn hardware_rings_drained(&self) -> bool {
        let (Some(read), Some(write)) = (
            self.rt.core.hsa_queue_load_read_index_relaxed_fn,
            self.rt.core.hsa_queue_load_write_index_relaxed_fn,
        ) else {
            return false;
        };
        if !self.markers {
            return false;
        }
        let queues = super::QUEUES.lock();
        queues.values().all(|&state| {
            // SAFETY: states in the map are alive: the destroy hook removes
            // them (under this lock) before the runtime destroys the queue.
            let hardware = unsafe { (*state).hardware.load(Ordering::Acquire) };
            // SAFETY: the hardware queue lives as long as its intercept
            // queue; the index loads are plain atomic reads.
            !hardware.is_null() && unsafe { read(hardware) >= write(hardware) }
        })
    }

    /// On ROCr >= 6, before a write: makes sure the runtime will submit
    /// `out` to the hardware ring at once rather than defer it behind a
    /// retry barrier. ROCr's final submit keeps a deferred write on the
    /// side and neither orders a later write of the same rewrite after it
    /// nor accepts a second deferral (`assert(overflow_.empty())`, live in
    /// Debian's builds): a rewriter in front of rprof that calls its writer
    /// twice per packet (allowed since 6.0) aborts the process when the
    /// ring is full, and a deferred marker's callback gets the wrong packet
    /// id. Waits while the device consumes the ring; gives up (and lets the
    /// runtime defer) only after [`HARDWARE_ROOM_STALL`] without progress.
    ///
    /// # Safety
    /// `writer` is the runtime's writer of the current interceptor call and
    /// `state` the queue's registered state.
    unsafe fn make_room(
        &self,
        state: &QueueState,
        writer: unsafe extern "C" fn(*const c_void, u64),
        out: &[RawPacket],
    ) {
        if !self.markers {
            return;
        }
        // SAFETY: as this function's contract.
        let hardware = unsafe { hardware_queue(state, writer) };
        let (Some(read), Some(write)) = (
            self.rt.core.hsa_queue_load_read_index_relaxed_fn,
            self.rt.core.hsa_queue_load_write_index_relaxed_fn,
        ) else {
            return;
        };
        if hardware.is_null() {
            return;
        }
        let needed = hardware_slots(out);
        // SAFETY: the hardware queue lives as long as the intercept queue
        // whose interceptor is running.
        let size = u64::from(unsafe { (*hardware).size });
        // SAFETY: as above; the index load is a plain atomic read.
        let written = unsafe { write(hardware) };
        // Most writes fit by the read index seen last: no load of the
        // device's cache line.
        if state.hardware_read.takes(size, written, needed) {
            return;
        }
        let indices = || {
            // SAFETY: as above; the index loads are plain atomic reads.
            let (r, w) = unsafe { (read(hardware), write(hardware)) };
            state.hardware_read.saw(r);
            (r, w)
        };
        // The device's read index, against the write index just loaded.
        // SAFETY: as above; the index load is a plain atomic read.
        let mut last_read = unsafe { read(hardware) };
        state.hardware_read.saw(last_read);
        if hardware_ring_takes(size, last_read, written, needed) {
            return;
        }
        // Bounded by progress: the wait ends once the ring has not moved for
        // HARDWARE_ROOM_STALL.
        let mut wait = Wait::with_timeout(HARDWARE_ROOM_STALL, ROOM_PACE);
        while wait.pause() {
            let (r, w) = indices();
            if hardware_ring_takes(size, r, w, needed) {
                return;
            }
            if r != last_read {
                last_read = r;
                wait.renew(Instant::now() + HARDWARE_ROOM_STALL);
            }
        }
    }
}

/// The queue's hardware ring (null while unknown). Learnt once per queue: a
/// write of one intercept marker whose callback (run by the runtime's submit
/// with the hardware queue) stores it.
///
/// # Safety
/// As [`Session::make_room`].
unsafe fn hardware_queue(
    state: &QueueState,
    writer: unsafe extern "C" fn(*const c_void, u64),
) -> *mut hsa_queue_t {
    let hardware = state.hardware.load(Ordering::Acquire);
    if !hardware.is_null() || state.marker_sent.swap(true, Ordering::AcqRel) {
        return hardware;
    }
    let marker = RawPacket::intercept_marker_with_callback(
        learn_hardware_queue as *const () as usize as u64,
        state as *const QueueState as u64,
    );
    // SAFETY: the current call's writer, given one packet that lives
    // until it returns; ROCr >= 6 runs the marker's callback inside
    // this call and submits nothing for it.
    unsafe { writer((&marker as *const RawPacket).cast(), 1) };
    state.hardware.load(Ordering::Acquire)
}

/// The callback of rprof's own intercept marker: records the hardware queue
/// ROCr >= 6 passes (the marker's first user-data word is the queue's
/// [`QueueState`]).
unsafe extern "C" fn learn_hardware_queue(
    marker: *const c_void,
    hardware: *mut hsa_queue_t,
    _packet_id: u64,
) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if marker.is_null() || hardware.is_null() {
            return;
        }
        // SAFETY: `marker` is the 64-byte packet rprof wrote, alive for the
        // callback; user_data[0] sits at byte 16.
        let state = unsafe { std::ptr::read_unaligned(marker.cast::<u8>().add(16).cast::<u64>()) };
        // SAFETY: rprof put its queue's `QueueState` pointer there; the queue
        // (and so the state) is alive while its packets are submitted.
        let state = unsafe { &*(state as usize as *const QueueState) };
        state.hardware.store(hardware, Ordering::Release);
    }));
}

/// The queue interceptor: runs on the app's thread, under the queue's lock.
/// Calls `writer` exactly once, with the rewritten batch, or with the
/// original packets if anything went wrong before writing (on ROCr >= 6,
/// once per queue, also with one intercept marker first: see
/// [`Session::make_room`]).
pub(super) unsafe extern "C" fn interceptor(
    pkts: *const c_void,
    pkt_count: u64,
    _user_pkt_index: u64,
    data: *mut c_void,
    writer: hsa_sys::hsa_amd_queue_intercept_packet_writer,
) {
    let Some(writer) = writer else { return };
    let written = std::cell::Cell::new(false);
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let Some(s) = session() else { return };
        if pkts.is_null() || data.is_null() || pkt_count == 0 || s.passthrough {
            return;
        }
        // SAFETY: the runtime passes `pkt_count` packets of 64 bytes;
        // `RawPacket` is a byte array with alignment 1.
        let packets =
            unsafe { std::slice::from_raw_parts(pkts.cast::<RawPacket>(), pkt_count as usize) };
        // SAFETY: `data` is the `QueueState` registered with this queue,
        // alive until after the runtime destroys the queue.
        let state = unsafe { &*data.cast::<QueueState>() };
        s.engine.intercept(&state.ctx, packets, &s.source, |out| {
            written.set(true);
            // SAFETY: this call's writer and the queue's registered state.
            unsafe { s.make_room(state, writer, out) };
            // SAFETY: the runtime's writer for this call, called once with
            // the batch, with packets that live until it returns.
            unsafe { writer(out.as_ptr().cast(), out.len() as u64) };
        });
    }));
    if !written.get() {
        // SAFETY: pass the original packets through unchanged.
        unsafe { writer(pkts, pkt_count) };
    }
}
