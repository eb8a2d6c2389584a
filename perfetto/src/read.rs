//! [`decode_trace`]: a written trace back as plain prost packets.

use std::collections::HashMap;
use std::io::{self, Read};

use flate2::read::ZlibDecoder;
use prost::Message;

use crate::protos::{Trace, TracePacket};

use crate::writer::field;

// The fields outside the schema subset, from the writer's one table.
const COMPRESSED_PACKETS: u64 = field::TP_COMPRESSED_PACKETS as u64;
const TRACE_PACKET_DEFAULTS: u64 = field::TP_TRACE_PACKET_DEFAULTS as u64;
const DEFAULTS_TIMESTAMP_CLOCK_ID: u64 = field::TPD_TIMESTAMP_CLOCK_ID as u64;

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

fn varint(buf: &[u8], pos: &mut usize) -> io::Result<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos).ok_or_else(|| bad("truncated varint"))?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(bad("varint too long"))
}

/// Calls `f(field, wire type, value or bytes)` for each field of `buf`; the
/// value is the varint, or the fixed64 bits, or 0 with `bytes` for
/// length-delimited fields.
fn fields(buf: &[u8], mut f: impl FnMut(u64, u64, u64, &[u8]) -> io::Result<()>) -> io::Result<()> {
    let mut pos = 0;
    while pos < buf.len() {
        let key = varint(buf, &mut pos)?;
        let (field, wt) = (key >> 3, key & 7);
        match wt {
            0 => {
                let v = varint(buf, &mut pos)?;
                f(field, wt, v, &[])?;
            }
            1 | 5 => {
                let n = if wt == 1 { 8 } else { 4 };
                let b = buf
                    .get(pos..pos + n)
                    .ok_or_else(|| bad("truncated fixed field"))?;
                let mut v = [0u8; 8];
                v[..n].copy_from_slice(b);
                pos += n;
                f(field, wt, u64::from_le_bytes(v), &[])?;
            }
            2 => {
                let len = varint(buf, &mut pos)? as usize;
                let b = buf
                    .get(pos..pos + len)
                    .ok_or_else(|| bad("truncated field"))?;
                pos += len;
                f(field, wt, 0, b)?;
            }
            _ => return Err(bad("unsupported wire type")),
        }
    }
    Ok(())
}

/// Per-sequence clock state while reading.
#[derive(Default)]
struct Sequence {
    /// Default `timestamp_clock_id` from `TracePacketDefaults`.
    default_clock: Option<u32>,
    /// Incremental clocks: id -> (last value, offset to BOOTTIME).
    delta: HashMap<u32, (i64, i64)>,
}

/// Decodes a `.pftrace` written by [`crate::TraceWriter`] with any
/// [`crate::WriterOptions`] into plain packets, as trace_processor sees them:
/// `compressed_packets` bundles are inflated in place, and timestamps on a
/// sequence's incremental clock (given explicitly or by the sequence's
/// `TracePacketDefaults`) are accumulated and converted to absolute
/// BOOTTIME ns (`timestamp_clock_id` cleared). Clock snapshots keep their
/// clocks. For tests and tools; not a general Perfetto reader (only
/// incremental sequence clocks are converted, other clock ids are kept).
pub fn decode_trace(bytes: &[u8]) -> io::Result<Trace> {
    let mut trace = Trace::default();
    let mut seqs: HashMap<u32, Sequence> = HashMap::new();
    decode_into(bytes, &mut trace, &mut seqs)?;
    Ok(trace)
}

