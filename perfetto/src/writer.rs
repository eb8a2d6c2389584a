//! [`TraceWriter`]: one packet at a time into a `BufWriter`.

use std::collections::HashMap;
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
    /// The current packet: framed for prost-encoded packets, the bare
    /// packet for track events (framed on write).
    buf: Vec<u8>,
    /// Encoded `TrackEvent` of the current event packet.
    event_buf: Vec<u8>,
    /// Encoded `DebugAnnotation` being appended to `event_buf`.
    arg_buf: Vec<u8>,
    /// Names interned since the last packet; attached to the next one.
    pending: InternedData,
    event_names: HashMap<String, u64>,
    annotation_names: HashMap<String, u64>,
    string_values: HashMap<String, u64>,
    first_packet: bool,
    packets: u64,
    bytes: u64,
}

impl<W: Write> TraceWriter<W> {
    /// A writer appending to `out` (wrapped in a 256 KiB `BufWriter`).
    pub fn new(out: W) -> Self {
        TraceWriter {
            out: BufWriter::with_capacity(256 * 1024, out),
            buf: Vec::with_capacity(256),
            event_buf: Vec::with_capacity(256),
            arg_buf: Vec::with_capacity(64),
            pending: InternedData::default(),
            event_names: HashMap::new(),
            annotation_names: HashMap::new(),
            string_values: HashMap::new(),
            first_packet: true,
            packets: 0,
            bytes: 0,
        }
    }

    /// Packets written so far.
    pub fn packets_written(&self) -> u64 {
        self.packets
    }

