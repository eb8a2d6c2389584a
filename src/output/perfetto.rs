//! `NAME.pftrace`: the run as a Perfetto trace, streamed packet by packet
//! through [`rprof_perfetto::TraceWriter`]. Layout (see `docs/trace-format.md`):
//!
//! ```text
//! <process name> <pid>                      process track
//!   <process name>                          thread track of the main thread (tid = pid)
//!   thread <tid>                            thread track of every other interceptor thread
//!     hsa_queue_write                       one slice per InterceptRecord, flow to each kernel
//!     sleep / serve, instant wake           RPC server threads (--rpc-trace): one of each per doorbell wake
//!     <message>                             ROCTx (--marker-trace): mark = instant, push/pop range = slice
//!   ROCTx ranges  (lane 0, 1, ...)          ROCTx start/stop ranges (may cross threads, need not nest)
//!   pending doorbell rings <signal>         counter track per doorbell: value at wake and at serve end
//! GPU <index> (<agent name>)                custom track per agent
//!   queue <queue_id>                        custom track per queue
//!     queue <queue_id>  (lane 0, 1, ...)    child tracks; kernel slices live here
//!   copies [engine <mask>]                  custom track per agent and engine (--memory-copy-trace)
//!     copies  (lane 0, 1, ...)              child tracks; one slice per copy, named by its direction
//! CPU <index> (<agent name>)                custom track of a CPU agent (host-to-host copies)
//! kernels                                   one `kernel symbol` instant per distinct kernel
//!                                           (static info; the kernel's name is its `kernel_name`
//!                                           arg, so a count of slices by a kernel's name is
//!                                           exactly its dispatches)
//! ```
//!
//! A memory copy is a slice on the copy track of the agent that does it
//! (the GPU side; a host-to-host copy the CPU's), named by rocprofv3's
//! direction name (`MEMORY_COPY_HOST_TO_DEVICE`, ...), with a flow from a
//! slice named after the runtime entry (`hsa_amd_memory_async_copy`, ...)
//! on the calling thread's track.
//!
//! Records arrive in completion order. Every slice is written as a
//! BEGIN/END pair at once; trace_processor sorts by timestamp. Slices on one
//! lane never overlap: a dispatch goes to the lowest lane of its queue whose
//! last end is ≤ its start (arrival order), else to a new lane. Timestamps
//! are never moved. State is bounded by threads + queues × lanes + kernels
//! (+ at most [`LAUNCH_TABLE_LIMIT`] launch configurations in
//! [`KernelArgs::Standard`]).

use foldhash::HashMap;
use foldhash::HashMapExt;
use std::fs::File;
use std::io;
use std::path::Path;

use rprof_perfetto::{
    AnnotationNameId, Arg, ArgValue, ChildTracksOrdering, ClockReadings, CounterTrack, CounterUnit,
    CounterValue, CustomTrack, EventNameId, ProcessTrack, SiblingMergeBehavior, Slice,
    StringValueId, ThreadTrack, TraceWriter,
};

/// How the trace is encoded ([`PerfettoOptions::encoding`]).
pub use rprof_perfetto::WriterOptions;

use crate::config::ensure_parent;
use crate::record::{
    AgentInfo, DispatchRecord, InterceptRecord, MemoryCopyRecord, RunInfo, RunMetadata,
};
use crate::rpc::RpcWakeRecord;
use crate::sink::{KernelInfo, RecordSink};

/// Name of the tracks of ROCTx start/stop ranges (one lane each while they
/// overlap).
pub const MARKER_RANGES_TRACK_NAME: &str = "ROCTx ranges";

/// Name of the slice an RPC server thread spends asleep on its doorbell.
pub const RPC_SLEEP_SLICE_NAME: &str = "sleep";
/// Name of the slice from a doorbell wake to the server's next wait.
pub const RPC_SERVE_SLICE_NAME: &str = "serve";
/// Name of the instant at a doorbell wake (arg `pending`: value seen).
pub const RPC_WAKE_INSTANT_NAME: &str = "wake";
/// Prefix of the counter track of pending doorbell rings, one per doorbell.
pub const RPC_COUNTER_TRACK_PREFIX: &str = "pending doorbell rings";

/// Interned names of the RPC view, made on the first wake.
#[derive(Debug, Clone, Copy)]
struct RpcNames {
    sleep: EventNameId,
    serve: EventNameId,
    wake: EventNameId,
    pending: AnnotationNameId,
    timeouts: AnnotationNameId,
    wake_latency_ns: AnnotationNameId,
}

