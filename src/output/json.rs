//! `NAME_results.json`: the run, its agents, every kernel dispatch and the
//! run metadata in one JSON document, written as a stream (one dispatch
//! object at a time) so memory does not grow with the trace.
//!
//! Shape:
//! ```text
//! { "rprof_version": "...", "run": {...}, "agents": [...],
//!   "kernel_dispatches": [ {...}, ... ],
//!   "rpc_wakes": [ {...}, ... ],
//!   "marker_api": [ {...}, ... ],
//!   "memory_copies": [ {...}, ... ],
//!   "metadata": {...} }
//! ```
//!
//! RPC wakes (`--rpc-trace`), ROCTx markers (`--marker-trace`) and memory
//! copies (`--memory-copy-trace`) arrive interleaved with dispatches; they are
//! spooled to temporary files next to the output and copied in at the end,
//! so memory stays bounded.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use serde::Serialize;

use crate::config::ensure_parent;
use crate::record::{AgentInfo, DispatchRecord, InterceptRecord, RunInfo, RunMetadata};
use crate::sink::{KernelInfo, RecordSink};

/// Streams the run to a JSON file.
#[derive(Debug)]
pub struct JsonSink {
    out: BufWriter<File>,
    first: bool,
    spool_path: std::path::PathBuf,
    spool: Option<BufWriter<File>>,
    /// ROCTx markers (`--marker-trace`), spooled until `finish`.
    marker_spool: Option<BufWriter<std::fs::File>>,
    /// Memory copies, spooled like the RPC wakes until `finish`.
    copies: Option<BufWriter<File>>,
}

/// One memory copy in `memory_copies` (rocprofv3's field names where it
/// has them).
#[derive(Serialize)]
struct JsonMemoryCopy {
    kind: &'static str,
    operation: &'static str,
    correlation_id: u64,
    thread_id: u32,
    src_agent_id: u32,
    dst_agent_id: u32,
    bytes: u64,
    api: &'static str,
    engine: u32,
    enqueue_ns: u64,
    start_timestamp: u64,
    end_timestamp: u64,
}

#[derive(Serialize)]
struct JsonRpcWake {
    thread_id: u32,
    signal: u64,
    sleep_begin_ns: u64,
    wake_ns: u64,
    serve_end_ns: u64,
    sleep_ns: u64,
    serve_ns: u64,
    pending_at_wake: i64,
    pending_at_serve_end: i64,
    timeouts: u32,
    ring_ns: Option<u64>,
    wake_latency_ns: Option<u64>,
}

#[derive(Serialize)]
struct JsonRun<'a> {
    pid: u32,
    process_name: &'a str,
    cmdline: &'a [String],
    hostname: &'a str,
    start_ns: u64,
    device: &'static str,
}

#[derive(Serialize)]
struct JsonAgent<'a> {
    index: u32,
    name: &'a str,
    product_name: &'a str,
    handle: u64,
    compute_units: u32,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct JsonDispatch<'a> {
    kind: &'static str,
    correlation_id: u64,
    dispatch_id: u64,
    agent_id: u32,
    queue_id: u64,
    thread_id: u32,
    kernel_id: u64,
    kernel_object: u64,
    kernel_name: &'a str,
    symbol_name: &'a str,
    grid_size: [u32; 3],
    workgroup_size: [u16; 3],
    private_segment_size: u32,
    group_segment_size: u32,
    enqueue_ns: u64,
    start_ns: u64,
    end_ns: u64,
    stream_id: u64,
    lds_block_size: u64,
    scratch_size: u32,
    /// `null` where the code object's metadata could not be read.
    arch_vgpr_count: Option<u32>,
    accum_vgpr_count: Option<u32>,
    sgpr_count: Option<u32>,
}

#[derive(Serialize)]
struct JsonMeta {
    dispatches: u64,
    filtered_out: u64,
    start_clamped: u64,
    end_clamped: u64,
    records_lost: u64,
    rpc_wakes: u64,
    rpc_unrecognised_waits: u64,
    end_ns: u64,
    memory_copies: u64,
}

