//! Timestamp signals: the signal pool's provider on top of ROCr, the pooled
//! handle the engine tracks, and the completion backend that reads signal
//! values and dispatch times.
//!
//! # Safety
//! Every runtime call goes through entries copied from the runtime's tables
//! at `OnLoad` and checked to be present; signal handles passed to them are
//! ones this module created and still owns.

use std::sync::atomic::{AtomicI64, Ordering};

use hsa_sys::{
    hsa_agent_t, hsa_amd_profiling_dispatch_time_t, hsa_signal_t, HSA_AMD_SIGNAL_AMD_GPU_ONLY,
    HSA_STATUS_SUCCESS,
};
use rprof_core::engine::{CompletionBackend, DispatchSignal, SignalSource};
use rprof_pool::{ProviderError, RawSignal, SignalHandle, SignalPool, SignalProvider};

use crate::runtime::Runtime;

/// Creates timestamp signals with ROCr: `hsa_amd_signal_create` with
/// `HSA_AMD_SIGNAL_AMD_GPU_ONLY`, which in ROCr 5.2.3 makes a plain memory
/// signal (`DefaultSignal`) with no driver event, so rprof's signals take
/// nothing from the process's 4096-event budget and never involve ROCr's
/// async-events thread. Nobody waits on them: the completion thread polls.
#[derive(Debug, Clone, Copy)]
pub struct RocrSignals {
    rt: Runtime,
}

impl RocrSignals {
    /// A provider over the runtime's original entries.
    pub fn new(rt: Runtime) -> Self {
        RocrSignals { rt }
    }
}

impl SignalProvider for RocrSignals {
    fn create(&self, initial: i64) -> Result<RawSignal, ProviderError> {
        let Some(create) = self.rt.amd.hsa_amd_signal_create_fn else {
            return Err(ProviderError {
                status: hsa_sys::HSA_STATUS_ERROR,
            });
        };
        let mut sig = hsa_signal_t { handle: 0 };
        // SAFETY: entry checked present at OnLoad; no consumer list; `sig` is
        // a valid out-pointer.
        let status = unsafe {
            create(
                initial,
                0,
                std::ptr::null(),
                u64::from(HSA_AMD_SIGNAL_AMD_GPU_ONLY),
                &mut sig,
            )
        };
        if status == HSA_STATUS_SUCCESS && sig.handle != 0 {
            Ok(RawSignal(sig.handle))
        } else {
            Err(ProviderError { status })
        }
    }

    fn reset(&self, signal: RawSignal, value: i64) {
        if let Some(store) = self.rt.core.hsa_signal_store_screlease_fn {
            // SAFETY: a signal this provider created and the pool still owns.
            unsafe { store(hsa_signal_t { handle: signal.0 }, value) };
        }
    }

    fn destroy(&self, signal: RawSignal) {
        if let Some(destroy) = self.rt.core.hsa_signal_destroy_fn {
            // SAFETY: a signal this provider created, destroyed once.
            unsafe { destroy(hsa_signal_t { handle: signal.0 }) };
        }
    }
}

/// The process's signal pool (leaked: it lives as long as the process, so
/// its handles are `'static`).
pub type Pool = SignalPool<RocrSignals>;

/// A pooled signal owned by one in-flight dispatch; dropping it resets the
/// signal to 1 and returns it to the pool.
#[derive(Debug)]
pub struct PooledSignal {
    handle: SignalHandle<'static, RocrSignals>,
}

impl DispatchSignal for PooledSignal {
    fn handle(&self) -> u64 {
        self.handle.raw().0
    }
}

/// The interceptor's view of the pool.
#[derive(Debug)]
pub struct PoolSource {
    pool: &'static Pool,
    capacity: usize,
}

impl PoolSource {
    /// A source over a leaked pool.
    pub fn new(pool: &'static Pool) -> Self {
        let capacity = pool.config().capacity as usize;
        PoolSource { pool, capacity }
    }

    /// The pool itself (for its statistics).
    pub fn pool(&self) -> &'static Pool {
        self.pool
    }
}

impl SignalSource<PooledSignal> for PoolSource {
    fn try_acquire(&self) -> Option<PooledSignal> {
        match self.pool.try_acquire() {
            Ok(Some(handle)) => Some(PooledSignal { handle }),
            _ => None,
        }
    }

    /// Not for hot paths: reads the pool's statistics (takes its lock).
    fn available(&self) -> usize {
        self.capacity
            .saturating_sub(self.pool.stats().in_use as usize)
    }

    fn capacity(&self) -> usize {
        self.capacity
    }
}

/// Reads signal values and dispatch times through the runtime's entries.
#[derive(Debug, Clone, Copy)]
pub struct RocrBackend {
    rt: Runtime,
}

impl RocrBackend {
    /// A backend over the runtime's original entries.
    pub fn new(rt: Runtime) -> Self {
        RocrBackend { rt }
    }
}

/// Offset of the value in ROCr's `amd_signal_t` (the memory the packet
/// processor decrements).
const SIGNAL_VALUE_OFFSET: usize = std::mem::offset_of!(hsa_sys::amd_signal_t, __bindgen_anon_1);
const _: () = assert!(SIGNAL_VALUE_OFFSET == 8);

impl CompletionBackend for RocrBackend {
    fn signal_value(&self, signal: u64) -> i64 {
        // ROCr's signal handle is the address of the signal's `amd_signal_t`
        // (the ABI the GPU uses: packets carry the handle and the packet
        // processor decrements the value at offset 8). Reading it directly
        // avoids a call into the runtime for every poll of every dispatch.
        if signal != 0 && signal % 8 == 0 {
            // SAFETY: `signal` is a live pooled signal created by
            // `hsa_amd_signal_create` (owned by an in-flight entry, so not
            // destroyed), whose value is an aligned 64-bit word the device
            // updates atomically.
            let value = unsafe { &*((signal as usize + SIGNAL_VALUE_OFFSET) as *const AtomicI64) };
            return value.load(Ordering::Acquire);
        }
        match self.rt.core.hsa_signal_load_relaxed_fn {
            // SAFETY: a pooled signal owned by an in-flight entry.
            Some(load) => unsafe { load(hsa_signal_t { handle: signal }) },
            None => 0,
        }
    }

    fn forward(&self, app_signal: u64) {
        if let Some(subtract) = self.rt.core.hsa_signal_subtract_screlease_fn {
            // SAFETY: the app's own completion signal from its packet; the
            // app keeps it alive until it has seen it complete.
            unsafe { subtract(hsa_signal_t { handle: app_signal }, 1) };
        }
    }

    fn open_gate(&self, signal: u64) {
        if let Some(store) = self.rt.core.hsa_signal_store_screlease_fn {
            // SAFETY: a pooled gate signal owned by an in-flight entry.
            unsafe { store(hsa_signal_t { handle: signal }, 0) };
        }
    }

    fn dispatch_time(&self, agent_handle: u64, signal: u64) -> Option<(u64, u64)> {
        let get = self.rt.amd.hsa_amd_profiling_get_dispatch_time_fn?;
        let mut t = hsa_amd_profiling_dispatch_time_t { start: 0, end: 0 };
        // SAFETY: a GPU agent from the runtime's enumeration, a pooled signal
        // that completed a kernel on a profiling-enabled queue, and a valid
        // out-pointer.
        let status = unsafe {
            get(
                hsa_agent_t {
                    handle: agent_handle,
                },
                hsa_signal_t { handle: signal },
                &mut t,
            )
        };
        (status == HSA_STATUS_SUCCESS).then_some((t.start, t.end))
    }
}
