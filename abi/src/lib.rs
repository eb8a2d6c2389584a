//! What rprof's tracer and its emulated GPU both speak, written once.
//!
//! The tracer (`rprof-core`'s engine) reads the AQL packets an application submits and rewrites them; the
//! emulated GPU (`rprof-emu`'s command processor) executes the same packets from the same 64-byte slots. Both
//! need the same facts: where each field of a packet lives, how the 16-bit header packs its type, barrier bit and
//! fence scopes, which AMD vendor formats exist, and which host clock timestamps are taken on.
//!
//! How the pieces fit:
//! - [`packet`] holds the AQL layout knowledge: header field helpers as `const fn`s on the raw header
//!   ([`packet::header_packet_type`], [`packet::make_header`], ...), byte offsets inside a slot, the AMD vendor
//!   formats, and [`packet::RawPacket`], a packet as a plain 64-byte value with safe accessors and constructors
//!   for the barrier packets rprof writes. Bit positions and widths come from the generated enums of `hsa-sys`;
//!   byte offsets are checked against its generated structs (tests and `const` assertions).
//! - [`clock`] reads the host clocks. [`clock::boottime_ns`] is the one time base: ROCr translates GPU ticks
//!   into it, every rprof record uses it, and the emulated GPU's system clock is it. [`clock::fast_boottime_ns`]
//!   reads the same clock for the interceptor by the CPU's time-stamp counter, along a line that
//!   [`clock::calibrate_fast_clock`] keeps fitted.
//!
//! What this crate must not hold: generated bindings (they stay in `hsa-sys`, which this crate depends on for
//! the struct types and constants), policy (how rprof builds a batch, how the emulator schedules a queue), or
//! anything specific to one ROCr version.
#![deny(missing_docs)]

pub mod clock;
pub mod packet;
