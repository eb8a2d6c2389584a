//! [`merge`]: one Perfetto trace from the traces of several processes (the
//! `rprof merge` command).
//!
//! Owns the rewrite of whole `.pftrace` files written elsewhere; it must not
//! know how rprof creates its output files (the caller passes `create`) nor
//! anything about GPUs. Field numbers come from the generated [`crate::protos`]
//! types (`Fields` reads each one back from an encoding with only that field
//! set), and for the two fields outside the subset (`compressed_packets`,
//! `TracePacketDefaults`) from the writer's table; varints and keys are
//! prost's (`prost::encoding`).
//!
//! A `.pftrace` file is a plain sequence of `TracePacket`s, and rprof's
//! correlation (flow) ids carry the pid, so merging is concatenation with
//! these fixes:
//! - every file's writer uses the same `trusted_packet_sequence_id`, and
//!   interned names are scoped to a sequence: each input's sequences are
//!   renumbered so that no two inputs share one;
//! - track uuids are small per-file numbers (they are repeated on every
//!   event, so they are kept short): input `k` (0-based) has its uuids XORed
//!   with `k << 48`, which keeps them distinct within the file and, for uuids
//!   below 2^48 as rprof writes them, distinct from every other input's;
//! - flow ids (`TrackEvent.flow_ids` and `terminating_flow_ids`) are
//!   rprof's correlation ids, `pid << 32 | counter`: two machines whose apps
//!   had the same pid write the same ids, and Perfetto would draw arrows
//!   from one machine's API call to the other's kernel. Each input's flow ids
//!   are mapped to fresh ones, numbered from 1 in order of first appearance
//!   over the whole merge, so no two inputs share one (the `correlation_id`
//!   annotation keeps the original value).
//!
//! Inputs come from elsewhere (other machines, other users) and are read as
//! hostile: every length is checked against what is left of the file before
//! anything is allocated for it, a packet is at most [`MAX_PACKET`] bytes,
//! and every malformed input is an error naming the file, never a panic
//! (`fuzz_merge_never_panics` mutates seed traces to check it).
//!
//! The rewrite works on the wire format (the sequence id, and the uuid fields
//! of track descriptors, track events and packet defaults) and copies every
//! other byte unchanged, so packets from other producers and fields outside
//! rprof's schema subset survive (prost would drop unknown fields, so packets
//! are not decoded into the generated structs). A `compressed_packets` bundle
//! (rprof's default encoding) is inflated (at most [`MAX_PACKET`] bytes) and
//! its packets are rewritten one by one (the output is not recompressed).
//! Delta timestamps need no rewrite: their clock (id 64..127) and the
//! defaults naming it are scoped to the sequence, which is renumbered as a
//! whole.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;
use std::sync::LazyLock;

use prost::encoding::{decode_key, decode_varint, encode_key, encode_varint, WireType};

use crate::protos::{trace_packet::Data, Trace, TracePacket, TrackDescriptor, TrackEvent};
use crate::writer::field;

/// The largest packet accepted (rprof writes packets of a few KiB; Perfetto's
/// own limit for a packet is lower).
pub const MAX_PACKET: u64 = 64 << 20;

/// The field numbers the merge reads or rewrites.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fields {
    /// `Trace.packet`.
    trace_packet: u32,
    /// `TracePacket.trusted_packet_sequence_id`.
    sequence_id: u32,
    /// `TracePacket.track_event`.
    track_event: u32,
    /// `TracePacket.track_descriptor`.
    track_descriptor: u32,
    /// `TracePacket.trace_packet_defaults` (outside the subset).
    packet_defaults: u32,
    /// `TracePacket.compressed_packets` (outside the subset).
    compressed_packets: u32,
    /// `TrackEvent.track_uuid`.
    event_track_uuid: u32,
    /// `TrackEvent.flow_ids`.
    flow_ids: u32,
    /// `TrackEvent.terminating_flow_ids`.
    terminating_flow_ids: u32,
    /// `TrackDescriptor.uuid`.
    uuid: u32,
    /// `TrackDescriptor.parent_uuid`.
    parent_uuid: u32,
    /// `TracePacketDefaults.track_event_defaults` (outside the subset).
    track_event_defaults: u32,
    /// `TrackEventDefaults.track_uuid` (outside the subset).
    defaults_track_uuid: u32,
}

/// The number of the one field set in `msg`, read back from its encoding.
fn tag_of(msg: &impl prost::Message) -> u32 {
    let bytes = msg.encode_to_vec();
    decode_key(&mut &bytes[..]).map_or(0, |(tag, _)| tag)
}

