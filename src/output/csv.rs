//! `NAME_kernel_trace.csv`: one row per kernel dispatch, with rocprofv3's
//! column names where they exist, so existing scripts keep working.

use std::fs::File;
use std::io::{self, BufWriter};
use std::path::Path;

use crate::config::ensure_parent;
use crate::record::{AgentInfo, DispatchRecord, InterceptRecord, RunInfo, RunMetadata};
use crate::sink::{KernelInfo, RecordSink};

/// The header row, in order.
pub const KERNEL_TRACE_COLUMNS: [&str; 18] = [
    "Kind",
    "Agent_Id",
    "Queue_Id",
    "Thread_Id",
    "Dispatch_Id",
    "Kernel_Id",
    "Kernel_Name",
    "Correlation_Id",
    "Start_Timestamp",
    "End_Timestamp",
    "Private_Segment_Size",
    "Group_Segment_Size",
    "Workgroup_Size_X",
    "Workgroup_Size_Y",
    "Workgroup_Size_Z",
    "Grid_Size_X",
    "Grid_Size_Y",
    "Grid_Size_Z",
];

/// Streams kernel dispatches to a CSV file.
#[derive(Debug)]
pub struct CsvSink {
    out: csv::Writer<BufWriter<File>>,
}

fn to_io(e: csv::Error) -> io::Error {
    io::Error::other(e)
}

impl CsvSink {
    /// Creates (truncates) the file and its directory.
    pub fn create(path: &Path) -> io::Result<Self> {
        ensure_parent(path)?;
        let file = BufWriter::with_capacity(1 << 16, File::create(path)?);
        Ok(CsvSink {
            out: csv::Writer::from_writer(file),
        })
    }
}

impl RecordSink for CsvSink {
    fn start(&mut self, _run: &RunInfo, _agents: &[AgentInfo]) -> io::Result<()> {
        self.out.write_record(KERNEL_TRACE_COLUMNS).map_err(to_io)
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
        field(w, u64::from(r.thread_id))?;
        field(w, r.dispatch_id)?;
        field(w, k.kernel_id)?;
        w.write_field(k.display_name).map_err(to_io)?;
        field(w, r.correlation_id)?;
        field(w, r.start_ns)?;
        field(w, r.end_ns)?;
        field(w, u64::from(r.private_segment_size))?;
        field(w, u64::from(r.group_segment_size))?;
        for v in r.workgroup {
            field(w, u64::from(v))?;
        }
        for v in r.grid {
            field(w, u64::from(v))?;
        }
        w.write_record(None::<&[u8]>).map_err(to_io)
    }

    fn finish(&mut self, _meta: &RunMetadata) -> io::Result<()> {
        self.out.flush()
    }
}
