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
//!   [`HSA_PACKET_TYPE_KERNEL_DISPATCH`]`: `[`hsa_packet_type_t`].
//! - [`hsakmt`] is generated from `hsakmttypes.h`: the types the emulated GPU (`emu/`) implements libhsakmt with.
//! - `packet` (coming next) is hand-written: AQL header bit helpers and AMD vendor packet constants.
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

pub use hsa::*;