/// Name of the slice drawn for each [`InterceptRecord`].
pub const INTERCEPT_SLICE_NAME: &str = "hsa_queue_write";
/// Name of the instant carrying [`RunMetadata`] on the process track.
pub const METADATA_INSTANT_NAME: &str = "rprof run";
/// Name of the root track holding one instant per distinct kernel.
pub const KERNEL_TABLE_TRACK_NAME: &str = "kernels";
/// Name of every instant on the [`KERNEL_TABLE_TRACK_NAME`] track. It
/// contains a space, so no kernel (an ELF symbol, or its demangled form
/// which never is this string) carries it: the kernel's own name is the
/// instant's `kernel_name` arg, and `select count(*) from slice where name
/// = K` counts exactly K's dispatches.
pub const KERNEL_SYMBOL_INSTANT_NAME: &str = "kernel symbol";

/// Uuid of the process track. Other tracks get 2, 3, ... in order of first
/// use, which keeps them one varint byte long on every event.
const PROCESS_TRACK_UUID: u64 = 1;

/// Most distinct launch configurations [`KernelArgs::Standard`] interns.
/// Dispatches with a configuration first seen after the table is full carry
/// the eight numbers as uint args instead, so memory stays bounded.
pub const LAUNCH_TABLE_LIMIT: usize = 65_536;

/// Which arguments kernel and interceptor slices carry.
///
/// In every mode, interceptor slices carry `packet_count` only when it
/// differs from the number of dispatches (plus `queue_id` and
/// `dispatch_count` in `Full`), and the `kernels` track holds the static
/// per-kernel facts. Sizes are measured in `docs/trace-format.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KernelArgs {
    /// Kernel slices carry only their interned name and the flow from the
    /// interceptor call; queue, agent and thread follow from the tracks and
    /// the flow. About 52 bytes per kernel slice plus 10 per flow id.
    Compact,
    /// Kernel slices carry exactly two args: `dispatch_id` (uint) and
    /// `launch`, an interned string such as
    /// `grid 1024x1x1 wg 256x1x1 lds 0 scratch 0` (grid and workgroup sizes
    /// in work-items, group and private segment sizes in bytes). Each
    /// distinct configuration is written once; a slice refers to it by a
    /// one- to three-byte iid. About 15 bytes per slice more than `Compact`.
    /// After [`LAUNCH_TABLE_LIMIT`] distinct configurations, new ones are
    /// written inline as `grid.x/y/z`, `workgroup.x/y/z`,
    /// `group_segment_size`, `private_segment_size` uint args.
    #[default]
    Standard,
    /// Every field of the [`DispatchRecord`] as kernel-slice args, and
    /// `queue_id`, `packet_count`, `dispatch_count` on interceptor slices
    /// (about 120 more bytes per dispatch than `Compact`, ~2.5x the
    /// encoding time).
    Full,
}

/// Options of a [`PerfettoSink`].
#[derive(Debug, Clone, Copy, Default)]
pub struct PerfettoOptions {
    /// Which args kernel slices carry.
    pub kernel_args: KernelArgs,
    /// Clock readings for the snapshot at the start; `None` reads the host
    /// clocks in [`RecordSink::start`]. Tests pass fixed values.
    pub clocks: Option<ClockReadings>,
    /// How packets are encoded: by default delta timestamps on a sequence
    /// clock and deflated bundles (`docs/trace-format.md`, "Encoding");
    /// [`WriterOptions::plain`] writes absolute timestamps, uncompressed.
    pub encoding: WriterOptions,
}

/// Interned argument names.
#[derive(Debug, Clone, Copy)]
struct ArgNames {
    queue_id: AnnotationNameId,
    packet_count: AnnotationNameId,
    dispatch_count: AnnotationNameId,
    correlation_id: AnnotationNameId,
    dispatch_id: AnnotationNameId,
    kernel_id: AnnotationNameId,
    kernel_object: AnnotationNameId,
    symbol_name: AnnotationNameId,
    kernel_name: AnnotationNameId,
    grid: [AnnotationNameId; 3],
    workgroup: [AnnotationNameId; 3],
    private_segment_size: AnnotationNameId,
    group_segment_size: AnnotationNameId,
    enqueue_ns: AnnotationNameId,
    thread_id: AnnotationNameId,
    launch: AnnotationNameId,
}

impl ArgNames {
    fn intern<W: io::Write>(w: &mut TraceWriter<W>) -> Self {
        let mut n = |s: &str| w.intern_annotation_name(s);
        ArgNames {
            queue_id: n("queue_id"),
            packet_count: n("packet_count"),
            dispatch_count: n("dispatch_count"),
            correlation_id: n("correlation_id"),
            dispatch_id: n("dispatch_id"),
            kernel_id: n("kernel_id"),
            kernel_object: n("kernel_object"),
            symbol_name: n("symbol_name"),
            kernel_name: n("kernel_name"),
            grid: [n("grid.x"), n("grid.y"), n("grid.z")],
            workgroup: [n("workgroup.x"), n("workgroup.y"), n("workgroup.z")],
            private_segment_size: n("private_segment_size"),
            group_segment_size: n("group_segment_size"),
            enqueue_ns: n("enqueue_ns"),
            thread_id: n("thread_id"),
            launch: n("launch"),
        }
    }
}

