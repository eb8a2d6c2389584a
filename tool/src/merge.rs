//! `rprof merge`: one Perfetto trace from the traces of several processes.
//!
//! A `.pftrace` file is a plain sequence of `TracePacket`s, and rprof's
//! correlation (flow) ids carry the pid, so merging is concatenation with two
//! fixes:
//! - every file's writer uses the same `trusted_packet_sequence_id`, and
//!   interned names are scoped to a sequence: each input's sequences are
//!   renumbered so that no two inputs share one;
//! - track uuids are small per-file numbers (they are repeated on every
//!   event, so they are kept short): input `k` (0-based) has its uuids XORed
//!   with `k << 48`, which keeps them distinct within the file and, for uuids
//!   below 2^48 as rprof writes them, distinct from every other input's.
//!
//! The rewrite works on the wire format (the sequence id, and the uuid fields
//! of track descriptors, track events and packet defaults) and copies every
//! other byte unchanged, so packets from other producers and fields outside
//! rprof's schema subset survive. A `compressed_packets` bundle (rprof's
//! default encoding) is inflated and its packets are rewritten one by one
//! (the output is not recompressed). Delta timestamps need no rewrite: their
//! clock (id 64..127) and the defaults naming it are scoped to the sequence,
//! which is renumbered as a whole.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

/// `TracePacket.trusted_packet_sequence_id`.
const SEQUENCE_ID_FIELD: u64 = 10;
/// `Trace.packet`.
const PACKET_FIELD: u64 = 1;
/// `TracePacket.compressed_packets`: zlib-deflated `Trace.packet` frames.
const COMPRESSED_PACKETS_FIELD: u64 = 50;

/// The packets inside `packet` if it is a `compressed_packets` bundle (its
/// only field, as rprof and Perfetto's service write it).
fn inflate_bundle(packet: &[u8]) -> io::Result<Option<Vec<u8>>> {
    let mut pos = 0;
    if packet.is_empty() || varint_from(packet, &mut pos)? != (COMPRESSED_PACKETS_FIELD << 3 | 2) {
        return Ok(None);
    }
    let len = varint_from(packet, &mut pos)? as usize;
    let data = packet.get(pos..pos + len).ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidData, "truncated compressed_packets")
    })?;
    let mut inner = Vec::new();
    flate2::read::ZlibDecoder::new(data).read_to_end(&mut inner)?;
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

fn read_varint(r: &mut impl Read) -> io::Result<Option<u64>> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let mut b = [0u8; 1];
        if r.read(&mut b)? == 0 {
            return if shift == 0 {
                Ok(None)
            } else {
                Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "truncated varint",
                ))
            };
        }
        value |= u64::from(b[0] & 0x7f) << shift;
        if b[0] & 0x80 == 0 {
            return Ok(Some(value));
        }
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        "varint longer than 10 bytes",
    ))
}

fn varint_from(buf: &[u8], pos: &mut usize) -> io::Result<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "truncated varint in packet")
        })?;
        *pos += 1;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        "varint longer than 10 bytes",
    ))
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The messages whose fields the merge rewrites.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Message {
    /// `TracePacket`: 10 = sequence id; 11 = track_event, 59 = defaults,
    /// 60 = track_descriptor.
    Packet,
    /// `TrackEvent`: 11 = track_uuid.
    TrackEvent,
    /// `TrackDescriptor`: 1 = uuid, 5 = parent_uuid.
    TrackDescriptor,
    /// `TracePacketDefaults`: 11 = track_event_defaults.
    PacketDefaults,
    /// `TrackEventDefaults`: 11 = track_uuid.
    TrackEventDefaults,
}

/// What to do with one field of a message.
enum Action {
    Copy,
    Sequence,
    Uuid,
    Descend(Message),
}

fn action(msg: Message, field: u64, wire: u64) -> Action {
    use Message::*;
    match (msg, field, wire) {
        (Packet, SEQUENCE_ID_FIELD, 0) => Action::Sequence,
        (Packet, 11, 2) => Action::Descend(TrackEvent),
        (Packet, 59, 2) => Action::Descend(PacketDefaults),
        (Packet, 60, 2) => Action::Descend(TrackDescriptor),
        (PacketDefaults, 11, 2) => Action::Descend(TrackEventDefaults),
        (TrackEvent, 11, 0) | (TrackEventDefaults, 11, 0) => Action::Uuid,
        (TrackDescriptor, 1, 0) | (TrackDescriptor, 5, 0) => Action::Uuid,
        _ => Action::Copy,
    }
}

/// How the ids of one input are rewritten.
struct Renumber<'a> {
    sequence: &'a mut dyn FnMut(u64) -> u64,
    uuid_salt: u64,
}

