//! AQL packets: the header's fields, the byte layout of a 64-byte slot, AMD vendor formats, and [`RawPacket`].
//!
//! Bit positions and widths come from the generated enums of `hsa-sys` (`HSA_PACKET_HEADER_*`,
//! `HSA_PACKET_HEADER_WIDTH_*`, `HSA_KERNEL_DISPATCH_PACKET_SETUP_*`); byte offsets are the HSA specification's
//! (little-endian, as on every AMD GPU host) and are pinned against the generated structs by the `const`
//! assertions at the bottom of this file and by the tests.
//!
//! Readers that hold a packet as memory (the emulated command processor reading a ring) use the header helpers
//! and offsets; readers that copy packets (the tracer's interceptor) use [`RawPacket`], which needs no `unsafe`.

use core::mem::{offset_of, size_of};

use hsa_sys::{
    hsa_amd_barrier_value_packet_t, hsa_barrier_and_packet_t, hsa_fence_scope_t,
    hsa_kernel_dispatch_packet_t, hsa_packet_type_t, HSA_AMD_PACKET_TYPE_BARRIER_VALUE,
    HSA_FENCE_SCOPE_NONE, HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS,
    HSA_KERNEL_DISPATCH_PACKET_SETUP_WIDTH_DIMENSIONS, HSA_PACKET_HEADER_BARRIER,
    HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE, HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE,
    HSA_PACKET_HEADER_TYPE, HSA_PACKET_HEADER_WIDTH_BARRIER,
    HSA_PACKET_HEADER_WIDTH_SCACQUIRE_FENCE_SCOPE, HSA_PACKET_HEADER_WIDTH_SCRELEASE_FENCE_SCOPE,
    HSA_PACKET_HEADER_WIDTH_TYPE, HSA_PACKET_TYPE_BARRIER_AND, HSA_PACKET_TYPE_KERNEL_DISPATCH,
    HSA_PACKET_TYPE_VENDOR_SPECIFIC,
};

/// Size in bytes of every AQL packet (a queue slot).
pub const PACKET_BYTES: usize = 64;

/// Byte offset of the completion signal handle: the same in every packet format.
pub const COMPLETION_SIGNAL_OFFSET: usize = 56;
/// Byte offset, inside a vendor-specific packet, of the AMD format byte (`hsa_amd_packet_header_t::AmdFormat`).
pub const VENDOR_FORMAT_OFFSET: usize = 2;
/// AMD vendor packet format of the barrier-value packet (`hsa_amd_barrier_value_packet_t`).
pub const VENDOR_FORMAT_BARRIER_VALUE: u8 = HSA_AMD_PACKET_TYPE_BARRIER_VALUE as u8;
/// Format byte of ROCr's intercept-marker vendor packet (`AMD_AQL_FORMAT_INTERCEPT_MARKER` in ROCr >= 6.0's
/// `hsa_api_trace.h`): a packet a rewriter puts immediately before the packet it marks; the intercept queue calls
/// its callback with the hardware packet id the next packet gets, and never copies the marker to the hardware
/// queue.
pub const AMD_AQL_FORMAT_INTERCEPT_MARKER: u8 = 0xFE;

const OFF_WORKGROUP: usize = offset_of!(hsa_kernel_dispatch_packet_t, workgroup_size_x);
const OFF_GRID: usize = offset_of!(hsa_kernel_dispatch_packet_t, grid_size_x);
const OFF_PRIVATE_SEGMENT: usize = offset_of!(hsa_kernel_dispatch_packet_t, private_segment_size);
const OFF_GROUP_SEGMENT: usize = offset_of!(hsa_kernel_dispatch_packet_t, group_segment_size);
const OFF_KERNEL_OBJECT: usize = offset_of!(hsa_kernel_dispatch_packet_t, kernel_object);
const OFF_BARRIER_DEP_SIGNAL: usize = offset_of!(hsa_barrier_and_packet_t, dep_signal);
/// Byte offset of an intercept marker's callback (after the header, the format byte and five reserved bytes;
/// 64-bit hosts); its `user_data` words follow.
const OFF_MARKER_CALLBACK: usize = 8;

