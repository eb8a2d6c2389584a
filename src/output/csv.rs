//! `NAME_kernel_trace.csv`: one row per kernel dispatch, with rocprofv3's
//! current kernel-trace columns in rocprofv3's order (so users' scripts read
//! it by name or position), then rprof's `Private_Segment_Size` and
//! `Group_Segment_Size` (the dispatch packet's exact sizes); and,
//! with `--rpc-trace`, `NAME_rpc_trace.csv`: one row per RPC doorbell wake
//! (created on the first wake, so runs without RPC traffic get no file);
//! and, with `--marker-trace`, `NAME_marker_api_trace.csv`: one row per ROCTx
//! mark or range, with rocprofv3's columns (created on the first marker);
//! and, with `--memory-copy-trace`, `NAME_memory_copy_trace.csv`: one row
//! per async memory copy, rocprofv3's columns plus `Bytes` (created on the
//! first copy).

use std::fs::File;
use std::io::{self, BufWriter};
use std::path::Path;

use crate::config::ensure_parent;
use crate::record::{AgentInfo, DispatchRecord, InterceptRecord, RunInfo, RunMetadata};
use crate::sink::{lds_block_size, KernelInfo, RecordSink};

/// The header row, in order: rocprofv3's (develop) 22 columns, then
/// rprof's two. `Stream_Id` is 0 (no HIP stream information, as rocprofv3
/// writes without it); `LDS_Block_Size` is the dispatch's group segment
/// rounded up to [`crate::sink::LDS_BLOCK_GRANULE`]; `Scratch_Size` the
/// dispatch's private segment; the register counts come from the code
/// object's metadata (0 where it could not be read).
pub const KERNEL_TRACE_COLUMNS: [&str; 24] = [
    "Kind",
    "Agent_Id",
    "Queue_Id",
    "Stream_Id",
    "Thread_Id",
    "Dispatch_Id",
    "Kernel_Id",
    "Kernel_Name",
    "Correlation_Id",
    "Start_Timestamp",
    "End_Timestamp",
    "LDS_Block_Size",
    "Scratch_Size",
    "VGPR_Count",
    "Accum_VGPR_Count",
    "SGPR_Count",
    "Workgroup_Size_X",
    "Workgroup_Size_Y",
    "Workgroup_Size_Z",
    "Grid_Size_X",
    "Grid_Size_Y",
    "Grid_Size_Z",
    "Private_Segment_Size",
    "Group_Segment_Size",
];

/// The header row of `NAME_rpc_trace.csv`.
pub const RPC_TRACE_COLUMNS: [&str; 12] = [
    "Thread_Id",
    "Doorbell_Signal",
    "Sleep_Begin_Timestamp",
    "Wake_Timestamp",
    "Serve_End_Timestamp",
    "Sleep_Ns",
    "Serve_Ns",
    "Pending_At_Wake",
    "Pending_At_Serve_End",
    "Timeouts",
    "Ring_Timestamp",
    "Wake_Latency_Ns",
];

/// The header row of `NAME_marker_api_trace.csv` (rocprofv3's).
pub const MARKER_API_TRACE_COLUMNS: [&str; 7] = [
    "Domain",
    "Function",
    "Process_Id",
    "Thread_Id",
    "Correlation_Id",
    "Start_Timestamp",
    "End_Timestamp",
];

/// The header row of `NAME_memory_copy_trace.csv`: rocprofv3's columns,
/// then `Bytes`.
pub const MEMORY_COPY_TRACE_COLUMNS: [&str; 9] = [
    "Kind",
    "Direction",
    "Stream_Id",
    "Source_Agent_Id",
    "Destination_Agent_Id",
    "Correlation_Id",
    "Start_Timestamp",
    "End_Timestamp",
    "Bytes",
];

/// The kernel CSV's file buffer: room for many rows between writes, so an
/// app thread writing records in the writer's place finds room
/// ([`RecordSink::spare_room`]).
const KERNEL_CSV_BUFFER: usize = 256 * 1024;
/// The csv crate's own buffer in front of a `csv::Writer`'s file (its
/// default capacity).
const CSV_OWN_BUFFER: usize = 8 * 1024;

