//! Decodes traces produced by `TraceWriter` with prost and checks packets,
//! flags, interning and the wire form of flow ids; compares a readable dump
//! of a small trace to `tests/snapshots/small_trace.txt`.
//!
//! Set `RPROF_UPDATE_SNAPSHOTS=1` to rewrite the snapshot after an intended
//! change, and review the diff.

use std::path::Path;

use prost::Message;
use rprof_perfetto::protos::{trace_packet::Data, track_event, Trace, TracePacket};
use rprof_perfetto::{decode_trace, WriterOptions, DELTA_CLOCK_ID};
use rprof_perfetto::{
    Arg, ArgValue, ChildTracksOrdering, ClockReadings, CounterTrack, CounterUnit, CounterValue,
    CustomTrack, ProcessTrack, SiblingMergeBehavior, Slice, ThreadTrack, TraceWriter, SEQUENCE_ID,
};

const LAUNCH: &str = "grid 1024x1x1 wg 256x1x1 lds 0 scratch 0";

/// The small trace in the plain encoding (absolute timestamps, no
/// compression), whose packets the tests below inspect byte by byte.
fn small_trace() -> Vec<u8> {
    small_trace_with(WriterOptions::plain())
}

/// The clock snapshot every test trace starts with: boottime 1,000 ns.
fn write_test_clock<W: std::io::Write>(w: &mut TraceWriter<W>) {
    w.write_clock_snapshot(&ClockReadings {
        boottime_ns: 1_000,
        monotonic_ns: 900,
        realtime_ns: 1_700_000_000_000_000_000,
    })
    .unwrap();
}

fn small_trace_with(options: WriterOptions) -> Vec<u8> {
    let mut w = TraceWriter::with_options(Vec::new(), options);
    write_test_clock(&mut w);
    w.write_process_track(&ProcessTrack {
        uuid: 1,
        pid: 42,
        name: "app",
        cmdline: &["./app".to_owned(), "-v".to_owned()],
        timestamp_ns: 1_000,
    })
    .unwrap();
    w.write_thread_track(&ThreadTrack {
        uuid: 2,
        pid: 42,
        tid: 43,
        name: "thread 43",
        timestamp_ns: 1_000,
    })
    .unwrap();
    w.write_custom_track(&CustomTrack {
        child_ordering: Some(ChildTracksOrdering::Chronological),
        ..CustomTrack::new(3, "GPU 0 (gfx90a)")
    })
    .unwrap();
    w.write_custom_track(&CustomTrack {
        parent_uuid: Some(3),
        sibling_merge_behavior: Some(SiblingMergeBehavior::None),
        ..CustomTrack::new(4, "queue 1")
    })
    .unwrap();
    w.write_custom_track(&CustomTrack {
        parent_uuid: Some(4),
        sibling_order_rank: Some(0),
        ..CustomTrack::new(5, "queue 1")
    })
    .unwrap();
    w.write_counter_track(&CounterTrack {
        uuid: 6,
        parent_uuid: Some(1),
        name: "pending",
        unit: Some(CounterUnit::Count),
    })
    .unwrap();
    let call = w.intern_event_name("hsa_queue_write");
    let count = w.intern_annotation_name("dispatch_count");
    w.write_slice(&Slice {
        args: &[Arg {
            name: count,
            value: ArgValue::Uint(2),
        }],
        flow_ids: &[0x2a_0000_0001, 0x2a_0000_0002],
        ..Slice::new(2, 2_000, 2_500, call)
    })
    .unwrap();
    let kernel = w.intern_event_name("vector_add");
    let args = [
        w.intern_annotation_name("grid.x"),
        w.intern_annotation_name("offset"),
        w.intern_annotation_name("ratio"),
        w.intern_annotation_name("note"),
        w.intern_annotation_name("kernel_object"),
        w.intern_annotation_name("barrier"),
    ];
    w.write_slice(&Slice {
        args: &[
            Arg {
                name: args[0],
                value: ArgValue::Uint(1024),
            },
            Arg {
                name: args[1],
                value: ArgValue::Int(-3),
            },
            Arg {
                name: args[2],
                value: ArgValue::Double(0.5),
            },
            Arg {
                name: args[3],
                value: ArgValue::Str("first"),
            },
            Arg {
                name: args[4],
                value: ArgValue::Pointer(0x7f00),
            },
            Arg {
                name: args[5],
                value: ArgValue::Bool(true),
            },
        ],
        terminating_flow_ids: &[0x2a_0000_0001],
        correlation_id: Some(0x2a_0000_0001),
        ..Slice::new(5, 3_000, 4_000, kernel)
    })
    .unwrap();
    let launch = w.intern_annotation_name("launch");
    let config = w.intern_string_value(LAUNCH);
    assert_eq!(w.intern_string_value(LAUNCH), config, "interned once");
    assert_eq!(w.string_values_interned(), 1);
    w.write_slice(&Slice {
        args: &[Arg {
            name: launch,
            value: ArgValue::InternedString(config),
        }],
        terminating_flow_ids: &[0x2a_0000_0002],
        ..Slice::new(5, 4_000, 4_000, kernel)
    })
    .unwrap();
    w.write_counter(6, 2_000, CounterValue::Int(2)).unwrap();
    w.write_counter(6, 4_000, CounterValue::Double(0.0))
        .unwrap();
    let end = w.intern_event_name("end");
    w.write_instant(1, 5_000, end, &[]).unwrap();
    assert_eq!(w.packets_written(), 16);
    let bytes_written = w.bytes_written();
    let bytes = w.finish().unwrap();
    // (Compressed, the file holds deflated bundles, fewer bytes than the
    // packets in them.)
    if options == WriterOptions::plain() {
        assert_eq!(bytes.len() as u64, bytes_written);
    }
    bytes
}