/// The launch configuration of a dispatch, as interned by
/// [`KernelArgs::Standard`]: grid x/y/z, workgroup x/y/z, group segment
/// (LDS) bytes, private segment (scratch) bytes.
type LaunchKey = [u32; 8];

fn launch_key(rec: &DispatchRecord) -> LaunchKey {
    [
        rec.grid[0],
        rec.grid[1],
        rec.grid[2],
        u32::from(rec.workgroup[0]),
        u32::from(rec.workgroup[1]),
        u32::from(rec.workgroup[2]),
        rec.group_segment_size,
        rec.private_segment_size,
    ]
}

/// Bounded table of interned launch strings, with a one-entry cache for the
/// common case of consecutive dispatches sharing a configuration.
#[derive(Debug, Default)]
struct LaunchTable {
    ids: HashMap<LaunchKey, StringValueId>,
    last: Option<(LaunchKey, StringValueId)>,
    /// Reused buffer for formatting a new configuration.
    text: String,
}

impl LaunchTable {
    /// The interned string for `key`, interning it if the table has room;
    /// `None` once the table is full and `key` is new.
    fn get<W: io::Write>(
        &mut self,
        key: &LaunchKey,
        writer: &mut TraceWriter<W>,
    ) -> Option<StringValueId> {
        if let Some((k, id)) = self.last {
            if k == *key {
                return Some(id);
            }
        }
        let id = match self.ids.get(key) {
            Some(&id) => id,
            None if self.ids.len() >= LAUNCH_TABLE_LIMIT => return None,
            None => {
                use std::fmt::Write as _;
                let [gx, gy, gz, wx, wy, wz, lds, scratch] = *key;
                self.text.clear();
                let _ = write!(
                    self.text,
                    "grid {gx}x{gy}x{gz} wg {wx}x{wy}x{wz} lds {lds} scratch {scratch}"
                );
                let id = writer.intern_string_value(&self.text);
                self.ids.insert(*key, id);
                id
            }
        };
        self.last = Some((*key, id));
        Some(id)
    }
}

/// One kernel lane of a queue.
#[derive(Debug, Clone, Copy)]
struct Lane {
    uuid: u64,
    last_end_ns: u64,
}

#[derive(Debug)]
struct QueueTracks {
    uuid: u64,
    lanes: Vec<Lane>,
}

/// Everything that exists once `start` has run.
#[derive(Debug)]
struct Started {
    writer: TraceWriter<File>,
    run: RunInfo,
    agents: Vec<AgentInfo>,
    args: ArgNames,
    intercept_name: EventNameId,
    kernel_symbol_name: EventNameId,
    next_uuid: u64,
    threads: HashMap<u32, u64>,
    agent_tracks: HashMap<u32, u64>,
    queues: HashMap<(u32, u64), QueueTracks>,
    /// kernel_id -> interned name (kernel_id 0 is looked up by name).
    kernels: HashMap<u64, EventNameId>,
    kernel_table_track: Option<u64>,
    flow_ids: Vec<u64>,
    launches: LaunchTable,
    last_ts: u64,
    rpc_names: Option<RpcNames>,
    /// Doorbell signal -> its counter track.
    rpc_counters: HashMap<u64, u64>,
    /// ROCTx start/stop range lanes: (track, last end).
    marker_lanes: Vec<(u64, u64)>,
    /// Names given with `roctxNameOsThread`.
    thread_names: HashMap<u32, String>,
    /// (agent, engine mask) -> its copy tracks.
    copy_tracks: HashMap<(u32, u32), QueueTracks>,
    /// Interned copy slice names (direction, then API), on first use.
    copy_names: HashMap<&'static str, EventNameId>,
}

#[derive(Debug)]
enum State {
    Created(File),
    Started(Box<Started>),
    Finished,
}

/// Streams the run to a `.pftrace` file. See the module docs for the layout.
#[derive(Debug)]
pub struct PerfettoSink {
    state: State,
    options: PerfettoOptions,
}

impl PerfettoSink {
    /// Creates (truncates) `path` (normally `DIR/NAME.pftrace`) and its
    /// directory, with default options.
    pub fn create(path: &Path) -> io::Result<Self> {
        Self::with_options(path, PerfettoOptions::default())
    }

    /// Like [`PerfettoSink::create`], with explicit options.
    pub fn with_options(path: &Path, options: PerfettoOptions) -> io::Result<Self> {
        ensure_parent(path)?;
        Ok(PerfettoSink {
            state: State::Created(super::files::create_new(path)?),
            options,
        })
    }

