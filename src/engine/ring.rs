//! The ring guard: rprof keeps its unfinished traced packets below a share
//! of each queue's ring ([`QueueContext::with_ring`]), waiting for the
//! device when a call would go above; plus the arithmetic of ROCr >= 6's
//! intercept queue (how many hardware slots a batch takes, whether it is
//! submitted at once).
//!
//! A kernel's slots, its forwarding barrier's included, come back when the
//! completion thread sees the kernel finish; the device may not have taken
//! the barrier out of the ring by then, so the ring can hold that one packet
//! beyond the limit for a moment, inside the quarter the guard leaves free.
//!
//! Packet layout itself lives in `rprof-abi` ([`RawPacket`]); this module
//! holds only what rprof knows about the runtime's intercept queue.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rprof_abi::packet::RawPacket;

use super::{DispatchSignal, Engine, QueueContext, RING_STALL};

/// Looks an interceptor takes at a full ring, after the last slot came back,
/// before a [`RING_STALL`] counts (about half a second of [`RING_WAIT_TICK`]s
/// when nothing wakes it).
const STALL_ROUNDS: u32 = 256;

/// Longest an interceptor waiting for ring space sleeps before it looks
/// again by itself (the completion thread normally wakes it when the queue
/// has drained to its target).
const RING_WAIT_TICK: Duration = Duration::from_millis(2);

/// Passes the completion thread makes, after the last slot came back, before
/// a [`RING_STALL`] counts (an interceptor that waits asks for a pass at
/// every tick in which nothing came back, so a running completion thread
/// makes these within a second).
const STALL_PASSES: u64 = 64;

/// Slots `packets` take in the hardware ring once the runtime's intercept
/// queue has submitted them (intercept markers take none).
pub fn hardware_slots(packets: &[RawPacket]) -> u64 {
    packets.iter().filter(|p| !p.is_intercept_marker()).count() as u64
}

/// Whether ROCr >= 6's intercept queue submits `needed` packets into a
/// hardware ring of `size` packets with these indices at once, instead of
/// deferring them behind a retry barrier: it wants one slot to spare for
/// that barrier. A batch larger than the ring can never go at once (ROCr
/// submits what fits), so waiting for it is pointless: also true.
pub fn hardware_ring_takes(size: u64, read: u64, write: u64, needed: u64) -> bool {
    if needed + 1 > size {
        return true;
    }
    let used = write.saturating_sub(read).min(size);
    // One slot more than the batch: the spare one for the retry barrier.
    size - used > needed
}

/// The highest read index an interceptor has loaded from one hardware ring.
///
/// The device writes a ring's read index, so loading it costs the writing
/// thread a cache line from the device's side on every write (about 50
/// cycles, 25 ns, of each interceptor call on ROCr 6.4.3 over the emulated
/// GPU: a probe build's room check on the graph storm). The
/// index only moves forward, and the room [`hardware_ring_takes`] finds
/// only grows with it: a write that fits by an index seen earlier fits by
/// the current one. So the interceptor asks this first and loads the index
/// only when the ring looks full by it.
#[derive(Debug, Default)]
pub struct SeenReadIndex {
    /// The highest index [`SeenReadIndex::saw`] was given (0 before any):
    /// never above the ring's current read index.
    highest: AtomicU64,
}

impl SeenReadIndex {
    /// Whether a ring of `size` packets at write index `write` takes
    /// `needed` packets at once by the highest read index seen (`false`
    /// means only: load the index and ask [`hardware_ring_takes`]).
    pub fn takes(&self, size: u64, write: u64, needed: u64) -> bool {
        hardware_ring_takes(size, self.highest.load(Ordering::Relaxed), write, needed)
    }

    /// Remembers `read`, an index just loaded from the ring. An older load
    /// stored late (by another thread) never moves the index back.
    pub fn saw(&self, read: u64) {
        if read > self.highest.load(Ordering::Relaxed) {
            self.highest.fetch_max(read, Ordering::Relaxed);
        }
    }
}

impl<S: DispatchSignal> Engine<S> {
    /// Asks the completion thread to poll now (an interceptor is waiting):
    /// on the first round of a wait and every 16th after.
    pub(super) fn wake_urgently(&self, round: u32) {
        if round % 16 == 0 {
            self.poll_now();
        }
    }

    /// Asks the completion thread for a full pass at once (it may be in a
    /// nap of up to `max_backoff` while completions flow).
    pub fn poll_now(&self) {
        self.urgent.store(true, Ordering::Release);
        self.completion_wake.notify();
    }

    /// Ring slots the traced form of `packets` takes at most: each kernel,
    /// its forwarding barrier when the app gave a signal, and the two gate
    /// barriers when serialized.
    pub(super) fn slots_needed(&self, packets: &[RawPacket]) -> u64 {
        let per_kernel = 1 + if self.options.serialize { 2 } else { 0 };
        packets
            .iter()
            .filter(|p| super::batch::is_traceable(p))
            .map(|p| {
                per_kernel + u64::from(p.completion_signal() != 0 && !self.options.host_forwarding)
            })
            .sum()
    }

