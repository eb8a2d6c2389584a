//! [`TraceWriter`]: one packet at a time into a `BufWriter`.

use std::collections::HashMap;

use libdeflater::{CompressionLvl, Compressor};
use std::io::{self, BufWriter, Write};

use prost::Message;

use crate::protos::{
    clock_snapshot, trace_packet, track_descriptor, track_event, BuiltinClock, ClockSnapshot,
    CounterDescriptor, DebugAnnotationName, EventName, InternedData, InternedString,
    ProcessDescriptor, ThreadDescriptor, TracePacket, TrackDescriptor,
};
use crate::{ChildTracksOrdering, CounterUnit, SiblingMergeBehavior};

/// The `trusted_packet_sequence_id` of every packet a [`TraceWriter`] writes.
pub const SEQUENCE_ID: u32 = 1;

const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u32 = 2;

/// Tag byte of `Trace.packet` (field 1, length-delimited).
const TRACE_PACKET_TAG: u8 = 0x0a;

/// The sequence-scoped, incremental clock (`ClockSnapshot.Clock.is_incremental`)
/// that every timestamp is written in when [`WriterOptions::delta_timestamps`]
/// is on: ids 64..127 belong to the packet sequence that declares them, and
/// each packet's `timestamp` is the difference to the previous timestamp on
/// the sequence (trace_processor reads it as int64, so a step back is a
/// wrapped, 10-byte varint).
pub const DELTA_CLOCK_ID: u32 = 64;

/// Uncompressed bytes of packets collected into one `compressed_packets`
/// bundle when [`WriterOptions::compress`] is on. Small enough that
/// deflating one (~0.1 ms) fits between two looks at a signal by an app
/// thread that writes records while it waits (rprof's lending wait); 128
/// KiB bundles made traces ~8 % smaller but had to be deflated by the
/// writer thread, on a core the app or the device needed.
pub const COMPRESS_CHUNK_BYTES: usize = 32 * 1024;

/// The most a full bundle deflates to: its input plus deflate's worst case
/// (a few bytes per 64 KiB over the input).
const DEFLATED_BUNDLE_MAX: usize = COMPRESS_CHUNK_BYTES + 8192;

/// How a [`TraceWriter`] encodes packets. Both are on by default
/// ([`WriterOptions::default`]); trace_processor, the UI and
/// `pftrace_check.py` read either form, and [`crate::decode_trace`] turns
/// any of them back into plain packets with absolute timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterOptions {
    /// Timestamps as deltas on the sequence clock [`DELTA_CLOCK_ID`], made
    /// the default clock by a `TracePacketDefaults` in the first packet
    /// (2–4 bytes per timestamp instead of 9).
    pub delta_timestamps: bool,
    /// Packets collected into zlib-deflated `TracePacket.compressed_packets`
    /// bundles of [`COMPRESS_CHUNK_BYTES`] (fast level). A crash loses at
    /// most the bundle being filled.
    pub compress: bool,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            delta_timestamps: true,
            compress: true,
        }
    }
}

impl WriterOptions {
    /// Absolute timestamps, no compression: every packet readable on its own.
    pub fn plain() -> Self {
        WriterOptions {
            delta_timestamps: false,
            compress: false,
        }
    }
}

/// An interned event (slice / instant) name. Only valid for the writer that
/// returned it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventNameId(u64);

impl EventNameId {
    /// The iid written to the trace (≥ 1).
    pub fn iid(self) -> u64 {
        self.0
    }
}

/// An interned debug-annotation (argument) name. Only valid for the writer
/// that returned it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AnnotationNameId(u64);

impl AnnotationNameId {
    /// The iid written to the trace (≥ 1).
    pub fn iid(self) -> u64 {
        self.0
    }
}

/// An interned string value of an argument
/// ([`ArgValue::InternedString`]). Only valid for the writer that returned it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StringValueId(u64);

impl StringValueId {
    /// The iid written to the trace (≥ 1).
    pub fn iid(self) -> u64 {
        self.0
    }
}

/// The value of one [`Arg`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ArgValue<'a> {
    /// Unsigned integer.
    Uint(u64),
    /// Signed integer.
    Int(i64),
    /// Floating point.
    Double(f64),
    /// Boolean.
    Bool(bool),
    /// An address, shown in hex by the UI.
    Pointer(u64),
    /// Text, copied into every packet that carries it; for a value repeated
    /// on many events, [`ArgValue::InternedString`] is smaller.
    Str(&'a str),
    /// Text interned with [`TraceWriter::intern_string_value`]: written as
    /// `string_value_iid`, one or two varint bytes; no allocation.
    InternedString(StringValueId),
}

/// One argument (debug annotation) of an event; shown as `debug.<name>`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arg<'a> {
    /// Interned name.
    pub name: AnnotationNameId,
    /// Value.
    pub value: ArgValue<'a>,
}