/// Rewrites one encoded message of kind `msg` into `out`.
fn rewrite_message(
    msg: Message,
    buf: &[u8],
    out: &mut Vec<u8>,
    r: &mut Renumber<'_>,
) -> io::Result<()> {
    let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
    let mut pos = 0;
    while pos < buf.len() {
        let start = pos;
        let key = varint_from(buf, &mut pos)?;
        let (field, wire) = (key >> 3, key & 7);
        let act = action(msg, field, wire);
        match wire {
            0 => {
                let v = varint_from(buf, &mut pos)?;
                let new = match act {
                    Action::Sequence => Some((r.sequence)(v)),
                    // uuid 0 is the implicit default track: keep it.
                    Action::Uuid if v != 0 => Some(v ^ r.uuid_salt),
                    _ => None,
                };
                if let Some(new) = new {
                    put_varint(out, key);
                    put_varint(out, new);
                    continue;
                }
            }
            1 => pos += 8,
            2 => {
                let len = varint_from(buf, &mut pos)? as usize;
                let body = pos;
                pos = pos.checked_add(len).ok_or_else(|| bad("length overflow"))?;
                if pos > buf.len() {
                    return Err(bad("field runs past the end of its message"));
                }
                if let Action::Descend(inner) = act {
                    let mut sub = Vec::with_capacity(len + 8);
                    rewrite_message(inner, &buf[body..pos], &mut sub, r)?;
                    put_varint(out, key);
                    put_varint(out, sub.len() as u64);
                    out.extend_from_slice(&sub);
                    continue;
                }
            }
            5 => pos += 4,
            _ => return Err(bad("unsupported wire type")),
        }
        if pos > buf.len() {
            return Err(bad("field runs past the end of its message"));
        }
        out.extend_from_slice(&buf[start..pos]);
    }
    Ok(())
}

/// Merges `inputs` into `output`.
pub fn merge(inputs: &[&Path], output: &Path) -> io::Result<MergeSummary> {
    let mut out = BufWriter::new(File::create(output)?);
    let mut summary = MergeSummary::default();
    let mut next_sequence = 1u64;
    let mut packet = Vec::new();
    let mut rewritten = Vec::new();
    let mut frame = Vec::new();
    for (index, input) in inputs.iter().enumerate() {
        let uuid_salt = (index as u64) << 48;
        let name = input.display().to_string();
        let with_name = |e: io::Error| io::Error::new(e.kind(), format!("{name}: {e}"));
        let mut r = BufReader::new(File::open(input).map_err(with_name)?);
        let mut seen: HashMap<u64, u64> = HashMap::new();
        while let Some(key) = read_varint(&mut r).map_err(with_name)? {
            if key != (PACKET_FIELD << 3 | 2) {
                return Err(with_name(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("not a Perfetto trace (unexpected field key {key})"),
                )));
            }
            let len = read_varint(&mut r).map_err(with_name)?.ok_or_else(|| {
                with_name(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "truncated packet",
                ))
            })?;
            packet.resize(len as usize, 0);
            r.read_exact(&mut packet).map_err(with_name)?;
            let mut sequence = |old: u64| {
                *seen.entry(old).or_insert_with(|| {
                    let id = next_sequence;
                    next_sequence += 1;
                    id
                })
            };
            let mut renumber = Renumber {
                sequence: &mut sequence,
                uuid_salt,
            };
            let mut write = |p: &[u8]| -> io::Result<()> {
                rewritten.clear();
                rewrite_message(Message::Packet, p, &mut rewritten, &mut renumber)?;
                frame.clear();
                put_varint(&mut frame, PACKET_FIELD << 3 | 2);
                put_varint(&mut frame, rewritten.len() as u64);
                out.write_all(&frame)?;
                out.write_all(&rewritten)?;
                summary.packets += 1;
                Ok(())
            };
            match inflate_bundle(&packet).map_err(with_name)? {
                None => write(&packet).map_err(with_name)?,
                Some(inner) => {
                    let mut pos = 0;
                    while pos < inner.len() {
                        let bad = || {
                            with_name(io::Error::new(
                                io::ErrorKind::InvalidData,
                                "bad packet frame in compressed_packets",
                            ))
                        };
                        if varint_from(&inner, &mut pos)? != (PACKET_FIELD << 3 | 2) {
                            return Err(bad());
                        }
                        let len = varint_from(&inner, &mut pos)? as usize;
                        let p = inner.get(pos..pos + len).ok_or_else(bad)?;
                        write(p).map_err(with_name)?;
                        pos += len;
                    }
                }
            }
        }
    }
    out.flush()?;
    summary.sequences = (next_sequence - 1) as u32;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        std::fs::write(&b, b"garbage").unwrap();
        let err = merge(&[&a, &b], &o).unwrap_err();
        assert!(err.to_string().contains("b.pftrace"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
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
}