/// One ROCTx mark or range in `marker_api` (rocprofv3's record fields,
/// with the message inline).
#[derive(Serialize)]
struct JsonMarker<'a> {
    kind: &'static str,
    operation: &'static str,
    correlation_id: u64,
    thread_id: u32,
    end_thread_id: u32,
    start_timestamp: u64,
    end_timestamp: u64,
    message: &'a str,
}

fn ser<T: Serialize>(w: &mut impl Write, v: &T) -> io::Result<()> {
    serde_json::to_writer(w, v).map_err(io::Error::other)
}

impl JsonSink {
    /// Creates (truncates) the file and its directory.
    pub fn create(path: &Path) -> io::Result<Self> {
        ensure_parent(path)?;
        let mut spool_path = path.as_os_str().to_owned();
        spool_path.push(".rpc.tmp");
        Ok(JsonSink {
            // Room for many records between writes, so an app thread
            // writing in the writer's place finds room (`spare_room`).
            out: BufWriter::with_capacity(256 * 1024, super::files::create_new(path)?),
            first: true,
            spool_path: spool_path.into(),
            spool: None,
            marker_spool: None,
            copies: None,
        })
    }
}

impl RecordSink for JsonSink {
    fn start(&mut self, run: &RunInfo, agents: &[AgentInfo]) -> io::Result<()> {
        write!(
            self.out,
            "{{\"rprof_version\":\"{}\",\"run\":",
            env!("CARGO_PKG_VERSION")
        )?;
        ser(
            &mut self.out,
            &JsonRun {
                pid: run.pid,
                process_name: &run.process_name,
                cmdline: &run.cmdline,
                hostname: &run.hostname,
                start_ns: run.start_ns,
                device: run.device(),
            },
        )?;
        self.out.write_all(b",\"agents\":[")?;
        for (i, a) in agents.iter().enumerate() {
            if i > 0 {
                self.out.write_all(b",")?;
            }
            ser(
                &mut self.out,
                &JsonAgent {
                    index: a.index,
                    name: &a.name,
                    product_name: &a.product_name,
                    handle: a.handle,
                    compute_units: a.compute_units,
                    kind: if a.cpu { "CPU" } else { "GPU" },
                },
            )?;
        }
        self.out.write_all(b"],\"kernel_dispatches\":[\n")
    }

    fn intercept(&mut self, _rec: &InterceptRecord) -> io::Result<()> {
        Ok(())
    }

    fn spare_room(&self) -> usize {
        let spools = [&self.spool, &self.marker_spool, &self.copies];
        let others = spools.into_iter().flatten().map(super::buffer_room);
        super::least_room(super::buffer_room(&self.out), others)
    }