impl Fields {
    fn from_generated() -> Self {
        let packet = |p: TracePacket| tag_of(&p);
        let event = |e: TrackEvent| tag_of(&e);
        let descriptor = |d: TrackDescriptor| tag_of(&d);
        Fields {
            trace_packet: tag_of(&Trace {
                packet: vec![TracePacket::default()],
            }),
            sequence_id: packet(TracePacket {
                trusted_packet_sequence_id: Some(1),
                ..Default::default()
            }),
            track_event: packet(TracePacket {
                data: Some(Data::TrackEvent(TrackEvent::default())),
                ..Default::default()
            }),
            track_descriptor: packet(TracePacket {
                data: Some(Data::TrackDescriptor(TrackDescriptor::default())),
                ..Default::default()
            }),
            packet_defaults: field::TP_TRACE_PACKET_DEFAULTS,
            compressed_packets: field::TP_COMPRESSED_PACKETS,
            event_track_uuid: event(TrackEvent {
                track_uuid: Some(1),
                ..Default::default()
            }),
            flow_ids: event(TrackEvent {
                flow_ids: vec![1],
                ..Default::default()
            }),
            terminating_flow_ids: event(TrackEvent {
                terminating_flow_ids: vec![1],
                ..Default::default()
            }),
            uuid: descriptor(TrackDescriptor {
                uuid: Some(1),
                ..Default::default()
            }),
            parent_uuid: descriptor(TrackDescriptor {
                parent_uuid: Some(1),
                ..Default::default()
            }),
            track_event_defaults: field::TPD_TRACK_EVENT_DEFAULTS,
            defaults_track_uuid: field::TED_TRACK_UUID,
        }
    }
}

static FIELDS: LazyLock<Fields> = LazyLock::new(Fields::from_generated);

fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

fn decode_error(e: prost::DecodeError) -> io::Error {
    invalid(e.to_string())
}

/// The next `n` bytes of `rest`, which then starts after them.
fn take<'a>(rest: &mut &'a [u8], n: usize) -> io::Result<&'a [u8]> {
    if n > rest.len() {
        return Err(invalid("field runs past the end of its message"));
    }
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    Ok(head)
}

/// A length-delimited field's length, bounded by what is left of `rest`.
fn take_len<'a>(rest: &mut &'a [u8]) -> io::Result<&'a [u8]> {
    let len = decode_varint(rest).map_err(decode_error)?;
    take(rest, usize::try_from(len).unwrap_or(usize::MAX))
}

/// Appends `body` as length-delimited field `tag` to `out`.
fn put_bytes(out: &mut Vec<u8>, tag: u32, body: &[u8]) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(body.len() as u64, out);
    out.extend_from_slice(body);
}

/// The packets inside `packet` if it is a `compressed_packets` bundle (its
/// only field, as rprof and Perfetto's service write it); inflating more
/// than [`MAX_PACKET`] bytes is refused.
fn inflate_bundle(packet: &[u8]) -> io::Result<Option<Vec<u8>>> {
    let mut rest = packet;
    match decode_key(&mut rest) {
        Ok((tag, WireType::LengthDelimited)) if tag == FIELDS.compressed_packets => {}
        _ => return Ok(None),
    }
    let data = take_len(&mut rest).map_err(|_| invalid("truncated compressed_packets"))?;
    let mut inner = Vec::new();
    flate2::read::ZlibDecoder::new(data)
        .take(MAX_PACKET + 1)
        .read_to_end(&mut inner)?;
    if inner.len() as u64 > MAX_PACKET {
        return Err(invalid(format!(
            "compressed_packets inflate to more than {MAX_PACKET} bytes"
        )));
    }
    Ok(Some(inner))
}

/// Counts of what a merge wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MergeSummary {
    /// Packets written.
    pub packets: u64,
    /// Distinct sequences in the output.
    pub sequences: u32,
}

/// A varint read from a stream; `None` at a clean end of the stream.
fn read_varint(r: &mut impl Read) -> io::Result<Option<u64>> {
    let mut bytes = [0u8; 10];
    for (i, slot) in bytes.iter_mut().enumerate() {
        let mut b = [0u8; 1];
        if r.read(&mut b)? == 0 {
            return if i == 0 {
                Ok(None)
            } else {
                Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "truncated varint",
                ))
            };
        }
        *slot = b[0];
        if b[0] & 0x80 == 0 {
            return decode_varint(&mut &bytes[..=i])
                .map(Some)
                .map_err(decode_error);
        }
    }
    Err(invalid("varint longer than 10 bytes"))
}