    fn started(&mut self) -> io::Result<&mut Started> {
        match &mut self.state {
            State::Started(s) => Ok(s),
            _ => Err(io::Error::other(
                "PerfettoSink: record outside start()..finish()",
            )),
        }
    }
}

fn read_clocks() -> ClockReadings {
    use rprof_abi::clock::{now_ns, Clock};
    ClockReadings {
        boottime_ns: now_ns(Clock::Boottime),
        monotonic_ns: now_ns(Clock::Monotonic),
        realtime_ns: now_ns(Clock::Realtime),
    }
}

/// `copies`, or `copies engine <mask>` for `_on_engine` copies.
fn copy_track_name(engine: u32) -> String {
    if engine == 0 {
        "copies".to_string()
    } else {
        format!("copies engine {engine:#x}")
    }
}

impl Started {
    /// Interned argument names of copy slices: bytes, source and
    /// destination agent.
    fn copy_arg_names(&mut self) -> (AnnotationNameId, AnnotationNameId, AnnotationNameId) {
        let w = &mut self.writer;
        (
            w.intern_annotation_name("copy_bytes"),
            w.intern_annotation_name("src_agent"),
            w.intern_annotation_name("dst_agent"),
        )
    }

    fn new_uuid(&mut self) -> u64 {
        let uuid = self.next_uuid;
        self.next_uuid += 1;
        uuid
    }

    fn thread_track(&mut self, tid: u32, first_ts: u64) -> io::Result<u64> {
        if let Some(&uuid) = self.threads.get(&tid) {
            return Ok(uuid);
        }
        let uuid = self.new_uuid();
        let name = if let Some(n) = self.thread_names.get(&tid) {
            n.clone()
        } else if tid == self.run.pid {
            self.run.process_name.clone()
        } else {
            format!("thread {tid}")
        };
        self.writer.write_thread_track(&ThreadTrack {
            uuid,
            pid: self.run.pid,
            tid,
            name: &name,
            timestamp_ns: first_ts.min(self.run.start_ns),
        })?;
        self.threads.insert(tid, uuid);
        Ok(uuid)
    }

    /// A lane of the `ROCTx ranges` tracks free at `start_ns`.
    fn marker_lane(&mut self, start_ns: u64, end_ns: u64) -> io::Result<u64> {
        if let Some(lane) = self.marker_lanes.iter_mut().find(|l| l.1 <= start_ns) {
            lane.1 = end_ns;
            return Ok(lane.0);
        }
        let uuid = self.new_uuid();
        self.writer.write_custom_track(&CustomTrack {
            parent_uuid: Some(PROCESS_TRACK_UUID),
            description: Some("ROCTx start/stop ranges (roctxRangeStartA .. roctxRangeStop)"),
            ..CustomTrack::new(uuid, MARKER_RANGES_TRACK_NAME)
        })?;
        self.marker_lanes.push((uuid, end_ns));
        Ok(uuid)
    }

    fn rpc_names(&mut self) -> RpcNames {
        if let Some(n) = self.rpc_names {
            return n;
        }
        let w = &mut self.writer;
        let n = RpcNames {
            sleep: w.intern_event_name(RPC_SLEEP_SLICE_NAME),
            serve: w.intern_event_name(RPC_SERVE_SLICE_NAME),
            wake: w.intern_event_name(RPC_WAKE_INSTANT_NAME),
            pending: w.intern_annotation_name("pending"),
            timeouts: w.intern_annotation_name("timeouts"),
            wake_latency_ns: w.intern_annotation_name("wake_latency_ns"),
        };
        self.rpc_names = Some(n);
        n
    }

    fn rpc_counter(&mut self, signal: u64) -> io::Result<u64> {
        if let Some(&uuid) = self.rpc_counters.get(&signal) {
            return Ok(uuid);
        }
        let uuid = self.new_uuid();
        let name = format!("{RPC_COUNTER_TRACK_PREFIX} {signal:#x}");
        self.writer.write_counter_track(&CounterTrack {
            uuid,
            parent_uuid: Some(PROCESS_TRACK_UUID),
            name: &name,
            unit: Some(CounterUnit::Count),
        })?;
        self.rpc_counters.insert(signal, uuid);
        Ok(uuid)
    }

    fn agent_track(&mut self, agent_index: u32) -> io::Result<u64> {
        if let Some(&uuid) = self.agent_tracks.get(&agent_index) {
            return Ok(uuid);
        }
        let uuid = self.new_uuid();
        let name = match self.agents.iter().find(|a| a.index == agent_index) {
            Some(a) if a.cpu => format!("CPU {} ({})", agent_index, a.name),
            Some(a) => format!("GPU {} ({})", agent_index, a.name),
            None => format!("GPU {agent_index}"),
        };
        self.writer.write_custom_track(&CustomTrack {
            child_ordering: Some(ChildTracksOrdering::Chronological),
            ..CustomTrack::new(uuid, &name)
        })?;
        self.agent_tracks.insert(agent_index, uuid);
        Ok(uuid)
    }