/// Packets of a decoded trace without what the encodings legitimately
/// differ in (sequence flags, where interned data rides, the clock
/// snapshot), sorted by their encoding: the same events, in any order.
fn normalized_events(trace: &Trace) -> (Vec<Vec<u8>>, Vec<TracePacket>) {
    let mut interned = Vec::new();
    let mut events: Vec<Vec<u8>> = trace
        .packet
        .iter()
        .filter(|p| !matches!(p.data, Some(Data::ClockSnapshot(_))))
        .map(|p| {
            let mut p = p.clone();
            if let Some(i) = p.interned_data.take() {
                interned.push(TracePacket {
                    interned_data: Some(i),
                    ..Default::default()
                });
            }
            p.sequence_flags = None;
            p.encode_to_vec()
        })
        .collect();
    events.sort();
    (events, interned)
}

#[test]
fn compact_encoding_decodes_to_the_same_events_in_arrival_order() {
    let plain = decode_trace(&small_trace()).unwrap();
    let compact_bytes = small_trace_with(WriterOptions::default());
    let compact = decode_trace(&compact_bytes).unwrap();
    assert_eq!(plain.packet.len(), 16);
    assert_eq!(compact.packet.len(), 16);
    let (plain_events, plain_interned) = normalized_events(&plain);
    let (compact_events, compact_interned) = normalized_events(&compact);
    assert_eq!(plain_events, compact_events);
    // Every definition is there; each rides on a packet at or before its first use.
    let names = |v: &[TracePacket]| {
        let mut n: Vec<String> = v
            .iter()
            .flat_map(|p| p.interned_data.iter())
            .flat_map(|i| {
                i.event_names
                    .iter()
                    .map(|e| e.name().to_owned())
                    .chain(i.debug_annotation_names.iter().map(|e| e.name().to_owned()))
            })
            .collect();
        n.sort();
        n
    };
    assert_eq!(names(&plain_interned), names(&compact_interned));
    // The file is one deflated bundle; inside, the clock snapshot declares
    // the incremental sequence clock and the track events keep the order
    // they were written in, with their exact timestamps (the counter at
    // 2,000, written after the slices at 3,000 and 4,000, has a negative
    // delta).
    assert!(compact_bytes.len() < small_trace().len());
    match &compact.packet[0].data {
        Some(Data::ClockSnapshot(cs)) => {
            let c = cs
                .clocks
                .iter()
                .find(|c| c.clock_id == Some(DELTA_CLOCK_ID))
                .unwrap();
            assert_eq!((c.timestamp, c.is_incremental), (Some(1_000), Some(true)));
        }
        other => panic!("first packet is not the clock snapshot: {other:?}"),
    }
    let ts: Vec<u64> = compact
        .packet
        .iter()
        .filter(|p| matches!(p.data, Some(Data::TrackEvent(_))))
        .map(|p| p.timestamp.unwrap())
        .collect();
    assert_eq!(
        ts,
        [2_000, 2_500, 3_000, 4_000, 4_000, 4_000, 2_000, 4_000, 5_000]
    );
}

