//! The tracing session: what `OnLoad` sets up, in order, and the state that
//! the hooks, the interceptor and the flush share for the rest of the
//! process.
//!
//! Owns the one [`Session`] (built once, leaked, reached through
//! `session()`), the start-up steps of [`on_load`] and [`guarded`]. It must
//! not hold what its parts do:
//! - `agents`: the GPU agents, from the runtime's agent iteration;
//! - `run_info`: the process facts the trace records (pid, command line);
//! - `threads`: spawning the completion and writer threads, at low priority;
//! - `hooks`: the five HSA entries rprof replaces (`hsa_init`,
//!   `hsa_shut_down`, `hsa_queue_create`, `hsa_queue_destroy`,
//!   `hsa_executable_freeze`);
//! - `kernel_symbols`: kernel names from a frozen executable;
//! - `copies`: the AMD-extension async-copy hooks (`--memory-copy-trace`);
//! - `interceptor`: the queue interceptor, its per-queue state and the wait
//!   for room in ROCr 6's hardware ring;
//! - `flush`: the bounded end of the trace;
//! - `lifecycle`: exit, quick_exit, fork, SIGTERM / SIGINT and `OnUnload`;
//! - `start_gate`: the wait for a session that starts beside the app;
//! - `lending_wait`: the app's spinning waits write records in the
//!   writer's place.
//!
//! The configuration (`RPROF_*`, tuning knobs included) is read and
//! validated by `rprof_core::config`, never here.
//!
//! # Safety
//! This module is the FFI edge: it receives raw pointers from the runtime
//! (tables, queues, packets, interceptor data) and calls runtime entries
//! copied at `OnLoad`. Each `unsafe` block says what it relies on. Every
//! `extern "C"` function here catches panics; on any internal failure the
//! call degrades to what the runtime would have done without rprof.

mod agents;
mod copies;
mod doorbell_event;
mod flush;
mod hooks;
mod interceptor;
mod kernel_symbols;
mod kernel_times;
mod lending_wait;
mod lifecycle;
mod run_info;
mod start_gate;
mod threads;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use hsa_sys::{HsaApiTable, HSA_DEVICE_TYPE_CPU, HSA_DEVICE_TYPE_GPU};
use rprof_core::config::{misspelt_variables, TraceConfig};
use rprof_core::engine::{Engine, EngineOptions};
use rprof_core::kernels::{KernelTable, NamePolicy};
use rprof_core::marker;
use rprof_core::record::AgentInfo;
use rprof_pool::{PoolConfig, SignalPool};

pub use lifecycle::on_unload;

use crate::outputs::open_outputs;
use crate::runtime::Runtime;
use crate::signal_memory::SignalMemory;
use crate::signals::{PoolSource, PooledSignal, RocrBackend, RocrSignals};
use interceptor::QueueState;
use start_gate::StartGate;

/// The end of every message after which the app runs without rprof.
const UNTRACED: &str = "the application runs untraced";

/// Everything a running trace needs, alive for the rest of the process.
pub struct Session {
    rt: Runtime,
    engine: Arc<Engine<PooledSignal>>,
    /// The kernel dispatches' timestamp signals.
    source: PoolSource,
    /// The memory the kernel signals live in (`None`: they are ROCr's).
    signal_memory: Option<&'static SignalMemory>,
    /// ROCr's signals for memory copies, when the kernel signals are in
    /// rprof's memory and copies are traced (otherwise copies share
    /// `source`).
    copy_source: Option<PoolSource>,
    /// `hsa_init` calls not yet matched by `hsa_shut_down` (the one that
    /// loaded rprof counts).
    init_depth: AtomicI64,
    threads: Mutex<Option<threads::Threads>>,
    finished: AtomicBool,
    /// A flush begun and not yet ended (see [`Session::begin_finish`]).
    ending: Mutex<Option<flush::Ending>>,
    /// The completion thread, still recycling for the ring guard after an
    /// at-exit flush (see [`Session::end_guard`]).
    guard_thread: Mutex<Option<JoinHandle<()>>>,
    /// The writer thread after the flush took its outcome (never joined).
    writer_thread: Mutex<Option<JoinHandle<()>>>,
    /// The output files, in the order of the sinks.
    outputs: Vec<std::path::PathBuf>,
    /// The report to the `rprof` command, opened at the start (the flush
    /// takes it).
    report_file: Mutex<Option<crate::report::ReportFile>>,
    verbose: bool,
    /// Measurement mode: intercept queues with profiling, packets unchanged.
    passthrough: bool,
    /// ROCr >= 6.0 (see [`intercept_markers`]).
    markers: bool,
}