/// Readings of the host clocks taken back to back, for a clock snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClockReadings {
    /// `CLOCK_BOOTTIME` ns: the clock of every timestamp in the trace.
    pub boottime_ns: u64,
    /// `CLOCK_MONOTONIC` ns.
    pub monotonic_ns: u64,
    /// `CLOCK_REALTIME` ns (wall clock).
    pub realtime_ns: u64,
}

/// A process track: the group that holds the process's thread tracks.
#[derive(Debug, Clone, Copy)]
pub struct ProcessTrack<'a> {
    /// Track uuid (trace-unique, not 0).
    pub uuid: u64,
    /// OS process id.
    pub pid: u32,
    /// Process name shown in the UI.
    pub name: &'a str,
    /// Command line (may be empty).
    pub cmdline: &'a [String],
    /// Timestamp of the descriptor packet: at or before the track's first event.
    pub timestamp_ns: u64,
}

/// A thread track inside a process.
#[derive(Debug, Clone, Copy)]
pub struct ThreadTrack<'a> {
    /// Track uuid (trace-unique, not 0).
    pub uuid: u64,
    /// OS process id.
    pub pid: u32,
    /// OS thread id.
    pub tid: u32,
    /// Thread name shown in the UI.
    pub name: &'a str,
    /// Timestamp of the descriptor packet: at or before the track's first event.
    pub timestamp_ns: u64,
}

/// A custom track (not tied to a process or thread), e.g. a GPU, a queue or
/// a lane. Nest them with `parent_uuid`.
#[derive(Debug, Clone, Copy)]
pub struct CustomTrack<'a> {
    /// Track uuid (trace-unique, not 0).
    pub uuid: u64,
    /// Parent track, if any.
    pub parent_uuid: Option<u64>,
    /// Name shown in the UI.
    pub name: &'a str,
    /// Optional longer description.
    pub description: Option<&'a str>,
    /// How this track's children are ordered.
    pub child_ordering: Option<ChildTracksOrdering>,
    /// Rank among siblings when the parent uses [`ChildTracksOrdering::Explicit`].
    pub sibling_order_rank: Option<i32>,
    /// How the UI merges this track with same-named siblings (default: by name).
    pub sibling_merge_behavior: Option<SiblingMergeBehavior>,
}

impl<'a> CustomTrack<'a> {
    /// A root custom track with just a uuid and a name.
    pub fn new(uuid: u64, name: &'a str) -> Self {
        CustomTrack {
            uuid,
            parent_uuid: None,
            name,
            description: None,
            child_ordering: None,
            sibling_order_rank: None,
            sibling_merge_behavior: None,
        }
    }
}

/// A counter track.
#[derive(Debug, Clone, Copy)]
pub struct CounterTrack<'a> {
    /// Track uuid (trace-unique, not 0).
    pub uuid: u64,
    /// Parent track, if any.
    pub parent_uuid: Option<u64>,
    /// Name shown in the UI.
    pub name: &'a str,
    /// Unit of the values.
    pub unit: Option<CounterUnit>,
}

/// A value on a counter track.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CounterValue {
    /// Integer value.
    Int(i64),
    /// Floating-point value.
    Double(f64),
}

/// A complete slice, written as a BEGIN/END pair by [`TraceWriter::write_slice`].
#[derive(Debug, Clone, Copy)]
pub struct Slice<'a> {
    /// Track the slice is on.
    pub track_uuid: u64,
    /// Begin timestamp (`CLOCK_BOOTTIME` ns).
    pub start_ns: u64,
    /// End timestamp (≥ `start_ns`).
    pub end_ns: u64,
    /// Interned name.
    pub name: EventNameId,
    /// Arguments, written on the BEGIN event.
    pub args: &'a [Arg<'a>],
    /// Flows that start (or continue) at this slice.
    pub flow_ids: &'a [u64],
    /// Flows that end at this slice.
    pub terminating_flow_ids: &'a [u64],
    /// `TrackEvent.correlation_id`, used by newer UIs to highlight related slices.
    pub correlation_id: Option<u64>,
}

impl Slice<'_> {
    /// A slice without args, flows or correlation id.
    pub fn new(track_uuid: u64, start_ns: u64, end_ns: u64, name: EventNameId) -> Self {
        Slice {
            track_uuid,
            start_ns,
            end_ns,
            name,
            args: &[],
            flow_ids: &[],
            terminating_flow_ids: &[],
            correlation_id: None,
        }
    }
}

/// Streaming `.pftrace` writer. See the crate docs.
///
/// Every write encodes one packet into a reused buffer and appends it to a
/// `BufWriter`; the only steady-state allocations are for names and string
/// values interned for the first time. Track events (slices, instants,
/// counters) are encoded directly into the buffer; descriptors and clock
/// snapshots go through the prost types.
#[derive(Debug)]
pub struct TraceWriter<W: Write> {
    out: BufWriter<W>,
    /// The current packet, framed, when packets are not compressed
    /// (compressed, packets are encoded straight into `chunk`).
    buf: Vec<u8>,
    /// Names interned since the last packet; attached to the next one.
    pending: InternedData,
    event_names: HashMap<String, u64>,
    annotation_names: HashMap<String, u64>,
    string_values: HashMap<String, u64>,
    first_packet: bool,
    packets: u64,
    bytes: u64,
    options: WriterOptions,
    /// Last timestamp written on the delta clock.
    last_ts: u64,
    /// Framed packets waiting to be compressed into one bundle.
    chunk: Vec<u8>,
    /// Deflated bundle being written.
    zbuf: Vec<u8>,
    /// The bundles' compressor (libdeflate, level 1), reused.
    deflate: Option<Deflater>,
}