    /// The interned slice name `name` (copy directions and API names).
    fn copy_name(&mut self, name: &'static str) -> EventNameId {
        if let Some(&id) = self.copy_names.get(name) {
            return id;
        }
        let id = self.writer.intern_event_name(name);
        self.copy_names.insert(name, id);
        id
    }

    /// The copy lane of `agent`'s `engine` free at `start`, creating the
    /// engine's track and lanes as needed (copies sharing an engine may
    /// overlap: a shared completion signal, several SDMA queues).
    fn copy_lane(&mut self, agent: u32, engine: u32, start: u64, end: u64) -> io::Result<u64> {
        let name = || copy_track_name(engine);
        self.lane_in(
            |s| &mut s.copy_tracks,
            (agent, engine),
            agent,
            name,
            start,
            end,
        )
    }

    /// The lane track for `rec`, creating queue and lane tracks as needed.
    fn lane_for(&mut self, rec: &DispatchRecord) -> io::Result<u64> {
        let name = || format!("queue {}", rec.queue_id);
        let key = (rec.agent_index, rec.queue_id);
        self.lane_in(
            |s| &mut s.queues,
            key,
            rec.agent_index,
            name,
            rec.start_ns,
            rec.end_ns,
        )
    }

    /// The lane of track group `key` (in the map `tracks` selects) free at
    /// `start`, now busy until `end`: the lowest whose last slice ended by
    /// `start`, else a new lane; the group's track (under `agent`'s) is
    /// made on first use. Lanes are named like their group (`name`, called
    /// only when a track is written) so the UI merges them.
    fn lane_in<K: Copy + Eq + std::hash::Hash>(
        &mut self,
        tracks: fn(&mut Self) -> &mut HashMap<K, QueueTracks>,
        key: K,
        agent: u32,
        name: impl Fn() -> String,
        start: u64,
        end: u64,
    ) -> io::Result<u64> {
        if let Some(group) = tracks(self).get_mut(&key) {
            if let Some(lane) = group.lanes.iter_mut().find(|l| l.last_end_ns <= start) {
                lane.last_end_ns = end;
                return Ok(lane.uuid);
            }
        } else {
            let parent = self.agent_track(agent)?;
            let uuid = self.new_uuid();
            self.writer.write_custom_track(&CustomTrack {
                parent_uuid: Some(parent),
                child_ordering: Some(ChildTracksOrdering::Explicit),
                sibling_merge_behavior: Some(SiblingMergeBehavior::None),
                ..CustomTrack::new(uuid, &name())
            })?;
            tracks(self).insert(
                key,
                QueueTracks {
                    uuid,
                    lanes: Vec::new(),
                },
            );
        }
        // No free lane: add one.
        let uuid = self.new_uuid();
        let group = tracks(self).get_mut(&key).expect("inserted above");
        let rank = group.lanes.len() as i32;
        group.lanes.push(Lane {
            uuid,
            last_end_ns: end,
        });
        let parent = group.uuid;
        self.writer.write_custom_track(&CustomTrack {
            parent_uuid: Some(parent),
            sibling_order_rank: Some(rank),
            ..CustomTrack::new(uuid, &name())
        })?;
        Ok(uuid)
    }

    /// The interned name of the kernel; the first time, also writes its
    /// entry on the `kernels` track.
    fn kernel_name(
        &mut self,
        rec: &DispatchRecord,
        kernel: &KernelInfo<'_>,
    ) -> io::Result<EventNameId> {
        if kernel.kernel_id != 0 {
            if let Some(&iid) = self.kernels.get(&kernel.kernel_id) {
                return Ok(iid);
            }
        }
        let iid = self.writer.intern_event_name(kernel.display_name);
        if kernel.kernel_id == 0 {
            return Ok(iid);
        }
        self.kernels.insert(kernel.kernel_id, iid);
        let track = match self.kernel_table_track {
            Some(t) => t,
            None => {
                let uuid = self.new_uuid();
                self.writer.write_custom_track(&CustomTrack {
                    description: Some("one instant per kernel, at its first dispatch"),
                    ..CustomTrack::new(uuid, KERNEL_TABLE_TRACK_NAME)
                })?;
                self.kernel_table_track = Some(uuid);
                uuid
            }
        };
        let a = self.args;
        self.writer.write_instant(
            track,
            rec.start_ns,
            self.kernel_symbol_name,
            &[
                Arg {
                    name: a.kernel_name,
                    value: ArgValue::Str(kernel.display_name),
                },
                Arg {
                    name: a.kernel_id,
                    value: ArgValue::Uint(kernel.kernel_id),
                },
                Arg {
                    name: a.kernel_object,
                    value: ArgValue::Pointer(rec.kernel_object),
                },
                Arg {
                    name: a.symbol_name,
                    value: ArgValue::Str(kernel.symbol_name),
                },
            ],
        )?;
        Ok(iid)
    }
}