/// Splits the file into packets by hand (tag 0x0a + varint length).
fn frames(bytes: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        assert_eq!(rest[0], 0x0a, "every record is Trace.packet");
        rest = &rest[1..];
        let len = prost::encoding::decode_varint(&mut rest).unwrap() as usize;
        out.push(&rest[..len]);
        rest = &rest[len..];
    }
    out
}

#[test]
fn framing_sequence_and_flags() {
    let bytes = small_trace();
    let trace = Trace::decode(&bytes[..]).unwrap();
    let frames = frames(&bytes);
    assert_eq!(frames.len(), trace.packet.len());
    assert_eq!(frames.len(), 16);
    for (i, (raw, p)) in frames.iter().zip(&trace.packet).enumerate() {
        assert_eq!(&TracePacket::decode(*raw).unwrap(), p);
        assert_eq!(p.trusted_packet_sequence_id, Some(SEQUENCE_ID));
        let flags = p.sequence_flags.unwrap_or(0);
        if i == 0 {
            assert_eq!(flags, 3, "first packet clears and needs incremental state");
            assert!(matches!(p.data, Some(Data::ClockSnapshot(_))));
        } else {
            assert_eq!(flags & 1, 0, "only the first packet clears");
        }
        let uses_iids = matches!(&p.data, Some(Data::TrackEvent(e)) if e.name_field.is_some());
        if uses_iids || p.interned_data.is_some() {
            assert_eq!(flags & 2, 2, "packet {i} uses interning");
        }
    }
}

#[test]
fn names_are_interned_once_in_the_first_packet_that_uses_them() {
    let trace = Trace::decode(&small_trace()[..]).unwrap();
    let mut defined = Vec::new();
    let mut annotations = Vec::new();
    for p in &trace.packet {
        if let Some(i) = &p.interned_data {
            defined.extend(
                i.event_names
                    .iter()
                    .map(|n| (n.iid.unwrap(), n.name.clone().unwrap())),
            );
            annotations.extend(i.debug_annotation_names.iter().map(|n| n.iid.unwrap()));
        }
        if let Some(Data::TrackEvent(e)) = &p.data {
            if let Some(track_event::NameField::NameIid(iid)) = e.name_field {
                assert!(
                    defined.iter().any(|(d, _)| *d == iid),
                    "iid {iid} used before definition"
                );
            }
        }
    }
    assert_eq!(
        defined,
        [
            (1, "hsa_queue_write".to_owned()),
            (2, "vector_add".to_owned()),
            (3, "end".to_owned())
        ]
    );
    assert_eq!(annotations, [1, 2, 3, 4, 5, 6, 7, 8]);
}