fn decode_into(
    bytes: &[u8],
    trace: &mut Trace,
    seqs: &mut HashMap<u32, Sequence>,
) -> io::Result<()> {
    fields(bytes, |field, wt, _, raw| {
        if field != 1 || wt != 2 {
            return Err(bad("not a Trace: unexpected top-level field"));
        }
        let mut compressed = None;
        let mut default_clock = None;
        fields(raw, |f, w, _, b| {
            if f == COMPRESSED_PACKETS && w == 2 {
                compressed = Some(b.to_vec());
            } else if f == TRACE_PACKET_DEFAULTS && w == 2 {
                default_clock = Some(None);
                fields(b, |f2, w2, v, _| {
                    if f2 == DEFAULTS_TIMESTAMP_CLOCK_ID && w2 == 0 {
                        default_clock = Some(Some(v as u32));
                    }
                    Ok(())
                })?;
            }
            Ok(())
        })?;
        if let Some(z) = compressed {
            let mut inner = Vec::new();
            ZlibDecoder::new(&z[..]).read_to_end(&mut inner)?;
            return decode_into(&inner, trace, seqs);
        }
        let mut p = TracePacket::decode(raw).map_err(io::Error::other)?;
        let seq_id = p.trusted_packet_sequence_id.unwrap_or(0);
        let seq = seqs.entry(seq_id).or_default();
        if p.sequence_flags.unwrap_or(0) & 1 != 0 {
            seq.default_clock = None;
        }
        if let Some(c) = default_clock {
            seq.default_clock = c;
        }
        if let Some(crate::protos::trace_packet::Data::ClockSnapshot(cs)) = &p.data {
            let boot = cs
                .clocks
                .iter()
                .find(|c| c.clock_id == Some(crate::protos::BuiltinClock::Boottime as u32))
                .and_then(|c| c.timestamp)
                .map(|t| t as i64);
            for c in &cs.clocks {
                if c.is_incremental == Some(true) {
                    let ts = c.timestamp.unwrap_or(0) as i64;
                    let offset = boot.map_or(0, |b| b - ts);
                    seq.delta.insert(c.clock_id.unwrap_or(0), (ts, offset));
                }
            }
            trace.packet.push(p);
            return Ok(());
        }
        if let Some(ts) = p.timestamp {
            let clock = p.timestamp_clock_id.or(seq.default_clock);
            if let Some((last, offset)) = clock.and_then(|c| seq.delta.get_mut(&c)) {
                *last = last.wrapping_add(ts as i64);
                p.timestamp = Some((*last + *offset) as u64);
                p.timestamp_clock_id = None;
            }
        }
        trace.packet.push(p);
        Ok(())
    })
}

/// What [`count_slices`] found in a trace: slices (BEGIN events) and
/// instants by their event name, resolved through each sequence's interned
/// names, plus how many packets the trace holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SliceCounts {
    /// Slices per name (`TYPE_SLICE_BEGIN` events).
    pub slices: std::collections::BTreeMap<String, u64>,
    /// Instants per name (`TYPE_INSTANT` events).
    pub instants: std::collections::BTreeMap<String, u64>,
    /// Track events whose name could not be resolved (an interned id the
    /// sequence never defined): 0 in a valid trace.
    pub unnamed: u64,
    /// Packets, with the packets inside `compressed_packets` bundles counted
    /// one by one (the bundles themselves not).
    pub packets: u64,
    /// Track descriptors.
    pub track_descriptors: u64,
}

impl SliceCounts {
    /// All slices.
    pub fn total_slices(&self) -> u64 {
        self.slices.values().sum()
    }
}

/// Counts a trace's slices and instants per name while reading it once from
/// `r`, one packet at a time: memory is bounded by the interned names, not
/// by the size of the trace (a ten-million-dispatch trace is counted in a
/// few MiB). Reads what [`crate::TraceWriter`] writes with any options,
/// [`crate::merge`]'s output included (several sequences, each with its own
/// interned names, reset where a packet clears the incremental state).
pub fn count_slices(r: impl Read) -> io::Result<SliceCounts> {
    let mut r = io::BufReader::with_capacity(1 << 16, r);
    let mut counts = SliceCounts::default();
    let mut names: HashMap<u32, HashMap<u64, String>> = HashMap::new();
    let mut packet = Vec::new();
    loop {
        let mut tag = [0u8; 1];
        match r.read(&mut tag)? {
            0 => break,
            _ if tag[0] != 0x0a => return Err(bad("not a Trace: unexpected top-level field")),
            _ => {}
        }
        let mut len = 0u64;
        for shift in (0..64).step_by(7) {
            let mut b = [0u8; 1];
            r.read_exact(&mut b)?;
            len |= u64::from(b[0] & 0x7f) << shift;
            if b[0] & 0x80 == 0 {
                break;
            }
        }
        packet.resize(len as usize, 0);
        r.read_exact(&mut packet)?;
        count_packet(&packet, &mut counts, &mut names)?;
    }
    Ok(counts)
}

