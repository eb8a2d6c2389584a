//! AQL packets as plain 64-byte values.
//!
//! The interceptor receives packets as raw memory from the runtime. This
//! module reads and rewrites them without `unsafe`: a [`RawPacket`] is a
//! 64-byte array, and every field is read or written at its offset from the
//! HSA specification (little-endian, as on every AMD GPU host). The offsets
//! are checked against the `hsa-sys` bindings by the tests below.

use hsa_sys::{
    HSA_FENCE_SCOPE_NONE, HSA_PACKET_HEADER_ACQUIRE_FENCE_SCOPE, HSA_PACKET_HEADER_BARRIER,
    HSA_PACKET_HEADER_RELEASE_FENCE_SCOPE, HSA_PACKET_HEADER_TYPE,
    HSA_PACKET_HEADER_WIDTH_RELEASE_FENCE_SCOPE, HSA_PACKET_HEADER_WIDTH_TYPE,
    HSA_PACKET_TYPE_BARRIER_AND, HSA_PACKET_TYPE_KERNEL_DISPATCH,
};

/// Size of every AQL packet in bytes.
pub const PACKET_BYTES: usize = 64;

const OFF_WORKGROUP: usize = 4;
const OFF_GRID: usize = 12;
const OFF_PRIVATE_SEGMENT: usize = 24;
const OFF_GROUP_SEGMENT: usize = 28;
const OFF_KERNEL_OBJECT: usize = 32;
const OFF_COMPLETION_SIGNAL: usize = 56;
const OFF_BARRIER_DEP_SIGNAL: usize = 8;
/// Byte 2 of an AMD vendor-specific packet: its format.
const OFF_VENDOR_FORMAT: usize = 2;

/// Byte offset of an intercept marker's callback (after the header, the
/// format byte and five reserved bytes; 64-bit hosts).
const OFF_MARKER_CALLBACK: usize = 8;

/// `hsa_packet_type_t` of vendor-specific packets (`HSA_PACKET_TYPE_VENDOR_SPECIFIC`).
pub const PACKET_TYPE_VENDOR_SPECIFIC: u32 = 0;
/// Format byte of ROCr's intercept-marker vendor packet
/// (`AMD_AQL_FORMAT_INTERCEPT_MARKER` in ROCr >= 6.0's `hsa_api_trace.h`): a
/// packet a rewriter puts immediately before the packet it marks; the
/// intercept queue calls its callback with the hardware packet id the next
/// packet gets, and never copies the marker to the hardware queue.
pub const AMD_AQL_FORMAT_INTERCEPT_MARKER: u8 = 0xFE;

/// One AQL packet, copied out of (or into) a queue ring.
///
/// `repr(C)` with byte alignment, so a pointer to any run of packets in a
/// ring can be viewed as `&[RawPacket]`.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RawPacket {
    /// The packet bytes in memory order.
    pub bytes: [u8; PACKET_BYTES],
}

impl std::fmt::Debug for RawPacket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawPacket")
            .field("type", &self.packet_type())
            .field("barrier", &self.barrier_bit())
            .field("completion_signal", &self.completion_signal())
            .finish()
    }
}

impl RawPacket {
    /// An all-zero packet.
    pub const ZERO: RawPacket = RawPacket {
        bytes: [0; PACKET_BYTES],
    };