/// The messages whose fields the merge rewrites.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Message {
    /// `TracePacket`: the sequence id; track_event, defaults and
    /// track_descriptor are descended into.
    Packet,
    /// `TrackEvent`: track_uuid, flow ids.
    TrackEvent,
    /// `TrackDescriptor`: uuid, parent_uuid.
    TrackDescriptor,
    /// `TracePacketDefaults`: track_event_defaults is descended into.
    PacketDefaults,
    /// `TrackEventDefaults`: track_uuid.
    TrackEventDefaults,
}

/// What to do with one field of a message.
enum Action {
    Copy,
    Sequence,
    Uuid,
    Flow,
    Descend(Message),
}

fn action(msg: Message, tag: u32, wire: WireType) -> Action {
    use Message::*;
    use WireType::{LengthDelimited as Len, SixtyFourBit as Fixed64, Varint};
    let f = &*FIELDS;
    match (msg, wire) {
        (Packet, Varint) if tag == f.sequence_id => Action::Sequence,
        (Packet, Len) if tag == f.track_event => Action::Descend(TrackEvent),
        (Packet, Len) if tag == f.packet_defaults => Action::Descend(PacketDefaults),
        (Packet, Len) if tag == f.track_descriptor => Action::Descend(TrackDescriptor),
        (PacketDefaults, Len) if tag == f.track_event_defaults => {
            Action::Descend(TrackEventDefaults)
        }
        (TrackEvent, Varint) if tag == f.event_track_uuid => Action::Uuid,
        (TrackEventDefaults, Varint) if tag == f.defaults_track_uuid => Action::Uuid,
        (TrackEvent, Fixed64 | Len) if tag == f.flow_ids || tag == f.terminating_flow_ids => {
            Action::Flow
        }
        (TrackDescriptor, Varint) if tag == f.uuid || tag == f.parent_uuid => Action::Uuid,
        _ => Action::Copy,
    }
}

/// How the ids of one input are rewritten.
struct Renumber<'a> {
    sequence: &'a mut dyn FnMut(u64) -> u64,
    flow: &'a mut dyn FnMut(u64) -> u64,
    uuid_salt: u64,
}

/// Rewrites one encoded message of kind `msg` into `out`.
fn rewrite_message(
    msg: Message,
    buf: &[u8],
    out: &mut Vec<u8>,
    r: &mut Renumber<'_>,
) -> io::Result<()> {
    let mut rest = buf;
    while !rest.is_empty() {
        let start = buf.len() - rest.len();
        let (tag, wire) = decode_key(&mut rest).map_err(decode_error)?;
        let act = action(msg, tag, wire);
        match wire {
            WireType::Varint => {
                let v = decode_varint(&mut rest).map_err(decode_error)?;
                let new = match act {
                    Action::Sequence => Some((r.sequence)(v)),
                    // uuid 0 is the implicit default track: keep it.
                    Action::Uuid if v != 0 => Some(v ^ r.uuid_salt),
                    _ => None,
                };
                if let Some(new) = new {
                    encode_key(tag, wire, out);
                    encode_varint(new, out);
                    continue;
                }
            }
            WireType::SixtyFourBit => {
                let bytes = take(&mut rest, 8)?;
                if let Action::Flow = act {
                    let id = u64::from_le_bytes(bytes.try_into().unwrap_or([0; 8]));
                    encode_key(tag, wire, out);
                    out.extend_from_slice(&(r.flow)(id).to_le_bytes());
                    continue;
                }
            }
            WireType::LengthDelimited => {
                let body = take_len(&mut rest)?;
                if let Action::Flow = act {
                    // Packed ids, as another producer may write them.
                    if body.len() % 8 != 0 {
                        return Err(invalid("packed flow ids not a multiple of 8 bytes"));
                    }
                    encode_key(tag, wire, out);
                    encode_varint(body.len() as u64, out);
                    for id in body.chunks_exact(8) {
                        let id = u64::from_le_bytes(id.try_into().unwrap_or([0; 8]));
                        out.extend_from_slice(&(r.flow)(id).to_le_bytes());
                    }
                    continue;
                }
                if let Action::Descend(inner) = act {
                    let mut sub = Vec::with_capacity(body.len() + 8);
                    rewrite_message(inner, body, &mut sub, r)?;
                    put_bytes(out, tag, &sub);
                    continue;
                }
            }
            WireType::ThirtyTwoBit => {
                take(&mut rest, 4)?;
            }
            WireType::StartGroup | WireType::EndGroup => {
                return Err(invalid("unsupported wire type"))
            }
        }
        out.extend_from_slice(&buf[start..buf.len() - rest.len()]);
    }
    Ok(())
}