/// Whether the runtime's intercept queue runs intercept-marker callbacks
/// (ROCr >= 6.0, AMD extension table major 2), which tell rprof each
/// queue's hardware ring, so rprof can keep the runtime from deferring its
/// writes.
fn intercept_markers(rt: &Runtime) -> bool {
    rt.amd.version.major_id >= 2
}

/// The traced queues by `hsa_queue_t` address, with the data pointer given
/// to the runtime's interceptor registration. Outside the session: a queue
/// is created traced while the session is still starting.
struct TracedQueues(Mutex<BTreeMap<usize, *const QueueState>>);

// SAFETY: the raw `QueueState` pointers come from `Arc::into_raw` and are
// only turned back into `Arc`s under the mutex (by the destroy hook, which
// removes them first).
unsafe impl Send for TracedQueues {}
// SAFETY: see `Send`; the map is only reached through its mutex.
unsafe impl Sync for TracedQueues {}

impl TracedQueues {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<usize, *const QueueState>> {
        lock(&self.0)
    }
}

static QUEUES: TracedQueues = TracedQueues(Mutex::new(BTreeMap::new()));

/// The GPU agents, enumerated at `OnLoad` (before the session exists, for
/// queues created while it starts).
static AGENTS: OnceLock<Vec<AgentInfo>> = OnceLock::new();

/// The agents `OnLoad` enumerated (none before).
fn listed_agents() -> &'static [AgentInfo] {
    AGENTS.get().map_or(&[], Vec::as_slice)
}

/// The index of a traced GPU agent (`None`: not a GPU rprof traces, or
/// before `OnLoad` enumerated them).
fn traced_agent_index(agent: hsa_sys::hsa_agent_t) -> Option<u32> {
    agents::gpu_index(listed_agents(), agent)
}

/// Whether a new queue is to be traced: the session traces, or it is still
/// starting in this process (its interceptor then waits for it at the
/// queue's first packets, normally long after: HIP creates its first queue
/// 0.1 s or more before its first launch).
fn traces_new_queues() -> bool {
    match SESSION.get() {
        Some(s) => s.engine.is_tracing(),
        None => START.running_here(),
    }
}

impl Session {
    /// Whether an app thread's wait may write records in the writer's place
    /// (tracing, not finished, not in pass-through mode).
    fn lends_writer(&self) -> bool {
        !self.passthrough && !self.finished.load(Ordering::Relaxed)
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("agents", &listed_agents())
            .finish_non_exhaustive()
    }
}

static SESSION: OnceLock<&'static Session> = OnceLock::new();
static LOADED: AtomicBool = AtomicBool::new(false);

/// The runtime's original entries, set at `OnLoad` before any hook is
/// installed: the hooks pass calls on through them while the session is
/// still starting, and for good when it could not start.
static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// The session's start when it runs beside the app ([`start_beside`]).
static START: StartGate = StartGate::new(START_TIMEOUT);
/// The longest a hook waits for the session's start (normally 1-2 ms: the
/// outputs, the signal pool, the engine's queues and two threads). Past it
/// the call goes on untraced, with one message.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The session, once started. While its start runs beside the app (the
/// default `--kernel-trace`: [`start_beside`]) this waits for it, so every
/// hook sees either the whole session or none (then the app's call goes on
/// untraced).
fn session() -> Option<&'static Session> {
    if let Some(s) = SESSION.get() {
        return Some(s);
    }
    START.wait();
    SESSION.get().copied()
}