/// Streams kernel dispatches (and RPC wakes, ROCTx markers, memory copies) to CSV files.
///
/// The kernel trace is the hot file (one row per dispatch): its rows are
/// assembled in `row` with `RowWriter` for the numbers (which never need
/// quoting), the kernel name as the `csv` crate quotes it and the row's
/// last 13 fields (launch and register counts, fixed for a kernel's
/// dispatches of one shape), both cached per kernel id, then written in one
/// piece. The other files are rare and go through `csv::Writer` field by
/// field.
#[derive(Debug)]
pub struct CsvSink {
    out: BufWriter<File>,
    /// The row being assembled (reused).
    row: Vec<u8>,
    /// Per kernel id: its name field and the end of its last row.
    kernels: Vec<KernelFields>,
    rpc_path: std::path::PathBuf,
    rpc: Option<csv::Writer<BufWriter<File>>>,
    marker_path: std::path::PathBuf,
    markers: Option<csv::Writer<BufWriter<File>>>,
    pid: u32,
    copies_path: std::path::PathBuf,
    copies: Option<csv::Writer<BufWriter<File>>>,
}

/// `X_kernel_trace.csv` → `X_marker_api_trace.csv` (other names get
/// `.marker.csv`).
pub fn marker_trace_path(kernel_trace: &Path) -> std::path::PathBuf {
    let s = kernel_trace.to_string_lossy();
    match s.strip_suffix("_kernel_trace.csv") {
        Some(stem) => format!("{stem}_marker_api_trace.csv").into(),
        None => format!("{s}.marker.csv").into(),
    }
}

/// `X_kernel_trace.csv` → `X_memory_copy_trace.csv` (other names get
/// `.memory_copy.csv`).
pub fn memory_copy_trace_path(kernel_trace: &Path) -> std::path::PathBuf {
    let s = kernel_trace.to_string_lossy();
    match s.strip_suffix("_kernel_trace.csv") {
        Some(stem) => format!("{stem}_memory_copy_trace.csv").into(),
        None => format!("{s}.memory_copy.csv").into(),
    }
}

/// `X_kernel_trace.csv` → `X_rpc_trace.csv` (other names get `.rpc.csv`).
pub fn rpc_trace_path(kernel_trace: &Path) -> std::path::PathBuf {
    let s = kernel_trace.to_string_lossy();
    match s.strip_suffix("_kernel_trace.csv") {
        Some(stem) => format!("{stem}_rpc_trace.csv").into(),
        None => format!("{s}.rpc.csv").into(),
    }
}

fn to_io(e: csv::Error) -> io::Error {
    io::Error::other(e)
}

impl CsvSink {
    /// Creates (truncates) the file and its directory.
    pub fn create(path: &Path) -> io::Result<Self> {
        ensure_parent(path)?;
        let file = BufWriter::with_capacity(KERNEL_CSV_BUFFER, super::files::create_new(path)?);
        Ok(CsvSink {
            out: file,
            row: Vec::with_capacity(512),
            kernels: Vec::new(),
            rpc_path: rpc_trace_path(path),
            rpc: None,
            marker_path: marker_trace_path(path),
            markers: None,
            pid: 0,
            copies_path: memory_copy_trace_path(path),
            copies: None,
        })
    }
}

/// What rows of one kernel id repeat, cached.
#[derive(Debug, Default)]
struct KernelFields {
    /// The display name, checked on each use (`--kernel-rename` gives one
    /// kernel several names).
    name: String,
    /// The name as a CSV field (quoted by the `csv` crate where needed).
    field: Vec<u8>,
    /// The values the row ends with, and those fields as written (from
    /// `LDS_Block_Size` to `Group_Segment_Size`, with the line end); empty
    /// before the first row.
    tail_key: TailKey,
    tail: Vec<u8>,
}

/// The 13 fields after `End_Timestamp`, as numbers.
type TailKey = [u64; 13];

fn tail_key(r: &DispatchRecord, k: &KernelInfo<'_>) -> TailKey {
    let res = k.resources.unwrap_or_default();
    [
        lds_block_size(r.group_segment_size),
        u64::from(r.private_segment_size),
        u64::from(res.arch_vgpr_count),
        u64::from(res.accum_vgpr_count),
        u64::from(res.sgpr_count),
        u64::from(r.workgroup[0]),
        u64::from(r.workgroup[1]),
        u64::from(r.workgroup[2]),
        u64::from(r.grid[0]),
        u64::from(r.grid[1]),
        u64::from(r.grid[2]),
        u64::from(r.private_segment_size),
        u64::from(r.group_segment_size),
    ]
}

