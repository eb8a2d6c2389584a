//! The ring guard's arithmetic: how many hardware ring slots a batch takes,
//! and whether ROCr >= 6's intercept queue submits it at once.
//!
//! Packet layout itself lives in `rprof-abi` ([`RawPacket`]); this module
//! holds only what rprof knows about the runtime's intercept queue.

use rprof_abi::packet::RawPacket;

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
}
