//! Hand-written AQL packet helpers (not generated).
//!
//! The bit positions and widths come from the generated enums (`HSA_PACKET_HEADER_*`,
//! `HSA_PACKET_HEADER_WIDTH_*`, `HSA_KERNEL_DISPATCH_PACKET_SETUP_*`); this module only combines them into the
//! few operations every packet reader and writer needs, as `const fn`s on the raw 16-bit header.

use crate::hsa::{
    hsa_fence_scope_t, hsa_packet_type_t, HSA_AMD_PACKET_TYPE_BARRIER_VALUE,
    HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS, HSA_KERNEL_DISPATCH_PACKET_SETUP_WIDTH_DIMENSIONS,
    HSA_PACKET_HEADER_BARRIER, HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE,
    HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE, HSA_PACKET_HEADER_TYPE,
    HSA_PACKET_HEADER_WIDTH_BARRIER, HSA_PACKET_HEADER_WIDTH_SCACQUIRE_FENCE_SCOPE,
    HSA_PACKET_HEADER_WIDTH_SCRELEASE_FENCE_SCOPE, HSA_PACKET_HEADER_WIDTH_TYPE,
};

/// Size in bytes of every AQL packet (a queue slot).
pub const AQL_PACKET_SIZE: usize = 64;

/// Byte offset, inside a vendor-specific packet, of the AMD format byte (`hsa_amd_packet_header_t::AmdFormat`).
pub const AMD_VENDOR_FORMAT_OFFSET: usize = 2;

/// AMD vendor packet format of the barrier-value packet ([`crate::hsa_amd_barrier_value_packet_t`]).
pub const AMD_VENDOR_FORMAT_BARRIER_VALUE: u8 = HSA_AMD_PACKET_TYPE_BARRIER_VALUE as u8;

const fn field(header: u16, position: u32, width: u32) -> u16 {
    (header >> position) & ((1u16 << width) - 1)
}

/// The packet type (`HSA_PACKET_TYPE_*`) stored in an AQL header.
pub const fn header_packet_type(header: u16) -> hsa_packet_type_t {
    field(header, HSA_PACKET_HEADER_TYPE, HSA_PACKET_HEADER_WIDTH_TYPE) as hsa_packet_type_t
}

/// Whether the barrier bit of an AQL header is set.
pub const fn header_barrier(header: u16) -> bool {
    field(
        header,
        HSA_PACKET_HEADER_BARRIER,
        HSA_PACKET_HEADER_WIDTH_BARRIER,
    ) != 0
}

/// The acquire fence scope (`HSA_FENCE_SCOPE_*`) of an AQL header.
pub const fn header_acquire_scope(header: u16) -> hsa_fence_scope_t {
    field(
        header,
        HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE,
        HSA_PACKET_HEADER_WIDTH_SCACQUIRE_FENCE_SCOPE,
    ) as hsa_fence_scope_t
}

/// The release fence scope (`HSA_FENCE_SCOPE_*`) of an AQL header.
pub const fn header_release_scope(header: u16) -> hsa_fence_scope_t {
    field(
        header,
        HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE,
        HSA_PACKET_HEADER_WIDTH_SCRELEASE_FENCE_SCOPE,
    ) as hsa_fence_scope_t
}

/// Builds an AQL header from its parts. Values wider than their field are truncated to the field width.
pub const fn make_header(
    packet_type: hsa_packet_type_t,
    barrier: bool,
    acquire: hsa_fence_scope_t,
    release: hsa_fence_scope_t,
) -> u16 {
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
pub const fn dispatch_dimensions(setup: u16) -> u16 {
    field(
        setup,
        HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS,
        HSA_KERNEL_DISPATCH_PACKET_SETUP_WIDTH_DIMENSIONS,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hsa::{
        HSA_FENCE_SCOPE_AGENT, HSA_FENCE_SCOPE_NONE, HSA_FENCE_SCOPE_SYSTEM,
        HSA_PACKET_TYPE_BARRIER_AND, HSA_PACKET_TYPE_KERNEL_DISPATCH,
        HSA_PACKET_TYPE_VENDOR_SPECIFIC,
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
            ::core::mem::offset_of!(crate::hsa::hsa_amd_packet_header_s, AmdFormat),
            AMD_VENDOR_FORMAT_OFFSET
        );
        assert_eq!(AMD_VENDOR_FORMAT_BARRIER_VALUE, 2);
    }
}