impl<W: Write> TraceWriter<W> {
    /// A writer appending to `out` (wrapped in a 256 KiB `BufWriter`), with
    /// the default (compact) [`WriterOptions`].
    pub fn new(out: W) -> Self {
        Self::with_options(out, WriterOptions::default())
    }

    /// A writer appending to `out` with explicit encoding options.
    pub fn with_options(out: W, options: WriterOptions) -> Self {
        TraceWriter {
            out: BufWriter::with_capacity(256 * 1024, out),
            buf: Vec::with_capacity(256),
            pending: InternedData::default(),
            event_names: HashMap::new(),
            annotation_names: HashMap::new(),
            string_values: HashMap::new(),
            first_packet: true,
            packets: 0,
            bytes: 0,
            options,
            last_ts: 0,
            chunk: Vec::with_capacity(if options.compress {
                COMPRESS_CHUNK_BYTES + 4096
            } else {
                0
            }),
            zbuf: Vec::with_capacity(if options.compress {
                DEFLATED_BUNDLE_MAX
            } else {
                0
            }),
            deflate: options
                .compress
                .then(|| Deflater(Compressor::new(DEFLATE_LEVEL))),
        }
    }

    /// The encoding options.
    pub fn options(&self) -> WriterOptions {
        self.options
    }

    /// Packets written so far (counting those in the bundle being filled).
    pub fn packets_written(&self) -> u64 {
        self.packets
    }

    /// Bytes written so far (including framing; some may still be buffered).
    /// With compression, the uncompressed bytes of packets not yet bundled
    /// are included as they are.
    pub fn bytes_written(&self) -> u64 {
        self.bytes + self.chunk.len() as u64
    }

    /// Interns an event name; the definition goes into the next packet.
    pub fn intern_event_name(&mut self, name: &str) -> EventNameId {
        if let Some(&iid) = self.event_names.get(name) {
            return EventNameId(iid);
        }
        let iid = self.event_names.len() as u64 + 1;
        self.event_names.insert(name.to_owned(), iid);
        self.pending.event_names.push(EventName {
            iid: Some(iid),
            name: Some(name.to_owned()),
        });
        EventNameId(iid)
    }

    /// Interns an argument name; the definition goes into the next packet.
    pub fn intern_annotation_name(&mut self, name: &str) -> AnnotationNameId {
        if let Some(&iid) = self.annotation_names.get(name) {
            return AnnotationNameId(iid);
        }
        let iid = self.annotation_names.len() as u64 + 1;
        self.annotation_names.insert(name.to_owned(), iid);
        self.pending
            .debug_annotation_names
            .push(DebugAnnotationName {
                iid: Some(iid),
                name: Some(name.to_owned()),
            });
        AnnotationNameId(iid)
    }

    /// Interns a string argument value; the definition
    /// (`InternedData.debug_annotation_string_values`) goes into the next
    /// packet. Every distinct value is kept for the writer's lifetime, so
    /// callers bound how many distinct values they intern.
    pub fn intern_string_value(&mut self, value: &str) -> StringValueId {
        if let Some(&iid) = self.string_values.get(value) {
            return StringValueId(iid);
        }
        let iid = self.string_values.len() as u64 + 1;
        self.string_values.insert(value.to_owned(), iid);
        self.pending
            .debug_annotation_string_values
            .push(InternedString {
                iid: Some(iid),
                str: Some(value.as_bytes().to_vec()),
            });
        StringValueId(iid)
    }

    /// Number of distinct string values interned so far.
    pub fn string_values_interned(&self) -> usize {
        self.string_values.len()
    }