impl PerfettoSink {
    /// One kernel slice, named after `region` (`--kernel-rename`) or the
    /// kernel; the kernel table keeps the kernel's own name.
    fn write_dispatch(
        &mut self,
        rec: &DispatchRecord,
        kernel: &KernelInfo<'_>,
        region: Option<&str>,
    ) -> io::Result<()> {
        let kernel_args = self.options.kernel_args;
        let s = self.started()?;
        let mut name = s.kernel_name(rec, kernel)?;
        if let Some(r) = region {
            name = s.writer.intern_event_name(r);
        }
        let lane = s.lane_for(rec)?;
        s.last_ts = s.last_ts.max(rec.end_ns);
        let flow = [rec.correlation_id];
        let slice = Slice {
            terminating_flow_ids: &flow,
            ..Slice::new(lane, rec.start_ns, rec.end_ns, name)
        };
        let u = |name, v: u64| Arg {
            name,
            value: ArgValue::Uint(v),
        };
        match kernel_args {
            KernelArgs::Compact => s.writer.write_slice(&slice),
            KernelArgs::Standard => {
                let a = s.args;
                let key = launch_key(rec);
                match s.launches.get(&key, &mut s.writer) {
                    Some(launch) => s.writer.write_slice(&Slice {
                        args: &[
                            u(a.dispatch_id, rec.dispatch_id),
                            Arg {
                                name: a.launch,
                                value: ArgValue::InternedString(launch),
                            },
                        ],
                        ..slice
                    }),
                    None => s.writer.write_slice(&Slice {
                        args: &[
                            u(a.dispatch_id, rec.dispatch_id),
                            u(a.grid[0], u64::from(key[0])),
                            u(a.grid[1], u64::from(key[1])),
                            u(a.grid[2], u64::from(key[2])),
                            u(a.workgroup[0], u64::from(key[3])),
                            u(a.workgroup[1], u64::from(key[4])),
                            u(a.workgroup[2], u64::from(key[5])),
                            u(a.group_segment_size, u64::from(key[6])),
                            u(a.private_segment_size, u64::from(key[7])),
                        ],
                        ..slice
                    }),
                }
            }
            KernelArgs::Full => {
                let a = s.args;
                let args = [
                    u(a.correlation_id, rec.correlation_id),
                    u(a.dispatch_id, rec.dispatch_id),
                    u(a.kernel_id, kernel.kernel_id),
                    Arg {
                        name: a.kernel_object,
                        value: ArgValue::Pointer(rec.kernel_object),
                    },
                    u(a.grid[0], u64::from(rec.grid[0])),
                    u(a.grid[1], u64::from(rec.grid[1])),
                    u(a.grid[2], u64::from(rec.grid[2])),
                    u(a.workgroup[0], u64::from(rec.workgroup[0])),
                    u(a.workgroup[1], u64::from(rec.workgroup[1])),
                    u(a.workgroup[2], u64::from(rec.workgroup[2])),
                    u(a.private_segment_size, u64::from(rec.private_segment_size)),
                    u(a.group_segment_size, u64::from(rec.group_segment_size)),
                    u(a.enqueue_ns, rec.enqueue_ns),
                    u(a.queue_id, rec.queue_id),
                    u(a.thread_id, u64::from(rec.thread_id)),
                ];
                s.writer.write_slice(&Slice {
                    args: &args,
                    correlation_id: Some(rec.correlation_id),
                    ..slice
                })
            }
        }
    }
}

impl RecordSink for PerfettoSink {
    fn start(&mut self, run: &RunInfo, agents: &[AgentInfo]) -> io::Result<()> {
        let file = match std::mem::replace(&mut self.state, State::Finished) {
            State::Created(f) => f,
            _ => return Err(io::Error::other("PerfettoSink::start called twice")),
        };
        let mut writer = TraceWriter::with_options(file, self.options.encoding);
        writer.write_clock_snapshot(&self.options.clocks.unwrap_or_else(read_clocks))?;
        writer.write_process_track(&ProcessTrack {
            uuid: PROCESS_TRACK_UUID,
            pid: run.pid,
            name: &run.process_name,
            cmdline: &run.cmdline,
            timestamp_ns: run.start_ns,
        })?;
        let args = ArgNames::intern(&mut writer);
        let intercept_name = writer.intern_event_name(INTERCEPT_SLICE_NAME);
        let kernel_symbol_name = writer.intern_event_name(KERNEL_SYMBOL_INSTANT_NAME);
        self.state = State::Started(Box::new(Started {
            writer,
            run: run.clone(),
            agents: agents.to_vec(),
            args,
            intercept_name,
            kernel_symbol_name,
            next_uuid: PROCESS_TRACK_UUID + 1,
            threads: HashMap::new(),
            agent_tracks: HashMap::new(),
            queues: HashMap::new(),
            kernels: HashMap::new(),
            kernel_table_track: None,
            flow_ids: Vec::new(),
            launches: LaunchTable::default(),
            last_ts: run.start_ns,
            rpc_names: None,
            rpc_counters: HashMap::new(),
            marker_lanes: Vec::new(),
            thread_names: HashMap::new(),
            copy_tracks: HashMap::new(),
            copy_names: HashMap::new(),
        }));
        Ok(())
    }

