//! The five HSA entries rprof replaces in the runtime's core table:
//! `hsa_init` / `hsa_shut_down` (count initialisations; flush at the last
//! shutdown), `hsa_queue_create` (every queue becomes an intercept queue
//! with profiling on and rprof's interceptor), `hsa_queue_destroy` (let the
//! queue's traced dispatches finish first) and `hsa_executable_freeze`
//! (kernel names).
//!
//! Owns installing them and each hook's bookkeeping; each calls the
//! runtime's original entry and degrades to exactly that call on any
//! internal failure. Must not rewrite packets (the interceptor and the
//! engine do) nor flush by itself (see [`super::flush`]).

use std::ffi::{c_char, c_void};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hsa_sys::{
    hsa_agent_t, hsa_executable_t, hsa_queue_t, hsa_queue_type32_t, hsa_status_t, HsaApiTable,
    HSA_STATUS_ERROR, HSA_STATUS_SUCCESS,
};
use rprof_core::config::TraceConfig;
use rprof_core::engine::QueueContext;
use rprof_core::wait::{poll_until, Pace};

use super::doorbell_event::FreshEventHold;
use super::interceptor::{interceptor, QueueState};
use super::{
    guarded, intercept_markers, kernel_symbols, runtime, session, traced_agent_index,
    traces_new_queues, Session, QUEUES, SESSION,
};
use crate::runtime::edit_core_table;
use crate::runtime::Runtime;

/// How long `hsa_queue_destroy` waits for the queue's traced dispatches.
const QUEUE_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Replaces the entries `config` needs in the runtime's core table. `s` is
/// the session when `OnLoad` built it itself (the RPC and copy hooks hold
/// the engine; their configurations always start so); `None` while it
/// starts beside the app, when the hooks find it through `session()`.
///
/// # Safety
/// `table` is the table given to `OnLoad`, validated by
/// [`crate::runtime::Runtime::from_tables`]; called inside `hsa_init`
/// before any app call.
pub(super) unsafe fn install(
    table: *mut HsaApiTable,
    config: &TraceConfig,
    s: Option<&'static Session>,
) {
    // SAFETY: as this function's contract: `from_tables` found every entry
    // replaced here present.
    unsafe {
        edit_core_table(table, |core| {
            core.hsa_init_fn = Some(hook_init);
            core.hsa_shut_down_fn = Some(hook_shut_down);
            if config.kernel_trace {
                core.hsa_queue_create_fn = Some(hook_queue_create);
                core.hsa_queue_destroy_fn = Some(hook_queue_destroy);
                core.hsa_executable_freeze_fn = Some(hook_executable_freeze);
            }
            // First: the RPC wrappers, installed next, wrap these.
            super::lending_wait::install(core);
            if let (true, Some(s)) = (config.rpc_trace, s) {
                crate::rpc_wait::install(core, s.engine.clone());
            }
        })
    };
    if config.kernel_trace {
        // SAFETY: as above.
        unsafe { super::kernel_times::install(table) };
    }
    if let (true, Some(s)) = (config.memory_copy_trace, s) {
        // SAFETY: as above.
        unsafe { super::copies::install(table, s) };
    }
}

unsafe extern "C" fn hook_init() -> hsa_status_t {
    let Some(init) = runtime().and_then(|rt| rt.core.hsa_init_fn) else {
        return HSA_STATUS_ERROR;
    };
    // SAFETY: the runtime's own hsa_init.
    let status = unsafe { init() };
    if status == HSA_STATUS_SUCCESS {
        if let Some(s) = session() {
            s.init_depth.fetch_add(1, Ordering::AcqRel);
        }
    }
    status
}

unsafe extern "C" fn hook_shut_down() -> hsa_status_t {
    if let Some(s) = session() {
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
    }
    let Some(shut_down) = runtime().and_then(|rt| rt.core.hsa_shut_down_fn) else {
        return HSA_STATUS_ERROR;
    };
    // SAFETY: the runtime's own hsa_shut_down.
    unsafe { shut_down() }
}

/// `hsa_queue_create`'s signature, shared by the runtime's intercept-queue
/// constructor.
type QueueCreateFn = unsafe extern "C" fn(
    hsa_agent_t,
    u32,
    hsa_queue_type32_t,
    Option<unsafe extern "C" fn(hsa_status_t, *mut hsa_queue_t, *mut c_void)>,
    *mut c_void,
    u32,
    u32,
    *mut *mut hsa_queue_t,
) -> hsa_status_t;

/// The app's arguments to `hsa_queue_create`, passed on unchanged.
#[derive(Clone, Copy)]
struct QueueCreate {
    agent: hsa_agent_t,
    size: u32,
    type_: hsa_queue_type32_t,
    callback: Option<unsafe extern "C" fn(hsa_status_t, *mut hsa_queue_t, *mut c_void)>,
    data: *mut c_void,
    private_segment_size: u32,
    group_segment_size: u32,
    queue: *mut *mut hsa_queue_t,
}

