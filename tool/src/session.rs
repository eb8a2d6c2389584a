//! The tracing session: what `OnLoad` sets up, the hooks it installs, the
//! queue interceptor, and the flush at `hsa_shut_down` / exit.
//!
//! # Safety
//! This module is the FFI edge: it receives raw pointers from the runtime
//! (tables, queues, packets, interceptor data) and calls runtime entries
//! copied at `OnLoad`. Each `unsafe` block says what it relies on. Every
//! `extern "C"` function here catches panics; on any internal failure the
//! call degrades to what the runtime would have done without rprof.

use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hsa_sys::{
    hsa_agent_t, hsa_executable_symbol_t, hsa_executable_t, hsa_queue_t, hsa_status_t, HsaApiTable,
    HSA_AGENT_INFO_DEVICE, HSA_AGENT_INFO_NAME, HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT,
    HSA_AMD_AGENT_INFO_PRODUCT_NAME, HSA_DEVICE_TYPE_GPU, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
    HSA_EXECUTABLE_SYMBOL_INFO_NAME, HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH,
    HSA_EXECUTABLE_SYMBOL_INFO_TYPE, HSA_STATUS_ERROR, HSA_STATUS_SUCCESS, HSA_SYMBOL_KIND_KERNEL,
};
use rprof_core::config::TraceConfig;
use rprof_core::engine::{
    boottime_ns, hardware_ring_takes, hardware_slots, join_within, Engine, EngineOptions,
    QueueContext, RawPacket, WriterOutcome,
};
use rprof_core::kernels::{KernelTable, NamePolicy};
use rprof_core::record::{AgentInfo, RunInfo};
use rprof_core::sink::RecordSink;
use rprof_pool::{PoolConfig, SignalPool};

use crate::outputs::open_outputs;
use crate::runtime::{edit_core_table, Runtime};
use crate::signals::{PoolSource, PooledSignal, RocrBackend, RocrSignals};

/// How long the flush waits for dispatches still on the device.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the flush waits for the completion thread to stop (or, at
/// exit, to settle the recorded dispatches).
const COMPLETION_JOIN: Duration = Duration::from_secs(2);
/// How long the flush waits for the writer to finish the outputs.
const WRITER_JOIN: Duration = Duration::from_secs(5);
/// How long `hsa_queue_destroy` waits for the queue's traced dispatches.
const QUEUE_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Everything a running trace needs, alive for the rest of the process.
pub struct Session {
    rt: Runtime,
    engine: Arc<Engine<PooledSignal>>,
    source: PoolSource,
    kernels: Arc<KernelTable>,
    agents: Vec<AgentInfo>,
    /// `hsa_init` calls not yet matched by `hsa_shut_down` (the one that
    /// loaded rprof counts).
    init_depth: AtomicI64,
    /// Traced queues by `hsa_queue_t` address, with the data pointer given
    /// to the runtime's interceptor registration.
    queues: Mutex<HashMap<usize, *const QueueState>>,
    threads: Mutex<Option<(JoinHandle<()>, JoinHandle<WriterOutcome>)>>,
    finished: AtomicBool,
    /// The completion thread, still recycling for the ring guard after an
    /// at-exit flush (see [`Session::end_guard`]).
    guard_thread: Mutex<Option<JoinHandle<()>>>,
    /// The output files, in the order of the sinks.
    outputs: Vec<std::path::PathBuf>,
    verbose: bool,
    /// Measurement mode: intercept queues with profiling, packets unchanged.
    passthrough: bool,
    /// ROCr >= 6.0 (AMD extension table major 2): its intercept queue runs
    /// intercept-marker callbacks, which tell rprof each queue's hardware
    /// ring, so rprof can keep the runtime from deferring its writes.
    markers: bool,
}

// SAFETY: the raw `QueueState` pointers in `queues` come from `Arc::into_raw`
// and are only turned back into `Arc`s under the mutex; everything else is
// `Send + Sync`.
unsafe impl Send for Session {}
// SAFETY: see `Send`.
unsafe impl Sync for Session {}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("agents", &self.agents)
            .finish_non_exhaustive()
    }
}

/// What the interceptor gets as its `data` pointer.
#[derive(Debug)]
struct QueueState {
    ctx: Arc<QueueContext>,
    /// The runtime's hardware queue under this intercept queue (ROCr >= 6,
    /// learnt from an intercept marker's callback; null until then).
    hardware: AtomicPtr<hsa_queue_t>,
    /// The marker that asks for `hardware` was written.
    marker_sent: AtomicBool,
}

/// How long a write waits for room in the hardware ring while the device
/// makes no progress at all (a head packet blocked on the host), before it
/// lets the runtime defer it.
const HARDWARE_ROOM_STALL: Duration = Duration::from_secs(1);