    fn intercept(&mut self, rec: &InterceptRecord) -> io::Result<()> {
        let kernel_args = self.options.kernel_args;
        let s = self.started()?;
        let track = s.thread_track(rec.thread_id, rec.begin_ns)?;
        s.flow_ids.clear();
        s.flow_ids.extend(
            (0..u64::from(rec.dispatch_count)).map(|i| rec.first_correlation_id.wrapping_add(i)),
        );
        let a = s.args;
        let uint = |name, v: u64| Arg {
            name,
            value: ArgValue::Uint(v),
        };
        let all_args = [
            uint(a.packet_count, u64::from(rec.packet_count)),
            uint(a.queue_id, rec.queue_id),
            uint(a.dispatch_count, u64::from(rec.dispatch_count)),
        ];
        // Compact: the queue follows from the flows' target track and the
        // dispatch count is the number of flows; keep the packet count only
        // when it says more (non-kernel packets in the batch).
        let args = match kernel_args {
            KernelArgs::Full => &all_args[..],
            _ if rec.packet_count != rec.dispatch_count => &all_args[..1],
            _ => &[],
        };
        s.last_ts = s.last_ts.max(rec.end_ns);
        s.writer.write_slice(&Slice {
            args,
            flow_ids: &s.flow_ids,
            ..Slice::new(track, rec.begin_ns, rec.end_ns, s.intercept_name)
        })
    }

    fn dispatch(&mut self, rec: &DispatchRecord, kernel: &KernelInfo<'_>) -> io::Result<()> {
        self.write_dispatch(rec, kernel, None)
    }

    fn dispatch_renamed(
        &mut self,
        rec: &DispatchRecord,
        kernel: &KernelInfo<'_>,
        region: &str,
    ) -> io::Result<()> {
        self.write_dispatch(rec, kernel, Some(region))
    }

    fn rpc_wake(&mut self, r: &RpcWakeRecord) -> io::Result<()> {
        let s = self.started()?;
        let track = s.thread_track(r.thread_id, r.sleep_begin_ns)?;
        let n = s.rpc_names();
        let timeouts = [Arg {
            name: n.timeouts,
            value: ArgValue::Uint(u64::from(r.timeouts)),
        }];
        s.writer.write_slice(&Slice {
            args: if r.timeouts > 0 { &timeouts } else { &[] },
            ..Slice::new(track, r.sleep_begin_ns, r.wake_ns, n.sleep)
        })?;
        s.writer
            .write_slice(&Slice::new(track, r.wake_ns, r.serve_end_ns, n.serve))?;
        let wake_args = [
            Arg {
                name: n.pending,
                value: ArgValue::Int(r.value_at_wake),
            },
            Arg {
                name: n.wake_latency_ns,
                value: ArgValue::Uint(r.wake_latency_ns().unwrap_or(0)),
            },
        ];
        let known = if r.wake_latency_ns().is_some() { 2 } else { 1 };
        s.writer
            .write_instant(track, r.wake_ns, n.wake, &wake_args[..known])?;
        let counter = s.rpc_counter(r.signal)?;
        s.writer
            .write_counter(counter, r.wake_ns, CounterValue::Int(r.value_at_wake))?;
        s.writer.write_counter(
            counter,
            r.serve_end_ns,
            CounterValue::Int(r.value_at_serve_end),
        )?;
        s.last_ts = s.last_ts.max(r.serve_end_ns);
        Ok(())
    }

    fn marker(&mut self, r: &crate::marker::MarkerRecord) -> io::Result<()> {
        use crate::marker::MarkerKind;
        let s = self.started()?;
        let name = s.writer.intern_event_name(r.message);
        s.last_ts = s.last_ts.max(r.end_ns);
        match r.kind {
            MarkerKind::Mark => {
                let track = s.thread_track(r.thread_id, r.start_ns)?;
                s.writer.write_instant(track, r.start_ns, name, &[])
            }
            MarkerKind::ThreadRange => {
                let track = s.thread_track(r.thread_id, r.start_ns)?;
                s.writer
                    .write_slice(&Slice::new(track, r.start_ns, r.end_ns, name))
            }
            MarkerKind::ProcessRange => {
                let track = s.marker_lane(r.start_ns, r.end_ns)?;
                let a = s.args;
                s.writer.write_slice(&Slice {
                    args: &[Arg {
                        name: a.thread_id,
                        value: ArgValue::Uint(u64::from(r.thread_id)),
                    }],
                    ..Slice::new(track, r.start_ns, r.end_ns, name)
                })
            }
        }
    }

