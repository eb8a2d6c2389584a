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

/// Streams kernel dispatches (and RPC wakes, ROCTx markers, memory copies) to CSV files.
#[derive(Debug)]
pub struct CsvSink {
    out: csv::Writer<BufWriter<File>>,
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
        let file = BufWriter::with_capacity(1 << 16, super::files::create_new(path)?);
        Ok(CsvSink {
            out: csv::Writer::from_writer(file),
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

impl RecordSink for CsvSink {
    fn start(&mut self, run: &RunInfo, _agents: &[AgentInfo]) -> io::Result<()> {
        self.pid = run.pid;
        self.out.write_record(KERNEL_TRACE_COLUMNS).map_err(to_io)
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
        let mut b = itoa::Buffer::new();
        let mut field = |w: &mut csv::Writer<_>, v: u64| w.write_field(b.format(v)).map_err(to_io);
        let w = &mut self.out;
        w.write_field("KERNEL_DISPATCH").map_err(to_io)?;
        field(w, u64::from(r.agent_index))?;
        field(w, r.queue_id)?;
        field(w, 0)?; // Stream_Id
        field(w, u64::from(r.thread_id))?;
        field(w, r.dispatch_id)?;
        field(w, k.kernel_id)?;
        w.write_field(k.display_name).map_err(to_io)?;
        field(w, r.correlation_id)?;
        field(w, r.start_ns)?;
        field(w, r.end_ns)?;
        field(w, lds_block_size(r.group_segment_size))?;
        field(w, u64::from(r.private_segment_size))?;
        let res = k.resources.unwrap_or_default();
        field(w, u64::from(res.arch_vgpr_count))?;
        field(w, u64::from(res.accum_vgpr_count))?;
        field(w, u64::from(res.sgpr_count))?;
        for v in r.workgroup {
            field(w, u64::from(v))?;
        }
        for v in r.grid {
            field(w, u64::from(v))?;
        }
        field(w, u64::from(r.private_segment_size))?;
        field(w, u64::from(r.group_segment_size))?;
        w.write_record(None::<&[u8]>).map_err(to_io)
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
        self.out.flush()
    }

    fn finish(&mut self, _meta: &RunMetadata) -> io::Result<()> {
        RecordSink::flush(self)
    }
}