impl CsvSink {
    /// The cache entry of kernel `id` named `name`, its name field quoted
    /// by the `csv` crate the first time (and when the name changes).
    fn kernel_fields(&mut self, id: u64, name: &str) -> io::Result<usize> {
        let i = usize::try_from(id).unwrap_or(usize::MAX);
        if i >= self.kernels.len() {
            if i > MAX_CACHED_KERNEL_ID {
                self.kernels.resize_with(1, Default::default);
                return self.quote_into(0, name);
            }
            self.kernels.resize_with(i + 1, Default::default);
        }
        if self.kernels[i].name != name {
            return self.quote_into(i, name);
        }
        Ok(i)
    }

    /// Quotes `name` as a CSV field into cache entry `i`.
    fn quote_into(&mut self, i: usize, name: &str) -> io::Result<usize> {
        let entry = &mut self.kernels[i];
        quote_field(name, &mut entry.field);
        entry.name.clear();
        entry.name.push_str(name);
        Ok(i)
    }
}

/// `value` as one CSV field, quoted where needed exactly as the `csv` crate
/// quotes (its allocation-free core, with the same defaults; a
/// `csv::Writer` allocates an 8 KiB buffer, and one per kernel was 2 MiB of
/// allocations on a 256-kernel app). An empty value is written as nothing.
fn quote_field(value: &str, out: &mut Vec<u8>) {
    let mut w = csv_core::Writer::new();
    // At worst every byte is a doubled quote, plus the two around them.
    out.clear();
    out.resize(2 * value.len() + 2, 0);
    let (_, _, n) = w.field(value.as_bytes(), out);
    let (_, m) = w.finish(&mut out[n..]);
    out.truncate(n + m);
}

/// Kernel ids above this share one cache entry (ids are dense from 1, so
/// only a corrupt id gets there).
const MAX_CACHED_KERNEL_ID: usize = 1 << 20;

impl RecordSink for CsvSink {
    fn start(&mut self, run: &RunInfo, _agents: &[AgentInfo]) -> io::Result<()> {
        self.pid = run.pid;
        let mut header = csv::Writer::from_writer(Vec::new());
        header.write_record(KERNEL_TRACE_COLUMNS).map_err(to_io)?;
        let header = header.into_inner().map_err(|e| e.into_error())?;
        io::Write::write_all(&mut self.out, &header)
    }

    fn marker(&mut self, r: &crate::marker::MarkerRecord) -> io::Result<()> {
        if self.markers.is_none() {
            let file = BufWriter::new(super::files::create_new(&self.marker_path)?);
            let mut w = csv::Writer::from_writer(file);
            w.write_record(MARKER_API_TRACE_COLUMNS).map_err(to_io)?;
            self.markers = Some(w);
        }
        let Some(w) = self.markers.as_mut() else {
            return Ok(());
        };
        let mut b = itoa::Buffer::new();
        let mut field = |w: &mut csv::Writer<_>, v: u64| w.write_field(b.format(v)).map_err(to_io);
        w.write_field(crate::marker::MARKER_DOMAIN).map_err(to_io)?;
        w.write_field(r.message).map_err(to_io)?;
        field(w, u64::from(self.pid))?;
        field(w, u64::from(r.thread_id))?;
        field(w, r.correlation_id)?;
        field(w, r.start_ns)?;
        field(w, r.end_ns)?;
        w.write_record(None::<&[u8]>).map_err(to_io)
    }

    fn intercept(&mut self, _rec: &InterceptRecord) -> io::Result<()> {
        Ok(())
    }

    fn dispatch(&mut self, r: &DispatchRecord, k: &KernelInfo<'_>) -> io::Result<()> {
        let i = self.kernel_fields(k.kernel_id, k.display_name)?;
        let entry = &mut self.kernels[i];
        // The row's end, rewritten only when this kernel's launch shape or
        // register counts change (13 numbers, most of a row's work).
        let key = tail_key(r, k);
        if entry.tail.is_empty() || entry.tail_key != key {
            entry.tail.clear();
            entry.tail.resize(key.len() * NUMBER_MAX, 0);
            let mut tail = RowWriter {
                buf: &mut entry.tail,
                at: 0,
            };
            for v in key {
                tail.num(v);
            }
            // The last comma becomes the record terminator.
            let len = tail.at;
            entry.tail.truncate(len);
            entry.tail[len - 1] = b'\n';
            entry.tail_key = key;
        }
        // Written by index into a buffer long enough for any row of this
        // kernel: no per-field capacity checks or copies.
        let need = ROW_NUMBERS_MAX + entry.field.len() + entry.tail.len();
        if self.row.len() < need {
            self.row.resize(need, 0);
        }
        let mut row = RowWriter {
            buf: &mut self.row,
            at: 0,
        };
        row.bytes(b"KERNEL_DISPATCH,");
        row.num(u64::from(r.agent_index));
        row.num(r.queue_id);
        row.bytes(b"0,"); // Stream_Id
        row.num(u64::from(r.thread_id));
        row.num(r.dispatch_id);
        row.num(k.kernel_id);
        row.bytes(&entry.field);
        row.bytes(b",");
        row.num(r.correlation_id);
        row.num(r.start_ns);
        row.num(r.end_ns);
        row.bytes(&entry.tail);
        let len = row.at;
        io::Write::write_all(&mut self.out, &self.row[..len])
    }

