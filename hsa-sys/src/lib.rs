//! Raw bindings to the ROCr 5.2.3 HSA runtime headers and the libhsakmt (thunk) types.
//!
//! This crate owns *layouts only*: the structs, unions, enums (as typed constants), `#define` constants and the
//! tool API tables that the rest of rprof shares with the HSA runtime. It has no safe wrappers and links nothing:
//! there are no `extern "C"` function declarations, so depending on it never pulls in `libhsa-runtime64` or
//! `libhsakmt`. Runtime entry points are reached through the tables the runtime hands to a tool
//! ([`HsaApiTable`], [`CoreApiTable`], [`AmdExtTable`], ...), whose fields are `Option<unsafe extern "C" fn(..)>`
//! with the header's signatures, in header order.
//!
//! How the pieces fit:
//! - [`hsa`] (re-exported at the crate root) is generated from `hsa.h`, `hsa_ext_amd.h`, `hsa_ven_amd_loader.h`,
//!   `amd_hsa_signal.h`, `amd_hsa_queue.h`, `amd_hsa_kernel_code.h` and `hsa_api_trace.h`. C enums become a
//!   `pub type NAME = c_uint` (or `c_int`) plus one `pub const` per enumerator with the C spelling, e.g.
//!   [`HSA_PACKET_TYPE_KERNEL_DISPATCH`]`: `[`hsa_packet_type_t`]. Every table entry `X_fn` also has a named
//!   function type `X_fn_t` (the field is `Option<X_fn_t>`), e.g. [`hsa_queue_create_fn_t`].
//! - [`hsakmt`] is generated from `hsakmttypes.h`: the types the emulated GPU (`emu/`) implements libhsakmt with.
//! - [`hsakmt_v6`] is generated, by the same generator, from the newer `hsakmttypes.h` of libhsakmt-dev 6.2.4 (the
//!   Debian trixie root that pairs it with ROCr 6.1.2). It is a superset with the same sizes: `HsaNodeProperties`
//!   names its former reserved tail (`NumXcc`, `KFDGpuID`, `FamilyID`, `Integrated`), `HsaMemFlags` names four
//!   more bits, `HsaEventData` gains `HwException`, and new types (`HsaAMDGPUDeviceHandle`, SMI, PC sampling) appear.
//!   The thunk front-end writes these layouts for ROCr 6.1.2; ROCr 5.2.3 ignores the formerly reserved bytes.
//! - AQL packet field helpers and offsets (hand-written knowledge built on these types) live in the
//!   `rprof-abi` crate (`abi/`), with the host clock; this crate stays generated bindings plus these pins.
//! - The `const` assertions at the bottom of this file pin the table entries and packet sizes that the tracer
//!   relies on; bindgen's own layout assertions pin everything else, and `tests/layout.rs` compares every
//!   struct, field and bitfield against the real headers compiled by a C++ compiler.
//!
//! Regenerate with `scripts/gen-hsa-sys.sh` (needs libclang 15 and the Debian `libhsa-runtime-dev` /
//! `libhsakmt-dev` headers); `scripts/check-hsa-sys-drift.sh` fails when the committed files differ from a fresh
//! generation.
#![no_std]
#![deny(missing_docs)]

/// HSA runtime API types, constants and tool API tables (generated; re-exported at the crate root).
#[allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    missing_docs,
    missing_debug_implementations,
    unsafe_op_in_unsafe_fn,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]
pub mod hsa;

/// libhsakmt (thunk) types from `hsakmttypes.h` (generated).
#[allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    missing_docs,
    missing_debug_implementations,
    unsafe_op_in_unsafe_fn,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]
pub mod hsakmt;

/// libhsakmt (thunk) types from the libhsakmt-dev 6.2.4 `hsakmttypes.h` (generated), for ROCr 6.1.2.
#[allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    missing_docs,
    missing_debug_implementations,
    unsafe_op_in_unsafe_fn,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]
pub mod hsakmt_v6;

pub use hsa::*;

use core::mem::{offset_of, size_of};