impl QueueCreate {
    /// Calls `create` with the app's arguments.
    ///
    /// # Safety
    /// `create` is the runtime's `hsa_queue_create` or its intercept-queue
    /// constructor (same contract), and the fields are the app's arguments.
    unsafe fn call(self, create: QueueCreateFn) -> hsa_status_t {
        // SAFETY: as this function's contract.
        unsafe {
            create(
                self.agent,
                self.size,
                self.type_,
                self.callback,
                self.data,
                self.private_segment_size,
                self.group_segment_size,
                self.queue,
            )
        }
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn hook_queue_create(
    agent: hsa_agent_t,
    size: u32,
    type_: hsa_queue_type32_t,
    callback: Option<unsafe extern "C" fn(hsa_status_t, *mut hsa_queue_t, *mut c_void)>,
    data: *mut c_void,
    private_segment_size: u32,
    group_segment_size: u32,
    queue: *mut *mut hsa_queue_t,
) -> hsa_status_t {
    let args = QueueCreate {
        agent,
        size,
        type_,
        callback,
        data,
        private_segment_size,
        group_segment_size,
        queue,
    };
    let Some(original) = runtime().and_then(|rt| rt.core.hsa_queue_create_fn) else {
        return HSA_STATUS_ERROR;
    };
    // No wait for a session still starting: the queue's interceptor waits
    // for it at the first packets instead (see `traces_new_queues`).
    let traced = guarded("hsa_queue_create", || None, || create_traced_queue(args));
    match traced {
        Some(status) => status,
        // SAFETY: the runtime's own hsa_queue_create with the app's arguments.
        None => unsafe { args.call(original) },
    }
}

/// Creates the app's queue as an intercept queue with profiling on and
/// rprof's interceptor. `None`: not created (not tracing, not a traced
/// agent, or the runtime refused): the caller creates a plain queue.
fn create_traced_queue(args: QueueCreate) -> Option<hsa_status_t> {
    let rt = runtime()?;
    if args.queue.is_null() || !traces_new_queues() {
        return None;
    }
    let agent_index = traced_agent_index(args.agent)?;
    let create = rt.amd.hsa_amd_queue_intercept_create_fn?;
    // ROCr >= 6: the queue's async doorbell gets a driver event that never
    // fired (see doorbell_event); the hold ends with the creation.
    let hold = intercept_markers(rt).then(|| FreshEventHold::take(*rt));
    // SAFETY: the app's own arguments, passed on unchanged to the runtime's
    // intercept-queue constructor (same contract as hsa_queue_create).
    let status = unsafe { args.call(create) };
    drop(hold);
    if status != HSA_STATUS_SUCCESS {
        return None;
    }
    // SAFETY: the runtime just stored a valid queue pointer.
    let q = unsafe { *args.queue };
    // SAFETY: `q` is a live queue created above.
    let (queue_id, ring_size) = unsafe { ((*q).id, (*q).size) };
    if let Some(enable) = rt.amd.hsa_amd_profiling_set_profiler_enabled_fn {
        // SAFETY: live queue.
        unsafe { enable(q, 1) };
    }
    let ctx = QueueContext::with_ring(queue_id, agent_index, args.agent.handle, ring_size);
    register_interceptor(rt, q, QueueState::new(ctx))
}

/// Registers rprof's interceptor with `state` on the new intercept queue
/// `q`; the queue works untraced if the runtime refuses.
fn register_interceptor(
    rt: &Runtime,
    q: *mut hsa_queue_t,
    state: QueueState,
) -> Option<hsa_status_t> {
    let register = rt.amd.hsa_amd_queue_intercept_register_fn?;
    let raw = Arc::into_raw(Arc::new(state));
    // SAFETY: live intercept queue; `raw` stays valid until the queue is
    // destroyed (it is released only after the runtime's destroy returns).
    let status = unsafe { register(q, Some(interceptor), raw as *mut c_void) };
    if status != HSA_STATUS_SUCCESS {
        // SAFETY: `raw` came from `Arc::into_raw` above and was not registered.
        drop(unsafe { Arc::from_raw(raw) });
        // The queue works as a plain (untraced) intercept queue.
        return Some(HSA_STATUS_SUCCESS);
    }
    QUEUES.lock().insert(q as usize, raw);
    Some(HSA_STATUS_SUCCESS)
}

unsafe extern "C" fn hook_queue_destroy(queue: *mut hsa_queue_t) -> hsa_status_t {
    let Some(original) = runtime().and_then(|rt| rt.core.hsa_queue_destroy_fn) else {
        return HSA_STATUS_ERROR;
    };
    let state = guarded(
        "hsa_queue_destroy",
        || None,
        || {
            let raw = QUEUES.lock().remove(&(queue as usize))?;
            // SAFETY: `raw` is alive: its `Arc` is released only below.
            let ctx = unsafe { &(*raw).ctx };
            // Let the queue's traced kernels finish before the queue goes away,
            // so none of them is lost (bounded: an app may destroy a queue with
            // work that never ends). The completion thread may be napping:
            // ask for a pass now.
            if ctx.has_work_in_flight() {
                if let Some(s) = SESSION.get() {
                    s.engine.poll_now();
                }
            }
            poll_until(
                Instant::now() + QUEUE_DRAIN_TIMEOUT,
                Pace::naps(Duration::from_micros(100)),
                || !ctx.has_work_in_flight(),
            );
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
    let Some(original) = runtime().and_then(|rt| rt.core.hsa_executable_freeze_fn) else {
        return HSA_STATUS_ERROR;
    };
    // SAFETY: the runtime's own freeze with the app's arguments.
    let status = unsafe { original(executable, options) };
    if status == HSA_STATUS_SUCCESS {
        if let Some(s) = session() {
            guarded(
                "hsa_executable_freeze",
                || (),
                || kernel_symbols::record(s, executable),
            );
        }
    }
    status
}