    /// Writes a clock snapshot (BOOTTIME primary, plus MONOTONIC and REALTIME).
    pub fn write_clock_snapshot(&mut self, clocks: &ClockReadings) -> io::Result<()> {
        let clock = |id: BuiltinClock, ts: u64| clock_snapshot::Clock {
            clock_id: Some(id as u32),
            timestamp: Some(ts),
            ..Default::default()
        };
        let mut all = vec![
            clock(BuiltinClock::Boottime, clocks.boottime_ns),
            clock(BuiltinClock::Monotonic, clocks.monotonic_ns),
            clock(BuiltinClock::Realtime, clocks.realtime_ns),
        ];
        let delta = self.options.delta_timestamps;
        let mut defaults = Vec::new();
        if delta {
            // The delta clock starts at the BOOTTIME reading, so converting
            // it to trace time is the identity.
            all.push(clock_snapshot::Clock {
                clock_id: Some(DELTA_CLOCK_ID),
                timestamp: Some(clocks.boottime_ns),
                is_incremental: Some(true),
                ..Default::default()
            });
            self.last_ts = clocks.boottime_ns;
            // TracePacketDefaults { timestamp_clock_id = DELTA_CLOCK_ID }, in
            // the packet that clears the incremental state (defaults are
            // part of it), so it applies to every later packet.
            let mut inner = Vec::new();
            wire::varint_field(
                &mut inner,
                field::TPD_TIMESTAMP_CLOCK_ID,
                u64::from(DELTA_CLOCK_ID),
            );
            wire::bytes_field(&mut defaults, field::TP_TRACE_PACKET_DEFAULTS, &inner);
        }
        let snapshot = ClockSnapshot {
            clocks: all,
            primary_trace_clock: Some(BuiltinClock::Boottime as i32),
        };
        let mut packet = TracePacket {
            // A snapshot's own timestamp is unused; with delta timestamps it
            // would be read on the delta clock, so it is left out.
            timestamp: (!delta).then_some(clocks.boottime_ns),
            data: Some(trace_packet::Data::ClockSnapshot(snapshot)),
            ..Default::default()
        };
        self.emit(&mut packet, false, &defaults)
    }

    /// Declares a process track.
    pub fn write_process_track(&mut self, track: &ProcessTrack<'_>) -> io::Result<()> {
        let desc = TrackDescriptor {
            uuid: Some(track.uuid),
            process: Some(ProcessDescriptor {
                pid: Some(track.pid as i32),
                cmdline: track.cmdline.to_vec(),
                process_name: Some(track.name.to_owned()),
            }),
            ..Default::default()
        };
        self.write_descriptor(Some(track.timestamp_ns), desc)
    }

    /// Declares a thread track.
    pub fn write_thread_track(&mut self, track: &ThreadTrack<'_>) -> io::Result<()> {
        let desc = TrackDescriptor {
            uuid: Some(track.uuid),
            thread: Some(ThreadDescriptor {
                pid: Some(track.pid as i32),
                tid: Some(i64::from(track.tid)),
                thread_name: Some(track.name.to_owned()),
            }),
            ..Default::default()
        };
        self.write_descriptor(Some(track.timestamp_ns), desc)
    }

    /// Declares a custom track.
    pub fn write_custom_track(&mut self, track: &CustomTrack<'_>) -> io::Result<()> {
        let desc = TrackDescriptor {
            uuid: Some(track.uuid),
            parent_uuid: track.parent_uuid,
            static_or_dynamic_name: Some(track_descriptor::StaticOrDynamicName::Name(
                track.name.to_owned(),
            )),
            description: track.description.map(str::to_owned),
            child_ordering: track.child_ordering.map(|o| o as i32),
            sibling_order_rank: track.sibling_order_rank,
            sibling_merge_behavior: track.sibling_merge_behavior.map(|b| b as i32),
            ..Default::default()
        };
        self.write_descriptor(None, desc)
    }

    /// Declares a counter track.
    pub fn write_counter_track(&mut self, track: &CounterTrack<'_>) -> io::Result<()> {
        let desc = TrackDescriptor {
            uuid: Some(track.uuid),
            parent_uuid: track.parent_uuid,
            static_or_dynamic_name: Some(track_descriptor::StaticOrDynamicName::Name(
                track.name.to_owned(),
            )),
            counter: Some(CounterDescriptor {
                unit: track.unit.map(|u| u as i32),
                ..Default::default()
            }),
            ..Default::default()
        };
        self.write_descriptor(None, desc)
    }

    fn write_descriptor(
        &mut self,
        timestamp: Option<u64>,
        desc: TrackDescriptor,
    ) -> io::Result<()> {
        let mut packet = TracePacket {
            timestamp,
            data: Some(trace_packet::Data::TrackDescriptor(desc)),
            ..Default::default()
        };
        self.emit(&mut packet, false, &[])
    }

    /// Writes a complete slice: a BEGIN (with name, args and flows) followed
    /// by a bare END on the same track.
    pub fn write_slice(&mut self, slice: &Slice<'_>) -> io::Result<()> {
        self.write_slice_begin(slice)?;
        self.write_slice_end(slice.track_uuid, slice.end_ns)
    }

    /// Writes only the BEGIN of `slice` (`end_ns` is ignored). Pair it with
    /// [`TraceWriter::write_slice_end`] on the same track.
    pub fn write_slice_begin(&mut self, slice: &Slice<'_>) -> io::Result<()> {
        self.write_event(
            slice.start_ns,
            &Event {
                kind: track_event::Type::SliceBegin,
                track_uuid: slice.track_uuid,
                name: Some(slice.name),
                args: slice.args,
                flow_ids: slice.flow_ids,
                terminating_flow_ids: slice.terminating_flow_ids,
                correlation_id: slice.correlation_id,
                counter: None,
            },
        )
    }