    fn u16_at(&self, off: usize) -> u16 {
        u16::from_le_bytes([self.bytes[off], self.bytes[off + 1]])
    }
    fn u32_at(&self, off: usize) -> u32 {
        let mut b = [0u8; 4];
        b.copy_from_slice(&self.bytes[off..off + 4]);
        u32::from_le_bytes(b)
    }
    fn u64_at(&self, off: usize) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.bytes[off..off + 8]);
        u64::from_le_bytes(b)
    }
    fn set_u16(&mut self, off: usize, v: u16) {
        self.bytes[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }
    fn set_u64(&mut self, off: usize, v: u64) {
        self.bytes[off..off + 8].copy_from_slice(&v.to_le_bytes());
    }

    /// The 16-bit header.
    pub fn header(&self) -> u16 {
        self.u16_at(0)
    }

    /// The packet type field of the header (`hsa_packet_type_t`).
    pub fn packet_type(&self) -> u32 {
        field(
            self.header(),
            HSA_PACKET_HEADER_TYPE,
            HSA_PACKET_HEADER_WIDTH_TYPE,
        )
    }

    /// Whether this is a kernel dispatch packet.
    pub fn is_kernel_dispatch(&self) -> bool {
        self.packet_type() == HSA_PACKET_TYPE_KERNEL_DISPATCH
    }

    /// Whether this is ROCr's intercept marker (a vendor-specific packet of
    /// format [`AMD_AQL_FORMAT_INTERCEPT_MARKER`]): it never reaches the
    /// device, and must stay immediately before the packet it marks.
    pub fn is_intercept_marker(&self) -> bool {
        self.packet_type() == PACKET_TYPE_VENDOR_SPECIFIC
            && self.bytes[OFF_VENDOR_FORMAT] == AMD_AQL_FORMAT_INTERCEPT_MARKER
    }

    /// An intercept marker whose first `user_data` word is `tag` (for tests
    /// and simulated rewriters; the callback pointer is null).
    pub fn intercept_marker(tag: u64) -> RawPacket {
        let mut p = RawPacket::ZERO;
        p.set_u16(
            0,
            (PACKET_TYPE_VENDOR_SPECIFIC << HSA_PACKET_HEADER_TYPE) as u16
                | (1 << HSA_PACKET_HEADER_BARRIER),
        );
        p.bytes[OFF_VENDOR_FORMAT] = AMD_AQL_FORMAT_INTERCEPT_MARKER;
        p.set_u64(OFF_MARKER_CALLBACK + 8, tag);
        p
    }

    /// An intercept marker whose callback is the function at address
    /// `callback` (an `amd_intercept_marker_handler`) and whose first
    /// `user_data` word is `user_data`.
    pub fn intercept_marker_with_callback(callback: u64, user_data: u64) -> RawPacket {
        let mut p = RawPacket::intercept_marker(user_data);
        p.set_u64(OFF_MARKER_CALLBACK, callback);
        p
    }

    /// The barrier bit.
    pub fn barrier_bit(&self) -> bool {
        self.header() & (1 << HSA_PACKET_HEADER_BARRIER) != 0
    }

    /// Release fence scope (`hsa_fence_scope_t`).
    pub fn release_fence_scope(&self) -> u32 {
        field(
            self.header(),
            HSA_PACKET_HEADER_RELEASE_FENCE_SCOPE,
            HSA_PACKET_HEADER_WIDTH_RELEASE_FENCE_SCOPE,
        )
    }

    /// The completion signal handle (0 = none). Same offset in every packet
    /// type the HSA specification defines.
    pub fn completion_signal(&self) -> u64 {
        self.u64_at(OFF_COMPLETION_SIGNAL)
    }

    /// Replaces the completion signal handle.
    pub fn set_completion_signal(&mut self, handle: u64) {
        self.set_u64(OFF_COMPLETION_SIGNAL, handle);
    }

    /// Kernel dispatch: work-group size (x, y, z).
    pub fn workgroup_size(&self) -> [u16; 3] {
        [
            self.u16_at(OFF_WORKGROUP),
            self.u16_at(OFF_WORKGROUP + 2),
            self.u16_at(OFF_WORKGROUP + 4),
        ]
    }

    /// Kernel dispatch: grid size (x, y, z).
    pub fn grid_size(&self) -> [u32; 3] {
        [
            self.u32_at(OFF_GRID),
            self.u32_at(OFF_GRID + 4),
            self.u32_at(OFF_GRID + 8),
        ]
    }

    /// Kernel dispatch: private segment bytes per work-item.
    pub fn private_segment_size(&self) -> u32 {
        self.u32_at(OFF_PRIVATE_SEGMENT)
    }

    /// Kernel dispatch: group segment bytes per work-group.
    pub fn group_segment_size(&self) -> u32 {
        self.u32_at(OFF_GROUP_SEGMENT)
    }

    /// Kernel dispatch: address of the kernel descriptor.
    pub fn kernel_object(&self) -> u64 {
        self.u64_at(OFF_KERNEL_OBJECT)
    }

    /// A BARRIER_AND packet with the barrier bit set, no dependencies, that
    /// completes `signal` once every earlier packet of the queue has
    /// completed. Acquires nothing; releases at `release_scope`.
    pub fn forwarding_barrier(signal: u64, release_scope: u32) -> RawPacket {
        let mut p = RawPacket::ZERO;
        let header = (HSA_PACKET_TYPE_BARRIER_AND << HSA_PACKET_HEADER_TYPE)
            | (1 << HSA_PACKET_HEADER_BARRIER)
            | (HSA_FENCE_SCOPE_NONE << HSA_PACKET_HEADER_ACQUIRE_FENCE_SCOPE)
            | (release_scope << HSA_PACKET_HEADER_RELEASE_FENCE_SCOPE);
        p.set_u16(0, header as u16);
        p.set_completion_signal(signal);
        p
    }

    /// A BARRIER_AND packet without the barrier bit that waits until
    /// `dependency` is 0 and completes nothing: the queue stalls on it until
    /// the host opens the gate.
    pub fn gate_barrier(dependency: u64) -> RawPacket {
        let mut p = RawPacket::ZERO;
        let header = (HSA_PACKET_TYPE_BARRIER_AND << HSA_PACKET_HEADER_TYPE)
            | (HSA_FENCE_SCOPE_NONE << HSA_PACKET_HEADER_ACQUIRE_FENCE_SCOPE)
            | (HSA_FENCE_SCOPE_NONE << HSA_PACKET_HEADER_RELEASE_FENCE_SCOPE);
        p.set_u16(0, header as u16);
        p.set_u64(OFF_BARRIER_DEP_SIGNAL, dependency);
        p
    }

    /// BARRIER_AND / BARRIER_OR: dependency signal `i` (0..5).
    pub fn dep_signal(&self, i: usize) -> u64 {
        self.u64_at(OFF_BARRIER_DEP_SIGNAL + 8 * i)
    }
}

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