/// One packet (or bundle) of [`count_slices`].
fn count_packet(
    raw: &[u8],
    counts: &mut SliceCounts,
    names: &mut HashMap<u32, HashMap<u64, String>>,
) -> io::Result<()> {
    let mut compressed = None;
    fields(raw, |f, w, _, b| {
        if f == COMPRESSED_PACKETS && w == 2 {
            compressed = Some(b.to_vec());
        }
        Ok(())
    })?;
    if let Some(z) = compressed {
        let mut inner = Vec::new();
        ZlibDecoder::new(&z[..]).read_to_end(&mut inner)?;
        return fields(&inner, |f, w, _, b| {
            if f != 1 || w != 2 {
                return Err(bad("bundle: unexpected field"));
            }
            count_packet(b, counts, names)
        });
    }
    use crate::protos::trace_packet::Data;
    use crate::protos::track_event::{NameField, Type};
    counts.packets += 1;
    let p = TracePacket::decode(raw).map_err(io::Error::other)?;
    let seq = names
        .entry(p.trusted_packet_sequence_id.unwrap_or(0))
        .or_default();
    if p.sequence_flags.unwrap_or(0) & 1 != 0 {
        seq.clear();
    }
    if let Some(interned) = &p.interned_data {
        for n in &interned.event_names {
            if let (Some(iid), Some(name)) = (n.iid, &n.name) {
                seq.insert(iid, name.clone());
            }
        }
    }
    match &p.data {
        Some(Data::TrackDescriptor(_)) => counts.track_descriptors += 1,
        Some(Data::TrackEvent(e)) => {
            let map = match e.r#type {
                Some(t) if t == Type::SliceBegin as i32 => &mut counts.slices,
                Some(t) if t == Type::Instant as i32 => &mut counts.instants,
                _ => return Ok(()),
            };
            let name = match &e.name_field {
                Some(NameField::NameIid(iid)) => seq.get(iid).cloned(),
                Some(NameField::Name(n)) => Some(n.clone()),
                None => None,
            };
            match name {
                Some(n) => *map.entry(n).or_insert(0) += 1,
                None => counts.unnamed += 1,
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ClockReadings, CustomTrack, Slice, TraceWriter, WriterOptions};

    fn trace(options: WriterOptions, slices: u64) -> Vec<u8> {
        let mut w = TraceWriter::with_options(Vec::new(), options);
        w.write_clock_snapshot(&ClockReadings {
            boottime_ns: 1_000,
            monotonic_ns: 900,
            realtime_ns: 5_000,
        })
        .unwrap();
        w.write_custom_track(&CustomTrack::new(10, "queue 1"))
            .unwrap();
        let a = w.intern_event_name("kernel_a");
        let b = w.intern_event_name("kernel_b");
        let mark = w.intern_event_name("mark");
        for i in 0..slices {
            let name = if i % 3 == 0 { b } else { a };
            w.write_slice(&Slice::new(10, 2_000 + 10 * i, 2_005 + 10 * i, name))
                .unwrap();
        }
        w.write_instant(10, 1_500, mark, &[]).unwrap();
        w.finish().unwrap()
    }

    #[test]
    fn counts_every_slice_by_name_in_either_encoding() {
        for options in [WriterOptions::default(), WriterOptions::plain()] {
            // Enough slices for several compressed bundles.
            let bytes = trace(options, 100_000);
            let c = count_slices(&bytes[..]).unwrap();
            assert_eq!(c.slices.get("kernel_a"), Some(&66_666));
            assert_eq!(c.slices.get("kernel_b"), Some(&33_334));
            assert_eq!(c.total_slices(), 100_000);
            assert_eq!(c.instants.get("mark"), Some(&1));
            assert_eq!((c.unnamed, c.track_descriptors), (0, 1));
            assert_eq!(c.packets, decode_trace(&bytes).unwrap().packet.len() as u64);
        }
    }

    #[test]
    fn a_truncated_trace_is_an_error() {
        let bytes = trace(WriterOptions::plain(), 10);
        assert!(count_slices(&bytes[..bytes.len() - 3]).is_err());
    }
}