    fn rpc_wake(&mut self, r: &crate::rpc::RpcWakeRecord) -> io::Result<()> {
        if self.rpc.is_none() {
            let file = BufWriter::new(super::files::create_new(&self.rpc_path)?);
            let mut w = csv::Writer::from_writer(file);
            w.write_record(RPC_TRACE_COLUMNS).map_err(to_io)?;
            self.rpc = Some(w);
        }
        let Some(w) = self.rpc.as_mut() else {
            return Ok(());
        };
        let mut b = itoa::Buffer::new();
        let mut field = |w: &mut csv::Writer<_>, v: u64| w.write_field(b.format(v)).map_err(to_io);
        field(w, u64::from(r.thread_id))?;
        w.write_field(format!("{:#x}", r.signal)).map_err(to_io)?;
        field(w, r.sleep_begin_ns)?;
        field(w, r.wake_ns)?;
        field(w, r.serve_end_ns)?;
        field(w, r.sleep_ns())?;
        field(w, r.serve_ns())?;
        w.write_field(r.value_at_wake.to_string()).map_err(to_io)?;
        w.write_field(r.value_at_serve_end.to_string())
            .map_err(to_io)?;
        field(w, u64::from(r.timeouts))?;
        if r.ring_ns != 0 {
            field(w, r.ring_ns)?;
        } else {
            w.write_field("").map_err(to_io)?;
        }
        match r.wake_latency_ns() {
            Some(l) => field(w, l)?,
            None => w.write_field("").map_err(to_io)?,
        }
        w.write_record(None::<&[u8]>).map_err(to_io)
    }

    fn memory_copy(&mut self, r: &crate::record::MemoryCopyRecord) -> io::Result<()> {
        if self.copies.is_none() {
            let file = BufWriter::new(super::files::create_new(&self.copies_path)?);
            let mut w = csv::Writer::from_writer(file);
            w.write_record(MEMORY_COPY_TRACE_COLUMNS).map_err(to_io)?;
            self.copies = Some(w);
        }
        let Some(w) = self.copies.as_mut() else {
            return Ok(());
        };
        let mut b = itoa::Buffer::new();
        let mut field = |w: &mut csv::Writer<_>, v: u64| w.write_field(b.format(v)).map_err(to_io);
        w.write_field("MEMORY_COPY").map_err(to_io)?;
        w.write_field(r.direction.name()).map_err(to_io)?;
        field(w, 0)?;
        w.write_field(format!("Agent {}", r.src_agent))
            .map_err(to_io)?;
        w.write_field(format!("Agent {}", r.dst_agent))
            .map_err(to_io)?;
        field(w, r.correlation_id)?;
        field(w, r.start_ns)?;
        field(w, r.end_ns)?;
        field(w, r.bytes)?;
        w.write_record(None::<&[u8]>).map_err(to_io)
    }

    fn spare_room(&self) -> usize {
        // A csv::Writer keeps a buffer of its own in front of its file's.
        let others = [&self.rpc, &self.markers, &self.copies]
            .into_iter()
            .flatten()
            .map(|w| super::buffer_room(w.get_ref()).saturating_sub(CSV_OWN_BUFFER));
        super::least_room(super::buffer_room(&self.out), others)
    }

    fn flush(&mut self) -> io::Result<()> {
        if let Some(w) = self.rpc.as_mut() {
            w.flush()?;
        }
        if let Some(w) = self.markers.as_mut() {
            w.flush()?;
        }
        if let Some(w) = self.copies.as_mut() {
            w.flush()?;
        }
        io::Write::flush(&mut self.out)
    }

    fn finish(&mut self, _meta: &RunMetadata) -> io::Result<()> {
        RecordSink::flush(self)
    }
}