static SESSION: OnceLock<&'static Session> = OnceLock::new();
static LOADED: AtomicBool = AtomicBool::new(false);

fn session() -> Option<&'static Session> {
    SESSION.get().copied()
}

/// Runs `f`, turning a panic into `fallback` (and one line on stderr).
pub fn guarded<T>(what: &str, fallback: impl FnOnce() -> T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => {
            eprintln!("rprof: internal error in {what}; continuing without it");
            fallback()
        }
    }
}

/// `OnLoad`: returns whether the runtime should keep rprof loaded (always
/// true: on any problem rprof stays loaded but inert, and the app runs
/// untraced).
///
/// # Safety
/// `table` is the runtime's API table pointer given to `OnLoad`.
pub unsafe fn on_load(table: *mut HsaApiTable) -> bool {
    if LOADED.swap(true, Ordering::AcqRel) {
        if session().is_some_and(|s| s.finished.load(Ordering::Acquire)) {
            eprintln!("rprof: the HSA runtime was initialised again after shutdown; this part of the run is not traced");
        }
        return true;
    }
    let config = match TraceConfig::from_env() {
        Ok(Some(c)) if c.kernel_trace || c.rpc_trace => c,
        Ok(_) => return true,
        Err(e) => {
            eprintln!("rprof: configuration error: {e}; the application runs untraced");
            return true;
        }
    };
    let tuning = match crate::tuning::Tuning::from_env() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("rprof: configuration error: {e}; the application runs untraced");
            return true;
        }
    };
    // One tracer per process: another copy of this library (at another
    // path) that already traces would write the same files.
    if let Some(other) = crate::single::other_tracer() {
        let me = crate::preload::own_library_path()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "this copy".into());
        eprintln!(
            "rprof: another rprof tool library ({}) already traces this process; {me} stays inactive",
            other.display()
        );
        return true;
    }
    crate::single::claim();
    // SAFETY: the pointer `OnLoad` received.
    let rt = match unsafe { Runtime::from_tables(table) } {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rprof: {e}; the application runs untraced");
            return true;
        }
    };
    let agents = enumerate_agents(&rt);
    if agents.is_empty() {
        eprintln!("rprof: no GPU agent found; nothing to trace");
        return true;
    }
    let kernels = Arc::new(KernelTable::new(NamePolicy::from_config(&config)));
    let sinks = match open_outputs(&config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rprof: cannot create the output files: {e}; the application runs untraced");
            return true;
        }
    };
    let pool_size = tuning
        .pool_size
        // A serialized dispatch takes three signals at once.
        .max(if config.serialize_kernels { 3 } else { 1 });
    let pool = match SignalPool::new(
        RocrSignals::new(rt),
        PoolConfig {
            capacity: pool_size,
            batch: pool_size.min(256),
            initial_value: 1,
        },
    ) {
        Ok(p) => Box::leak(Box::new(p)),
        Err(e) => {
            eprintln!("rprof: cannot set up the signal pool: {e}; the application runs untraced");
            return true;
        }
    };
    // Measurement knobs (docs/completion.md): the completion thread's
    // longest backoff sleep, and a pass-through mode that keeps intercept
    // queues and profiling but changes no packet.
    let mut options = EngineOptions {
        max_in_flight: pool_size as usize,
        serialize: config.serialize_kernels,
        host_forwarding: tuning.host_forwarding,
        ..EngineOptions::default()
    };
    if let Some(b) = tuning.max_backoff {
        options.max_backoff = b;
    }
    let engine = Arc::new(Engine::new(options));
    let run = run_info();
    let session: &'static Session = Box::leak(Box::new(Session {
        rt,
        engine: engine.clone(),
        source: PoolSource::new(pool),
        kernels: kernels.clone(),
        agents: agents.clone(),
        init_depth: AtomicI64::new(1),
        queues: Mutex::new(HashMap::new()),
        threads: Mutex::new(None),
        finished: AtomicBool::new(false),
        guard_thread: Mutex::new(None),
        outputs: crate::report::output_files(&config),
        verbose: tuning.verbose,
        passthrough: tuning.passthrough,
        markers: rt.amd.version.major_id >= 2,
    }));
    let threads = match start_threads(engine, RocrBackend::new(rt), sinks, kernels, run, agents) {
        Ok(t) => t,
        Err(e) => {
            eprintln!(
                "rprof: cannot start the tracing threads: {e}; the application runs untraced"
            );
            return true;
        }
    };
    *lock(&session.threads) = Some(threads);
    if SESSION.set(session).is_err() {
        return true;
    }
    // SAFETY: validated by `from_tables`, which found every entry replaced
    // here present; OnLoad runs inside hsa_init before any app call.
    unsafe {
        edit_core_table(table, |core| {
            core.hsa_init_fn = Some(hook_init);
            core.hsa_shut_down_fn = Some(hook_shut_down);
            if config.kernel_trace {
                core.hsa_queue_create_fn = Some(hook_queue_create);
                core.hsa_queue_destroy_fn = Some(hook_queue_destroy);
                core.hsa_executable_freeze_fn = Some(hook_executable_freeze);
            }
            if config.rpc_trace {
                crate::rpc_wait::install(core, session.engine.clone());
            }
        })
    };
    // SAFETY: registering a plain extern "C" function with the C library
    // (glibc has both); failure only means no flush at exit, which
    // hsa_shut_down still covers. `quick_exit` runs only the second list.
    unsafe {
        libc::atexit(at_exit);
        at_quick_exit(at_exit);
        // A forked child has none of rprof's threads: it runs untraced.
        libc::pthread_atfork(None, None, Some(in_forked_child));
    }
    // SIGTERM / SIGINT: flush, then end as the signal would have.
    crate::terminate::install(flush_on_signal);
    true
}