    /// Waits until the queue's ring has room for `slots` more traced slots
    /// (see [`QueueContext::with_ring`]); returns whether there is room.
    ///
    /// The thread sleeps in `ring_space` until the completion thread has
    /// given back enough of the queue's slots (it wakes the queue's waiters
    /// once their target is reached: one wake-up per wait, not one per nap),
    /// looking again every [`RING_WAIT_TICK`] in case a wake-up was missed or
    /// the completion thread sleeps (then it asks for a pass at once).
    ///
    /// The wait ends without room after [`RING_STALL`] in which none of the
    /// queue's traced packets finished (or [`EngineOptions::pool_wait`] in
    /// all): the device cannot make progress on this queue by itself (its
    /// head waits for something the app does later). Such a queue never
    /// waits again: later calls without room return `false` at once.
    ///
    /// A stall counts only once it was seen: this thread looked
    /// [`STALL_ROUNDS`] times and the completion thread made [`STALL_PASSES`]
    /// passes since the last slot came back. A thread the scheduler kept off
    /// the CPU for a second (an overloaded machine; valgrind, which runs one
    /// thread at a time) has not seen a stuck device, and giving up costs
    /// dispatches (and, on ROCr 5.2.3, whose intercept queue asserts when two
    /// packets in a row find its ring full, can abort the app).
    ///
    /// [`EngineOptions::pool_wait`]: super::EngineOptions::pool_wait
    pub(super) fn wait_for_ring_space(&self, queue: &QueueContext, slots: u64) -> bool {
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
        let _waiter = queue.ring_waiter(target);
        let start = Instant::now();
        let deadline = start + self.options.pool_wait;
        let mut progress = start;
        let mut last = queue.slots_in_use();
        let mut passes_at_progress = self.completion_passes.load(Ordering::Acquire);
        let mut rounds: u32 = 0;
        let mut rounds_at_progress = 0;
        loop {
            let now_in_use = queue.slots_in_use();
            if now_in_use <= target {
                return true;
            }
            if !self.is_guarding() {
                // Nothing traced any more: the completion thread is gone.
                return queue.slots_in_use() + need <= queue.slot_limit;
            }
            let now = Instant::now();
            // Slots came back since the last look; if not, this look asks
            // the completion thread for a pass at once.
            let moved = now_in_use < last;
            if moved {
                last = now_in_use;
                progress = now;
                passes_at_progress = self.completion_passes.load(Ordering::Acquire);
                rounds_at_progress = rounds;
            }
            let stalled = now.duration_since(progress) >= RING_STALL
                && rounds - rounds_at_progress >= STALL_ROUNDS
                && self.completion_passes.load(Ordering::Acquire) - passes_at_progress
                    >= STALL_PASSES;
            if stalled || now >= deadline {
                queue.ring_wait_gave_up.store(true, Ordering::Release);
                return queue.slots_in_use() + need <= queue.slot_limit;
            }
            if !moved {
                self.poll_now();
            }
            self.ring_space
                .wait(RING_WAIT_TICK.min(deadline - now), || {
                    queue.slots_in_use() <= target || !self.is_guarding()
                });
            rounds = rounds.saturating_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hardware_ring_room() {
        let batch = [
            RawPacket::intercept_marker(1),
            RawPacket::forwarding_barrier(1, 0),
            RawPacket::intercept_marker(2),
            RawPacket::gate_barrier(3),
        ];
        assert_eq!(hardware_slots(&batch), 2);
        // 16-slot ring: 2 packets + the spare retry slot need 3 free.
        assert!(hardware_ring_takes(16, 100, 113, 2));
        assert!(!hardware_ring_takes(16, 100, 114, 2));
        assert!(!hardware_ring_takes(16, 100, 116, 2));
        assert!(hardware_ring_takes(16, 0, 0, 15));
        assert!(!hardware_ring_takes(16, 0, 1, 15));
        // Never fits whole: ROCr submits part of it, nothing to wait for.
        assert!(hardware_ring_takes(16, 0, 16, 16));
    }

    #[test]
    fn a_write_that_fits_by_the_read_index_seen_needs_no_load() {
        let seen = SeenReadIndex::default();
        // Nothing seen yet: a fresh ring's index 0.
        assert!(seen.takes(16, 13, 2));
        assert!(!seen.takes(16, 14, 2));
        seen.saw(100);
        assert!(seen.takes(16, 113, 2));
        // Full by what was seen: the caller loads the index.
        assert!(!seen.takes(16, 114, 2));
        seen.saw(101);
        assert!(seen.takes(16, 114, 2));
    }

    #[test]
    fn the_read_index_seen_never_moves_back() {
        let seen = SeenReadIndex::default();
        seen.saw(101);
        // An older load, stored after the newer one.
        seen.saw(100);
        assert!(seen.takes(16, 114, 2), "the ring has room by index 101");
    }
}