    /// Bytes written so far (including framing; some may still be buffered).
    pub fn bytes_written(&self) -> u64 {
        self.bytes
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
        let snapshot = ClockSnapshot {
            clocks: vec![
                clock(BuiltinClock::Boottime, clocks.boottime_ns),
                clock(BuiltinClock::Monotonic, clocks.monotonic_ns),
                clock(BuiltinClock::Realtime, clocks.realtime_ns),
            ],
            primary_trace_clock: Some(BuiltinClock::Boottime as i32),
        };
        let mut packet = TracePacket {
            timestamp: Some(clocks.boottime_ns),
            data: Some(trace_packet::Data::ClockSnapshot(snapshot)),
            ..Default::default()
        };
        self.emit(&mut packet, false)
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
        self.emit(&mut packet, false)
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
    pub fn finish(self) -> io::Result<W> {
        self.out.into_inner().map_err(|e| e.into_error())
    }

    /// Flushes buffered packets to the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Sequence flags for the next packet, and whether pending interned
    /// data goes into it.
    fn next_flags(&mut self, uses_interning: bool) -> (Option<u32>, bool) {
        let has_interned = !self.pending.event_names.is_empty()
            || !self.pending.debug_annotation_names.is_empty()
            || !self.pending.debug_annotation_string_values.is_empty();
        let mut flags = 0;
        if self.first_packet {
            flags |= SEQ_INCREMENTAL_STATE_CLEARED | SEQ_NEEDS_INCREMENTAL_STATE;
            self.first_packet = false;
        }
        if uses_interning || has_interned {
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
        let (flags, has_interned) = self.next_flags(uses_interning);

        let body = &mut self.event_buf;
        body.clear();
        wire::varint_field(body, field::TE_TYPE, ev.kind as u64);
        wire::varint_field(body, field::TE_TRACK_UUID, ev.track_uuid);
        if let Some(name) = ev.name {
            wire::varint_field(body, field::TE_NAME_IID, name.0);
        }
        for arg in ev.args {
            let a = &mut self.arg_buf;
            a.clear();
            wire::varint_field(a, field::DA_NAME_IID, arg.name.0);
            match arg.value {
                ArgValue::Uint(v) => wire::varint_field(a, field::DA_UINT_VALUE, v),
                // int64: two's complement as a 10-byte varint when negative.
                ArgValue::Int(v) => wire::varint_field(a, field::DA_INT_VALUE, v as u64),
                ArgValue::Double(v) => wire::fixed64_field(a, field::DA_DOUBLE_VALUE, v.to_bits()),
                ArgValue::Bool(v) => wire::varint_field(a, field::DA_BOOL_VALUE, u64::from(v)),
                ArgValue::Pointer(v) => wire::varint_field(a, field::DA_POINTER_VALUE, v),
                ArgValue::Str(v) => wire::bytes_field(a, field::DA_STRING_VALUE, v.as_bytes()),
                ArgValue::InternedString(id) => {
                    wire::varint_field(a, field::DA_STRING_VALUE_IID, id.0)
                }
            }
            wire::bytes_field(body, field::TE_DEBUG_ANNOTATIONS, a);
        }
        match ev.counter {
            Some(CounterValue::Int(v)) => {
                wire::varint_field(body, field::TE_COUNTER_VALUE, v as u64)
            }
            Some(CounterValue::Double(v)) => {
                wire::fixed64_field(body, field::TE_DOUBLE_COUNTER_VALUE, v.to_bits())
            }
            None => {}
        }
        // One fixed64 field per id (unpacked), as upstream's proto2 declares.
        for &id in ev.flow_ids {
            wire::fixed64_field(body, field::TE_FLOW_IDS, id);
        }
        for &id in ev.terminating_flow_ids {
            wire::fixed64_field(body, field::TE_TERMINATING_FLOW_IDS, id);
        }
        if let Some(id) = ev.correlation_id {
            wire::varint_field(body, field::TE_CORRELATION_ID, id);
        }

        let packet = &mut self.buf;
        packet.clear();
        wire::varint_field(packet, field::TP_TIMESTAMP, ts_ns);
        wire::bytes_field(packet, field::TP_TRACK_EVENT, body);
        wire::varint_field(
            packet,
            field::TP_TRUSTED_PACKET_SEQUENCE_ID,
            u64::from(SEQUENCE_ID),
        );
        if has_interned {
            wire::key(packet, field::TP_INTERNED_DATA, wire::LEN);
            self.pending
                .encode_length_delimited(packet)
                .expect("encoding into a Vec cannot run out of space");
        }
        if let Some(flags) = flags {
            wire::varint_field(packet, field::TP_SEQUENCE_FLAGS, u64::from(flags));
        }
        if has_interned {
            self.clear_pending();
        }

        let mut header = [0u8; 1 + wire::MAX_VARINT];
        header[0] = TRACE_PACKET_TAG;
        let header_len = 1 + wire::put_varint(&mut header[1..], self.buf.len() as u64);
        self.packets += 1;
        self.bytes += (header_len + self.buf.len()) as u64;
        self.out.write_all(&header[..header_len])?;
        self.out.write_all(&self.buf)
    }

    /// Adds sequence id, flags and pending interned names, then frames and
    /// writes a packet encoded by prost (descriptors, clock snapshots).
    fn emit(&mut self, packet: &mut TracePacket, uses_interning: bool) -> io::Result<()> {
        packet.trusted_packet_sequence_id = Some(SEQUENCE_ID);
        let (flags, has_interned) = self.next_flags(uses_interning);
        packet.sequence_flags = flags;
        if has_interned {
            packet.interned_data = Some(std::mem::take(&mut self.pending));
        }

        self.buf.clear();
        self.buf.push(TRACE_PACKET_TAG);
        prost::encoding::encode_varint(packet.encoded_len() as u64, &mut self.buf);
        packet
            .encode(&mut self.buf)
            .expect("encoding into a Vec cannot run out of space");

        if let Some(interned) = packet.interned_data.take() {
            self.pending = interned;
            self.clear_pending();
        }
        self.packets += 1;
        self.bytes += self.buf.len() as u64;
        self.out.write_all(&self.buf)
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
/// decodes every kind of event with the generated prost types.
mod field {
    pub const TP_TIMESTAMP: u32 = 8;
    pub const TP_TRUSTED_PACKET_SEQUENCE_ID: u32 = 10;
    pub const TP_TRACK_EVENT: u32 = 11;
    pub const TP_INTERNED_DATA: u32 = 12;
    pub const TP_SEQUENCE_FLAGS: u32 = 13;
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
    const VARINT: u32 = 0;
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

    fn varint(buf: &mut Vec<u8>, v: u64) {
        let mut tmp = [0u8; MAX_VARINT];
        let n = put_varint(&mut tmp, v);
        buf.extend_from_slice(&tmp[..n]);
    }

    pub fn key(buf: &mut Vec<u8>, field: u32, wire_type: u32) {
        varint(buf, u64::from(field << 3 | wire_type));
    }

    pub fn varint_field(buf: &mut Vec<u8>, field: u32, v: u64) {
        key(buf, field, VARINT);
        varint(buf, v);
    }

    pub fn fixed64_field(buf: &mut Vec<u8>, field: u32, v: u64) {
        key(buf, field, FIXED64);
        buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn bytes_field(buf: &mut Vec<u8>, field: u32, bytes: &[u8]) {
        key(buf, field, LEN);
        varint(buf, bytes.len() as u64);
        buf.extend_from_slice(bytes);
    }
}