fn field(header: u16, shift: u32, width: u32) -> u32 {
    (u32::from(header) >> shift) & ((1 << width) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hsa_sys::{hsa_barrier_and_packet_t, hsa_kernel_dispatch_packet_t};
    use std::mem::{offset_of, size_of};

    #[test]
    fn offsets_match_the_runtime_headers() {
        type K = hsa_kernel_dispatch_packet_t;
        assert_eq!(size_of::<K>(), PACKET_BYTES);
        assert_eq!(size_of::<hsa_barrier_and_packet_t>(), PACKET_BYTES);
        assert_eq!(offset_of!(K, workgroup_size_x), OFF_WORKGROUP);
        assert_eq!(offset_of!(K, grid_size_x), OFF_GRID);
        assert_eq!(offset_of!(K, private_segment_size), OFF_PRIVATE_SEGMENT);
        assert_eq!(offset_of!(K, group_segment_size), OFF_GROUP_SEGMENT);
        assert_eq!(offset_of!(K, kernel_object), OFF_KERNEL_OBJECT);
        assert_eq!(offset_of!(K, completion_signal), OFF_COMPLETION_SIGNAL);
        assert_eq!(
            offset_of!(hsa_barrier_and_packet_t, dep_signal),
            OFF_BARRIER_DEP_SIGNAL
        );
        assert_eq!(
            offset_of!(hsa_barrier_and_packet_t, completion_signal),
            OFF_COMPLETION_SIGNAL
        );
    }

    #[test]
    fn reads_kernel_fields() {
        let mut p = RawPacket::ZERO;
        let header = (HSA_PACKET_TYPE_KERNEL_DISPATCH << HSA_PACKET_HEADER_TYPE)
            | (1 << HSA_PACKET_HEADER_BARRIER)
            | (2 << HSA_PACKET_HEADER_RELEASE_FENCE_SCOPE);
        p.set_u16(0, header as u16);
        p.set_u16(4, 64);
        p.set_u16(6, 2);
        p.set_u16(8, 1);
        p.bytes[12..16].copy_from_slice(&1024u32.to_le_bytes());
        p.bytes[16..20].copy_from_slice(&8u32.to_le_bytes());
        p.bytes[20..24].copy_from_slice(&1u32.to_le_bytes());
        p.bytes[24..28].copy_from_slice(&16u32.to_le_bytes());
        p.bytes[28..32].copy_from_slice(&512u32.to_le_bytes());
        p.set_u64(32, 0x0dea_dbee_f000);
        p.set_u64(56, 0x1234);
        assert!(p.is_kernel_dispatch());
        assert!(p.barrier_bit());
        assert_eq!(p.release_fence_scope(), 2);
        assert_eq!(p.workgroup_size(), [64, 2, 1]);
        assert_eq!(p.grid_size(), [1024, 8, 1]);
        assert_eq!(p.private_segment_size(), 16);
        assert_eq!(p.group_segment_size(), 512);
        assert_eq!(p.kernel_object(), 0x0dea_dbee_f000);
        assert_eq!(p.completion_signal(), 0x1234);
        p.set_completion_signal(7);
        assert_eq!(p.completion_signal(), 7);
    }

    #[test]
    fn intercept_markers_are_recognised() {
        let m = RawPacket::intercept_marker(7);
        assert!(m.is_intercept_marker());
        assert!(!m.is_kernel_dispatch());
        assert_eq!(m.packet_type(), PACKET_TYPE_VENDOR_SPECIFIC);
        // user_data[0] of amd_aql_intercept_marker_t (after header, format,
        // reserved[5] and the 8-byte callback).
        assert_eq!(m.u64_at(16), 7);
        // Other vendor packets (PM4 IB is format 1) are not markers.
        let mut pm4 = m;
        pm4.bytes[OFF_VENDOR_FORMAT] = 1;
        assert!(!pm4.is_intercept_marker());
        assert!(!RawPacket::forwarding_barrier(0, 0).is_intercept_marker());
    }

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
        let m = RawPacket::intercept_marker_with_callback(0xdead_beef, 42);
        assert!(m.is_intercept_marker());
        assert_eq!(m.u64_at(8), 0xdead_beef);
        assert_eq!(m.u64_at(16), 42);
    }

    #[test]
    fn forwarding_barrier_layout() {
        let b = RawPacket::forwarding_barrier(0xabc, 2);
        assert_eq!(b.packet_type(), HSA_PACKET_TYPE_BARRIER_AND);
        assert!(b.barrier_bit());
        assert_eq!(b.release_fence_scope(), 2);
        assert_eq!(b.completion_signal(), 0xabc);
        for i in 0..5 {
            assert_eq!(b.dep_signal(i), 0);
        }
        assert!(!b.is_kernel_dispatch());
        let g = RawPacket::gate_barrier(0x77);
        assert_eq!(g.packet_type(), HSA_PACKET_TYPE_BARRIER_AND);
        assert!(!g.barrier_bit());
        assert_eq!(g.dep_signal(0), 0x77);
        assert_eq!(g.completion_signal(), 0);
    }
}