#[inline]
const fn field(header: u16, position: u32, width: u32) -> u16 {
    (header >> position) & ((1u16 << width) - 1)
}

/// The packet type (`HSA_PACKET_TYPE_*`) stored in an AQL header.
#[inline]
pub const fn header_packet_type(header: u16) -> hsa_packet_type_t {
    field(header, HSA_PACKET_HEADER_TYPE, HSA_PACKET_HEADER_WIDTH_TYPE) as hsa_packet_type_t
}

/// Whether the barrier bit of an AQL header is set.
#[inline]
pub const fn header_barrier(header: u16) -> bool {
    field(
        header,
        HSA_PACKET_HEADER_BARRIER,
        HSA_PACKET_HEADER_WIDTH_BARRIER,
    ) != 0
}

/// The acquire fence scope (`HSA_FENCE_SCOPE_*`) of an AQL header.
#[inline]
pub const fn header_acquire_scope(header: u16) -> hsa_fence_scope_t {
    field(
        header,
        HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE,
        HSA_PACKET_HEADER_WIDTH_SCACQUIRE_FENCE_SCOPE,
    ) as hsa_fence_scope_t
}

/// The release fence scope (`HSA_FENCE_SCOPE_*`) of an AQL header.
#[inline]
pub const fn header_release_scope(header: u16) -> hsa_fence_scope_t {
    field(
        header,
        HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE,
        HSA_PACKET_HEADER_WIDTH_SCRELEASE_FENCE_SCOPE,
    ) as hsa_fence_scope_t
}

/// Builds an AQL header from its parts. Values wider than their field are truncated to the field width.
#[inline]
pub const fn make_header(
    packet_type: hsa_packet_type_t,
    barrier: bool,
    acquire: hsa_fence_scope_t,
    release: hsa_fence_scope_t,
) -> u16 {
    #[inline]
    const fn put(value: u32, position: u32, width: u32) -> u16 {
        ((value & ((1u32 << width) - 1)) << position) as u16
    }
    put(
        packet_type,
        HSA_PACKET_HEADER_TYPE,
        HSA_PACKET_HEADER_WIDTH_TYPE,
    ) | put(
        barrier as u32,
        HSA_PACKET_HEADER_BARRIER,
        HSA_PACKET_HEADER_WIDTH_BARRIER,
    ) | put(
        acquire,
        HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE,
        HSA_PACKET_HEADER_WIDTH_SCACQUIRE_FENCE_SCOPE,
    ) | put(
        release,
        HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE,
        HSA_PACKET_HEADER_WIDTH_SCRELEASE_FENCE_SCOPE,
    )
}

/// Number of grid dimensions (1..=3) in a kernel dispatch packet's `setup` field.
#[inline]
pub const fn dispatch_dimensions(setup: u16) -> u16 {
    field(
        setup,
        HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS,
        HSA_KERNEL_DISPATCH_PACKET_SETUP_WIDTH_DIMENSIONS,
    )
}

/// One AQL packet, copied out of (or into) a queue ring.
///
/// `repr(C)` with byte alignment, so a pointer to any run of packets in a ring can be viewed as `&[RawPacket]`.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RawPacket {
    /// The packet bytes in memory order.
    pub bytes: [u8; PACKET_BYTES],
}

impl core::fmt::Debug for RawPacket {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
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