/// `ArgValue::InternedString` is written as `string_value_iid` (17) and its
/// text as `InternedData.debug_annotation_string_values` (29) in the same
/// packet, which resolves back to the string.
#[test]
fn interned_string_values_resolve() {
    use rprof_perfetto::protos::debug_annotation::Value;
    let trace = Trace::decode(&small_trace()[..]).unwrap();
    let mut values = std::collections::HashMap::new();
    let mut resolved = Vec::new();
    for (i, p) in trace.packet.iter().enumerate() {
        if let Some(d) = &p.interned_data {
            for v in &d.debug_annotation_string_values {
                let text = String::from_utf8(v.str.clone().unwrap()).unwrap();
                assert!(
                    values.insert(v.iid.unwrap(), text).is_none(),
                    "defined twice"
                );
            }
        }
        let Some(Data::TrackEvent(e)) = &p.data else {
            continue;
        };
        for a in &e.debug_annotations {
            if let Some(Value::StringValueIid(iid)) = a.value {
                assert_eq!(p.sequence_flags.unwrap_or(0) & 2, 2);
                resolved.push((i, values[&iid].clone()));
            }
        }
    }
    assert_eq!(values.len(), 1);
    assert_eq!(resolved, [(11, LAUNCH.to_owned())]);
    // The raw bytes carry field 17 as a varint (key 0x88 0x01) holding iid 1.
    let bytes = small_trace();
    let key_and_iid = [0x88, 0x01, 0x01];
    assert!(bytes.windows(3).any(|w| w == key_and_iid));
}

/// `flow_ids` (47) and `terminating_flow_ids` (48) must be written as one
/// fixed64 field per id (wire type 1), never packed (wire type 2).
#[test]
fn flow_ids_are_unpacked_fixed64() {
    let bytes = small_trace();
    let mut flow_tags = 0;
    let mut terminating_tags = 0;
    for raw in frames(&bytes) {
        let p = TracePacket::decode(raw).unwrap();
        let Some(Data::TrackEvent(e)) = p.data else {
            continue;
        };
        let encoded = e.encode_to_vec();
        // Walk the TrackEvent's top-level fields.
        let mut rest = &encoded[..];
        while !rest.is_empty() {
            let key = prost::encoding::decode_varint(&mut rest).unwrap();
            let (field, wire) = (key >> 3, key & 7);
            assert!(
                !(field == 47 || field == 48) || wire == 1,
                "flow field {field} with wire type {wire}"
            );
            match (field, wire) {
                (47, _) => flow_tags += 1,
                (48, _) => terminating_tags += 1,
                _ => {}
            }
            match wire {
                0 => {
                    prost::encoding::decode_varint(&mut rest).unwrap();
                }
                1 => rest = &rest[8..],
                2 => {
                    let len = prost::encoding::decode_varint(&mut rest).unwrap() as usize;
                    rest = &rest[len..];
                }
                5 => rest = &rest[4..],
                w => panic!("wire type {w}"),
            }
        }
    }
    assert_eq!(flow_tags, 2);
    assert_eq!(terminating_tags, 2);
}

/// In the default encoding (shown uncompressed) every track event's packet
/// ends with its timestamp (field 8, a varint), so that the bytes packets
/// share sit together for deflate (docs/trace-format.md, "Field order").
#[test]
fn track_event_packets_end_with_their_timestamp() {
    let delta = WriterOptions {
        compress: false,
        ..WriterOptions::default()
    };
    let bytes = small_trace_with(delta);
    let mut events = 0;
    for raw in frames(&bytes) {
        let p = TracePacket::decode(raw).unwrap();
        if !matches!(p.data, Some(Data::TrackEvent(_))) {
            continue;
        }
        events += 1;
        // The last field: its key byte, then a varint (high bit clear on
        // its last byte only).
        let mut end = raw.len() - 1;
        assert!(raw[end] & 0x80 == 0);
        while end > 0 && raw[end - 1] & 0x80 != 0 {
            end -= 1;
        }
        assert_eq!(
            raw[end - 1],
            8 << 3,
            "{p:?} does not end with its timestamp"
        );
        let mut ts = &raw[end..];
        let value = prost::encoding::decode_varint(&mut ts).unwrap();
        assert_eq!(Some(value), p.timestamp);
    }
    assert_eq!(events, 9);
}