/// The runtime's original entries (`None` before `OnLoad` validated them).
fn runtime() -> Option<&'static Runtime> {
    RUNTIME.get()
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `OnLoad`: returns whether the runtime should keep rprof loaded (always
/// true: on any problem rprof stays loaded but inert, and the app runs
/// untraced).
///
/// # Safety
/// `table` is the runtime's API table pointer given to `OnLoad`.
pub unsafe fn on_load(table: *mut HsaApiTable) -> bool {
    if !first_load() {
        return true;
    }
    // SAFETY: the pointer `OnLoad` received.
    if let Err(why) = unsafe { start(table) } {
        eprintln!("rprof: {why}");
    }
    true
}

/// Whether this is the process's first `OnLoad` (a runtime initialised
/// again after its shutdown loads rprof again: that part is not traced).
fn first_load() -> bool {
    if !LOADED.swap(true, Ordering::AcqRel) {
        return true;
    }
    if session().is_some_and(|s| s.finished.load(Ordering::Acquire)) {
        eprintln!("rprof: the HSA runtime was initialised again after shutdown; this part of the run is not traced");
    }
    false
}

/// The start-up steps. `Ok` also when there is nothing to trace; `Err` is
/// the one message to print (the app then runs untraced).
///
/// # Safety
/// As [`on_load`].
unsafe fn start(table: *mut HsaApiTable) -> Result<(), String> {
    let Some(config) = read_config()? else {
        return Ok(());
    };
    claim_the_process()?;
    // SAFETY: the pointer `OnLoad` received.
    let rt = unsafe { Runtime::from_tables(table) }.map_err(|e| format!("{e}; {UNTRACED}"))?;
    let agents = agents::enumerate(&rt, config.memory_copy_trace);
    if !agents.iter().any(|a| !a.cpu) {
        return Err("no GPU agent found; nothing to trace".into());
    }
    if RUNTIME.set(rt).is_err() || AGENTS.set(agents.clone()).is_err() {
        return Ok(());
    }
    if config.memory_copy_trace || config.rpc_trace {
        // Their hooks hold the engine from the start: build it here.
        let session = Session::start(rt, &config, agents)?;
        if SESSION.set(session).is_err() {
            return Ok(());
        }
        // SAFETY: the table `from_tables` validated; OnLoad runs inside
        // hsa_init before any app call.
        unsafe { hooks::install(table, &config, Some(session)) };
    } else {
        start_beside(rt, config.clone(), agents);
        // SAFETY: as above. Until the session has started, the hooks wait
        // for it; if it cannot start, they pass every call on.
        unsafe { hooks::install(table, &config, None) };
    }
    lifecycle::install();
    if config.marker_trace || config.kernel_rename {
        crate::roctx::start(push_marker, config.kernel_rename);
        if let Some(why) = crate::roctx::capture_problem() {
            eprintln!("rprof: {why}");
        }
    }
    Ok(())
}

/// Starts the session on a thread of its own (`rprof-session`), so that
/// `OnLoad` returns to `hsa_init` at once: opening the outputs, creating the
/// signal pool, building the engine and starting its threads take 1-2 ms,
/// which the app's start-up then overlaps. Whatever needs the session
/// waits for it in [`session`]; creating a queue does not (it needs only
/// what `OnLoad` found: [`traces_new_queues`]), so the first wait, if any,
/// is at the queue's first packets, which HIP writes 0.1 s or more after
/// creating its first queue (0.3-50 ms after `hsa_init` loaded rprof). A
/// start that fails says why in the same one message as before, and the app
/// runs untraced. Starts here if no thread can be started.
fn start_beside(rt: Runtime, config: TraceConfig, agents: Vec<AgentInfo>) {
    START.begin();
    let build = move || {
        START.build(|| {
            guarded(
                "the tracing session's start",
                || (),
                || {
                    if config.marker_trace {
                        // Markers the app makes meanwhile wait there.
                        marker::prepare_early();
                    }
                    // Tests' knob (`RPROF_START_DELAY_MS`): a start slower
                    // than any real one.
                    std::thread::sleep(config.tuning.start_delay);
                    match Session::start(rt, &config, agents) {
                        Ok(s) => {
                            if SESSION.set(s).is_ok() {
                                // ROCTx records made while it started.
                                drain_early_markers(s);
                            }
                        }
                        Err(why) => eprintln!("rprof: {why}"),
                    }
                },
            )
        })
    };
    // The thread takes `build` out of the slot; if it cannot be spawned,
    // this thread does.
    let slot = Arc::new(Mutex::new(Some(build)));
    let spawned = std::thread::Builder::new()
        .name("rprof-session".into())
        .spawn({
            let slot = slot.clone();
            move || {
                if let Some(build) = lock(&slot).take() {
                    build();
                }
            }
        });
    if spawned.is_err() {
        if let Some(build) = lock(&slot).take() {
            build();
        }
    }
}

/// Hands a ROCTx record to the engine (the marker module's target).
///
/// While the session still starts beside the app, the record waits in the
/// marker module's early queue instead of the app's thread waiting for the
/// start (an app's first marker right after HIP's start-up waited ~1 ms):
/// the start drains the queue once the session is published, and every
/// record after that drains what is left first, so each thread's records
/// reach the engine in the order it made them.
fn push_marker(rec: rprof_core::record::Record) {
    if let Some(s) = SESSION.get() {
        drain_early_markers(s);
        s.engine.push_app_record(rec);
        return;
    }
    if START.running_here() {
        marker::keep_early(rec);
        // The start may have published the session (and drained the queue)
        // meanwhile: then this record must not stay behind.
        if let Some(s) = SESSION.get() {
            drain_early_markers(s);
        }
        return;
    }
    if let Some(s) = session() {
        s.engine.push_app_record(rec);
    }
}

/// Hands the records waiting in the marker module's early queue to the
/// engine (nothing to do, no lock and no atomic write, when there are none),
/// after any drain running elsewhere has handed on what it took, so that the
/// caller's next record cannot overtake them.
fn drain_early_markers(s: &Session) {
    if !marker::has_early() {
        return;
    }
    let lost = marker::drain_early(|r| s.engine.push_app_record(r));
    if lost > 0 {
        eprintln!("rprof: {lost} ROCTx calls made before the session started were not recorded (early queue full)");
    }
}

/// The configuration, `None` when it asks for no trace. Warns first about
/// `RPROF_*` variables that look like typos of known ones.
fn read_config() -> Result<Option<TraceConfig>, String> {
    let names: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .collect();
    for m in misspelt_variables(names.iter().map(String::as_str)) {
        eprintln!("rprof: warning: {m}");
    }
    match TraceConfig::from_env() {
        Ok(Some(c)) if c.kernel_trace || c.rpc_trace || c.marker_trace || c.memory_copy_trace => {
            Ok(Some(c))
        }
        Ok(_) => Ok(None),
        Err(e) => Err(format!("configuration error: {e}; {UNTRACED}")),
    }
}

/// One tracer per process: another copy of this library (at another path)
/// that already traces would write the same files.
fn claim_the_process() -> Result<(), String> {
    if let Some(other) = crate::single::other_tracer() {
        let me = crate::preload::own_library_path()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "this copy".into());
        return Err(format!(
            "another rprof tool library ({}) already traces this process; {me} stays inactive",
            other.display()
        ));
    }
    crate::single::claim();
    Ok(())
}

