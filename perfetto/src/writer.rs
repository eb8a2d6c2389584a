//! [`TraceWriter`]: one packet at a time into a `BufWriter`.

use std::collections::HashMap;
use std::io::{self, BufWriter, Write};

use prost::Message;

use crate::protos::{
    clock_snapshot, debug_annotation, trace_packet, track_descriptor, track_event, BuiltinClock,
    ClockSnapshot, CounterDescriptor, DebugAnnotation, DebugAnnotationName, EventName,
    InternedData, ProcessDescriptor, ThreadDescriptor, TracePacket, TrackDescriptor, TrackEvent,
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
    /// Text. Copied into the packet (allocates); keep it off per-dispatch paths.
    Str(&'a str),
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
/// `BufWriter`; the only steady-state allocations are for names interned for
/// the first time and for [`ArgValue::Str`] values.
#[derive(Debug)]
pub struct TraceWriter<W: Write> {
    out: BufWriter<W>,
    /// Encoded frame of the current packet.
    buf: Vec<u8>,
    /// Reused event, moved in and out of the packet.
    event: TrackEvent,
    /// Names interned since the last packet; attached to the next one.
    pending: InternedData,
    event_names: HashMap<String, u64>,
    annotation_names: HashMap<String, u64>,
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
            event: TrackEvent::default(),
            pending: InternedData::default(),
            event_names: HashMap::new(),
            annotation_names: HashMap::new(),
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
        let e = &mut self.event;
        e.r#type = Some(track_event::Type::SliceBegin as i32);
        e.track_uuid = Some(slice.track_uuid);
        e.name_field = Some(track_event::NameField::NameIid(slice.name.0));
        e.flow_ids.extend_from_slice(slice.flow_ids);
        e.terminating_flow_ids
            .extend_from_slice(slice.terminating_flow_ids);
        e.correlation_id_field = slice
            .correlation_id
            .map(track_event::CorrelationIdField::CorrelationId);
        fill_args(&mut e.debug_annotations, slice.args);
        self.emit_event(slice.start_ns, true)
    }

    /// Writes a bare END closing the innermost open slice on `track_uuid`.
    pub fn write_slice_end(&mut self, track_uuid: u64, ts_ns: u64) -> io::Result<()> {
        let e = &mut self.event;
        e.r#type = Some(track_event::Type::SliceEnd as i32);
        e.track_uuid = Some(track_uuid);
        self.emit_event(ts_ns, false)
    }

    /// Writes an instant event.
    pub fn write_instant(
        &mut self,
        track_uuid: u64,
        ts_ns: u64,
        name: EventNameId,
        args: &[Arg<'_>],
    ) -> io::Result<()> {
        let e = &mut self.event;
        e.r#type = Some(track_event::Type::Instant as i32);
        e.track_uuid = Some(track_uuid);
        e.name_field = Some(track_event::NameField::NameIid(name.0));
        fill_args(&mut e.debug_annotations, args);
        self.emit_event(ts_ns, true)
    }

    /// Writes one value on a counter track.
    pub fn write_counter(
        &mut self,
        track_uuid: u64,
        ts_ns: u64,
        value: CounterValue,
    ) -> io::Result<()> {
        let e = &mut self.event;
        e.r#type = Some(track_event::Type::Counter as i32);
        e.track_uuid = Some(track_uuid);
        e.counter_value_field = Some(match value {
            CounterValue::Int(v) => track_event::CounterValueField::CounterValue(v),
            CounterValue::Double(v) => track_event::CounterValueField::DoubleCounterValue(v),
        });
        self.emit_event(ts_ns, false)
    }

    /// Flushes and returns the underlying writer.
    pub fn finish(self) -> io::Result<W> {
        self.out.into_inner().map_err(|e| e.into_error())
    }

    /// Flushes buffered packets to the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Wraps `self.event` in a packet, writes it and resets the event,
    /// keeping its vectors' capacity.
    fn emit_event(&mut self, ts_ns: u64, uses_interning: bool) -> io::Result<()> {
        let mut packet = TracePacket {
            timestamp: Some(ts_ns),
            data: Some(trace_packet::Data::TrackEvent(std::mem::take(
                &mut self.event,
            ))),
            ..Default::default()
        };
        let result = self.emit(&mut packet, uses_interning);
        if let Some(trace_packet::Data::TrackEvent(mut e)) = packet.data {
            e.r#type = None;
            e.track_uuid = None;
            e.name_field = None;
            e.counter_value_field = None;
            e.correlation_id_field = None;
            e.flow_ids.clear();
            e.terminating_flow_ids.clear();
            e.debug_annotations.clear();
            self.event = e;
        }
        result
    }

    /// Adds sequence id, flags and pending interned names, then frames and
    /// writes the packet.
    fn emit(&mut self, packet: &mut TracePacket, uses_interning: bool) -> io::Result<()> {
        packet.trusted_packet_sequence_id = Some(SEQUENCE_ID);
        let has_interned =
            !self.pending.event_names.is_empty() || !self.pending.debug_annotation_names.is_empty();
        let mut flags = 0;
        if self.first_packet {
            flags |= SEQ_INCREMENTAL_STATE_CLEARED | SEQ_NEEDS_INCREMENTAL_STATE;
            self.first_packet = false;
        }
        if uses_interning || has_interned {
            flags |= SEQ_NEEDS_INCREMENTAL_STATE;
        }
        if flags != 0 {
            packet.sequence_flags = Some(flags);
        }
        if has_interned {
            packet.interned_data = Some(std::mem::take(&mut self.pending));
        }

        self.buf.clear();
        self.buf.push(TRACE_PACKET_TAG);
        prost::encoding::encode_varint(packet.encoded_len() as u64, &mut self.buf);
        packet
            .encode(&mut self.buf)
            .expect("encoding into a Vec cannot run out of space");

        if let Some(mut interned) = packet.interned_data.take() {
            // Keep the vectors' capacity for the next batch of new names.
            interned.event_names.clear();
            interned.debug_annotation_names.clear();
            self.pending = interned;
        }
        self.packets += 1;
        self.bytes += self.buf.len() as u64;
        self.out.write_all(&self.buf)
    }
}

fn fill_args(out: &mut Vec<DebugAnnotation>, args: &[Arg<'_>]) {
    for arg in args {
        let value = match arg.value {
            ArgValue::Uint(v) => debug_annotation::Value::UintValue(v),
            ArgValue::Int(v) => debug_annotation::Value::IntValue(v),
            ArgValue::Double(v) => debug_annotation::Value::DoubleValue(v),
            ArgValue::Bool(v) => debug_annotation::Value::BoolValue(v),
            ArgValue::Pointer(v) => debug_annotation::Value::PointerValue(v),
            ArgValue::Str(s) => debug_annotation::Value::StringValue(s.to_owned()),
        };
        out.push(DebugAnnotation {
            name_field: Some(debug_annotation::NameField::NameIid(arg.name.0)),
            value: Some(value),
            ..Default::default()
        });
    }
}
