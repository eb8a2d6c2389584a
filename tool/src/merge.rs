//! `rprof merge`: one Perfetto trace from the traces of several processes.
//!
//! A `.pftrace` file is a plain sequence of `TracePacket`s, and rprof makes
//! every id that crosses process boundaries globally unique (correlation and
//! flow ids carry the pid, track uuids are derived from the pid), so merging
//! is concatenation, with one fix: every file's writer uses the same
//! `trusted_packet_sequence_id`, and interned names are scoped to a sequence.
//! Each input's sequences are renumbered so that no two inputs share one.
//!
//! The rewrite works on the wire format (field 10 of each packet, a varint)
//! and copies every other byte unchanged, so packets from other producers and
//! fields outside rprof's schema subset survive.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

/// `TracePacket.trusted_packet_sequence_id`.
const SEQUENCE_ID_FIELD: u64 = 10;
/// `Trace.packet`.
const PACKET_FIELD: u64 = 1;

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

/// Rewrites the sequence id of one encoded packet through `renumber`.
fn rewrite_packet(
    packet: &[u8],
    out: &mut Vec<u8>,
    renumber: &mut impl FnMut(u64) -> u64,
) -> io::Result<()> {
    let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
    let mut pos = 0;
    while pos < packet.len() {
        let start = pos;
        let key = varint_from(packet, &mut pos)?;
        let (field, wire) = (key >> 3, key & 7);
        match wire {
            0 => {
                let v = varint_from(packet, &mut pos)?;
                if field == SEQUENCE_ID_FIELD {
                    put_varint(out, key);
                    put_varint(out, renumber(v));
                    continue;
                }
            }
            1 => pos += 8,
            2 => {
                let len = varint_from(packet, &mut pos)? as usize;
                pos = pos.checked_add(len).ok_or_else(|| bad("length overflow"))?;
            }
            5 => pos += 4,
            _ => return Err(bad("unsupported wire type in packet")),
        }
        if pos > packet.len() {
            return Err(bad("field runs past the end of its packet"));
        }
        out.extend_from_slice(&packet[start..pos]);
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
    for input in inputs {
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
            rewritten.clear();
            rewrite_packet(&packet, &mut rewritten, &mut |old| {
                *seen.entry(old).or_insert_with(|| {
                    let id = next_sequence;
                    next_sequence += 1;
                    id
                })
            })
            .map_err(with_name)?;
            frame.clear();
            put_varint(&mut frame, PACKET_FIELD << 3 | 2);
            put_varint(&mut frame, rewritten.len() as u64);
            out.write_all(&frame)?;
            out.write_all(&rewritten)?;
            summary.packets += 1;
        }
    }
    out.flush()?;
    summary.sequences = (next_sequence - 1) as u32;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(fields: &[(u64, u64)], payload: &[u8]) -> Vec<u8> {
        let mut p = Vec::new();
        for &(f, v) in fields {
            put_varint(&mut p, f << 3);
            put_varint(&mut p, v);
        }
        put_varint(&mut p, 11 << 3 | 2);
        put_varint(&mut p, payload.len() as u64);
        p.extend_from_slice(payload);
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

    #[test]
    fn renumbers_sequences_per_input_and_keeps_other_bytes() {
        let dir = std::env::temp_dir().join(format!("rprof-merge-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = dir.join("a.pftrace");
        let b = dir.join("b.pftrace");
        let o = dir.join("o.pftrace");
        std::fs::write(
            &a,
            file(&[
                packet(&[(8, 100), (10, 1)], b"xyz"),
                packet(&[(8, 200), (10, 1)], b""),
            ]),
        )
        .unwrap();
        std::fs::write(
            &b,
            file(&[packet(&[(10, 1), (8, 300)], b"q"), packet(&[(10, 7)], b"")]),
        )
        .unwrap();
        let s = merge(&[&a, &b], &o).unwrap();
        assert_eq!(
            s,
            MergeSummary {
                packets: 4,
                sequences: 3
            }
        );
        let expect = file(&[
            packet(&[(8, 100), (10, 1)], b"xyz"),
            packet(&[(8, 200), (10, 1)], b""),
            packet(&[(10, 2), (8, 300)], b"q"),
            packet(&[(10, 3)], b""),
        ]);
        assert_eq!(std::fs::read(&o).unwrap(), expect);
        std::fs::write(&b, b"garbage").unwrap();
        let err = merge(&[&a, &b], &o).unwrap_err();
        assert!(err.to_string().contains("b.pftrace"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