    /// Writes a bare END closing the innermost open slice on `track_uuid`.
    pub fn write_slice_end(&mut self, track_uuid: u64, ts_ns: u64) -> io::Result<()> {
        self.write_event(ts_ns, &Event::bare(track_event::Type::SliceEnd, track_uuid))
    }

    /// Writes an instant event.
    pub fn write_instant(
        &mut self,
        track_uuid: u64,
        ts_ns: u64,
        name: EventNameId,
        args: &[Arg<'_>],
    ) -> io::Result<()> {
        self.write_event(
            ts_ns,
            &Event {
                name: Some(name),
                args,
                ..Event::bare(track_event::Type::Instant, track_uuid)
            },
        )
    }

    /// Writes one value on a counter track.
    pub fn write_counter(
        &mut self,
        track_uuid: u64,
        ts_ns: u64,
        value: CounterValue,
    ) -> io::Result<()> {
        self.write_event(
            ts_ns,
            &Event {
                counter: Some(value),
                ..Event::bare(track_event::Type::Counter, track_uuid)
            },
        )
    }

    /// Flushes and returns the underlying writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.flush_chunk()?;
        self.out.into_inner().map_err(|e| e.into_error())
    }

    /// How many more bytes of packets the writer takes before it writes to
    /// the underlying writer: compressed, the room left in the bundle being
    /// filled plus a whole bundle for each further deflated bundle the
    /// buffer behind it still holds at the worst (0 once it cannot hold
    /// one: bundles are deflated into that buffer, so filling them costs
    /// CPU but no I/O); plain, the room in the buffer. A caller that must
    /// never block on I/O writes only while this is large.
    pub fn spare_room(&self) -> usize {
        let buffered = self.out.capacity() - self.out.buffer().len();
        if !self.options.compress {
            return buffered;
        }
        // A deflated bundle, framed: a few header bytes more.
        let bundle = DEFLATED_BUNDLE_MAX + 32;
        if buffered < bundle {
            return 0;
        }
        COMPRESS_CHUNK_BYTES.saturating_sub(self.chunk.len())
            + COMPRESS_CHUNK_BYTES * ((buffered - bundle) / bundle)
    }

