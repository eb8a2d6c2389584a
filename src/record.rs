//! The fixed-size records that flow from the interceptor and the completion
//! path to the writer thread, and the tables that give them names.
//!
//! Every record is `Copy` and has no heap data, so that the hot paths can push
//! it into a lock-free queue without allocating (marker texts are
//! `&'static str`s interned once per thread, see [`crate::marker`]). Names (kernel symbols, agent
//! names) live in tables that are filled off the hot path (code-object load,
//! `OnLoad`) and are looked up by the writer.

/// One finished kernel dispatch, as the completion path saw it.
///
/// Times are `CLOCK_BOOTTIME` nanoseconds. `start_ns` and `end_ns` are the
/// GPU timestamps translated by ROCr and clamped into
/// `[enqueue_ns, completion_ns]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DispatchRecord {
    /// Globally unique id linking the kernel to the interceptor call that
    /// enqueued it (the Perfetto flow id): `(pid << 32) + per-process counter`
    /// (64-bit, wrapping: never repeats within a process).
    pub correlation_id: u64,
    /// Per-process dispatch counter, starting at 1, in enqueue order.
    pub dispatch_id: u64,
    /// Index of the GPU agent in the run's agent table.
    pub agent_index: u32,
    /// Process-unique queue id (ROCr's `hsa_queue_t::id`).
    pub queue_id: u64,
    /// OS thread id of the thread that wrote the packet.
    pub thread_id: u32,
    /// The packet's `kernel_object` (address of the kernel descriptor).
    pub kernel_object: u64,
    /// Grid size in work-items (x, y, z).
    pub grid: [u32; 3],
    /// Work-group size in work-items (x, y, z).
    pub workgroup: [u16; 3],
    /// Private (scratch) segment bytes per work-item.
    pub private_segment_size: u32,
    /// Group (LDS) segment bytes per work-group.
    pub group_segment_size: u32,
    /// When the interceptor saw the packet.
    pub enqueue_ns: u64,
    /// Kernel start on the GPU.
    pub start_ns: u64,
    /// Kernel end on the GPU.
    pub end_ns: u64,
}

/// One call of the queue interceptor on an application thread: the host
/// side of a batch of dispatches. Drawn as a slice on the thread's track with
/// a flow to each kernel whose correlation id is in
/// `first_correlation_id .. first_correlation_id + dispatch_count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InterceptRecord {
    /// OS thread id of the calling thread.
    pub thread_id: u32,
    /// Queue the packets were written to.
    pub queue_id: u64,
    /// Agent of that queue.
    pub agent_index: u32,
    /// Entry into the interceptor.
    pub begin_ns: u64,
    /// Return from the interceptor.
    pub end_ns: u64,
    /// Correlation id of the first kernel dispatch of the batch.
    pub first_correlation_id: u64,
    /// Number of kernel dispatches in the batch (other packets not counted).
    pub dispatch_count: u32,
    /// Number of packets of any type in the batch.
    pub packet_count: u32,
}

/// Everything the writer thread receives, in one fixed-size enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// A finished kernel dispatch.
    Dispatch(DispatchRecord),
    /// An interceptor call on an application thread.
    Intercept(InterceptRecord),
    /// A doorbell wake of a GPU RPC server thread (`--rpc-trace`).
    RpcWake(crate::rpc::RpcWakeRecord),
    /// A finished ROCTx mark or range (`--marker-trace`).
    Marker(crate::marker::MarkerRecord),
    /// `roctxRangeStartA` (paired with its stop by the writer).
    RangeStart(crate::marker::RangeStartRecord),
    /// `roctxRangeStop`.
    RangeStop(crate::marker::RangeStopRecord),
    /// `--kernel-rename`: the ROCTx range a batch of dispatches was enqueued in.
    KernelRegion(crate::marker::KernelRegionRecord),
    /// `roctxNameOsThread`.
    ThreadName(crate::marker::ThreadNameRecord),
    /// A finished asynchronous memory copy (`--memory-copy-trace`).
    MemoryCopy(MemoryCopyRecord),
    /// The app froze an executable: its kernels wait in the engine's inbox
    /// ([`crate::engine::Engine::push_loaded_kernels`]) for the writer's
    /// kernel table. Queued before any dispatch of them can complete.
    KernelsLoaded,
}

/// Direction of a memory copy, from the kinds of its two agents, with
/// rocprofv3's operation names ([`CopyDirection::name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash, PartialOrd, Ord)]
pub enum CopyDirection {
    /// CPU agent to CPU agent.
    #[default]
    HostToHost,
    /// CPU agent to GPU agent.
    HostToDevice,
    /// GPU agent to CPU agent.
    DeviceToHost,
    /// GPU agent to GPU agent (also every rectangular copy, whose one copy
    /// agent is both source and destination, as rocprofv3 labels it).
    DeviceToDevice,
}

impl CopyDirection {
    /// Every direction, in rocprofv3's enum order.
    pub const ALL: [CopyDirection; 4] = [
        CopyDirection::HostToHost,
        CopyDirection::HostToDevice,
        CopyDirection::DeviceToHost,
        CopyDirection::DeviceToDevice,
    ];

    /// The direction of a copy from `src` to `dst` agents (`true` = GPU).
    pub fn from_agents(src_is_gpu: bool, dst_is_gpu: bool) -> Self {
        match (src_is_gpu, dst_is_gpu) {
            (false, false) => CopyDirection::HostToHost,
            (false, true) => CopyDirection::HostToDevice,
            (true, false) => CopyDirection::DeviceToHost,
            (true, true) => CopyDirection::DeviceToDevice,
        }
    }