    /// Writes the dispatches buffered so far (the spooled records stay in
    /// their spools until `finish`).
    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    fn dispatch(&mut self, r: &DispatchRecord, k: &KernelInfo<'_>) -> io::Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        ser(
            &mut self.out,
            &JsonDispatch {
                kind: "KERNEL_DISPATCH",
                correlation_id: r.correlation_id,
                dispatch_id: r.dispatch_id,
                agent_id: r.agent_index,
                queue_id: r.queue_id,
                thread_id: r.thread_id,
                kernel_id: k.kernel_id,
                kernel_object: r.kernel_object,
                kernel_name: k.display_name,
                symbol_name: k.symbol_name,
                grid_size: r.grid,
                workgroup_size: r.workgroup,
                private_segment_size: r.private_segment_size,
                group_segment_size: r.group_segment_size,
                enqueue_ns: r.enqueue_ns,
                start_ns: r.start_ns,
                end_ns: r.end_ns,
                stream_id: 0,
                lds_block_size: crate::sink::lds_block_size(r.group_segment_size),
                scratch_size: r.private_segment_size,
                arch_vgpr_count: k.resources.map(|x| x.arch_vgpr_count),
                accum_vgpr_count: k.resources.map(|x| x.accum_vgpr_count),
                sgpr_count: k.resources.map(|x| x.sgpr_count),
            },
        )
    }

    fn rpc_wake(&mut self, r: &crate::rpc::RpcWakeRecord) -> io::Result<()> {
        let first = self.spool.is_none();
        if first {
            let dir = self.spool_path.parent().unwrap_or(Path::new("."));
            self.spool = Some(BufWriter::new(super::files::spool_file(dir)?));
        }
        let Some(w) = self.spool.as_mut() else {
            return Ok(());
        };
        if !first {
            w.write_all(b",\n")?;
        }
        ser(
            w,
            &JsonRpcWake {
                thread_id: r.thread_id,
                signal: r.signal,
                sleep_begin_ns: r.sleep_begin_ns,
                wake_ns: r.wake_ns,
                serve_end_ns: r.serve_end_ns,
                sleep_ns: r.sleep_ns(),
                serve_ns: r.serve_ns(),
                pending_at_wake: r.value_at_wake,
                pending_at_serve_end: r.value_at_serve_end,
                timeouts: r.timeouts,
                ring_ns: (r.ring_ns != 0).then_some(r.ring_ns),
                wake_latency_ns: r.wake_latency_ns(),
            },
        )
    }

    fn marker(&mut self, r: &crate::marker::MarkerRecord) -> io::Result<()> {
        let first = self.marker_spool.is_none();
        if first {
            let dir = self.spool_path.parent().unwrap_or(Path::new("."));
            self.marker_spool = Some(BufWriter::new(super::files::spool_file(dir)?));
        }
        let Some(w) = self.marker_spool.as_mut() else {
            return Ok(());
        };
        if !first {
            w.write_all(b",\n")?;
        }
        ser(
            w,
            &JsonMarker {
                kind: crate::marker::MARKER_DOMAIN,
                operation: r.kind.operation(),
                correlation_id: r.correlation_id,
                thread_id: r.thread_id,
                end_thread_id: r.end_thread_id,
                start_timestamp: r.start_ns,
                end_timestamp: r.end_ns,
                message: r.message,
            },
        )
    }

    fn memory_copy(&mut self, r: &crate::record::MemoryCopyRecord) -> io::Result<()> {
        let first = self.copies.is_none();
        if first {
            let dir = self.spool_path.parent().unwrap_or(Path::new("."));
            self.copies = Some(BufWriter::new(super::files::spool_file(dir)?));
        }
        let Some(w) = self.copies.as_mut() else {
            return Ok(());
        };
        if !first {
            w.write_all(b",\n")?;
        }
        ser(
            w,
            &JsonMemoryCopy {
                kind: "MEMORY_COPY",
                operation: r.direction.name(),
                correlation_id: r.correlation_id,
                thread_id: r.thread_id,
                src_agent_id: r.src_agent,
                dst_agent_id: r.dst_agent,
                bytes: r.bytes,
                api: r.api.name(),
                engine: r.engine,
                enqueue_ns: r.enqueue_ns,
                start_timestamp: r.start_ns,
                end_timestamp: r.end_ns,
            },
        )
    }

    fn finish(&mut self, m: &RunMetadata) -> io::Result<()> {
        self.out.write_all(b"\n],\"rpc_wakes\":[\n")?;
        if let Some(spool) = self.spool.take() {
            let mut f = spool.into_inner().map_err(|e| e.into_error())?;
            io::Seek::rewind(&mut f)?;
            io::copy(&mut f, &mut self.out)?;
        }
        self.out.write_all(b"\n],\"marker_api\":[\n")?;
        if let Some(spool) = self.marker_spool.take() {
            let mut f = spool.into_inner().map_err(|e| e.into_error())?;
            io::Seek::rewind(&mut f)?;
            io::copy(&mut f, &mut self.out)?;
        }
        self.out.write_all(b"\n],\"memory_copies\":[\n")?;
        if let Some(spool) = self.copies.take() {
            let mut f = spool.into_inner().map_err(|e| e.into_error())?;
            io::Seek::rewind(&mut f)?;
            io::copy(&mut f, &mut self.out)?;
        }
        self.out.write_all(b"\n],\"metadata\":")?;
        ser(
            &mut self.out,
            &JsonMeta {
                dispatches: m.dispatches,
                filtered_out: m.filtered_out,
                start_clamped: m.start_clamped,
                end_clamped: m.end_clamped,
                records_lost: m.records_lost,
                rpc_wakes: m.rpc_wakes,
                rpc_unrecognised_waits: m.rpc_unrecognised_waits,
                end_ns: m.end_ns,
                memory_copies: m.memory_copies,
            },
        )?;
        self.out.write_all(b"}\n")?;
        self.out.flush()
    }
}