    /// Writes what the buffer holds (deflated bundles; plain, whole
    /// packets) to the underlying writer, leaving the bundle being filled
    /// open: [`TraceWriter::spare_room`] is then as large as it gets
    /// without closing that bundle early (a smaller, less compressed one).
    pub fn write_out(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Flushes buffered packets to the underlying writer (with compression,
    /// closes the bundle being filled).
    pub fn flush(&mut self) -> io::Result<()> {
        self.flush_chunk()?;
        self.out.flush()
    }

    /// The timestamp field's value for `ts_ns`: the delta to the previous
    /// timestamp on the delta clock, or `ts_ns` itself.
    fn encode_ts(&mut self, ts_ns: u64) -> u64 {
        if self.options.delta_timestamps {
            let d = ts_ns.wrapping_sub(self.last_ts);
            self.last_ts = ts_ns;
            d
        } else {
            ts_ns
        }
    }

    /// Deflates the pending packets into one `TracePacket { compressed_packets }`.
    fn flush_chunk(&mut self) -> io::Result<()> {
        let Some(Deflater(z)) = self.deflate.as_mut() else {
            return Ok(());
        };
        if self.chunk.is_empty() {
            return Ok(());
        }
        // One whole-buffer zlib stream per bundle (what compressed_packets
        // holds): no streaming state to reset between bundles.
        let bound = z.zlib_compress_bound(self.chunk.len());
        if self.zbuf.len() < bound {
            self.zbuf.resize(bound, 0);
        }
        let n = z
            .zlib_compress(&self.chunk, &mut self.zbuf)
            .map_err(|e| io::Error::other(format!("deflate: {e:?}")))?;
        let zbuf = &self.zbuf[..n];
        let mut inner = [0u8; 2 + wire::MAX_VARINT];
        let mut n = wire::put_key(&mut inner, field::TP_COMPRESSED_PACKETS, wire::LEN);
        n += wire::put_varint(&mut inner[n..], zbuf.len() as u64);
        let mut header = [0u8; 1 + wire::MAX_VARINT];
        header[0] = TRACE_PACKET_TAG;
        let h = 1 + wire::put_varint(&mut header[1..], (n + zbuf.len()) as u64);
        self.out.write_all(&header[..h])?;
        self.out.write_all(&inner[..n])?;
        self.out.write_all(zbuf)?;
        self.bytes += (h + n + zbuf.len()) as u64;
        self.chunk.clear();
        Ok(())
    }

    /// Sequence flags for the next packet, and whether pending interned
    /// data goes into it.
    /// `timestamped`: the packet carries a timestamp (on the default delta
    /// clock, which is incremental state).
    fn next_flags_for(&mut self, uses_interning: bool, timestamped: bool) -> (Option<u32>, bool) {
        let has_interned = !self.pending.event_names.is_empty()
            || !self.pending.debug_annotation_names.is_empty()
            || !self.pending.debug_annotation_string_values.is_empty();
        let mut flags = 0;
        if self.first_packet {
            flags |= SEQ_INCREMENTAL_STATE_CLEARED | SEQ_NEEDS_INCREMENTAL_STATE;
            self.first_packet = false;
        }
        if uses_interning || has_interned || (timestamped && self.options.delta_timestamps) {
            flags |= SEQ_NEEDS_INCREMENTAL_STATE;
        }
        ((flags != 0).then_some(flags), has_interned)
    }

    /// Empties the pending interned data once written, keeping the vectors'
    /// capacity for the next batch of new names.
    fn clear_pending(&mut self) {
        self.pending.event_names.clear();
        self.pending.debug_annotation_names.clear();
        self.pending.debug_annotation_string_values.clear();
    }

    /// Encodes a track-event packet directly (the hot path: no intermediate
    /// prost structs), frames it and writes it. The bytes are what prost
    /// writes for the same `TracePacket`, up to field order
    /// (`tests/writer.rs` compares decoded packets and encoded lengths).
    fn write_event(&mut self, ts_ns: u64, ev: &Event<'_>) -> io::Result<()> {
        // Interned names (event and argument) and interned string values.
        let uses_interning = ev.name.is_some() || !ev.args.is_empty();
        let (flags, has_interned) = self.next_flags_for(uses_interning, true);
        // Written as it arrives: records reach the writer in a few
        // ascending runs (calls in call order, kernels in completion order),
        // so a delta is negative (a wrapped 10-byte varint, read back
        // exactly) only where one run gives way to an earlier one: rarely.
        // docs/trace-format.md, "Arrival order", has what the reorder
        // window this replaced bought and cost.
        let ts_field = self.encode_ts(ts_ns);
        let delta = self.options.delta_timestamps;

        // Encoded in place, each nested message's length filled in at its
        // end: no copy of the event into the packet, nor of the packet into
        // the bundle.
        let out = packet_buffer(self.options.compress, &mut self.chunk, &mut self.buf);
        let packet = wire::begin_packet(out);
        if !delta {
            wire::varint_field(out, field::TP_TIMESTAMP, ts_field);
        }
        wire::key(out, field::TP_TRACK_EVENT, wire::LEN);
        let event = wire::begin_len(out);
        wire::varint_field(out, field::TE_TYPE, ev.kind as u64);
        wire::varint_field(out, field::TE_TRACK_UUID, ev.track_uuid);
        if let Some(name) = ev.name {
            wire::varint_field(out, field::TE_NAME_IID, name.0);
        }
        for arg in ev.args {
            wire::key(out, field::TE_DEBUG_ANNOTATIONS, wire::LEN);
            let annotation = wire::begin_len(out);
            wire::varint_field(out, field::DA_NAME_IID, arg.name.0);
            match arg.value {
                ArgValue::Uint(v) => wire::varint_field(out, field::DA_UINT_VALUE, v),
                // int64: two's complement as a 10-byte varint when negative.
                ArgValue::Int(v) => wire::varint_field(out, field::DA_INT_VALUE, v as u64),
                ArgValue::Double(v) => {
                    wire::fixed64_field(out, field::DA_DOUBLE_VALUE, v.to_bits())
                }
                ArgValue::Bool(v) => wire::varint_field(out, field::DA_BOOL_VALUE, u64::from(v)),
                ArgValue::Pointer(v) => wire::varint_field(out, field::DA_POINTER_VALUE, v),
                ArgValue::Str(v) => wire::bytes_field(out, field::DA_STRING_VALUE, v.as_bytes()),
                ArgValue::InternedString(id) => {
                    wire::varint_field(out, field::DA_STRING_VALUE_IID, id.0)
                }
            }
            wire::end_len(out, annotation);
        }
        match ev.counter {
            Some(CounterValue::Int(v)) => {
                wire::varint_field(out, field::TE_COUNTER_VALUE, v as u64)
            }
            Some(CounterValue::Double(v)) => {
                wire::fixed64_field(out, field::TE_DOUBLE_COUNTER_VALUE, v.to_bits())
            }
            None => {}
        }
        // One fixed64 field per id (unpacked), as upstream's proto2 declares.
        for &id in ev.flow_ids {
            wire::fixed64_field(out, field::TE_FLOW_IDS, id);
        }
        for &id in ev.terminating_flow_ids {
            wire::fixed64_field(out, field::TE_TERMINATING_FLOW_IDS, id);
        }
        if let Some(id) = ev.correlation_id {
            wire::varint_field(out, field::TE_CORRELATION_ID, id);
        }
        wire::end_len(out, event);
        wire::varint_field(
            out,
            field::TP_TRUSTED_PACKET_SEQUENCE_ID,
            u64::from(SEQUENCE_ID),
        );
        if has_interned {
            wire::key(out, field::TP_INTERNED_DATA, wire::LEN);
            self.pending
                .encode_length_delimited(out)
                .expect("encoding into a Vec cannot run out of space");
        }
        if let Some(flags) = flags {
            wire::varint_field(out, field::TP_SEQUENCE_FLAGS, u64::from(flags));
        }
        if delta {
            // The delta last: the fields before it repeat from packet to
            // packet, so deflate copies them in longer matches
            // (docs/trace-format.md, "Field order").
            wire::varint_field(out, field::TP_TIMESTAMP, ts_field);
        }
        wire::end_len(out, packet);
        if has_interned {
            self.clear_pending();
        }
        self.packet_written()
    }

    /// Adds sequence id, flags and pending interned names, then frames and
    /// writes a packet encoded by prost (descriptors, clock snapshots).
    /// `extra` is appended to the packet's fields as it is (hand-encoded
    /// fields the prost subset does not declare).
    fn emit(
        &mut self,
        packet: &mut TracePacket,
        uses_interning: bool,
        extra: &[u8],
    ) -> io::Result<()> {
        packet.trusted_packet_sequence_id = Some(SEQUENCE_ID);
        let (flags, has_interned) = self.next_flags_for(uses_interning, packet.timestamp.is_some());
        packet.sequence_flags = flags;
        if let Some(ts) = packet.timestamp {
            packet.timestamp = Some(self.encode_ts(ts));
        }
        if has_interned {
            packet.interned_data = Some(std::mem::take(&mut self.pending));
        }

        let out = packet_buffer(self.options.compress, &mut self.chunk, &mut self.buf);
        let start = wire::begin_packet(out);
        packet
            .encode(out)
            .expect("encoding into a Vec cannot run out of space");
        out.extend_from_slice(extra);
        wire::end_len(out, start);

        if let Some(interned) = packet.interned_data.take() {
            self.pending = interned;
            self.clear_pending();
        }
        self.packet_written()
    }

    /// Counts the packet just framed by [`wire::begin_packet`] into
    /// [`packet_buffer`], and moves it on: compressed, deflates the bundle
    /// once it is full; plain, writes the packet to the file.
    fn packet_written(&mut self) -> io::Result<()> {
        self.packets += 1;
        if self.options.compress {
            if self.chunk.len() >= COMPRESS_CHUNK_BYTES {
                self.flush_chunk()?;
            }
            return Ok(());
        }
        self.bytes += self.buf.len() as u64;
        self.out.write_all(&self.buf)
    }
}

/// Where the next packet is encoded: compressed, at the end of the bundle
/// being filled (`chunk`); plain, into the emptied packet buffer (`buf`),
/// which [`TraceWriter::packet_written`] then writes to the file.
fn packet_buffer<'a>(
    compress: bool,
    chunk: &'a mut Vec<u8>,
    buf: &'a mut Vec<u8>,
) -> &'a mut Vec<u8> {
    if compress {
        chunk
    } else {
        buf.clear();
        buf
    }
}