    #[inline]
    fn u16_at(&self, off: usize) -> u16 {
        u16::from_le_bytes([self.bytes[off], self.bytes[off + 1]])
    }
    #[inline]
    fn u32_at(&self, off: usize) -> u32 {
        let mut b = [0u8; 4];
        b.copy_from_slice(&self.bytes[off..off + 4]);
        u32::from_le_bytes(b)
    }
    #[inline]
    fn u64_at(&self, off: usize) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.bytes[off..off + 8]);
        u64::from_le_bytes(b)
    }
    #[inline]
    fn set_u16(&mut self, off: usize, v: u16) {
        self.bytes[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }
    #[inline]
    fn set_u64(&mut self, off: usize, v: u64) {
        self.bytes[off..off + 8].copy_from_slice(&v.to_le_bytes());
    }

    /// A packet whose only non-zero field is `header`.
    #[inline]
    pub fn with_header(header: u16) -> RawPacket {
        let mut p = RawPacket::ZERO;
        p.set_header(header);
        p
    }

    /// The 16-bit header.
    #[inline]
    pub fn header(&self) -> u16 {
        self.u16_at(0)
    }

    /// Replaces the 16-bit header.
    #[inline]
    pub fn set_header(&mut self, header: u16) {
        self.set_u16(0, header);
    }

    /// The packet type field of the header (`hsa_packet_type_t`).
    #[inline]
    pub fn packet_type(&self) -> hsa_packet_type_t {
        header_packet_type(self.header())
    }

    /// Whether this is a kernel dispatch packet.
    #[inline]
    pub fn is_kernel_dispatch(&self) -> bool {
        self.packet_type() == HSA_PACKET_TYPE_KERNEL_DISPATCH
    }

    /// The AMD format byte of a vendor-specific packet (meaningless for other types).
    #[inline]
    pub fn vendor_format(&self) -> u8 {
        self.bytes[VENDOR_FORMAT_OFFSET]
    }

    /// Whether this is ROCr's intercept marker (a vendor-specific packet of format
    /// [`AMD_AQL_FORMAT_INTERCEPT_MARKER`]): it never reaches the device, and must stay immediately before the
    /// packet it marks.
    #[inline]
    pub fn is_intercept_marker(&self) -> bool {
        self.packet_type() == HSA_PACKET_TYPE_VENDOR_SPECIFIC
            && self.vendor_format() == AMD_AQL_FORMAT_INTERCEPT_MARKER
    }

    /// An intercept marker whose first `user_data` word is `tag` (for tests and simulated rewriters; the callback
    /// pointer is null).
    #[inline]
    pub fn intercept_marker(tag: u64) -> RawPacket {
        let mut p = RawPacket::with_header(make_header(
            HSA_PACKET_TYPE_VENDOR_SPECIFIC,
            true,
            HSA_FENCE_SCOPE_NONE,
            HSA_FENCE_SCOPE_NONE,
        ));
        p.bytes[VENDOR_FORMAT_OFFSET] = AMD_AQL_FORMAT_INTERCEPT_MARKER;
        p.set_u64(OFF_MARKER_CALLBACK + 8, tag);
        p
    }

    /// An intercept marker whose callback is the function at address `callback` (an
    /// `amd_intercept_marker_handler`) and whose first `user_data` word is `user_data`.
    #[inline]
    pub fn intercept_marker_with_callback(callback: u64, user_data: u64) -> RawPacket {
        let mut p = RawPacket::intercept_marker(user_data);
        p.set_u64(OFF_MARKER_CALLBACK, callback);
        p
    }

    /// The barrier bit.
    #[inline]
    pub fn barrier_bit(&self) -> bool {
        header_barrier(self.header())
    }

    /// Release fence scope (`hsa_fence_scope_t`).
    #[inline]
    pub fn release_fence_scope(&self) -> hsa_fence_scope_t {
        header_release_scope(self.header())
    }

    /// The completion signal handle (0 = none). Same offset in every packet type the HSA specification defines.
    #[inline]
    pub fn completion_signal(&self) -> u64 {
        self.u64_at(COMPLETION_SIGNAL_OFFSET)
    }

    /// Replaces the completion signal handle.
    #[inline]
    pub fn set_completion_signal(&mut self, handle: u64) {
        self.set_u64(COMPLETION_SIGNAL_OFFSET, handle);
    }

    /// Kernel dispatch: work-group size (x, y, z).
    #[inline]
    pub fn workgroup_size(&self) -> [u16; 3] {
        [
            self.u16_at(OFF_WORKGROUP),
            self.u16_at(OFF_WORKGROUP + 2),
            self.u16_at(OFF_WORKGROUP + 4),
        ]
    }

    /// Kernel dispatch: grid size (x, y, z).
    #[inline]
    pub fn grid_size(&self) -> [u32; 3] {
        [
            self.u32_at(OFF_GRID),
            self.u32_at(OFF_GRID + 4),
            self.u32_at(OFF_GRID + 8),
        ]
    }

    /// Kernel dispatch: private segment bytes per work-item.
    #[inline]
    pub fn private_segment_size(&self) -> u32 {
        self.u32_at(OFF_PRIVATE_SEGMENT)
    }

    /// Kernel dispatch: group segment bytes per work-group.
    #[inline]
    pub fn group_segment_size(&self) -> u32 {
        self.u32_at(OFF_GROUP_SEGMENT)
    }

    /// Kernel dispatch: address of the kernel descriptor.
    #[inline]
    pub fn kernel_object(&self) -> u64 {
        self.u64_at(OFF_KERNEL_OBJECT)
    }

    /// A BARRIER_AND packet with the barrier bit set, no dependencies, that completes `signal` once every earlier
    /// packet of the queue has completed. Acquires nothing; releases at `release_scope`.
    #[inline]
    pub fn forwarding_barrier(signal: u64, release_scope: hsa_fence_scope_t) -> RawPacket {
        let mut p = RawPacket::with_header(make_header(
            HSA_PACKET_TYPE_BARRIER_AND,
            true,
            HSA_FENCE_SCOPE_NONE,
            release_scope,
        ));
        p.set_completion_signal(signal);
        p
    }

    /// A BARRIER_AND packet without the barrier bit that waits until `dependency` is 0 and completes nothing: the
    /// queue stalls on it until the host opens the gate.
    #[inline]
    pub fn gate_barrier(dependency: u64) -> RawPacket {
        let mut p = RawPacket::with_header(make_header(
            HSA_PACKET_TYPE_BARRIER_AND,
            false,
            HSA_FENCE_SCOPE_NONE,
            HSA_FENCE_SCOPE_NONE,
        ));
        p.set_u64(OFF_BARRIER_DEP_SIGNAL, dependency);
        p
    }

    /// BARRIER_AND / BARRIER_OR: dependency signal `i` (0..5).
    #[inline]
    pub fn dep_signal(&self, i: usize) -> u64 {
        self.u64_at(OFF_BARRIER_DEP_SIGNAL + 8 * i)
    }
}