/// A readable dump of the decoded trace, compared to a committed file.
#[test]
fn small_trace_matches_snapshot() {
    let trace = Trace::decode(&small_trace()[..]).unwrap();
    let mut dump = String::new();
    for (i, p) in trace.packet.iter().enumerate() {
        dump.push_str(&format!("--- packet {i}\n{p:#?}\n"));
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/small_trace.txt");
    if std::env::var_os("RPROF_UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &dump).unwrap();
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with RPROF_UPDATE_SNAPSHOTS=1)",
            path.display()
        )
    });
    if dump != expected {
        let actual = path.with_extension("actual.txt");
        std::fs::write(&actual, &dump).unwrap();
        panic!(
            "trace dump differs from {}; see {} (RPROF_UPDATE_SNAPSHOTS=1 to accept)",
            path.display(),
            actual.display()
        );
    }
}

/// Track events are encoded by hand, not by prost: every packet must decode
/// (checked above) and be exactly as long as prost's canonical encoding of
/// the decoded packet, so no field is duplicated, missing or non-minimal.
#[test]
fn hand_encoded_events_match_prost_encoding_length() {
    let bytes = small_trace();
    let mut events = 0;
    for raw in frames(&bytes) {
        let p = TracePacket::decode(raw).unwrap();
        assert_eq!(p.encoded_len(), raw.len(), "{p:#?}");
        if matches!(p.data, Some(Data::TrackEvent(_))) {
            events += 1;
        }
    }
    assert_eq!(events, 9);
}

/// Starts a trace for counter tests: the clock snapshot (boottime 1,000 ns)
/// and counter track 9, "order".
fn start_order_counters<W: std::io::Write>(w: &mut TraceWriter<W>) {
    write_test_clock(w);
    w.write_counter_track(&CounterTrack {
        uuid: 9,
        parent_uuid: None,
        name: "order",
        unit: None,
    })
    .unwrap();
}

