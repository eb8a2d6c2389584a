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
//!   below 2^48 as rprof writes them, distinct from every other input's;
//! - flow ids (`TrackEvent.flow_ids` 47 and `terminating_flow_ids` 48) are
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
//! rprof's schema subset survive. A `compressed_packets` bundle (rprof's
//! default encoding) is inflated (at most [`MAX_PACKET`] bytes) and its
//! packets are rewritten one by one (the output is not recompressed). Delta
//! timestamps need no rewrite: their clock (id 64..127) and the defaults
//! naming it are scoped to the sequence, which is renumbered as a whole.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

/// `TracePacket.trusted_packet_sequence_id`.
const SEQUENCE_ID_FIELD: u64 = 10;
/// `Trace.packet`.
const PACKET_FIELD: u64 = 1;
/// The largest packet accepted (rprof writes packets of a few KiB; Perfetto's
/// own limit for a packet is lower).
pub const MAX_PACKET: u64 = 64 << 20;
/// `TracePacket.compressed_packets`: zlib-deflated `Trace.packet` frames.
const COMPRESSED_PACKETS_FIELD: u64 = 50;

/// The packets inside `packet` if it is a `compressed_packets` bundle (its
/// only field, as rprof and Perfetto's service write it); inflating more
/// than [`MAX_PACKET`] bytes is refused.
fn inflate_bundle(packet: &[u8]) -> io::Result<Option<Vec<u8>>> {
    let mut pos = 0;
    if packet.is_empty() || varint_from(packet, &mut pos)? != (COMPRESSED_PACKETS_FIELD << 3 | 2) {
        return Ok(None);
    }
    let len = varint_from(packet, &mut pos)? as usize;
    let data = pos
        .checked_add(len)
        .and_then(|end| packet.get(pos..end))
        .ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "truncated compressed_packets")
        })?;
    let mut inner = Vec::new();
    flate2::read::ZlibDecoder::new(data)
        .take(MAX_PACKET + 1)
        .read_to_end(&mut inner)?;
    if inner.len() as u64 > MAX_PACKET {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("compressed_packets inflate to more than {MAX_PACKET} bytes"),
        ));
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
    Flow,
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
        (TrackEvent, 47 | 48, 1 | 2) => Action::Flow,
        (TrackDescriptor, 1, 0) | (TrackDescriptor, 5, 0) => Action::Uuid,
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
            1 => {
                if let Action::Flow = act {
                    let bytes: [u8; 8] = buf
                        .get(pos..pos + 8)
                        .and_then(|b| b.try_into().ok())
                        .ok_or_else(|| bad("field runs past the end of its message"))?;
                    pos += 8;
                    put_varint(out, key);
                    out.extend_from_slice(&(r.flow)(u64::from_le_bytes(bytes)).to_le_bytes());
                    continue;
                }
                pos += 8
            }
            2 => {
                let len = varint_from(buf, &mut pos)? as usize;
                let body = pos;
                pos = pos.checked_add(len).ok_or_else(|| bad("length overflow"))?;
                if pos > buf.len() {
                    return Err(bad("field runs past the end of its message"));
                }
                if let Action::Flow = act {
                    // Packed ids, as another producer may write them.
                    if len % 8 != 0 {
                        return Err(bad("packed flow ids not a multiple of 8 bytes"));
                    }
                    put_varint(out, key);
                    put_varint(out, len as u64);
                    for id in buf[body..pos].chunks_exact(8) {
                        let id = u64::from_le_bytes(id.try_into().unwrap_or([0; 8]));
                        out.extend_from_slice(&(r.flow)(id).to_le_bytes());
                    }
                    continue;
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

/// Merges `inputs` into `output`, which must not exist
/// ([`rprof_core::output::files::create_new`]).
pub fn merge(inputs: &[&Path], output: &Path) -> io::Result<MergeSummary> {
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
    let mut out = BufWriter::new(rprof_core::output::files::create_new_hinted(
        output,
        "remove it, or name another output with -o",
    )?);
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

/// Merges `inputs` into `out` (see the module doc).
pub fn merge_into(inputs: Vec<Input<'_>>, out: &mut impl Write) -> io::Result<MergeSummary> {
    let mut summary = MergeSummary::default();
    let mut next_sequence = 1u64;
    let mut next_flow = 1u64;
    let mut packet = Vec::new();
    let mut rewritten = Vec::new();
    let mut frame = Vec::new();
    for (index, input) in inputs.into_iter().enumerate() {
        let uuid_salt = (index as u64) << 48;
        let name = input.name;
        let with_name = |e: io::Error| io::Error::new(e.kind(), format!("{name}: {e}"));
        let mut r = CountingReader {
            inner: input.reader,
            read: 0,
        };
        let mut seen: HashMap<u64, u64> = HashMap::new();
        let mut flows: HashMap<u64, u64> = HashMap::new();
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
            let left = input.size.saturating_sub(r.read);
            if len > left || len > MAX_PACKET {
                return Err(with_name(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "packet of {len} bytes at offset {} {}",
                        r.read,
                        if len > MAX_PACKET {
                            format!("is larger than the {MAX_PACKET}-byte limit")
                        } else {
                            format!("runs past the end of the file ({left} bytes left)")
                        }
                    ),
                )));
            }
            packet.resize(len as usize, 0);
            r.read_exact(&mut packet).map_err(with_name)?;
            rewritten.clear();
            let mut sequence = |old: u64| {
                *seen.entry(old).or_insert_with(|| {
                    let id = next_sequence;
                    next_sequence += 1;
                    id
                })
            };
            let mut flow = |old: u64| {
                *flows.entry(old).or_insert_with(|| {
                    let id = next_flow;
                    next_flow += 1;
                    id
                })
            };
            let mut renumber = Renumber {
                sequence: &mut sequence,
                flow: &mut flow,
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
                        if varint_from(&inner, &mut pos).map_err(with_name)?
                            != (PACKET_FIELD << 3 | 2)
                        {
                            return Err(bad());
                        }
                        let len = varint_from(&inner, &mut pos).map_err(with_name)? as usize;
                        let p = pos
                            .checked_add(len)
                            .and_then(|end| inner.get(pos..end))
                            .ok_or_else(bad)?;
                        write(p).map_err(with_name)?;
                        pos += len;
                    }
                }
            }
        }
    }
    summary.sequences = u32::try_from(next_sequence - 1).unwrap_or(u32::MAX);
    Ok(summary)
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
}
