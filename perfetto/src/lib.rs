//! Streaming writer for Perfetto `.pftrace` files, and the merger of several.
//!
//! Owns the proto2 subset of the Perfetto schema, its encoding and the merge
//! of whole traces (`rprof merge`); it must
//! not know about GPUs, HSA or rprof's records (the mapping from records to
//! tracks lives in `rprof-core`'s Perfetto sink).
//!
//! A `.pftrace` file is the protobuf message `Trace { repeated TracePacket
//! packet = 1; }`, which on the wire is nothing but packets one after another.
//! [`TraceWriter`] therefore encodes one [`protos::TracePacket`] at a time
//! (`0x0a`, varint length, packet bytes) into a `BufWriter`: memory stays
//! bounded, a crash leaves a readable prefix, and there is no footer.
//! Descriptors and clock snapshots are encoded by prost; per-event packets
//! (the hot path) are encoded directly with the same field numbers,
//! straight into the compressed bundle being filled (plain traces: a reused
//! packet buffer), so steady-state writes allocate nothing.
//!
//! How the pieces fit together:
//!
//! * [`protos`] is prost code generated from our own proto2 subset of the
//!   Perfetto schema (`proto/perfetto_subset.proto`, upstream field numbers).
//!   The generated file is committed; `scripts/gen-perfetto-proto.sh`
//!   regenerates it, so normal builds need only `prost`.
//! * [`TraceWriter`] owns one packet sequence (`trusted_packet_sequence_id`
//!   1). Its first packet is flagged "incremental state cleared | needs
//!   incremental state", so interned names are valid from there on.
//! * Names are interned: [`TraceWriter::intern_event_name`] returns an
//!   [`EventNameId`] and [`TraceWriter::intern_annotation_name`] an
//!   [`AnnotationNameId`]; string argument values can be interned too
//!   ([`TraceWriter::intern_string_value`] returns a [`StringValueId`] for
//!   [`ArgValue::InternedString`]). A new name or value is written into the
//!   next packet, which is at or before the first packet that uses it.
//! * Tracks are declared once with [`TraceWriter::write_process_track`],
//!   [`TraceWriter::write_thread_track`], [`TraceWriter::write_custom_track`]
//!   or [`TraceWriter::write_counter_track`]; track uuids are chosen by the
//!   caller and must be unique in the trace.
//! * Events: [`TraceWriter::write_slice`] writes a complete slice as a
//!   BEGIN/END pair (with [`Arg`]s and flow ids), plus
//!   [`TraceWriter::write_instant`] and [`TraceWriter::write_counter`].
//!   trace_processor sorts events by timestamp, so slices on *different*
//!   tracks may be written in any order; slices on one track must nest.
//!
//! * [`merge`] (`rprof merge`) rewrites whole traces written elsewhere into
//!   one: sequences renumbered, track uuids salted and flow ids mapped per
//!   input, bundles inflated, every other byte copied. It takes its field
//!   numbers from [`protos`] and the writer's table of the fields outside
//!   the subset.
//!
//! Timestamps are `CLOCK_BOOTTIME` nanoseconds (Perfetto's default clock).
//! Write a [`ClockReadings`] snapshot first so the trace can be aligned with
//! wall-clock time and with other traces.
//!
//! Encoding ([`WriterOptions`], both on by default): timestamps are written
//! as deltas on the sequence-scoped incremental clock [`DELTA_CLOCK_ID`]
//! (declared in that snapshot and made the default by a
//! `TracePacketDefaults`); track events are written as they arrive, so a
//! delta is negative (a wrapped 10-byte varint) only for an event that
//! arrived after a later one; and packets are collected into zlib-deflated
//! `compressed_packets` bundles of [`COMPRESS_CHUNK_BYTES`]. Together they
//! make a trace about a sixth of the plain size. [`WriterOptions::plain`]
//! writes absolute timestamps without bundles; [`decode_trace`] reads either
//! back as plain prost packets with absolute timestamps.
//!
//! ```
//! use rprof_perfetto::{Arg, ArgValue, ClockReadings, CustomTrack, Slice, TraceWriter};
//!
//! let mut w = TraceWriter::new(Vec::new());
//! w.write_clock_snapshot(&ClockReadings { boottime_ns: 1_000, monotonic_ns: 900, realtime_ns: 5_000 })?;
//! w.write_custom_track(&CustomTrack::new(10, "GPU 0 (gfx90a)"))?;
//! let kernel = w.intern_event_name("vector_add");
//! let grid = w.intern_annotation_name("grid.x");
//! w.write_slice(&Slice {
//!     args: &[Arg { name: grid, value: ArgValue::Uint(1024) }],
//!     terminating_flow_ids: &[7],
//!     ..Slice::new(10, 2_000, 3_000, kernel)
//! })?;
//! let bytes = w.finish()?;
//! assert_eq!(bytes[0], 0x0a); // field 1 of `Trace`, length-delimited
//! # Ok::<(), std::io::Error>(())
//! ```
#![deny(missing_docs)]

/// prost types generated from `proto/perfetto_subset.proto` (package
/// `perfetto.protos`). Regenerate with `scripts/gen-perfetto-proto.sh`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod protos {
    include!("generated/perfetto.protos.rs");
}

pub mod merge;
mod read;
mod writer;

pub use read::{count_slices, decode_trace, SliceCounts};

/// The `prost` the [`protos`] types are built with: decode a trace with
/// `protos::Trace::decode` after `use rprof_perfetto::prost::Message`
/// (tests do) without depending on a matching `prost` yourself.
pub use prost;

/// Unit of a counter track.
pub use protos::counter_descriptor::Unit as CounterUnit;
/// How children of a custom track are ordered in the UI.
pub use protos::track_descriptor::ChildTracksOrdering;
/// How the UI merges sibling tracks.
pub use protos::track_descriptor::SiblingMergeBehavior;
pub use writer::{
    AnnotationNameId, Arg, ArgValue, ClockReadings, CounterTrack, CounterValue, CustomTrack,
    EventNameId, ProcessTrack, Slice, StringValueId, ThreadTrack, TraceWriter, WriterOptions,
    COMPRESS_CHUNK_BYTES, DELTA_CLOCK_ID, SEQUENCE_ID,
};