/// Size in bytes of [`ApiTableVersion`] (ROCr 5.2.3).
pub const API_TABLE_VERSION_SIZE_5_2_3: usize = 16;
/// Size in bytes of [`HsaApiTable`] as shipped by ROCr 5.2.3.
pub const HSA_API_TABLE_SIZE_5_2_3: usize = 48;
/// Size in bytes of [`CoreApiTable`] as shipped by ROCr 5.2.3 (125 entries).
pub const CORE_API_TABLE_SIZE_5_2_3: usize = 1016;
/// Size in bytes of [`AmdExtTable`] as shipped by ROCr 5.2.3 (48 entries).
pub const AMD_EXT_TABLE_SIZE_5_2_3: usize = 400;
/// Size in bytes of [`FinalizerExtTable`] as shipped by ROCr 5.2.3 (6 entries).
pub const FINALIZER_EXT_TABLE_SIZE_5_2_3: usize = 64;
/// Size in bytes of [`ImageExtTable`] as shipped by ROCr 5.2.3 (13 entries).
pub const IMAGE_EXT_TABLE_SIZE_5_2_3: usize = 120;

/// Whether a table whose header is `version` holds the 8-byte entry at `entry_offset`
/// (e.g. `offset_of!(CoreApiTable, hsa_init_fn)`).
///
/// ROCr fills `minor_id` of each table's [`ApiTableVersion`] with the size in bytes of the table it built, and
/// tables only grow at the end, so an entry exists exactly when it ends within that size. Newer runtimes pass
/// larger tables (entries beyond the 5.2.3 ones are simply not described here); an older or foreign runtime may pass
/// a smaller one, and a tool must not read or patch entries past its end.
pub const fn table_has_entry(version: &ApiTableVersion, entry_offset: usize) -> bool {
    entry_offset + size_of::<usize>() <= version.minor_id as usize
}