/// libdeflate's level for the bundles: 1, its fastest that compresses
/// (level 0 only stores).
const DEFLATE_LEVEL: CompressionLvl = match CompressionLvl::new(1) {
    Ok(l) => l,
    Err(_) => panic!("libdeflate has level 1"),
};

/// libdeflate's compressor, with a `Debug` that says what it is.
struct Deflater(Compressor);

impl std::fmt::Debug for Deflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Deflater(libdeflate, level 1)")
    }
}

/// The fields of one track event, borrowed from the caller.
#[derive(Debug, Clone, Copy)]
struct Event<'a> {
    kind: track_event::Type,
    track_uuid: u64,
    name: Option<EventNameId>,
    args: &'a [Arg<'a>],
    flow_ids: &'a [u64],
    terminating_flow_ids: &'a [u64],
    correlation_id: Option<u64>,
    counter: Option<CounterValue>,
}

impl Event<'_> {
    fn bare(kind: track_event::Type, track_uuid: u64) -> Self {
        Event {
            kind,
            track_uuid,
            name: None,
            args: &[],
            flow_ids: &[],
            terminating_flow_ids: &[],
            correlation_id: None,
            counter: None,
        }
    }
}

/// Upstream field numbers of what [`TraceWriter::write_event`] encodes by
/// hand: the same as in `proto/perfetto_subset.proto` (which
/// `scripts/check-perfetto-drift.sh` compares with upstream); `tests/writer.rs`
/// decodes every kind of event with the generated prost types. The fields
/// outside the subset (`compressed_packets`, the packet defaults) are named
/// here only, and the merger ([`crate::merge`]) takes them from here too.
pub(crate) mod field {
    pub const TP_TIMESTAMP: u32 = 8;
    pub const TP_TRUSTED_PACKET_SEQUENCE_ID: u32 = 10;
    pub const TP_TRACK_EVENT: u32 = 11;
    pub const TP_INTERNED_DATA: u32 = 12;
    pub const TP_SEQUENCE_FLAGS: u32 = 13;
    pub const TP_COMPRESSED_PACKETS: u32 = 50;
    pub const TP_TRACE_PACKET_DEFAULTS: u32 = 59;
    pub const TPD_TIMESTAMP_CLOCK_ID: u32 = 58;
    /// `TracePacketDefaults.track_event_defaults`.
    pub const TPD_TRACK_EVENT_DEFAULTS: u32 = 11;
    /// `TrackEventDefaults.track_uuid`.
    pub const TED_TRACK_UUID: u32 = 11;
    pub const TE_DEBUG_ANNOTATIONS: u32 = 4;
    pub const TE_TYPE: u32 = 9;
    pub const TE_NAME_IID: u32 = 10;
    pub const TE_TRACK_UUID: u32 = 11;
    pub const TE_COUNTER_VALUE: u32 = 30;
    pub const TE_DOUBLE_COUNTER_VALUE: u32 = 44;
    pub const TE_FLOW_IDS: u32 = 47;
    pub const TE_TERMINATING_FLOW_IDS: u32 = 48;
    pub const TE_CORRELATION_ID: u32 = 52;
    pub const DA_NAME_IID: u32 = 1;
    pub const DA_BOOL_VALUE: u32 = 2;
    pub const DA_UINT_VALUE: u32 = 3;
    pub const DA_INT_VALUE: u32 = 4;
    pub const DA_DOUBLE_VALUE: u32 = 5;
    pub const DA_STRING_VALUE: u32 = 6;
    pub const DA_POINTER_VALUE: u32 = 7;
    pub const DA_STRING_VALUE_IID: u32 = 17;
}