/// Nice value of rprof's own threads.
const BACKGROUND_NICE: libc::c_int = 10;

/// Lowers the calling thread's scheduling priority: where cores are scarce,
/// rprof's completion and writer threads give way to the application (and,
/// on the emulated GPU, to the command processor). Nothing they do is
/// time-critical: timestamps come from the signals, and an interceptor that
/// waits for them wakes them explicitly.
fn yield_to_the_app() {
    // SAFETY: gettid and setpriority on the calling thread only; failure
    // (e.g. a sandbox forbidding it) leaves the default priority.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, BACKGROUND_NICE);
    }
}

fn start_threads(
    engine: Arc<Engine<PooledSignal>>,
    backend: RocrBackend,
    mut sinks: Vec<Box<dyn RecordSink + Send>>,
    kernels: Arc<KernelTable>,
    run: RunInfo,
    agents: Vec<AgentInfo>,
) -> std::io::Result<(JoinHandle<()>, JoinHandle<WriterOutcome>)> {
    let e = engine.clone();
    let completion = std::thread::Builder::new()
        .name("rprof-completion".into())
        .spawn(move || {
            yield_to_the_app();
            guarded(
                "the completion thread",
                // Nobody completes dispatches any more: trace nothing new,
                // so interceptors never wait for this thread.
                || e.completion_failed(),
                || e.run_completion(&backend),
            )
        })?;
    let writer = std::thread::Builder::new()
        .name("rprof-writer".into())
        .spawn(move || {
            yield_to_the_app();
            let e = engine.clone();
            guarded(
                "the writer thread",
                move || {
                    e.writer_failed();
                    WriterOutcome::default()
                },
                || engine.run_writer(&mut sinks, &mut &*kernels, &run, &agents),
            )
        })?;
    Ok((completion, writer))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn run_info() -> RunInfo {
    let cmdline: Vec<String> = std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default();
    let process_name = cmdline
        .first()
        .map(|a| a.rsplit('/').next().unwrap_or(a).to_string())
        .unwrap_or_default();
    RunInfo {
        pid: std::process::id(),
        process_name,
        cmdline,
        hostname: rprof_core::config::hostname(),
        start_ns: boottime_ns(),
    }
}

fn info_string(rt: &Runtime, agent: hsa_agent_t, attribute: u32) -> String {
    let Some(get) = rt.core.hsa_agent_get_info_fn else {
        return String::new();
    };
    let mut buf = [0u8; 64];
    // SAFETY: both attributes write at most 64 bytes (a char[64]) into `buf`.
    let status = unsafe { get(agent, attribute, buf.as_mut_ptr().cast()) };
    if status != HSA_STATUS_SUCCESS {
        return String::new();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

fn info_u32(rt: &Runtime, agent: hsa_agent_t, attribute: u32) -> u32 {
    let Some(get) = rt.core.hsa_agent_get_info_fn else {
        return 0;
    };
    let mut v = 0u32;
    // SAFETY: the attributes queried this way are 32-bit values.
    let status = unsafe { get(agent, attribute, (&mut v as *mut u32).cast()) };
    if status == HSA_STATUS_SUCCESS {
        v
    } else {
        0
    }
}

/// GPU agents in enumeration order.
fn enumerate_agents(rt: &Runtime) -> Vec<AgentInfo> {
    unsafe extern "C" fn collect(agent: hsa_agent_t, data: *mut c_void) -> hsa_status_t {
        // SAFETY: `data` is the `Vec` passed below, alive for the iteration.
        let v = unsafe { &mut *data.cast::<Vec<hsa_agent_t>>() };
        v.push(agent);
        HSA_STATUS_SUCCESS
    }
    let mut all: Vec<hsa_agent_t> = Vec::new();
    if let Some(iterate) = rt.core.hsa_iterate_agents_fn {
        // SAFETY: the callback only pushes into `all`, which outlives the call.
        unsafe { iterate(Some(collect), (&mut all as *mut Vec<hsa_agent_t>).cast()) };
    }
    let mut out = Vec::new();
    for agent in all {
        if info_u32(rt, agent, HSA_AGENT_INFO_DEVICE) != HSA_DEVICE_TYPE_GPU {
            continue;
        }
        out.push(AgentInfo {
            index: out.len() as u32,
            name: info_string(rt, agent, HSA_AGENT_INFO_NAME),
            product_name: info_string(rt, agent, HSA_AMD_AGENT_INFO_PRODUCT_NAME),
            handle: agent.handle,
            compute_units: info_u32(rt, agent, HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT),
        });
    }
    out
}

impl Session {
    /// The write index of every traced queue now: the packets the app has
    /// written so far.
    fn write_indices(&self) -> Vec<(usize, u64)> {
        let Some(write) = self.rt.core.hsa_queue_load_write_index_relaxed_fn else {
            return Vec::new();
        };
        let queues = lock(&self.queues);
        queues
            .keys()
            .map(|&q| {
                // SAFETY: queues in the map are alive: the destroy hook
                // removes them (under this lock) before the runtime
                // destroys them.
                (q, unsafe { write(q as *const hsa_queue_t) })
            })
            .collect()
    }

    /// Whether some traced queue still holds, undelivered to the
    /// interceptor, packets written before `snapshot` was taken (packets
    /// written later do not count: app threads may keep launching while the
    /// process exits).
    fn undelivered_packets(&self, snapshot: &[(usize, u64)]) -> bool {
        let Some(read) = self.rt.core.hsa_queue_load_read_index_relaxed_fn else {
            return false;
        };
        let queues = lock(&self.queues);
        snapshot.iter().any(|&(q, written)| {
            queues.contains_key(&q)
                // SAFETY: as in `write_indices`; still in the map.
                && unsafe { read(q as *const hsa_queue_t) } < written
        })
    }

    fn agent_index(&self, agent: hsa_agent_t) -> Option<u32> {
        self.agents
            .iter()
            .find(|a| a.handle == agent.handle)
            .map(|a| a.index)
    }

    /// Flushes the trace: waits (bounded) for dispatches on the device, lets
    /// the completion and writer threads finish, and closes the outputs.
    /// Idempotent; later calls return at once.
    ///
    /// `at_exit`: the process is exiting (`exit` from any thread, possibly
    /// while other threads keep launching kernels): only packets written
    /// before the flush began are waited for, and the ring guard stays on
    /// for whatever the app submits afterwards (see
    /// [`Engine::keep_guard_after_stop`]).
    ///
    /// Every wait is bounded: a device that never finishes, a completion
    /// thread or a writer that is stuck (a FIFO nobody reads, a hung file
    /// system) costs at most [`FLUSH_TIMEOUT`] + [`COMPLETION_JOIN`] +
    /// [`WRITER_JOIN`]; what could not be finished is said on stderr and in
    /// the report to the `rprof` command.
    fn finish(&self, why: &str, at_exit: bool) {
        if self.finished.swap(true, Ordering::AcqRel) {
            return;
        }
        let t0 = Instant::now();
        // Packets the app wrote before now that the runtime has not handed
        // to the interceptor yet (it defers them when the hardware ring is
        // full) are still to be traced: wait until each traced queue's proxy
        // ring has delivered them, then for the device.
        let snapshot = self.write_indices();
        while self.undelivered_packets(&snapshot) && t0.elapsed() < FLUSH_TIMEOUT {
            std::thread::sleep(Duration::from_micros(200));
        }
        if at_exit {
            self.engine.keep_guard_after_stop();
        }
        let left = self
            .engine
            .begin_shutdown(FLUSH_TIMEOUT.saturating_sub(t0.elapsed()));
        let threads = lock(&self.threads).take();
        let mut outcome = None;
        let mut writer_stuck = false;
        if let Some((completion, writer)) = threads {
            if at_exit {
                // The completion thread keeps recycling for the app's
                // remaining launches; wait only until it has settled the
                // recorded dispatches.
                let t = Instant::now();
                while !self.engine.records_closed() && t.elapsed() < COMPLETION_JOIN {
                    std::thread::sleep(Duration::from_micros(200));
                }
                *lock(&self.guard_thread) = Some(completion);
            } else if join_within(completion, COMPLETION_JOIN).is_none() {
                eprintln!("rprof: the completion thread did not stop within {COMPLETION_JOIN:?}; dispatches it still held are lost");
            }
            self.engine.stop_writer();
            outcome = join_within(writer, WRITER_JOIN);
            writer_stuck = outcome.is_none();
        }
        // Destroy the timestamp signals while the runtime is still up (no
        // handle is out once the completion thread has returned, except for
        // dispatches given up on, which keep the pool open). Not at exit:
        // the completion thread still recycles them for the app's threads.
        if !at_exit {
            let _ = self.source.pool().shutdown();
        }
        if left > 0 {
            eprintln!("rprof: {left} dispatches were still running after {FLUSH_TIMEOUT:?} at {why}; they are counted as lost");
        }
        let stuck_reason = format!(
            "the output writer did not finish within {WRITER_JOIN:?} (stuck writing: a FIFO nobody reads, a hung file system?); {} records were still queued",
            self.engine.records_queued()
        );
        if writer_stuck {
            eprintln!("rprof: {stuck_reason}; the outputs are incomplete");
        }
        crate::report::report_outputs(
            &self.outputs,
            outcome.as_ref().map(|o| &o.sink_failures[..]),
            &stuck_reason,
        );
        if let Some(o) = outcome {
            let m = o.metadata;
            if m.records_lost > 0 {
                eprintln!(
                    "rprof: {} records could not be recorded (see the run metadata)",
                    m.records_lost
                );
            }
            if self.verbose {
                let stats = self.source.pool().stats();
                eprintln!(
                    "rprof: finished at {why} in {:?}: {} dispatches written, {} filtered out, {} lost, clamps start/end {}/{}, signal pool {} created, high water {}, {} waits; {} interceptor calls, mean {} ns",
                    t0.elapsed(),
                    m.dispatches,
                    m.filtered_out,
                    m.records_lost,
                    m.start_clamped,
                    m.end_clamped,
                    stats.created,
                    stats.high_water,
                    stats.acquire_waits,
                    o.intercept_calls,
                    o.intercept_ns / o.intercept_calls.max(1),
                );
            }
        }
    }
}

impl Session {
    /// Before the runtime shuts down after an at-exit flush (HIP and others
    /// call `hsa_shut_down` from their own exit handlers): the completion
    /// thread stops recycling, since the runtime's signals go away.
    fn end_guard(&self) {
        if let Some(t) = lock(&self.guard_thread).take() {
            self.engine.stop_guard();
            let _ = join_within(t, COMPLETION_JOIN);
        }
    }
}

/// `OnUnload`: the runtime is unloading rprof (inside `hsa_shut_down`).
pub fn on_unload() {
    if let Some(s) = session() {
        s.finish("OnUnload", false);
        s.end_guard();
    }
}

extern "C" {
    /// C11 `at_quick_exit` (glibc); not in the `libc` crate.
    fn at_quick_exit(f: extern "C" fn()) -> libc::c_int;
}

/// In a child created by `fork`: the completion and writer threads do not
/// exist there, so stop tracing and never wait for them.
extern "C" fn in_forked_child() {
    if let Some(s) = session() {
        s.finished.store(true, Ordering::Release);
        s.engine.forked_child();
        crate::terminate::in_forked_child();
    }
}

/// The flush for SIGTERM / SIGINT (`terminate`), on rprof's signal thread.
fn flush_on_signal(why: &str) {
    if let Some(s) = session() {
        s.finish(why, true);
    }
}

extern "C" fn at_exit() {
    guarded(
        "the exit flush",
        || (),
        || {
            if let Some(s) = session() {
                s.finish("exit", true);
            }
        },
    )
}

unsafe extern "C" fn hook_init() -> hsa_status_t {
    let Some(s) = session() else {
        return HSA_STATUS_ERROR;
    };
    let Some(init) = s.rt.core.hsa_init_fn else {
        return HSA_STATUS_ERROR;
    };
    // SAFETY: the runtime's own hsa_init.
    let status = unsafe { init() };
    if status == HSA_STATUS_SUCCESS {
        s.init_depth.fetch_add(1, Ordering::AcqRel);
    }
    status
}

unsafe extern "C" fn hook_shut_down() -> hsa_status_t {
    let Some(s) = session() else {
        return HSA_STATUS_ERROR;
    };
    guarded(
        "hsa_shut_down",
        || (),
        || {
            if s.init_depth.fetch_sub(1, Ordering::AcqRel) == 1 {
                s.finish("hsa_shut_down", false);
                s.end_guard();
            }
        },
    );
    let Some(shut_down) = s.rt.core.hsa_shut_down_fn else {
        return HSA_STATUS_ERROR;
    };
    // SAFETY: the runtime's own hsa_shut_down.
    unsafe { shut_down() }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn hook_queue_create(
    agent: hsa_agent_t,
    size: u32,
    type_: hsa_sys::hsa_queue_type32_t,
    callback: Option<unsafe extern "C" fn(hsa_status_t, *mut hsa_queue_t, *mut c_void)>,
    data: *mut c_void,
    private_segment_size: u32,
    group_segment_size: u32,
    queue: *mut *mut hsa_queue_t,
) -> hsa_status_t {
    let Some(s) = session() else {
        return HSA_STATUS_ERROR;
    };
    let Some(original) = s.rt.core.hsa_queue_create_fn else {
        return HSA_STATUS_ERROR;
    };
    let traced = guarded(
        "hsa_queue_create",
        || None,
        || {
            if !s.engine.is_tracing() || queue.is_null() {
                return None;
            }
            let agent_index = s.agent_index(agent)?;
            let create = s.rt.amd.hsa_amd_queue_intercept_create_fn?;
            // SAFETY: the app's own arguments, passed on unchanged to the
            // runtime's intercept-queue constructor (same contract as
            // hsa_queue_create).
            let status = unsafe {
                create(
                    agent,
                    size,
                    type_,
                    callback,
                    data,
                    private_segment_size,
                    group_segment_size,
                    queue,
                )
            };
            if status != HSA_STATUS_SUCCESS {
                return None;
            }
            // SAFETY: the runtime just stored a valid queue pointer.
            let q = unsafe { *queue };
            // SAFETY: `q` is a live queue created above.
            let (queue_id, ring_size) = unsafe { ((*q).id, (*q).size) };
            if let Some(enable) = s.rt.amd.hsa_amd_profiling_set_profiler_enabled_fn {
                // SAFETY: live queue.
                unsafe { enable(q, 1) };
            }
            let state = Arc::new(QueueState {
                ctx: Arc::new(QueueContext::with_ring(
                    queue_id,
                    agent_index,
                    agent.handle,
                    ring_size,
                )),
                hardware: AtomicPtr::new(std::ptr::null_mut()),
                marker_sent: AtomicBool::new(false),
            });
            let raw = Arc::into_raw(state);
            let register = s.rt.amd.hsa_amd_queue_intercept_register_fn?;
            // SAFETY: live intercept queue; `raw` stays valid until the queue is
            // destroyed (it is released only after the runtime's destroy returns).
            let status = unsafe { register(q, Some(interceptor), raw as *mut c_void) };
            if status != HSA_STATUS_SUCCESS {
                // SAFETY: `raw` came from `Arc::into_raw` above and was not registered.
                drop(unsafe { Arc::from_raw(raw) });
                // The queue works as a plain (untraced) intercept queue.
                return Some(HSA_STATUS_SUCCESS);
            }
            lock(&s.queues).insert(q as usize, raw);
            Some(HSA_STATUS_SUCCESS)
        },
    );
    match traced {
        Some(status) => status,
        // SAFETY: the runtime's own hsa_queue_create with the app's arguments.
        None => unsafe {
            original(
                agent,
                size,
                type_,
                callback,
                data,
                private_segment_size,
                group_segment_size,
                queue,
            )
        },
    }
}

unsafe extern "C" fn hook_queue_destroy(queue: *mut hsa_queue_t) -> hsa_status_t {
    let Some(s) = session() else {
        return HSA_STATUS_ERROR;
    };
    let Some(original) = s.rt.core.hsa_queue_destroy_fn else {
        return HSA_STATUS_ERROR;
    };
    let state = guarded(
        "hsa_queue_destroy",
        || None,
        || {
            let raw = lock(&s.queues).remove(&(queue as usize))?;
            // SAFETY: `raw` is alive: its `Arc` is released only below.
            let ctx = unsafe { &(*raw).ctx };
            // Let the queue's traced kernels finish before the queue goes away,
            // so none of them is lost (bounded: an app may destroy a queue with
            // work that never ends).
            let t0 = Instant::now();
            while ctx.in_flight() > 0 && t0.elapsed() < QUEUE_DRAIN_TIMEOUT {
                std::thread::sleep(Duration::from_micros(100));
            }
            Some(raw)
        },
    );
    // SAFETY: the runtime's own hsa_queue_destroy on the app's queue.
    let status = unsafe { original(queue) };
    if let Some(raw) = state {
        // SAFETY: the queue is gone, so the runtime no longer calls the
        // interceptor with `raw`; this releases the reference taken at create.
        let state = unsafe { Arc::from_raw(raw) };
        state.ctx.mark_destroyed();
    }
    status
}

unsafe extern "C" fn hook_executable_freeze(
    executable: hsa_executable_t,
    options: *const c_char,
) -> hsa_status_t {
    let Some(s) = session() else {
        return HSA_STATUS_ERROR;
    };
    let Some(original) = s.rt.core.hsa_executable_freeze_fn else {
        return HSA_STATUS_ERROR;
    };
    // SAFETY: the runtime's own freeze with the app's arguments.
    let status = unsafe { original(executable, options) };
    if status == HSA_STATUS_SUCCESS {
        guarded(
            "hsa_executable_freeze",
            || (),
            || record_kernels(s, executable),
        );
    }
    status
}

fn record_kernels(s: &'static Session, executable: hsa_executable_t) {
    type GetInfo = hsa_sys::hsa_executable_symbol_get_info_fn_t;
    /// One fixed-size attribute of `symbol`, or `None` if the runtime fails.
    ///
    /// # Safety
    /// `T` must be the attribute's type (the runtime writes `size_of::<T>()`
    /// bytes).
    unsafe fn info<T: Default>(
        get: GetInfo,
        symbol: hsa_executable_symbol_t,
        attribute: u32,
    ) -> Option<T> {
        let mut value = T::default();
        // SAFETY: the caller guarantees `T` is the attribute's type, so the
        // runtime writes exactly into `value`.
        let status = unsafe { get(symbol, attribute, (&mut value as *mut T).cast()) };
        (status == HSA_STATUS_SUCCESS).then_some(value)
    }
    unsafe extern "C" fn visit(
        _exec: hsa_executable_t,
        symbol: hsa_executable_symbol_t,
        data: *mut c_void,
    ) -> hsa_status_t {
        // SAFETY: `data` is the session passed below.
        let s = unsafe { &*data.cast::<Session>() };
        guarded(
            "kernel symbol lookup",
            || (),
            || {
                let Some(get) = s.rt.core.hsa_executable_symbol_get_info_fn else {
                    return;
                };
                // SAFETY: TYPE is a 32-bit hsa_symbol_kind_t.
                let kind = unsafe { info::<u32>(get, symbol, HSA_EXECUTABLE_SYMBOL_INFO_TYPE) };
                if kind != Some(HSA_SYMBOL_KIND_KERNEL) {
                    return;
                }
                // SAFETY: NAME_LENGTH is a u32.
                let Some(len) =
                    (unsafe { info::<u32>(get, symbol, HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH) })
                else {
                    return;
                };
                // NAME is written without a terminator; leave room anyway.
                let mut name = vec![0u8; len as usize + 1];
                // SAFETY: NAME writes `len` bytes into a buffer of `len + 1`.
                if unsafe {
                    get(
                        symbol,
                        HSA_EXECUTABLE_SYMBOL_INFO_NAME,
                        name.as_mut_ptr().cast(),
                    )
                } != HSA_STATUS_SUCCESS
                {
                    return;
                }
                name.truncate(len as usize);
                // SAFETY: KERNEL_OBJECT is a u64.
                let Some(object) =
                    (unsafe { info::<u64>(get, symbol, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT) })
                else {
                    return;
                };
                let name = String::from_utf8_lossy(&name);
                let name = name.trim_end_matches('\0');
                s.kernels.insert(object, name);
            },
        );
        HSA_STATUS_SUCCESS
    }
    if let Some(iterate) = s.rt.core.hsa_executable_iterate_symbols_fn {
        // SAFETY: a frozen executable; the callback only reads symbols and
        // uses the session, which lives for the rest of the process.
        unsafe {
            iterate(
                executable,
                Some(visit),
                (s as *const Session).cast_mut().cast(),
            )
        };
    }
}

impl Session {
    /// On ROCr >= 6, before a write: makes sure the runtime will submit
    /// `out` to the hardware ring at once rather than defer it behind a
    /// retry barrier. ROCr's final submit keeps a deferred write on the
    /// side and neither orders a later write of the same rewrite after it
    /// nor accepts a second deferral (`assert(overflow_.empty())`, live in
    /// Debian's builds): a rewriter in front of rprof that calls its writer
    /// twice per packet (allowed since 6.0) aborts the process when the
    /// ring is full, and a deferred marker's callback gets the wrong packet
    /// id. Waits while the device consumes the ring; gives up (and lets the
    /// runtime defer) only after [`HARDWARE_ROOM_STALL`] without progress.
    ///
    /// The hardware ring is learnt once per queue: a write of one intercept
    /// marker whose callback (run by the runtime's submit with the hardware
    /// queue) stores it.
    ///
    /// # Safety
    /// `writer` is the runtime's writer of the current interceptor call and
    /// `state` the queue's registered state.
    unsafe fn make_room(
        &self,
        state: &QueueState,
        writer: unsafe extern "C" fn(*const c_void, u64),
        out: &[RawPacket],
    ) {
        if !self.markers {
            return;
        }
        let mut hardware = state.hardware.load(Ordering::Acquire);
        if hardware.is_null() && !state.marker_sent.swap(true, Ordering::AcqRel) {
            let marker = RawPacket::intercept_marker_with_callback(
                learn_hardware_queue as *const () as usize as u64,
                state as *const QueueState as u64,
            );
            // SAFETY: the current call's writer, given one packet that lives
            // until it returns; ROCr >= 6 runs the marker's callback inside
            // this call and submits nothing for it.
            unsafe { writer((&marker as *const RawPacket).cast(), 1) };
            hardware = state.hardware.load(Ordering::Acquire);
        }
        let (Some(read), Some(write)) = (
            self.rt.core.hsa_queue_load_read_index_relaxed_fn,
            self.rt.core.hsa_queue_load_write_index_relaxed_fn,
        ) else {
            return;
        };
        if hardware.is_null() {
            return;
        }
        let needed = hardware_slots(out);
        // SAFETY: the hardware queue lives as long as the intercept queue
        // whose interceptor is running.
        let size = u64::from(unsafe { (*hardware).size });
        let indices = || {
            // SAFETY: as above; the index loads are plain atomic reads.
            unsafe { (read(hardware), write(hardware)) }
        };
        let (mut last_read, w) = indices();
        if hardware_ring_takes(size, last_read, w, needed) {
            return;
        }
        let mut progress = Instant::now();
        let mut rounds = 0u32;
        loop {
            if rounds < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
            rounds += 1;
            let (r, w) = indices();
            if hardware_ring_takes(size, r, w, needed) {
                return;
            }
            if r != last_read {
                last_read = r;
                progress = Instant::now();
            } else if progress.elapsed() >= HARDWARE_ROOM_STALL {
                return;
            }
        }
    }
}

/// The callback of rprof's own intercept marker: records the hardware queue
/// ROCr >= 6 passes (the marker's first user-data word is the queue's
/// [`QueueState`]).
unsafe extern "C" fn learn_hardware_queue(
    marker: *const c_void,
    hardware: *mut hsa_queue_t,
    _packet_id: u64,
) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if marker.is_null() || hardware.is_null() {
            return;
        }
        // SAFETY: `marker` is the 64-byte packet rprof wrote, alive for the
        // callback; user_data[0] sits at byte 16.
        let state = unsafe { std::ptr::read_unaligned(marker.cast::<u8>().add(16).cast::<u64>()) };
        // SAFETY: rprof put its queue's `QueueState` pointer there; the queue
        // (and so the state) is alive while its packets are submitted.
        let state = unsafe { &*(state as usize as *const QueueState) };
        state.hardware.store(hardware, Ordering::Release);
    }));
}