impl Session {
    /// Opens the outputs and the signal pool, builds the engine and starts
    /// its threads: the session, leaked for the rest of the process.
    fn start(
        rt: Runtime,
        config: &TraceConfig,
        agents: Vec<AgentInfo>,
    ) -> Result<&'static Session, String> {
        let kernels = Arc::new(KernelTable::new(NamePolicy::from_config(config)));
        if !config.tuning.clock_gettime_only {
            rprof_abi::clock::enable_fast_clock();
        }
        let pool_size = pool_size(config);
        let (engine, (sinks, memory, pool)) =
            build_engine_beside(engine_options(config, pool_size), || {
                let sinks = open_outputs(config)
                    .map_err(|e| format!("cannot create the output files: {e}; {UNTRACED}"))?;
                let memory = signal_memory(rt, config);
                let pool = open_signal_pool(RocrSignals::in_memory(rt, memory), pool_size)?;
                Ok((sinks, memory, pool))
            })?;
        let copy_source = match memory {
            Some(_) if config.memory_copy_trace => Some(PoolSource::new(open_signal_pool(
                RocrSignals::new(rt),
                pool_size,
            )?)),
            _ => None,
        };
        let engine = Arc::new(engine);
        let run = run_info::of_this_process();
        let session: &'static Session = Box::leak(Box::new(Session {
            rt,
            engine: engine.clone(),
            source: PoolSource::new(pool),
            signal_memory: memory,
            copy_source,
            init_depth: AtomicI64::new(1),
            threads: Mutex::new(None),
            finished: AtomicBool::new(false),
            ending: Mutex::new(None),
            guard_thread: Mutex::new(None),
            writer_thread: Mutex::new(None),
            outputs: crate::report::output_files(config),
            report_file: Mutex::new(crate::report::ReportFile::open_for_run()),
            verbose: config.tuning.verbose,
            passthrough: config.tuning.passthrough,
            markers: intercept_markers(&rt),
        }));
        let threads = threads::start(
            engine,
            RocrBackend::new(rt, memory),
            sinks,
            kernels,
            run,
            agents,
            || session.end_finish_from_writer(),
        )
        .map_err(|e| format!("cannot start the tracing threads: {e}; {UNTRACED}"))?;
        *lock(&session.threads) = Some(threads);
        Ok(session)
    }
}