/// Minimal protobuf wire encoding into a `Vec` (its capacity is reused, so
/// nothing allocates once the buffers have grown).
mod wire {
    pub const MAX_VARINT: usize = 10;
    pub const VARINT: u32 = 0;
    const FIXED64: u32 = 1;
    pub const LEN: u32 = 2;

    /// Writes `v` as a varint at the start of `out`; returns its length.
    pub fn put_varint(out: &mut [u8], mut v: u64) -> usize {
        let mut i = 0;
        while v >= 0x80 {
            out[i] = (v as u8) | 0x80;
            v >>= 7;
            i += 1;
        }
        out[i] = v as u8;
        i + 1
    }

    /// Byte by byte: most varints here are one to three bytes (keys,
    /// delta timestamps, ids), where a push beats a copy from a stack
    /// buffer (a `memcpy` call per varint).
    #[inline(always)]
    fn varint(buf: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        buf.push(v as u8);
    }

    /// Starts a length-delimited value whose length is not known yet: a
    /// one-byte placeholder for the length (the messages nested here are
    /// mostly under 128 bytes). Returns where the value starts, for
    /// [`end_len`].
    #[inline(always)]
    pub fn begin_len(buf: &mut Vec<u8>) -> usize {
        buf.push(0);
        buf.len()
    }

    /// Starts a framed `TracePacket` (the `Trace.packet` key, then
    /// [`begin_len`]).
    #[inline(always)]
    pub fn begin_packet(buf: &mut Vec<u8>) -> usize {
        buf.push(super::TRACE_PACKET_TAG);
        begin_len(buf)
    }

    /// Ends the value [`begin_len`] started at `start`: writes its length
    /// into the placeholder, moving the value along when the length takes
    /// more than the one byte (the bytes are then what an encoder that knew
    /// the length beforehand writes).
    #[inline(always)]
    pub fn end_len(buf: &mut Vec<u8>, start: usize) {
        let len = buf.len() - start;
        if len < 0x80 {
            buf[start - 1] = len as u8;
        } else {
            widen_len(buf, start, len);
        }
    }

    /// [`end_len`] for a length of two bytes or more: the value moves along
    /// to make room for it.
    #[cold]
    fn widen_len(buf: &mut Vec<u8>, start: usize, len: usize) {
        let mut length = [0u8; MAX_VARINT];
        let n = put_varint(&mut length, len as u64);
        let end = buf.len();
        buf.resize(end + n - 1, 0);
        buf.copy_within(start..end, start + n - 1);
        buf[start - 1..start - 1 + n].copy_from_slice(&length[..n]);
    }

    /// Writes a field key at the start of `out`; returns its length.
    pub fn put_key(out: &mut [u8], field: u32, wire_type: u32) -> usize {
        put_varint(out, u64::from(field << 3 | wire_type))
    }

    #[inline]
    pub fn key(buf: &mut Vec<u8>, field: u32, wire_type: u32) {
        varint(buf, u64::from(field << 3 | wire_type));
    }

    #[inline]
    pub fn varint_field(buf: &mut Vec<u8>, field: u32, v: u64) {
        key(buf, field, VARINT);
        varint(buf, v);
    }

    #[inline]
    pub fn fixed64_field(buf: &mut Vec<u8>, field: u32, v: u64) {
        key(buf, field, FIXED64);
        buf.extend_from_slice(&v.to_le_bytes());
    }

    #[inline]
    pub fn bytes_field(buf: &mut Vec<u8>, field: u32, bytes: &[u8]) {
        key(buf, field, LEN);
        varint(buf, bytes.len() as u64);
        buf.extend_from_slice(bytes);
    }
}