/// Room for a number of at most 20 digits and its comma.
const NUMBER_MAX: usize = 21;

/// Room for a kernel row's fields before its cached end: the 16-byte kind,
/// the 2-byte stream id, 8 numbers and the comma after the name.
const ROW_NUMBERS_MAX: usize = 16 + 2 + 8 * NUMBER_MAX + 1;

/// Appends a row's fields by index into a buffer sized for the row. A kernel
/// row is ~25 short numbers, and copying each from a formatting buffer (or
/// pushing its digits) cost a `memcpy` call or a capacity check per field:
/// the largest part of the CSV's CPU on the graph storm.
struct RowWriter<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl RowWriter<'_> {
    /// `v` in decimal, then a comma.
    fn num(&mut self, v: u64) {
        // itoa writes two digits per step from a table: half the work of a
        // digit-at-a-time loop on the 19-digit timestamps.
        let mut digits = itoa::Buffer::new();
        let d = digits.format(v).as_bytes();
        let end = self.at + d.len();
        self.buf[self.at..end].copy_from_slice(d);
        self.buf[end] = b',';
        self.at = end + 1;
    }

    fn bytes(&mut self, b: &[u8]) {
        self.buf[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::KernelResourceCounts;

    /// The row as `csv::Writer` writes it field by field (what the sink did
    /// before rows were assembled by hand): the oracle.
    fn oracle_row(r: &DispatchRecord, k: &KernelInfo<'_>) -> Vec<u8> {
        let mut w = csv::Writer::from_writer(Vec::new());
        let res = k.resources.unwrap_or_default();
        let mut fields: Vec<String> = vec!["KERNEL_DISPATCH".into()];
        for v in [
            u64::from(r.agent_index),
            r.queue_id,
            0,
            u64::from(r.thread_id),
            r.dispatch_id,
            k.kernel_id,
        ] {
            fields.push(v.to_string());
        }
        fields.push(k.display_name.into());
        for v in [
            r.correlation_id,
            r.start_ns,
            r.end_ns,
            lds_block_size(r.group_segment_size),
            u64::from(r.private_segment_size),
            u64::from(res.arch_vgpr_count),
            u64::from(res.accum_vgpr_count),
            u64::from(res.sgpr_count),
        ] {
            fields.push(v.to_string());
        }
        fields.extend(r.workgroup.iter().map(|v| v.to_string()));
        fields.extend(r.grid.iter().map(|v| v.to_string()));
        fields.push(r.private_segment_size.to_string());
        fields.push(r.group_segment_size.to_string());
        w.write_record(&fields).unwrap();
        w.into_inner().unwrap()
    }

    #[test]
    fn decimals_match_std_formatting_at_the_edges() {
        let values = [
            0,
            1,
            9,
            10,
            99,
            100,
            1_000_000_007,
            u64::from(u32::MAX),
            u64::MAX - 1,
            u64::MAX,
        ];
        let mut buf = vec![0u8; 22 * values.len() + 1];
        let mut row = RowWriter {
            buf: &mut buf,
            at: 0,
        };
        row.bytes(b"x");
        let mut expect = String::from("x");
        for v in values {
            row.num(v);
            expect += &format!("{v},");
        }
        let len = row.at;
        assert_eq!(String::from_utf8_lossy(&buf[..len]), expect);
        // Every width, odd and even, and every digit pair in every place.
        let mut buf = vec![0u8; 32];
        let mut p = 1u64;
        for v in (0..20_000u64).chain((1..20).flat_map(|_| {
            p = p.saturating_mul(10);
            [p - 1, p, p.saturating_add(1), p.saturating_mul(7) / 3]
        })) {
            let mut row = RowWriter {
                buf: &mut buf,
                at: 0,
            };
            row.num(v);
            let len = row.at;
            assert_eq!(&buf[..len], format!("{v},").as_bytes());
        }
    }

    /// A kernel-trace sink writing into a fresh directory named after
    /// `tag`, started, and the header the file must begin with.
    fn started_sink(tag: &str) -> (CsvSink, std::path::PathBuf, Vec<u8>) {
        let dir = std::env::temp_dir().join(format!("rprof-csv-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut sink = CsvSink::create(&dir.join("x_kernel_trace.csv")).unwrap();
        sink.start(&RunInfo::default(), &[]).unwrap();
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record(KERNEL_TRACE_COLUMNS).unwrap();
        (sink, dir, w.into_inner().unwrap())
    }

    /// Finishes `sink` and checks that its file holds exactly `expected`.
    fn assert_written(mut sink: CsvSink, dir: std::path::PathBuf, expected: &[u8]) {
        sink.finish(&RunMetadata::default()).unwrap();
        drop(sink);
        let got = std::fs::read(dir.join("x_kernel_trace.csv")).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(expected)
        );
    }

    /// The cached end of a kernel's rows follows every field it holds: a
    /// repeat reuses it, a change in any one of them rewrites it.
    #[test]
    fn a_kernels_cached_row_end_follows_its_launch_shape_and_registers() {
        let (mut sink, dir, mut expected) = started_sink("tail");
        let base = DispatchRecord {
            agent_index: 0,
            queue_id: 1,
            thread_id: 7,
            grid: [1024, 4, 2],
            workgroup: [256, 2, 1],
            private_segment_size: 32,
            group_segment_size: 1000,
            start_ns: 5_000,
            end_ns: 6_000,
            ..Default::default()
        };
        let regs = KernelResourceCounts {
            sgpr_count: 20,
            arch_vgpr_count: 12,
            accum_vgpr_count: 0,
            group_segment_fixed_size: 0,
            private_segment_fixed_size: 0,
            code_object_id: 1,
        };
        // Each step changes one field of the row's end (or none), then the
        // original comes back.
        type Step = fn(&mut DispatchRecord, &mut KernelResourceCounts);
        let steps: [Step; 12] = [
            |_, _| {},
            |_, _| {},
            |r, _| r.grid[2] = 3,
            |r, _| r.grid[0] = 512,
            |r, _| r.workgroup[1] = 4,
            |r, _| r.private_segment_size = 0,
            |r, _| r.group_segment_size = 1024,
            |_, k| k.sgpr_count = 96,
            |_, k| k.arch_vgpr_count = 128,
            |_, k| k.accum_vgpr_count = 64,
            |r, _| r.grid[1] = 1,
            |_, _| {},
        ];
        for (i, step) in steps.iter().enumerate() {
            let (mut r, mut k_regs) = (base, regs);
            step(&mut r, &mut k_regs);
            r.dispatch_id = i as u64 + 1;
            r.correlation_id = i as u64 + 1;
            for res in [Some(k_regs), None] {
                let k = KernelInfo {
                    kernel_id: 1,
                    display_name: "k",
                    symbol_name: "k",
                    resources: res,
                };
                sink.dispatch(&r, &k).unwrap();
                expected.extend(oracle_row(&r, &k));
                sink.dispatch(&base, &k).unwrap();
                expected.extend(oracle_row(&base, &k));
            }
        }
        assert_written(sink, dir, &expected);
    }

    #[test]
    fn kernel_rows_match_the_csv_crate_field_by_field() {
        let (mut sink, dir, mut expected) = started_sink("rows");
        let names = [
            "void graph_node<78>(int*, int)",
            "plain",
            "with \"quotes\", and comma",
            "line\nbreak",
            "",
            "plain",
            // Same id as the first, another name (--kernel-rename).
            "region A",
        ];
        let ids = [3u64, 1, 2, 4, 5, 1, 3];
        for (i, (name, id)) in names.iter().zip(ids).enumerate() {
            let i = i as u64;
            let r = DispatchRecord {
                correlation_id: (7 << 32) + i,
                dispatch_id: i + 1,
                agent_index: 1,
                queue_id: 9 + i,
                thread_id: 4242,
                kernel_object: 0xdead_0000 + i,
                grid: [64, 2, 1],
                workgroup: [64, 1, 1],
                private_segment_size: 16 * i as u32,
                group_segment_size: 100 * i as u32,
                enqueue_ns: 1,
                start_ns: 1_000_000_000_000 + i,
                end_ns: u64::MAX - i,
            };
            let k = KernelInfo {
                kernel_id: id,
                display_name: name,
                symbol_name: "_Z1kv",
                resources: (i % 2 == 0).then_some(KernelResourceCounts {
                    sgpr_count: 18,
                    arch_vgpr_count: 7,
                    accum_vgpr_count: 4,
                    group_segment_fixed_size: 0,
                    private_segment_fixed_size: 0,
                    code_object_id: 1,
                }),
            };
            sink.dispatch(&r, &k).unwrap();
            expected.extend(oracle_row(&r, &k));
        }
        assert_written(sink, dir, &expected);
    }
}