const _: () = {
    assert!(size_of::<ApiTableVersion>() == API_TABLE_VERSION_SIZE_5_2_3);
    assert!(size_of::<HsaApiTable>() == HSA_API_TABLE_SIZE_5_2_3);
    assert!(size_of::<CoreApiTable>() == CORE_API_TABLE_SIZE_5_2_3);
    assert!(size_of::<AmdExtTable>() == AMD_EXT_TABLE_SIZE_5_2_3);
    assert!(size_of::<FinalizerExtTable>() == FINALIZER_EXT_TABLE_SIZE_5_2_3);
    assert!(size_of::<ImageExtTable>() == IMAGE_EXT_TABLE_SIZE_5_2_3);

    // Every table starts with its version; HsaApiTable points at the others in this order.
    assert!(offset_of!(CoreApiTable, version) == 0);
    assert!(offset_of!(AmdExtTable, version) == 0);
    assert!(offset_of!(HsaApiTable, core_) == 16);
    assert!(offset_of!(HsaApiTable, amd_ext_) == 24);
    assert!(offset_of!(HsaApiTable, finalizer_ext_) == 32);
    assert!(offset_of!(HsaApiTable, image_ext_) == 40);

    // CoreApiTable entries the tracer hooks or calls.
    assert!(offset_of!(CoreApiTable, hsa_init_fn) == 16);
    assert!(offset_of!(CoreApiTable, hsa_shut_down_fn) == 24);
    assert!(offset_of!(CoreApiTable, hsa_queue_create_fn) == 72);
    assert!(offset_of!(CoreApiTable, hsa_queue_destroy_fn) == 88);
    assert!(offset_of!(CoreApiTable, hsa_signal_wait_relaxed_fn) == 360);
    assert!(offset_of!(CoreApiTable, hsa_signal_wait_scacquire_fn) == 368);
    assert!(offset_of!(CoreApiTable, hsa_executable_freeze_fn) == 704);
    assert!(offset_of!(CoreApiTable, hsa_executable_iterate_symbols_fn) == 768);
    assert!(offset_of!(CoreApiTable, hsa_code_object_reader_create_from_memory_fn) == 944);
    assert!(offset_of!(CoreApiTable, hsa_executable_load_agent_code_object_fn) == 976);
    assert!(offset_of!(CoreApiTable, hsa_executable_get_symbol_by_name_fn) == 992);
    assert!(offset_of!(CoreApiTable, hsa_executable_iterate_agent_symbols_fn) == 1000);
    assert!(offset_of!(CoreApiTable, hsa_executable_iterate_program_symbols_fn) == 1008);

    // AmdExtTable entries the tracer hooks or calls.
    assert!(offset_of!(AmdExtTable, hsa_amd_profiling_set_profiler_enabled_fn) == 32);
    assert!(offset_of!(AmdExtTable, hsa_amd_profiling_get_dispatch_time_fn) == 48);
    assert!(offset_of!(AmdExtTable, hsa_amd_signal_async_handler_fn) == 72);
    assert!(offset_of!(AmdExtTable, hsa_amd_signal_wait_any_fn) == 88);
    assert!(offset_of!(AmdExtTable, hsa_amd_signal_create_fn) == 264);
    assert!(offset_of!(AmdExtTable, hsa_amd_queue_intercept_create_fn) == 296);
    assert!(offset_of!(AmdExtTable, hsa_amd_queue_intercept_register_fn) == 304);

    // AQL packets are one 64-byte queue slot each (rprof-abi pins the fields it reads).
    assert!(size_of::<hsa_kernel_dispatch_packet_t>() == 64);
    assert!(size_of::<hsa_agent_dispatch_packet_t>() == 64);
    assert!(size_of::<hsa_barrier_and_packet_t>() == 64);
    assert!(size_of::<hsa_barrier_or_packet_t>() == 64);
    assert!(size_of::<hsa_amd_barrier_value_packet_t>() == 64);
    assert!(offset_of!(hsa_kernel_dispatch_packet_t, kernel_object) == 32);
    assert!(offset_of!(hsa_kernel_dispatch_packet_t, completion_signal) == 56);

    // The runtime's signal and queue objects.
    assert!(size_of::<amd_signal_t>() == 64);
    assert!(offset_of!(amd_signal_t, start_ts) == 32);
    assert!(offset_of!(amd_signal_t, end_ts) == 40);
    assert!(size_of::<amd_queue_t>() == 256);
    assert!(offset_of!(amd_queue_t, hsa_queue) == 0);
    assert!(offset_of!(amd_queue_t, queue_properties) == 180);
    assert!(size_of::<amd_kernel_code_t>() == 256);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_entry_respects_the_size_in_minor_id() {
        let version = ApiTableVersion {
            major_id: 1,
            minor_id: CORE_API_TABLE_SIZE_5_2_3 as u32,
            step_id: 0,
            reserved: 0,
        };
        let last = offset_of!(CoreApiTable, hsa_executable_iterate_program_symbols_fn);
        assert!(table_has_entry(
            &version,
            offset_of!(CoreApiTable, hsa_init_fn)
        ));
        assert!(table_has_entry(&version, last));
        assert!(!table_has_entry(&version, last + 8));
        let short = ApiTableVersion {
            minor_id: (last) as u32,
            ..version
        };
        assert!(!table_has_entry(&short, last));
        assert!(table_has_entry(&short, last - 8));
    }

    #[test]
    fn entry_aliases_are_the_field_payload_types() {
        let core = CoreApiTable::default();
        let amd = AmdExtTable::default();
        let queue_create: Option<hsa_queue_create_fn_t> = core.hsa_queue_create_fn;
        let wait: Option<hsa_signal_wait_scacquire_fn_t> = core.hsa_signal_wait_scacquire_fn;
        let intercept: Option<hsa_amd_queue_intercept_register_fn_t> =
            amd.hsa_amd_queue_intercept_register_fn;
        assert!(queue_create.is_none() && wait.is_none() && intercept.is_none());
    }

    #[test]
    fn enum_constants_keep_their_c_names_and_typedef_types() {
        let status: hsa_status_t = HSA_STATUS_SUCCESS;
        assert_eq!(status, 0);
        let kind: hsa_packet_type_t = HSA_PACKET_TYPE_KERNEL_DISPATCH;
        assert_eq!(kind, 2);
        let thunk: hsakmt::HSAKMT_STATUS = hsakmt::HSAKMT_STATUS_SUCCESS;
        assert_eq!(thunk, 0);
        assert_eq!(
            AMD_QUEUE_PROPERTIES_ENABLE_PROFILING,
            1 << AMD_QUEUE_PROPERTIES_ENABLE_PROFILING_SHIFT
        );
    }
}