/// Merges `inputs` into a new file `output`, made by `create` (rprof passes
/// `rprof_core::output::files::create_new_hinted`, which never overwrites);
/// on failure the half-written output is removed.
pub fn merge(
    inputs: &[&Path],
    output: &Path,
    create: impl FnOnce(&Path) -> io::Result<File>,
) -> io::Result<MergeSummary> {
    let mut opened = Vec::with_capacity(inputs.len());
    for input in inputs {
        let name = input.display().to_string();
        let with_name = |e: io::Error| io::Error::new(e.kind(), format!("{name}: {e}"));
        let file = File::open(input).map_err(with_name)?;
        let size = file.metadata().map_err(with_name)?.len();
        opened.push(Input {
            name,
            size,
            reader: Box::new(BufReader::new(file)),
        });
    }
    let mut out = BufWriter::new(create(output)?);
    let result = merge_into(opened, &mut out).and_then(|s| out.flush().map(|()| s));
    if result.is_err() {
        // The file is ours (created new above): no half-merged trace stays.
        drop(out);
        let _ = std::fs::remove_file(output);
    }
    result
}

/// One trace to merge: its name for messages, its size in bytes (the bound
/// on every length read from it) and its bytes.
pub struct Input<'a> {
    /// Shown in errors.
    pub name: String,
    /// Bytes in `reader`.
    pub size: u64,
    /// The trace.
    pub reader: Box<dyn Read + 'a>,
}

impl std::fmt::Debug for Input<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Input")
            .field("name", &self.name)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

/// Ids handed out over the whole merge.
#[derive(Default)]
struct Counters {
    next_sequence: u64,
    next_flow: u64,
}

/// Merges `inputs` into `out` (see the module doc).
pub fn merge_into(inputs: Vec<Input<'_>>, out: &mut impl Write) -> io::Result<MergeSummary> {
    let mut summary = MergeSummary::default();
    let mut counters = Counters {
        next_sequence: 1,
        next_flow: 1,
    };
    for (index, input) in inputs.into_iter().enumerate() {
        let name = input.name.clone();
        merge_one(
            input,
            (index as u64) << 48,
            &mut counters,
            &mut summary,
            out,
        )
        .map_err(|e| io::Error::new(e.kind(), format!("{name}: {e}")))?;
    }
    summary.sequences = u32::try_from(counters.next_sequence - 1).unwrap_or(u32::MAX);
    Ok(summary)
}

/// Copies the packets of one input to `out`, renumbered (errors are not yet
/// named).
fn merge_one(
    input: Input<'_>,
    uuid_salt: u64,
    counters: &mut Counters,
    summary: &mut MergeSummary,
    out: &mut impl Write,
) -> io::Result<()> {
    let trace_packet = FIELDS.trace_packet;
    let mut r = CountingReader {
        inner: input.reader,
        read: 0,
    };
    let mut sequences: HashMap<u64, u64> = HashMap::new();
    let mut flows: HashMap<u64, u64> = HashMap::new();
    let mut sequence = |old: u64| {
        *sequences.entry(old).or_insert_with(|| {
            counters.next_sequence += 1;
            counters.next_sequence - 1
        })
    };
    let mut next_flow = counters.next_flow;
    let mut flow = |old: u64| {
        *flows.entry(old).or_insert_with(|| {
            next_flow += 1;
            next_flow - 1
        })
    };
    let mut renumber = Renumber {
        sequence: &mut sequence,
        flow: &mut flow,
        uuid_salt,
    };
    let (mut packet, mut rewritten, mut frame) = (Vec::new(), Vec::new(), Vec::new());
    let mut write = |p: &[u8], renumber: &mut Renumber<'_>| -> io::Result<()> {
        rewritten.clear();
        rewrite_message(Message::Packet, p, &mut rewritten, renumber)?;
        frame.clear();
        encode_key(trace_packet, WireType::LengthDelimited, &mut frame);
        encode_varint(rewritten.len() as u64, &mut frame);
        out.write_all(&frame)?;
        out.write_all(&rewritten)?;
        summary.packets += 1;
        Ok(())
    };
    while read_packet(&mut r, input.size, &mut packet)? {
        match inflate_bundle(&packet)? {
            None => write(&packet, &mut renumber)?,
            Some(inner) => {
                let mut rest = &inner[..];
                let bad = || invalid("bad packet frame in compressed_packets");
                while !rest.is_empty() {
                    match decode_key(&mut rest) {
                        Ok((tag, WireType::LengthDelimited)) if tag == trace_packet => {}
                        _ => return Err(bad()),
                    }
                    let p = take_len(&mut rest).map_err(|_| bad())?;
                    write(p, &mut renumber)?;
                }
            }
        }
    }

    counters.next_flow = next_flow;
    Ok(())
}

