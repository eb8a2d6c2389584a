//! The push-model output interface.
//!
//! The writer thread drains records from the completion queue and pushes
//! them, one at a time and in arrival order, into every configured
//! [`RecordSink`] (Perfetto, CSV, JSON, stats, test collectors). A sink never
//! sees the whole run at once: it must stream, with memory bounded by what it
//! chooses to keep (interning tables, lane state), never by the number of
//! dispatches.
//!
//! Call order: [`RecordSink::start`] once, then any interleaving of
//! [`RecordSink::intercept`], [`RecordSink::dispatch`] and
//! [`RecordSink::rpc_wake`], [`RecordSink::marker`],
//! [`RecordSink::thread_name`], [`RecordSink::memory_copy`], then
//! [`RecordSink::finish`] once. Records are *not* sorted by time: a dispatch
//! arrives when it completes, after the intercept record of its batch.

use std::io;

use crate::record::{
    AgentInfo, DispatchRecord, InterceptRecord, MemoryCopyRecord, RunInfo, RunMetadata,
};
use crate::rpc::RpcWakeRecord;

/// Names of a dispatch's kernel, resolved by the writer from the kernel
/// table.
#[derive(Debug, Clone, Copy)]
pub struct KernelInfo<'a> {
    /// Stable per-process id of the kernel symbol (1-based; 0 = unknown).
    pub kernel_id: u64,
    /// Name to display: demangled, truncated to the base name if asked.
    pub display_name: &'a str,
    /// The symbol name as found in the code object (mangled).
    pub symbol_name: &'a str,
    /// What the compiler recorded for the kernel in its code object's
    /// metadata (`None`: not read, e.g. a code object without metadata or a
    /// kernel the loader never reported).
    pub resources: Option<KernelResourceCounts>,
}

/// A kernel's register and static memory use, from its code object's
/// metadata (`rprof_core::code_object`). rocprofv3 reports these per
/// dispatch (`VGPR_Count`, `Accum_VGPR_Count`, `SGPR_Count`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KernelResourceCounts {
    /// Scalar registers (`.sgpr_count`).
    pub sgpr_count: u32,
    /// Architected vector registers (`.vgpr_count`).
    pub arch_vgpr_count: u32,
    /// Accumulation vector registers (`.agpr_count`; 0 where the target has none).
    pub accum_vgpr_count: u32,
    /// Static LDS per work-group in bytes (`.group_segment_fixed_size`).
    pub group_segment_fixed_size: u32,
    /// Static scratch per work-item in bytes (`.private_segment_fixed_size`).
    pub private_segment_fixed_size: u32,
    /// The loaded code object holding the kernel
    /// ([`crate::code_object::loaded`]; 0 = unknown).
    pub code_object_id: u64,
}

/// The LDS allocation granule rocprofv3 rounds `LDS_Block_Size` up to (bytes).
pub const LDS_BLOCK_GRANULE: u64 = 512;

/// `LDS_Block_Size` of a dispatch: its group segment size (static plus
/// dynamic LDS per work-group, as the dispatch packet gives it) rounded up
/// to [`LDS_BLOCK_GRANULE`]; 0 stays 0.
pub fn lds_block_size(group_segment_size: u32) -> u64 {
    u64::from(group_segment_size).div_ceil(LDS_BLOCK_GRANULE) * LDS_BLOCK_GRANULE
}

/// A consumer of trace records. See the module docs for the call order.
pub trait RecordSink {
    /// Called once before any record, with the process and its GPU agents.
    fn start(&mut self, run: &RunInfo, agents: &[AgentInfo]) -> io::Result<()>;
    /// One interceptor call on an application thread.
    fn intercept(&mut self, rec: &InterceptRecord) -> io::Result<()>;
    /// One finished kernel dispatch.
    fn dispatch(&mut self, rec: &DispatchRecord, kernel: &KernelInfo<'_>) -> io::Result<()>;
    /// One finished kernel dispatch named after the ROCTx range it was
    /// enqueued in (`--kernel-rename`). By default, the dispatch with the
    /// range as its display name; sinks that keep the kernel's own name
    /// beside it (Perfetto's kernel table, rocpd's `region` column)
    /// override it.
    fn dispatch_renamed(
        &mut self,
        rec: &DispatchRecord,
        kernel: &KernelInfo<'_>,
        region: &str,
    ) -> io::Result<()> {
        self.dispatch(
            rec,
            &KernelInfo {
                display_name: region,
                ..*kernel
            },
        )
    }
    /// One RPC doorbell wake (`--rpc-trace`). Sinks without an RPC view
    /// ignore it.
    fn rpc_wake(&mut self, rec: &RpcWakeRecord) -> io::Result<()> {
        let _ = rec;
        Ok(())
    }
    /// One finished ROCTx mark or range (`--marker-trace`). Sinks without
    /// a marker view ignore it.
    fn marker(&mut self, rec: &crate::marker::MarkerRecord) -> io::Result<()> {
        let _ = rec;
        Ok(())
    }
    /// A thread named with `roctxNameOsThread`. Sinks that do not name
    /// threads ignore it.
    fn thread_name(&mut self, thread_id: u32, name: &str) -> io::Result<()> {
        let _ = (thread_id, name);
        Ok(())
    }
    /// One finished asynchronous memory copy (`--memory-copy-trace`).
    /// Sinks without a copy view ignore it.
    fn memory_copy(&mut self, rec: &MemoryCopyRecord) -> io::Result<()> {
        let _ = rec;
        Ok(())
    }
    /// Bytes of records this sink takes before it must write to its file
    /// (what its buffers have left). An app thread that writes records in
    /// the writer thread's place (`Engine::lend_writer`) does so only while
    /// every sink has room for a record, so it never waits on I/O. 0, the
    /// default: any record may write, and the sink is left to the writer
    /// thread.
    fn spare_room(&self) -> usize {
        0
    }
    /// Pushes what is buffered to the file, at a record boundary, so the
    /// file on disk is a readable prefix of the trace if the process is
    /// killed. The writer calls it at least every 100 ms while records
    /// flow. Sinks without buffers need not implement it.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
    /// Writes out buffered bytes so that [`RecordSink::spare_room`] grows
    /// again, when a lending thread found too little: the writer thread
    /// calls it for such a sink alone. Unlike [`RecordSink::flush`] it need
    /// not end anything at a record boundary (the Perfetto sink writes the
    /// bundles it has deflated and keeps filling the open one). The
    /// default: `flush`.
    fn make_room(&mut self) -> io::Result<()> {
        self.flush()
    }
    /// Called once after the last record. Flushes and closes.
    fn finish(&mut self, meta: &RunMetadata) -> io::Result<()>;
}
