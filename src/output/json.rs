//! `NAME_results.json`: the run, its agents, every kernel dispatch and the
//! run metadata in one JSON document, written as a stream (one dispatch
//! object at a time) so memory does not grow with the trace.
//!
//! Shape:
//! ```text
//! { "rprof_version": "...", "run": {...}, "agents": [...],
//!   "kernel_dispatches": [ {...}, ... ],
//!   "rpc_wakes": [ {...}, ... ],
//!   "metadata": {...} }
//! ```
//!
//! RPC wakes (`--rpc-trace`) arrive interleaved with dispatches; they are
//! spooled to a temporary file next to the output and copied in at the end,
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
            out: BufWriter::with_capacity(1 << 16, super::files::create_new(path)?),
            first: true,
            spool_path: spool_path.into(),
            spool: None,
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
                },
            )?;
        }
        self.out.write_all(b"],\"kernel_dispatches\":[\n")
    }

    fn intercept(&mut self, _rec: &InterceptRecord) -> io::Result<()> {
        Ok(())
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

    fn finish(&mut self, m: &RunMetadata) -> io::Result<()> {
        self.out.write_all(b"\n],\"rpc_wakes\":[\n")?;
        if let Some(spool) = self.spool.take() {
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
            },
        )?;
        self.out.write_all(b"}\n")?;
        self.out.flush()
    }
}