/// The (timestamp, value) of every integer counter event in `bytes`.
fn counter_values(bytes: &[u8]) -> Vec<(u64, i64)> {
    decode_trace(bytes)
        .unwrap()
        .packet
        .iter()
        .filter_map(|p| match &p.data {
            Some(Data::TrackEvent(e)) => match e.counter_value_field {
                Some(track_event::CounterValueField::CounterValue(v)) => {
                    Some((p.timestamp.unwrap(), v))
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// Events are written in arrival order, each timestamp a delta to the one
/// before: an event earlier than the previous one has a negative delta (a
/// wrapped 10-byte varint), which reads back exactly, as do ties.
#[test]
fn events_keep_arrival_order_and_earlier_timestamps_read_back_exactly() {
    let mut w = TraceWriter::new(Vec::new());
    start_order_counters(&mut w);
    // 6,000 events, four per nanosecond plus up to 64 ns of jitter from a
    // small LCG: many collide and about half go back in time.
    let mut x: u64 = 12345;
    let mut written = Vec::new();
    for i in 0..6_000i64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let ts = 10_000 + i as u64 / 4 + (x >> 33) % 64;
        w.write_counter(9, ts, CounterValue::Int(i)).unwrap();
        written.push((ts, i));
    }
    let read = counter_values(&w.finish().unwrap());
    assert_eq!(read.len(), 6_000);
    assert_eq!(read, written);
}

/// Keeps the bytes that reach the underlying writer.
struct SharedWriter(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);

impl std::io::Write for SharedWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Compressed bundles are deflated into the writer's buffer, not written: a
/// caller that writes only while `spare_room` says 16 KiB are left (rprof's
/// app threads writing records while they wait) fills and deflates several
/// bundles, and no byte reaches the file while it does. (When the room
/// counted only the bundle being filled, such a caller stopped before its
/// first bundle was deflated and left every deflate to the writer thread.)
#[test]
fn spare_room_counts_the_bundles_the_buffer_still_takes() {
    let file = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let mut w = TraceWriter::with_options(SharedWriter(file.clone()), WriterOptions::default());
    w.write_custom_track(&CustomTrack::new(5, "queue 1"))
        .unwrap();
    let kernel = w.intern_event_name("vector_add");
    let grid = w.intern_annotation_name("grid.x");
    // Timestamps and args that deflate like a real trace's, not to nothing.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let (mut t, mut slices) = (1_000u64, 0usize);
    // A bundle deflated: the bytes so far drop (its packets, counted as they
    // are while it fills, become its smaller deflated form).
    let (mut before, mut deflated) = (w.bytes_written(), 0);
    while w.spare_room() >= 16 * 1024 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let start = t + x % 1_000;
        w.write_slice(&Slice {
            args: &[Arg {
                name: grid,
                value: ArgValue::Uint(x >> 40),
            }],
            ..Slice::new(5, start, start + 20_000 + x % 5_000, kernel)
        })
        .unwrap();
        t += 25_000;
        slices += 1;
        assert!(
            file.borrow().is_empty(),
            "a byte was written after {slices} slices"
        );
        let now = w.bytes_written();
        if now < before {
            deflated += 1;
        }
        before = now;
        assert!(slices < 2_000_000, "spare_room never fell");
    }
    assert!(
        deflated >= 2,
        "{deflated} bundles deflated in {slices} slices before the room ran out"
    );
    // Everything taken is in the finished trace.
    drop(w.finish().unwrap());
    let trace = decode_trace(&file.borrow()).unwrap();
    let events = trace
        .packet
        .iter()
        .filter(|p| matches!(p.data, Some(Data::TrackEvent(_))))
        .count();
    assert_eq!(events, 2 * slices, "a BEGIN and an END per slice");
}

/// Writes `n` slices that deflate like a real trace's, from `state` on.
fn write_noisy_slices<W: std::io::Write>(w: &mut TraceWriter<W>, n: usize, state: &mut (u64, u64)) {
    let kernel = w.intern_event_name("vector_add");
    let grid = w.intern_annotation_name("grid.x");
    for _ in 0..n {
        let (x, t) = state;
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        let start = *t + *x % 1_000;
        w.write_slice(&Slice {
            args: &[Arg {
                name: grid,
                value: ArgValue::Uint(*x >> 40),
            }],
            ..Slice::new(5, start, start + 20_000 + *x % 5_000, kernel)
        })
        .unwrap();
        *t += 25_000;
    }
}

/// `write_out` (what the writer thread does when a lending thread finds too
/// little room) writes the deflated bundles and leaves the open one open:
/// the finished trace is byte for byte the one written without it, and the
/// room is back. (`flush`, which it used before, closed the open bundle
/// early each time: a smaller bundle, deflated on the writer thread.)
#[test]
fn write_out_makes_room_without_closing_the_open_bundle() {
    let run = |write_out_every: Option<usize>| {
        let file = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let mut w = TraceWriter::with_options(SharedWriter(file.clone()), WriterOptions::default());
        w.write_custom_track(&CustomTrack::new(5, "queue 1"))
            .unwrap();
        let mut state = (0x9e37_79b9_7f4a_7c15u64, 1_000u64);
        let mut room_regained = 0;
        for round in 0..60 {
            write_noisy_slices(&mut w, 1_000, &mut state);
            if write_out_every.is_some_and(|k| round % k == k - 1) {
                let before = w.spare_room();
                w.write_out().unwrap();
                if w.spare_room() > before {
                    room_regained += 1;
                }
            }
        }
        drop(w.finish().unwrap());
        let bytes = file.borrow().clone();
        (bytes, room_regained)
    };
    let (plain, _) = run(None);
    let (written_out, regained) = run(Some(7));
    assert!(regained >= 4, "room came back {regained} times");
    assert_eq!(written_out.len(), plain.len());
    assert!(written_out == plain, "write_out changed the trace");
    let trace = decode_trace(&written_out).unwrap();
    let events = trace
        .packet
        .iter()
        .filter(|p| matches!(p.data, Some(Data::TrackEvent(_))))
        .count();
    assert_eq!(events, 2 * 60_000, "a BEGIN and an END per slice");
}

/// The periodic flush writes every event that arrived before it, so the
/// file is a readable prefix of the trace at each flush, stragglers (an
/// event older than those before it) included.
#[test]
fn flush_writes_every_event_that_arrived_before_it() {
    let file = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let mut w = TraceWriter::with_options(SharedWriter(file.clone()), WriterOptions::default());
    start_order_counters(&mut w);
    let mut written: Vec<(u64, i64)> = Vec::new();
    for i in 0..100i64 {
        w.write_counter(9, 1_000 + i as u64, CounterValue::Int(i))
            .unwrap();
        written.push((1_000 + i as u64, i));
    }
    w.flush().unwrap();
    assert_eq!(counter_values(&file.borrow()), written);
    for i in 100..200i64 {
        w.write_counter(9, 2_000 + i as u64, CounterValue::Int(i))
            .unwrap();
        written.push((2_000 + i as u64, i));
    }
    // A straggler older than every event since the first flush.
    w.write_counter(9, 1_050, CounterValue::Int(-1)).unwrap();
    written.push((1_050, -1));
    w.flush().unwrap();
    assert_eq!(counter_values(&file.borrow()), written);
    drop(w.finish().unwrap());
    assert_eq!(counter_values(&file.borrow()), written);
}

/// Events are encoded in place with a one-byte length placeholder per
/// nested message, moved along when the length needs more: string
/// arguments around the one-, two- and three-byte length boundaries (of the
/// annotation, the event and the packet) must decode to the same strings,
/// framed minimally (as long as prost's own encoding), plain and compressed.
#[test]
fn long_arguments_are_framed_as_an_encoder_that_knew_their_length() {
    let lengths = [
        0, 100, 120, 121, 126, 127, 128, 200, 16_370, 16_383, 16_384, 70_000,
    ];
    for options in [WriterOptions::plain(), WriterOptions::default()] {
        let mut w = TraceWriter::with_options(Vec::new(), options);
        write_test_clock(&mut w);
        let name = w.intern_event_name("long");
        let note = w.intern_annotation_name("note");
        let texts: Vec<String> = lengths
            .iter()
            .map(|&n| (0..n).map(|i| char::from(b'a' + (i % 26) as u8)).collect())
            .collect();
        for (i, text) in texts.iter().enumerate() {
            let at = 2_000 + 10 * i as u64;
            w.write_slice(&Slice {
                args: &[Arg {
                    name: note,
                    value: ArgValue::Str(text),
                }],
                ..Slice::new(7, at, at + 5, name)
            })
            .unwrap();
        }
        let bytes = w.finish().unwrap();
        let trace = decode_trace(&bytes).unwrap();
        let mut seen = Vec::new();
        for p in &trace.packet {
            let Some(Data::TrackEvent(e)) = &p.data else {
                continue;
            };
            for a in &e.debug_annotations {
                if let Some(rprof_perfetto::protos::debug_annotation::Value::StringValue(s)) =
                    &a.value
                {
                    seen.push(s.clone());
                }
            }
        }
        assert_eq!(seen, texts, "{options:?}");
        if options == WriterOptions::plain() {
            // Minimal framing: every packet as long as prost encodes it.
            for raw in frames(&bytes) {
                let p = TracePacket::decode(raw).unwrap();
                assert_eq!(p.encoded_len(), raw.len());
            }
        }
    }
}