// The layout this module relies on, pinned against the generated structs.
const _: () = {
    assert!(size_of::<RawPacket>() == PACKET_BYTES);
    assert!(size_of::<hsa_kernel_dispatch_packet_t>() == PACKET_BYTES);
    assert!(size_of::<hsa_sys::hsa_agent_dispatch_packet_t>() == PACKET_BYTES);
    assert!(size_of::<hsa_barrier_and_packet_t>() == PACKET_BYTES);
    assert!(size_of::<hsa_sys::hsa_barrier_or_packet_t>() == PACKET_BYTES);
    assert!(size_of::<hsa_amd_barrier_value_packet_t>() == PACKET_BYTES);
    assert!(
        offset_of!(hsa_kernel_dispatch_packet_t, completion_signal) == COMPLETION_SIGNAL_OFFSET
    );
    assert!(offset_of!(hsa_barrier_and_packet_t, completion_signal) == COMPLETION_SIGNAL_OFFSET);
    assert!(
        offset_of!(hsa_sys::hsa_barrier_or_packet_t, completion_signal) == COMPLETION_SIGNAL_OFFSET
    );
    assert!(
        offset_of!(hsa_sys::hsa_agent_dispatch_packet_t, completion_signal)
            == COMPLETION_SIGNAL_OFFSET
    );
    assert!(
        offset_of!(hsa_amd_barrier_value_packet_t, completion_signal) == COMPLETION_SIGNAL_OFFSET
    );
    assert!(offset_of!(hsa_sys::hsa_amd_packet_header_s, AmdFormat) == VENDOR_FORMAT_OFFSET);
};