/// The queue interceptor: runs on the app's thread, under the queue's lock.
/// Calls `writer` exactly once, with the rewritten batch, or with the
/// original packets if anything went wrong before writing (on ROCr >= 6,
/// once per queue, also with one intercept marker first: see
/// [`Session::make_room`]).
unsafe extern "C" fn interceptor(
    pkts: *const c_void,
    pkt_count: u64,
    _user_pkt_index: u64,
    data: *mut c_void,
    writer: hsa_sys::hsa_amd_queue_intercept_packet_writer,
) {
    let Some(writer) = writer else { return };
    let written = std::cell::Cell::new(false);
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let Some(s) = session() else { return };
        if pkts.is_null() || data.is_null() || pkt_count == 0 || s.passthrough {
            return;
        }
        // SAFETY: the runtime passes `pkt_count` packets of 64 bytes;
        // `RawPacket` is a byte array with alignment 1.
        let packets =
            unsafe { std::slice::from_raw_parts(pkts.cast::<RawPacket>(), pkt_count as usize) };
        // SAFETY: `data` is the `QueueState` registered with this queue,
        // alive until after the runtime destroys the queue.
        let state = unsafe { &*data.cast::<QueueState>() };
        s.engine.intercept(&state.ctx, packets, &s.source, |out| {
            written.set(true);
            // SAFETY: this call's writer and the queue's registered state.
            unsafe { s.make_room(state, writer, out) };
            // SAFETY: the runtime's writer for this call, called once with
            // the batch, with packets that live until it returns.
            unsafe { writer(out.as_ptr().cast(), out.len() as u64) };
        });
    }));
    if !written.get() {
        // SAFETY: pass the original packets through unchanged.
        unsafe { writer(pkts, pkt_count) };
    }
}
