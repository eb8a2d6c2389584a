//! The memory-copy trace (`--memory-copy-trace`): rprof's replacements of
//! the AMD-extension async copies `hsa_amd_memory_async_copy`,
//! `hsa_amd_memory_async_copy_rect` and (ROCr >= 6)
//! `hsa_amd_memory_async_copy_on_engine`.
//!
//! Owns installing them, turning on ROCr's async-copy profiling (once, at
//! the first copy: the runtime is not open yet during `OnLoad`), and
//! describing each call as a [`MemoryCopyRecord`] (agents, direction,
//! bytes). The engine ([`rprof_core::engine::Engine::trace_copy`]) gives
//! the copy its id and a pooled signal in place of the app's completion
//! signal; rprof's completion thread, or an app thread lending its wait,
//! completes the app's signal once the copy is done (decremented by 1, as
//! the copy engine would have). Each hook
//! degrades to exactly the runtime's call with the app's arguments on any
//! internal failure. Must not wait for copies (the completion thread and
//! the flush do).

use std::cell::Cell;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

use hsa_sys::{
    hsa_agent_t, hsa_amd_copy_direction_t, hsa_dim3_t, hsa_pitched_ptr_t, hsa_signal_t,
    hsa_status_t, HsaApiTable, HSA_STATUS_ERROR, HSA_STATUS_SUCCESS,
};
use rprof_core::record::{CopyApi, CopyDirection, MemoryCopyRecord};

use super::agents::any_agent;
use super::{listed_agents, session, Session};
use crate::runtime::{replace_amd_entry, AmdEntry};

/// ROCr's async-copy profiling is turned on once, at the first copy.
static PROFILING: Once = Once::new();

/// Replaces the async-copy entries the runtime has.
///
/// # Safety
/// As [`super::hooks::install`]: the validated `OnLoad` table, during
/// `OnLoad`.
pub(super) unsafe fn install(table: *mut HsaApiTable, s: &'static Session) {
    let mut missing = Vec::new();
    if s.rt.amd.hsa_amd_profiling_get_async_copy_time_fn.is_none()
        || s.rt.amd.hsa_amd_profiling_async_copy_enable_fn.is_none()
    {
        eprintln!("rprof: the HSA runtime has no async-copy profiling; --memory-copy-trace records nothing");
        return;
    }
    // SAFETY: (all three) the validated table during `OnLoad`; each
    // replacement has its entry's C signature.
    unsafe {
        if s.rt.amd.hsa_amd_memory_async_copy_fn.is_none()
            || !replace_amd_entry(
                table,
                AmdEntry::AsyncCopy,
                hook_async_copy as *const () as usize,
            )
        {
            missing.push("hsa_amd_memory_async_copy");
        }
        if s.rt.amd.hsa_amd_memory_async_copy_rect_fn.is_none()
            || !replace_amd_entry(
                table,
                AmdEntry::AsyncCopyRect,
                hook_async_copy_rect as *const () as usize,
            )
        {
            missing.push("hsa_amd_memory_async_copy_rect");
        }
        // Absent before ROCr 6 (not an error there).
        if s.rt.async_copy_on_engine.is_some() {
            replace_amd_entry(
                table,
                AmdEntry::AsyncCopyOnEngine,
                hook_async_copy_on_engine as *const () as usize,
            );
        }
    }
    if !missing.is_empty() {
        eprintln!(
            "rprof: the HSA runtime's table lacks {}; those copies are not traced",
            missing.join(", ")
        );
    }
}

/// Turns on ROCr's async-copy profiling (once per process).
fn enable_profiling(s: &Session) {
    PROFILING.call_once(|| {
        if let Some(enable) = s.rt.amd.hsa_amd_profiling_async_copy_enable_fn {
            // SAFETY: the runtime's own entry; the runtime is open (an app
            // thread is inside one of its copy entries).
            let status = unsafe { enable(true) };
            if status != HSA_STATUS_SUCCESS {
                eprintln!("rprof: hsa_amd_profiling_async_copy_enable failed ({status:#x}); copy times fall back to the host's view");
            }
        }
    });
}

/// The record of a copy between two listed agents, or `None` (an agent
/// rprof does not list: the copy runs untraced).
fn linear_record(
    api: CopyApi,
    src_agent: hsa_agent_t,
    dst_agent: hsa_agent_t,
    bytes: usize,
    engine: u32,
) -> Option<MemoryCopyRecord> {
    let (src, src_gpu) = any_agent(src_agent)?;
    let (dst, dst_gpu) = any_agent(dst_agent)?;
    Some(MemoryCopyRecord {
        src_agent: src,
        dst_agent: dst,
        direction: CopyDirection::from_agents(src_gpu, dst_gpu),
        api,
        engine,
        bytes: bytes as u64,
        ..MemoryCopyRecord::default()
    })
}

/// ROCr's `hsa_amd_copy_direction_t`.
const HOST_TO_HOST: hsa_amd_copy_direction_t = 0;
const HOST_TO_DEVICE: hsa_amd_copy_direction_t = 1;
const DEVICE_TO_HOST: hsa_amd_copy_direction_t = 2;