    /// rocprofv3's operation name, e.g. `MEMORY_COPY_HOST_TO_DEVICE`.
    pub fn name(self) -> &'static str {
        match self {
            CopyDirection::HostToHost => "MEMORY_COPY_HOST_TO_HOST",
            CopyDirection::HostToDevice => "MEMORY_COPY_HOST_TO_DEVICE",
            CopyDirection::DeviceToHost => "MEMORY_COPY_DEVICE_TO_HOST",
            CopyDirection::DeviceToDevice => "MEMORY_COPY_DEVICE_TO_DEVICE",
        }
    }

    /// rocprofv3's operation number (`rocprofiler_memory_copy_operation_t`:
    /// 1 = host to host ... 4 = device to device).
    pub fn operation(self) -> u32 {
        match self {
            CopyDirection::HostToHost => 1,
            CopyDirection::HostToDevice => 2,
            CopyDirection::DeviceToHost => 3,
            CopyDirection::DeviceToDevice => 4,
        }
    }
}

/// Which AMD-extension entry issued a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CopyApi {
    /// `hsa_amd_memory_async_copy`.
    #[default]
    AsyncCopy,
    /// `hsa_amd_memory_async_copy_on_engine` (ROCr >= 6).
    OnEngine,
    /// `hsa_amd_memory_async_copy_rect`.
    Rect,
}

impl CopyApi {
    /// The runtime entry's name.
    pub fn name(self) -> &'static str {
        match self {
            CopyApi::AsyncCopy => "hsa_amd_memory_async_copy",
            CopyApi::OnEngine => "hsa_amd_memory_async_copy_on_engine",
            CopyApi::Rect => "hsa_amd_memory_async_copy_rect",
        }
    }
}

/// One finished asynchronous memory copy, as the completion path saw it.
///
/// Agents are indices into the run's agent table ([`AgentInfo::index`]),
/// which lists the GPU agents first and then the CPU agents. Times are
/// `CLOCK_BOOTTIME` ns: `start_ns` and `end_ns` come from ROCr's async-copy
/// profiling, clamped into `[enqueue_ns, completion observed]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryCopyRecord {
    /// Correlation id, from the same allocator as the dispatches'.
    pub correlation_id: u64,
    /// OS thread id of the thread that called the copy entry.
    pub thread_id: u32,
    /// Source agent (index into the run's agent table).
    pub src_agent: u32,
    /// Destination agent (index into the run's agent table).
    pub dst_agent: u32,
    /// Direction, from the two agents' kinds.
    pub direction: CopyDirection,
    /// Which entry issued it.
    pub api: CopyApi,
    /// SDMA engine mask asked for (`_on_engine` only; 0 otherwise).
    pub engine: u32,
    /// Bytes copied (for a rectangle: `range.x * range.y * range.z`).
    pub bytes: u64,
    /// Entry into the copy call.
    pub enqueue_ns: u64,
    /// Return from the copy call (the host side of the copy).
    pub call_end_ns: u64,
    /// Start of the copy on its engine.
    pub start_ns: u64,
    /// End of the copy on its engine.
    pub end_ns: u64,
}

/// An agent as listed in the run's outputs: the GPU agents in enumeration
/// order, then (with `--memory-copy-trace`) the CPU agents.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AgentInfo {
    /// Index in the run's agent table: GPU agents in enumeration order from
    /// 0, CPU agents after them.
    pub index: u32,
    /// ROCr agent name, e.g. `gfx90a`.
    pub name: String,
    /// Marketing / product name.
    pub product_name: String,
    /// The agent's `hsa_agent_t` handle (for JSON consumers).
    pub handle: u64,
    /// Number of compute units.
    pub compute_units: u32,
    /// A CPU agent (listed only for the memory-copy trace; kernel records
    /// never name one).
    pub cpu: bool,
}

/// Facts about the traced process written once at the start.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunInfo {
    /// Process id.
    pub pid: u32,
    /// Executable name (argv\[0\] basename).
    pub process_name: String,
    /// Full command line.
    pub cmdline: Vec<String>,
    /// Host name.
    pub hostname: String,
    /// `CLOCK_BOOTTIME` ns when tracing started.
    pub start_ns: u64,
    /// The GPU is rprof's emulated one (no `/dev/kfd`, or `--device
    /// emulated`): every output says so ([`RunInfo::device`]), since its
    /// kernel times are modelled, not measured.
    pub emulated_device: bool,
}

impl RunInfo {
    /// `"emulated"` or `"hardware"`: the device the outputs describe.
    pub fn device(&self) -> &'static str {
        if self.emulated_device {
            "emulated"
        } else {
            "hardware"
        }
    }
}

/// Counters written at the end of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunMetadata {
    /// Kernel dispatches recorded (after filters).
    pub dispatches: u64,
    /// Dispatches dropped by the include/exclude filters.
    pub filtered_out: u64,
    /// Start timestamps moved up to the enqueue time.
    pub start_clamped: u64,
    /// End timestamps moved down to the completion time.
    pub end_clamped: u64,
    /// Records lost (must be 0; counted rather than hidden).
    pub records_lost: u64,
    /// RPC doorbell wakes recorded (`--rpc-trace`).
    pub rpc_wakes: u64,
    /// Blocked `NE 0` waits on signals without an event, which the RPC
    /// tracer cannot treat as doorbell waits (see [`crate::rpc`]).
    pub rpc_unrecognised_waits: u64,
    /// `CLOCK_BOOTTIME` ns when tracing ended.
    pub end_ns: u64,
    /// Memory copies recorded (`--memory-copy-trace`).
    pub memory_copies: u64,
}