/// Reads the next `Trace.packet` frame of `r` (a file of `size` bytes) into
/// `packet`; false at the end of the file.
fn read_packet(r: &mut CountingReader<'_>, size: u64, packet: &mut Vec<u8>) -> io::Result<bool> {
    let Some(key) = read_varint(r)? else {
        return Ok(false);
    };
    if key != u64::from(FIELDS.trace_packet << 3 | WireType::LengthDelimited as u32) {
        return Err(invalid(format!(
            "not a Perfetto trace (unexpected field key {key})"
        )));
    }
    let len = read_varint(r)?
        .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "truncated packet"))?;
    let left = size.saturating_sub(r.read);
    if len > left || len > MAX_PACKET {
        return Err(invalid(format!(
            "packet of {len} bytes at offset {} {}",
            r.read,
            if len > MAX_PACKET {
                format!("is larger than the {MAX_PACKET}-byte limit")
            } else {
                format!("runs past the end of the file ({left} bytes left)")
            }
        )));
    }
    packet.resize(len as usize, 0);
    r.read_exact(packet)?;
    Ok(true)
}

/// Counts the bytes read, to bound lengths by what is left.
struct CountingReader<'a> {
    inner: Box<dyn Read + 'a>,
    read: u64,
}

impl Read for CountingReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put_varint(out: &mut Vec<u8>, v: u64) {
        encode_varint(v, out);
    }

    const COMPRESSED_PACKETS_FIELD: u64 = field::TP_COMPRESSED_PACKETS as u64;

    /// What `rprof merge` passes as `create`.
    fn create(path: &Path) -> io::Result<File> {
        rprof_core::output::files::create_new_hinted(
            path,
            "remove it, or name another output with -o",
        )
    }

    fn merge(inputs: &[&Path], output: &Path) -> io::Result<MergeSummary> {
        super::merge(inputs, output, create)
    }

    fn message(fields: &[(u64, u64)]) -> Vec<u8> {
        let mut p = Vec::new();
        for &(f, v) in fields {
            put_varint(&mut p, f << 3);
            put_varint(&mut p, v);
        }
        p
    }

    /// A packet with varint `fields` and a TrackEvent (field 11) whose
    /// fields are `event`, followed by an opaque string field 99.
    fn packet(fields: &[(u64, u64)], event: &[(u64, u64)]) -> Vec<u8> {
        let mut p = message(fields);
        let e = message(event);
        put_varint(&mut p, 11 << 3 | 2);
        put_varint(&mut p, e.len() as u64);
        p.extend_from_slice(&e);
        put_varint(&mut p, 99 << 3 | 2);
        put_varint(&mut p, 3);
        p.extend_from_slice(b"xyz");
        p
    }

    fn file(packets: &[Vec<u8>]) -> Vec<u8> {
        let mut f = Vec::new();
        for p in packets {
            put_varint(&mut f, 10);
            put_varint(&mut f, p.len() as u64);
            f.extend_from_slice(p);
        }
        f
    }

    fn descriptor(seq: u64, uuid: u64, parent: u64) -> Vec<u8> {
        let mut p = message(&[(10, seq)]);
        let d = message(&[(1, uuid), (5, parent)]);
        put_varint(&mut p, 60 << 3 | 2);
        put_varint(&mut p, d.len() as u64);
        p.extend_from_slice(&d);
        p
    }

    #[test]
    fn renumbers_sequences_and_uuids_per_input_and_keeps_other_bytes() {
        let dir = std::env::temp_dir().join(format!("rprof-merge-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = dir.join("a.pftrace");
        let b = dir.join("b.pftrace");
        let o = dir.join("o.pftrace");
        let a_packets = [
            descriptor(1, 5, 4),
            packet(&[(8, 100), (10, 1)], &[(9, 1), (11, 5)]),
        ];
        std::fs::write(&a, file(&a_packets)).unwrap();
        std::fs::write(
            &b,
            file(&[
                descriptor(1, 5, 4),
                packet(&[(10, 1), (8, 300)], &[(11, 5)]),
                packet(&[(10, 7)], &[(11, 0)]),
            ]),
        )
        .unwrap();
        let s = merge(&[&a, &b], &o).unwrap();
        assert_eq!(
            s,
            MergeSummary {
                packets: 5,
                sequences: 3
            }
        );
        let salt = 1u64 << 48;
        let mut expect = a_packets.to_vec();
        expect.extend([
            descriptor(2, 5 ^ salt, 4 ^ salt),
            packet(&[(10, 2), (8, 300)], &[(11, 5 ^ salt)]),
            packet(&[(10, 3)], &[(11, 0)]),
        ]);
        assert_eq!(std::fs::read(&o).unwrap(), file(&expect));
        // The output is never overwritten.
        let err = merge(&[&a, &b], &o).unwrap_err().to_string();
        assert!(err.contains("o.pftrace already exists"), "{err}");
        assert_eq!(std::fs::read(&o).unwrap(), file(&expect));
        std::fs::remove_file(&o).unwrap();
        std::fs::write(&b, b"garbage").unwrap();
        let err = merge(&[&a, &b], &o).unwrap_err();
        assert!(err.to_string().contains("b.pftrace"), "{err}");
        assert!(!o.exists(), "a failed merge leaves no output");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A TrackEvent packet on sequence `seq` with `flows` (fixed64 field
    /// 47) and `terminating` (48), as rprof's writer encodes them.
    fn flow_packet(seq: u64, flows: &[u64], terminating: &[u64]) -> Vec<u8> {
        let mut p = message(&[(10, seq)]);
        let mut e = message(&[(11, 3)]);
        for (field, ids) in [(47u64, flows), (48, terminating)] {
            for &id in ids {
                put_varint(&mut e, field << 3 | 1);
                e.extend_from_slice(&id.to_le_bytes());
            }
        }
        put_varint(&mut p, 11 << 3 | 2);
        put_varint(&mut p, e.len() as u64);
        p.extend_from_slice(&e);
        p
    }

    fn merged(inputs: &[Vec<u8>]) -> io::Result<(MergeSummary, Vec<u8>)> {
        let mut out = Vec::new();
        let inputs = inputs
            .iter()
            .enumerate()
            .map(|(i, f)| Input {
                name: format!("in{i}"),
                size: f.len() as u64,
                reader: Box::new(&f[..]),
            })
            .collect();
        merge_into(inputs, &mut out).map(|s| (s, out))
    }

    #[test]
    fn flow_ids_of_two_hosts_with_the_same_pid_stay_apart() {
        // The same pid on two machines: the same correlation ids.
        let id = |n: u64| 4242u64 << 32 | n;
        let host = file(&[
            flow_packet(1, &[id(1), id(2)], &[]),
            flow_packet(1, &[], &[id(1)]),
            flow_packet(1, &[], &[id(2)]),
        ]);
        let (s, out) = merged(&[host.clone(), host]).unwrap();
        assert_eq!(s.packets, 6);
        let mut want = file(&[
            flow_packet(1, &[1, 2], &[]),
            flow_packet(1, &[], &[1]),
            flow_packet(1, &[], &[2]),
        ]);
        let second = [
            flow_packet(2, &[3, 4], &[]),
            flow_packet(2, &[], &[3]),
            flow_packet(2, &[], &[4]),
        ];
        let mut salted = Vec::new();
        for p in second {
            // Track uuid 3 of input 1 becomes 3 ^ 1 << 48.
            let mut r = Renumber {
                sequence: &mut |s| s,
                flow: &mut |f| f,
                uuid_salt: 1 << 48,
            };
            let mut q = Vec::new();
            rewrite_message(Message::Packet, &p, &mut q, &mut r).unwrap();
            salted.push(q);
        }
        want.extend(file(&salted));
        assert_eq!(out, want);
    }

    #[test]
    fn packed_flow_ids_are_renumbered_too() {
        let mut p = message(&[(10, 1)]);
        let mut e = Vec::new();
        put_varint(&mut e, 47 << 3 | 2);
        put_varint(&mut e, 16);
        e.extend_from_slice(&77u64.to_le_bytes());
        e.extend_from_slice(&99u64.to_le_bytes());
        put_varint(&mut p, 11 << 3 | 2);
        put_varint(&mut p, e.len() as u64);
        p.extend_from_slice(&e);
        let (_, out) = merged(&[file(&[p.clone()]), file(&[p])]).unwrap();
        let ids: Vec<u64> = (0..4)
            .map(|i| {
                let at = out.len() / 2 * (i / 2) + out.len() / 2 - 16 + 8 * (i % 2);
                u64::from_le_bytes(out[at..at + 8].try_into().unwrap())
            })
            .collect();
        assert_eq!(ids, [1, 2, 3, 4]);
    }

    #[test]
    fn a_length_beyond_the_file_is_refused_before_allocating() {
        let mut f = Vec::new();
        put_varint(&mut f, 10);
        put_varint(&mut f, u64::MAX >> 1);
        let err = merged(&[f]).unwrap_err().to_string();
        assert!(err.starts_with("in0: packet of"), "{err}");
        assert!(err.contains("bytes at offset"), "{err}");
        let mut f = Vec::new();
        put_varint(&mut f, 10);
        put_varint(&mut f, 5);
        f.extend_from_slice(b"abc");
        let err = merged(&[f]).unwrap_err().to_string();
        assert!(
            err.contains("runs past the end of the file (3 bytes left)"),
            "{err}"
        );
    }

    /// Deterministic mutation fuzzing on stable Rust: seed traces (rprof's
    /// shapes: descriptors, events with flows, defaults) mutated by a fixed
    /// xorshift sequence; every result must be Ok or an error, never a
    /// panic, and the output never larger than its inputs allow.
    /// `RPROF_FUZZ_ITERATIONS` raises the count (CI: the default).
    #[test]
    fn fuzz_merge_never_panics() {
        let iterations: u64 = std::env::var("RPROF_FUZZ_ITERATIONS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20_000);
        let seeds = [
            file(&[
                descriptor(1, 5, 4),
                packet(&[(8, 100), (10, 1)], &[(9, 1), (11, 5)]),
            ]),
            file(&[
                flow_packet(1, &[1 << 32 | 1, 1 << 32 | 2], &[]),
                flow_packet(1, &[], &[1 << 32 | 1]),
            ]),
            {
                // A packet with defaults (59 → 11 → 11).
                let d = message(&[(11, 9)]);
                let mut pd = Vec::new();
                put_varint(&mut pd, 11 << 3 | 2);
                put_varint(&mut pd, d.len() as u64);
                pd.extend_from_slice(&d);
                let mut p = message(&[(10, 2)]);
                put_varint(&mut p, 59 << 3 | 2);
                put_varint(&mut p, pd.len() as u64);
                p.extend_from_slice(&pd);
                file(&[p])
            },
        ];
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut ok, mut errors) = (0u64, 0u64);
        for _ in 0..iterations {
            let mut inputs = Vec::new();
            for _ in 0..1 + next() % 2 {
                let mut f = seeds[(next() % seeds.len() as u64) as usize].clone();
                for _ in 0..1 + next() % 4 {
                    let at = (next() % (f.len() as u64 + 1)) as usize;
                    match next() % 5 {
                        0 if at < f.len() => f[at] ^= 1 << (next() % 8),
                        1 if at < f.len() => {
                            f[at] = [0x00, 0x7f, 0x80, 0xff][(next() % 4) as usize]
                        }
                        2 => f.insert(at, next() as u8),
                        3 if at < f.len() => {
                            f.truncate(at);
                        }
                        _ => f
                            .splice(at..at, [0xff; 9].iter().copied().chain([0x01]))
                            .for_each(drop),
                    }
                }
                inputs.push(f);
            }
            let total: usize = inputs.iter().map(Vec::len).sum();
            match std::panic::catch_unwind(|| merged(&inputs)) {
                Ok(Ok((_, out))) => {
                    // Renumbered ids are at most 10 bytes more per field.
                    assert!(out.len() <= 8 * total + 64, "{} from {total}", out.len());
                    ok += 1;
                }
                Ok(Err(e)) => {
                    assert!(e.to_string().starts_with("in"), "{e}");
                    errors += 1;
                }
                Err(_) => panic!("merge panicked on inputs {inputs:?}"),
            }
        }
        assert_eq!(ok + errors, iterations);
        assert!(ok > 0 && errors > 0, "ok {ok}, errors {errors}");
    }

    /// A `compressed_packets` bundle merges like its packets written plainly.
    #[test]
    fn inflates_compressed_bundles() {
        use std::io::Write as _;
        let dir = std::env::temp_dir().join(format!("rprof-merge-z-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let packets = [
            descriptor(1, 5, 4),
            packet(&[(8, 100), (10, 1)], &[(9, 1), (11, 5)]),
        ];
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(&file(&packets)).unwrap();
        let z = z.finish().unwrap();
        let mut bundle = Vec::new();
        put_varint(&mut bundle, COMPRESSED_PACKETS_FIELD << 3 | 2);
        put_varint(&mut bundle, z.len() as u64);
        bundle.extend_from_slice(&z);
        let (plain, packed) = (dir.join("plain.pftrace"), dir.join("packed.pftrace"));
        let (o1, o2) = (dir.join("o1.pftrace"), dir.join("o2.pftrace"));
        std::fs::write(&plain, file(&packets)).unwrap();
        std::fs::write(&packed, file(&[bundle])).unwrap();
        let s1 = merge(&[&plain, &plain], &o1).unwrap();
        let s2 = merge(&[&packed, &packed], &o2).unwrap();
        assert_eq!(s1, s2);
        assert_eq!(s2.packets, 4);
        assert_eq!(std::fs::read(&o1).unwrap(), std::fs::read(&o2).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn field_numbers_read_from_the_generated_types_are_upstream_numbers() {
        assert_eq!(
            Fields::from_generated(),
            Fields {
                trace_packet: 1,
                sequence_id: 10,
                track_event: 11,
                track_descriptor: 60,
                packet_defaults: 59,
                compressed_packets: 50,
                event_track_uuid: 11,
                flow_ids: 47,
                terminating_flow_ids: 48,
                uuid: 1,
                parent_uuid: 5,
                track_event_defaults: 11,
                defaults_track_uuid: 11,
            }
        );
    }

    /// A trace as rprof's writer makes it by default (delta timestamps,
    /// one compressed bundle): a custom track with two kernels whose flows
    /// are the correlation ids of pid 4242, as on two hosts.
    fn writer_trace() -> Vec<u8> {
        use crate::{ClockReadings, CustomTrack, Slice, TraceWriter};
        let mut w = TraceWriter::new(Vec::new());
        let clocks = ClockReadings {
            boottime_ns: 1_000,
            monotonic_ns: 900,
            realtime_ns: 5_000,
        };
        w.write_clock_snapshot(&clocks).unwrap();
        w.write_custom_track(&CustomTrack::new(7, "GPU 0")).unwrap();
        let name = w.intern_event_name("k");
        for n in 1..=2u64 {
            let id = [4242u64 << 32 | n];
            w.write_slice(&Slice {
                terminating_flow_ids: &id,
                correlation_id: Some(id[0]),
                ..Slice::new(7, 2_000 * n, 2_000 * n + 500, name)
            })
            .unwrap();
        }
        w.finish().unwrap()
    }

    /// The flow ids of every track event of `trace`, in order.
    fn flows_of(trace: &[u8]) -> Vec<u64> {
        crate::decode_trace(trace)
            .unwrap()
            .packet
            .into_iter()
            .filter_map(|p| match p.data {
                Some(Data::TrackEvent(e)) => Some(e),
                _ => None,
            })
            .flat_map(|e| e.flow_ids.into_iter().chain(e.terminating_flow_ids))
            .collect()
    }

    #[test]
    fn writer_traces_of_two_hosts_with_the_same_pid_get_distinct_flow_ids() {
        let host = writer_trace();
        assert_eq!(flows_of(&host), [4242 << 32 | 1, 4242 << 32 | 2]);
        let (s, out) = merged(&[host.clone(), host]).unwrap();
        assert_eq!(s.sequences, 2);
        assert_eq!(flows_of(&out), [1, 2, 3, 4]);
        // Sequences and uuids: input 1's track is 7 ^ 1 << 48 on sequence 2.
        let packets = crate::decode_trace(&out).unwrap().packet;
        let tracks: Vec<(u32, u64)> = packets
            .iter()
            .filter_map(|p| match &p.data {
                Some(Data::TrackDescriptor(d)) => Some((p.trusted_packet_sequence_id?, d.uuid?)),
                _ => None,
            })
            .collect();
        assert_eq!(tracks, [(1, 7), (2, 7 ^ 1 << 48)]);
    }

    /// A trace cut anywhere, or overwritten with garbage, is merged up to a
    /// packet boundary or refused with an error naming its file; never a
    /// panic, and a refused merge leaves no output.
    #[test]
    fn a_truncated_or_garbage_input_is_an_error_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("rprof-merge-cut-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.pftrace");
        let bad = dir.join("cut.pftrace");
        let out = dir.join("out.pftrace");
        let trace = writer_trace();
        std::fs::write(&good, &trace).unwrap();
        let (mut ok, mut refused) = (0, 0);
        for cut in 1..trace.len() {
            std::fs::write(&bad, &trace[..cut]).unwrap();
            match std::panic::catch_unwind(|| merge(&[&good, &bad], &out)) {
                Ok(Ok(_)) => {
                    ok += 1;
                    std::fs::remove_file(&out).unwrap();
                }
                Ok(Err(e)) => {
                    let e = e.to_string();
                    assert!(
                        e.starts_with(&format!("{}: ", bad.display())),
                        "cut {cut}: {e}"
                    );
                    assert!(!out.exists(), "cut {cut} left an output");
                    refused += 1;
                }
                Err(_) => panic!("merge panicked on {cut} bytes of {}", trace.len()),
            }
        }
        // The writer put every packet into one bundle: each cut is inside it.
        assert_eq!((ok, refused), (0, trace.len() - 1));
        for garbage in [
            &b"\xff\xff\xff"[..],
            b"\x0a\x05ab",
            b"hello world",
            b"\x0a\x80",
        ] {
            std::fs::write(&bad, garbage).unwrap();
            let e = merge(&[&good, &bad], &out).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("{}: ", bad.display())),
                "{garbage:?}: {e}"
            );
            assert!(!out.exists());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