/// The record of a rectangular copy: its one copy agent is the device side;
/// the host side (if any, by the app's direction argument) is the first CPU
/// agent. Bytes are the rectangle's (`range.x * range.y * range.z`, `x` in
/// bytes).
fn rect_record(
    copy_agent: hsa_agent_t,
    dir: hsa_amd_copy_direction_t,
    range: *const hsa_dim3_t,
) -> Option<MemoryCopyRecord> {
    if range.is_null() {
        return None;
    }
    // SAFETY: the app's range argument, non-null, read before the runtime
    // is called (the runtime reads it the same way).
    let r = unsafe { *range };
    let bytes = u64::from(r.x) * u64::from(r.y) * u64::from(r.z);
    let (gpu, _) = any_agent(copy_agent)?;
    let cpu = listed_agents()
        .iter()
        .find(|a| a.cpu)
        .map_or(gpu, |a| a.index);
    let (src_agent, dst_agent, direction) = match dir {
        HOST_TO_HOST => (cpu, cpu, CopyDirection::HostToHost),
        HOST_TO_DEVICE => (cpu, gpu, CopyDirection::HostToDevice),
        DEVICE_TO_HOST => (gpu, cpu, CopyDirection::DeviceToHost),
        _ => (gpu, gpu, CopyDirection::DeviceToDevice),
    };
    Some(MemoryCopyRecord {
        src_agent,
        dst_agent,
        direction,
        api: CopyApi::Rect,
        bytes,
        ..MemoryCopyRecord::default()
    })
}

/// Runs one copy call: traced through the engine when `record` describes
/// it, else the runtime's call with the app's signal. `call(signal)` calls
/// the runtime with `signal` as the completion signal. A panic before the
/// runtime was called falls back to the plain call; the runtime is called
/// exactly once either way.
fn run_copy(
    s: &'static Session,
    app_signal: hsa_signal_t,
    record: impl FnOnce() -> Option<MemoryCopyRecord>,
    call: impl Fn(u64) -> hsa_status_t,
) -> hsa_status_t {
    let status = Cell::new(None::<hsa_status_t>);
    let called = |signal: u64| {
        let st = call(signal);
        status.set(Some(st));
        st
    };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let record = if s.engine.is_tracing() {
            record()
        } else {
            None
        };
        let Some(record) = record else {
            called(app_signal.handle);
            return;
        };
        enable_profiling(s);
        s.engine
            .trace_copy(s.copy_signals(), app_signal.handle, record, called, |st| {
                *st == HSA_STATUS_SUCCESS
            });
    }));
    match status.get() {
        Some(st) => st,
        None => {
            eprintln!("rprof: internal error in an async-copy hook; the copy runs untraced");
            call(app_signal.handle)
        }
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn hook_async_copy(
    dst: *mut c_void,
    dst_agent: hsa_agent_t,
    src: *const c_void,
    src_agent: hsa_agent_t,
    size: usize,
    num_dep_signals: u32,
    dep_signals: *const hsa_signal_t,
    completion_signal: hsa_signal_t,
) -> hsa_status_t {
    let Some(s) = session() else {
        return HSA_STATUS_ERROR;
    };
    let Some(original) = s.rt.amd.hsa_amd_memory_async_copy_fn else {
        return HSA_STATUS_ERROR;
    };
    run_copy(
        s,
        completion_signal,
        || linear_record(CopyApi::AsyncCopy, src_agent, dst_agent, size, 0),
        |signal| {
            // SAFETY: the runtime's own entry with the app's arguments; only
            // the completion signal may be rprof's (a live pooled signal).
            unsafe {
                original(
                    dst,
                    dst_agent,
                    src,
                    src_agent,
                    size,
                    num_dep_signals,
                    dep_signals,
                    hsa_signal_t { handle: signal },
                )
            }
        },
    )
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn hook_async_copy_on_engine(
    dst: *mut c_void,
    dst_agent: hsa_agent_t,
    src: *const c_void,
    src_agent: hsa_agent_t,
    size: usize,
    num_dep_signals: u32,
    dep_signals: *const hsa_signal_t,
    completion_signal: hsa_signal_t,
    engine_id: u32,
    force_copy_on_sdma: bool,
) -> hsa_status_t {
    let Some(s) = session() else {
        return HSA_STATUS_ERROR;
    };
    let Some(original) = s.rt.async_copy_on_engine else {
        return HSA_STATUS_ERROR;
    };
    run_copy(
        s,
        completion_signal,
        || linear_record(CopyApi::OnEngine, src_agent, dst_agent, size, engine_id),
        |signal| {
            // SAFETY: as in `hook_async_copy`.
            unsafe {
                original(
                    dst,
                    dst_agent,
                    src,
                    src_agent,
                    size,
                    num_dep_signals,
                    dep_signals,
                    hsa_signal_t { handle: signal },
                    engine_id,
                    force_copy_on_sdma,
                )
            }
        },
    )
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn hook_async_copy_rect(
    dst: *const hsa_pitched_ptr_t,
    dst_offset: *const hsa_dim3_t,
    src: *const hsa_pitched_ptr_t,
    src_offset: *const hsa_dim3_t,
    range: *const hsa_dim3_t,
    copy_agent: hsa_agent_t,
    dir: hsa_amd_copy_direction_t,
    num_dep_signals: u32,
    dep_signals: *const hsa_signal_t,
    completion_signal: hsa_signal_t,
) -> hsa_status_t {
    let Some(s) = session() else {
        return HSA_STATUS_ERROR;
    };
    let Some(original) = s.rt.amd.hsa_amd_memory_async_copy_rect_fn else {
        return HSA_STATUS_ERROR;
    };
    run_copy(
        s,
        completion_signal,
        || rect_record(copy_agent, dir, range),
        |signal| {
            // SAFETY: as in `hook_async_copy`.
            unsafe {
                original(
                    dst,
                    dst_offset,
                    src,
                    src_offset,
                    range,
                    copy_agent,
                    dir,
                    num_dep_signals,
                    dep_signals,
                    hsa_signal_t { handle: signal },
                )
            }
        },
    )
}