#[cfg(test)]
mod tests {
    use super::*;
    use hsa_sys::{
        HSA_FENCE_SCOPE_AGENT, HSA_FENCE_SCOPE_SYSTEM, HSA_PACKET_HEADER_RELEASE_FENCE_SCOPE,
    };

    #[test]
    fn header_round_trips_and_matches_the_aql_bit_layout() {
        // type 2 in bits 0..8, barrier bit 8, acquire scope 2 in bits 9..11, release scope 2 in bits 11..13.
        let header = make_header(
            HSA_PACKET_TYPE_KERNEL_DISPATCH,
            true,
            HSA_FENCE_SCOPE_SYSTEM,
            HSA_FENCE_SCOPE_SYSTEM,
        );
        assert_eq!(header, 0x1502);
        assert_eq!(header_packet_type(header), HSA_PACKET_TYPE_KERNEL_DISPATCH);
        assert!(header_barrier(header));
        assert_eq!(header_acquire_scope(header), HSA_FENCE_SCOPE_SYSTEM);
        assert_eq!(header_release_scope(header), HSA_FENCE_SCOPE_SYSTEM);

        let header = make_header(
            HSA_PACKET_TYPE_BARRIER_AND,
            false,
            HSA_FENCE_SCOPE_AGENT,
            HSA_FENCE_SCOPE_NONE,
        );
        assert_eq!(header, 0x0203);
        assert!(!header_barrier(header));
        assert_eq!(header_acquire_scope(header), HSA_FENCE_SCOPE_AGENT);
        assert_eq!(header_release_scope(header), HSA_FENCE_SCOPE_NONE);
        assert_eq!(
            header_packet_type(make_header(HSA_PACKET_TYPE_VENDOR_SPECIFIC, false, 0, 0)),
            0
        );
    }

    #[test]
    fn dispatch_dimensions_reads_the_low_bits_of_setup() {
        assert_eq!(dispatch_dimensions(3), 3);
        assert_eq!(dispatch_dimensions(0xfffd), 1);
    }

    #[test]
    fn vendor_format_byte_is_where_the_amd_header_puts_it() {
        assert_eq!(
            offset_of!(hsa_sys::hsa_amd_packet_header_s, AmdFormat),
            VENDOR_FORMAT_OFFSET
        );
        assert_eq!(VENDOR_FORMAT_BARRIER_VALUE, 2);
    }

    #[test]
    fn offsets_match_the_runtime_headers() {
        type K = hsa_kernel_dispatch_packet_t;
        assert_eq!(size_of::<K>(), PACKET_BYTES);
        assert_eq!(size_of::<hsa_barrier_and_packet_t>(), PACKET_BYTES);
        assert_eq!(OFF_WORKGROUP, 4);
        assert_eq!(OFF_GRID, 12);
        assert_eq!(OFF_PRIVATE_SEGMENT, 24);
        assert_eq!(OFF_GROUP_SEGMENT, 28);
        assert_eq!(OFF_KERNEL_OBJECT, 32);
        assert_eq!(offset_of!(K, completion_signal), COMPLETION_SIGNAL_OFFSET);
        assert_eq!(COMPLETION_SIGNAL_OFFSET, 56);
        assert_eq!(OFF_BARRIER_DEP_SIGNAL, 8);
        assert_eq!(
            offset_of!(hsa_barrier_and_packet_t, completion_signal),
            COMPLETION_SIGNAL_OFFSET
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
        assert_eq!(m.packet_type(), HSA_PACKET_TYPE_VENDOR_SPECIFIC);
        // user_data[0] of amd_aql_intercept_marker_t (after header, format, reserved[5] and the 8-byte callback).
        assert_eq!(m.u64_at(16), 7);
        // Other vendor packets (PM4 IB is format 1) are not markers.
        let mut pm4 = m;
        pm4.bytes[VENDOR_FORMAT_OFFSET] = 1;
        assert!(!pm4.is_intercept_marker());
        assert!(!RawPacket::forwarding_barrier(0, 0).is_intercept_marker());
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