/// Builds the engine on a helper thread while `beside` runs on this one
/// (the app's, inside `hsa_init`): the engine's queues are ~2 MB written
/// once when built, a first-touch page fault per 4 KiB (0.9–1.0 ms on ROCr
/// 6.4.3 over the emulated GPU), and opening the outputs and the signal
/// pool takes 0.7–0.9 ms. Builds it here if no thread can be started.
fn build_engine_beside<T>(
    options: EngineOptions,
    beside: impl FnOnce() -> Result<T, String>,
) -> Result<(Engine<PooledSignal>, T), String> {
    std::thread::scope(|scope| {
        let helper = std::thread::Builder::new()
            .name("rprof-start".into())
            .spawn_scoped(scope, {
                let options = options.clone();
                move || Engine::new(options)
            });
        let other = beside();
        let engine = match helper {
            Ok(h) => h
                .join()
                .map_err(|_| format!("building the engine failed; {UNTRACED}"))?,
            Err(_) => Engine::new(options),
        };
        Ok((engine, other?))
    })
}

/// The signal pool's size: the configured one, and at least the signals one
/// dispatch takes at once (three when serialized).
fn pool_size(config: &TraceConfig) -> u32 {
    let per_dispatch = if config.serialize_kernels { 3 } else { 1 };
    config.tuning.pool_size.max(per_dispatch)
}

impl Session {
    /// The signals memory copies complete: ROCr's, the copy pool's when the
    /// kernel signals are in rprof's memory.
    pub(super) fn copy_signals(&self) -> &PoolSource {
        self.copy_source.as_ref().unwrap_or(&self.source)
    }
}

/// Where the kernel signals live: rprof's own memory unless
/// `RPROF_TIMESTAMP_SIGNALS=rocr` or the runtime has no memory pool for it
/// (then ROCr's signals, said with `RPROF_VERBOSE`). Leaked with the session.
fn signal_memory(rt: Runtime, config: &TraceConfig) -> Option<&'static SignalMemory> {
    if config.tuning.rocr_signals {
        return None;
    }
    let found = SignalMemory::find(
        rt,
        &agents::of_type(&rt, HSA_DEVICE_TYPE_CPU),
        &agents::of_type(&rt, HSA_DEVICE_TYPE_GPU),
    );
    if found.is_none() && config.tuning.verbose {
        eprintln!("rprof: no fine-grained system memory pool for timestamp signals; using the runtime's signals");
    }
    found.map(|m| &*Box::leak(Box::new(m)))
}

/// A pool of timestamp signals from `provider`, leaked for the rest of the
/// process.
fn open_signal_pool(
    provider: RocrSignals,
    capacity: u32,
) -> Result<&'static SignalPool<RocrSignals>, String> {
    let config = PoolConfig {
        capacity,
        batch: capacity.min(256),
        initial_value: 1,
    };
    match SignalPool::new(provider, config) {
        Ok(p) => Ok(Box::leak(Box::new(p))),
        Err(e) => Err(format!("cannot set up the signal pool: {e}; {UNTRACED}")),
    }
}

/// The engine's options: serialization and the measurement knobs
/// (docs/completion.md): who forwards the app's signal, and the completion
/// thread's longest backoff sleep.
fn engine_options(config: &TraceConfig, pool_size: u32) -> EngineOptions {
    let mut options = EngineOptions {
        max_in_flight: pool_size as usize,
        max_copies_in_flight: if config.memory_copy_trace {
            pool_size as usize
        } else {
            0
        },
        serialize: config.serialize_kernels,
        host_forwarding: config.tuning.host_forwarding,
        ..EngineOptions::default()
    };
    if let Some(b) = config.tuning.max_backoff {
        options.max_backoff = b;
    }
    options
}