    fn thread_name(&mut self, thread_id: u32, name: &str) -> io::Result<()> {
        let s = self.started()?;
        s.thread_names.insert(thread_id, name.to_string());
        if let Some(&uuid) = s.threads.get(&thread_id) {
            // The track exists already: describe it again under the name.
            let pid = s.run.pid;
            let ts = s.run.start_ns;
            s.writer.write_thread_track(&ThreadTrack {
                uuid,
                pid,
                tid: thread_id,
                name,
                timestamp_ns: ts,
            })?;
        }
        Ok(())
    }

    fn memory_copy(&mut self, r: &MemoryCopyRecord) -> io::Result<()> {
        let s = self.started()?;
        // The agent that does the copy: the GPU side (the source for
        // device-to-device), the CPU for host-to-host.
        let agent = match r.direction {
            crate::record::CopyDirection::HostToDevice => r.dst_agent,
            _ => r.src_agent,
        };
        let flow = [r.correlation_id];
        let host = s.thread_track(r.thread_id, r.enqueue_ns)?;
        let api = s.copy_name(r.api.name());
        s.writer.write_slice(&Slice {
            flow_ids: &flow,
            ..Slice::new(host, r.enqueue_ns, r.call_end_ns.max(r.enqueue_ns), api)
        })?;
        let lane = s.copy_lane(agent, r.engine, r.start_ns, r.end_ns)?;
        let name = s.copy_name(r.direction.name());
        let a = s.args;
        let (bytes, src, dst) = s.copy_arg_names();
        let u = |name, v: u64| Arg {
            name,
            value: ArgValue::Uint(v),
        };
        let args = [
            u(bytes, r.bytes),
            u(src, u64::from(r.src_agent)),
            u(dst, u64::from(r.dst_agent)),
            u(a.correlation_id, r.correlation_id),
            u(a.thread_id, u64::from(r.thread_id)),
        ];
        s.last_ts = s.last_ts.max(r.end_ns);
        s.writer.write_slice(&Slice {
            args: &args,
            terminating_flow_ids: &flow,
            ..Slice::new(lane, r.start_ns, r.end_ns, name)
        })
    }

    fn spare_room(&self) -> usize {
        match &self.state {
            State::Started(s) => s.writer.spare_room(),
            _ => 0,
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.state {
            State::Started(s) => s.writer.flush(),
            _ => Ok(()),
        }
    }

    fn make_room(&mut self) -> io::Result<()> {
        match &mut self.state {
            State::Started(s) => s.writer.write_out(),
            _ => Ok(()),
        }
    }

    fn finish(&mut self, meta: &RunMetadata) -> io::Result<()> {
        let mut s = match std::mem::replace(&mut self.state, State::Finished) {
            State::Started(s) => s,
            _ => return Err(io::Error::other("PerfettoSink::finish without start")),
        };
        let ts = if meta.end_ns != 0 {
            meta.end_ns
        } else {
            s.last_ts
        };
        let name = s.writer.intern_event_name(METADATA_INSTANT_NAME);
        let mut n = |k: &str| s.writer.intern_annotation_name(k);
        let keys = [
            n("dispatches"),
            n("filtered_out"),
            n("start_clamped"),
            n("end_clamped"),
            n("records_lost"),
            n("rpc_wakes"),
            n("rpc_unrecognised_waits"),
            n("memory_copies"),
            n("start_ns"),
            n("end_ns"),
            n("hostname"),
            n("device"),
        ];
        let values = [
            meta.dispatches,
            meta.filtered_out,
            meta.start_clamped,
            meta.end_clamped,
            meta.records_lost,
            meta.rpc_wakes,
            meta.rpc_unrecognised_waits,
            meta.memory_copies,
            s.run.start_ns,
            meta.end_ns,
        ];
        let mut args: Vec<Arg<'_>> = keys
            .iter()
            .zip(values)
            .map(|(&name, v)| Arg {
                name,
                value: ArgValue::Uint(v),
            })
            .collect();
        args.push(Arg {
            name: keys[keys.len() - 2],
            value: ArgValue::Str(&s.run.hostname),
        });
        args.push(Arg {
            name: keys[keys.len() - 1],
            value: ArgValue::Str(s.run.device()),
        });
        s.writer
            .write_instant(PROCESS_TRACK_UUID, ts, name, &args)?;
        s.writer.finish()?;
        Ok(())
    }
}
