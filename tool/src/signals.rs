//! Timestamp signals: the signal pool's provider on top of ROCr, the pooled
//! handle the engine tracks, and the completion backend that reads signal
//! values and dispatch times.
//!
//! # Safety
//! Every runtime call goes through entries copied from the runtime's tables
//! at `OnLoad` and checked to be present; signal handles passed to them are
//! ones this module created and still owns.

use std::sync::atomic::{AtomicBool, Ordering};

use hsa_sys::{
    hsa_agent_t, hsa_amd_profiling_dispatch_time_t, hsa_signal_t, HSA_AMD_SIGNAL_AMD_GPU_ONLY,
    HSA_STATUS_SUCCESS,
};
use rprof_core::engine::{CompletionBackend, DispatchSignal, SignalSource};
use rprof_pool::{PoolError, ProviderError, RawSignal, SignalHandle, SignalPool, SignalProvider};

use crate::runtime::Runtime;
use crate::signal_memory::{self, SignalMemory};

/// Creates timestamp signals, in one of two ways:
///
/// - in rprof's own memory ([`SignalMemory`], the kernel pool's default):
///   plain `amd_signal_t` records the runtime never sees, cheap to create
///   and free to give up;
/// - with ROCr: `hsa_amd_signal_create` with `HSA_AMD_SIGNAL_AMD_GPU_ONLY`,
///   which in ROCr 5.2.3 makes a plain memory signal (`DefaultSignal`) with
///   no driver event (memory copies need these, and the kernel pool uses
///   them with `RPROF_TIMESTAMP_SIGNALS=rocr` or where no suitable memory
///   pool exists).
///
/// Either way the signals take nothing from the process's 4096-event budget
/// and never involve ROCr's async-events thread. Nobody waits on them: the
/// completion thread polls.
#[derive(Debug, Clone, Copy)]
pub struct RocrSignals {
    rt: Runtime,
    memory: Option<&'static SignalMemory>,
}

impl RocrSignals {
    /// A provider of ROCr's signals over the runtime's original entries.
    pub fn new(rt: Runtime) -> Self {
        RocrSignals { rt, memory: None }
    }

    /// A provider of signals in `memory` (ROCr's when `None`).
    pub fn in_memory(rt: Runtime, memory: Option<&'static SignalMemory>) -> Self {
        RocrSignals { rt, memory }
    }
}

impl SignalProvider for RocrSignals {
    fn create(&self, initial: i64) -> Result<RawSignal, ProviderError> {
        if let Some(memory) = self.memory {
            return memory
                .create(initial)
                .map(RawSignal)
                .map_err(|status| ProviderError { status });
        }
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
        if self.memory.is_some() {
            // SAFETY: a record this provider created and the pool still owns.
            unsafe { signal_memory::store_value(signal.0, value) };
            return;
        }
        if let Some(store) = self.rt.core.hsa_signal_store_screlease_fn {
            // SAFETY: a signal this provider created and the pool still owns.
            unsafe { store(hsa_signal_t { handle: signal.0 }, value) };
        }
    }

    fn destroy(&self, signal: RawSignal) {
        // A signal in rprof's memory is given up with its block
        // (`SignalMemory::release_all`).
        if self.memory.is_some() {
            return;
        }
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
pub struct PooledSignal<P: SignalProvider + 'static = RocrSignals> {
    handle: SignalHandle<'static, P>,
}

impl<P: SignalProvider + std::fmt::Debug + 'static> DispatchSignal for PooledSignal<P> {
    fn handle(&self) -> u64 {
        self.handle.raw().0
    }
}

/// The interceptor's view of the pool.
#[derive(Debug)]
pub struct PoolSource<P: SignalProvider + 'static = RocrSignals> {
    pool: &'static SignalPool<P>,
    capacity: usize,
    /// The pool can never hand out a signal again (the runtime created
    /// none, or the pool is closed): reported once, then every kernel passes
    /// through untraced at once instead of waiting for a signal.
    failed: AtomicBool,
    /// The pool stopped growing below its capacity (reported once).
    stunted: AtomicBool,
}

impl<P: SignalProvider + 'static> PoolSource<P> {
    /// A source over a leaked pool.
    pub fn new(pool: &'static SignalPool<P>) -> Self {
        let capacity = pool.config().capacity as usize;
        PoolSource {
            pool,
            capacity,
            failed: AtomicBool::new(false),
            stunted: AtomicBool::new(false),
        }
    }

    /// The pool itself (for its statistics).
    pub fn pool(&self) -> &'static SignalPool<P> {
        self.pool
    }

    /// Whether the pool can never hand out a signal again.
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }
}

impl<P: SignalProvider + std::fmt::Debug + 'static> SignalSource<PooledSignal<P>>
    for PoolSource<P>
{
    fn try_acquire(&self) -> Option<PooledSignal<P>> {
        match self.pool.try_acquire() {
            Ok(Some(handle)) => Some(PooledSignal { handle }),
            Ok(None) => None,
            // Creation failed and the pool kept what it had: ordinary
            // back-pressure on a smaller pool.
            Err(PoolError::Create { error, pool_size }) if pool_size > 0 => {
                if !self.stunted.swap(true, Ordering::AcqRel) {
                    eprintln!("rprof: the runtime could not create more timestamp signals ({error}); tracing goes on with {pool_size}");
                }
                None
            }
            // Nothing to wait for, ever.
            Err(e) => {
                if !self.failed.swap(true, Ordering::AcqRel) && e != PoolError::Closed {
                    eprintln!("rprof: the runtime could not create timestamp signals ({e}); kernels from now on run untraced and are counted as lost");
                }
                self.failed.store(true, Ordering::Release);
                None
            }
        }
    }

    fn never_available(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    fn capacity(&self) -> usize {
        self.capacity
    }
}

/// Reads signal values and dispatch times, of the kernel pool's signals in
/// `memory` when it is set, else through the runtime's entries.
#[derive(Debug, Clone, Copy)]
pub struct RocrBackend {
    rt: Runtime,
    memory: Option<&'static SignalMemory>,
}

impl RocrBackend {
    /// A backend over the runtime's original entries, for kernel signals in
    /// `memory` (ROCr's when `None`).
    pub fn new(rt: Runtime, memory: Option<&'static SignalMemory>) -> Self {
        RocrBackend { rt, memory }
    }
}

impl CompletionBackend for RocrBackend {
    fn signal_value(&self, signal: u64) -> i64 {
        // ROCr's signal handle is the address of the signal's `amd_signal_t`
        // (the ABI the GPU uses: packets carry the handle and the packet
        // processor decrements the value at offset 8). Reading it directly
        // avoids a call into the runtime for every poll of every dispatch.
        if signal != 0 && signal % 8 == 0 {
            // SAFETY: `signal` is a live pooled signal, a record of rprof's
            // memory or made by `hsa_amd_signal_create` (owned by an
            // in-flight entry, so not destroyed).
            return unsafe { signal_memory::load_value(signal) };
        }
        match self.rt.core.hsa_signal_load_relaxed_fn {
            // SAFETY: a pooled signal owned by an in-flight entry.
            Some(load) => unsafe { load(hsa_signal_t { handle: signal }) },
            None => 0,
        }
    }

    fn forward(&self, app_signal: u64, kernel_signal: Option<u64>) {
        if let Some(subtract) = self.rt.core.hsa_signal_subtract_screlease_fn {
            if let Some(kernel_signal) = kernel_signal {
                // SAFETY: `kernel_signal` is the finished kernel's timestamp
                // signal, still owned by its in-flight entry; `app_signal` is
                // the app's own completion signal from its packet, which the
                // app keeps alive until it has seen it complete (below); both
                // are `amd_signal_t` records (ROCr's handles are their address).
                unsafe { signal_memory::copy_times(kernel_signal, app_signal) };
            }
            // SAFETY: the app's own completion signal from its packet; the
            // app keeps it alive until it has seen it complete.
            unsafe { subtract(hsa_signal_t { handle: app_signal }, 1) };
        }
    }

    fn open_gate(&self, signal: u64) {
        if self.memory.is_some() {
            // SAFETY: a pooled gate signal (a record of `memory`) owned by an
            // in-flight entry.
            unsafe { signal_memory::store_value(signal, 0) };
            return;
        }
        if let Some(store) = self.rt.core.hsa_signal_store_screlease_fn {
            // SAFETY: a pooled gate signal owned by an in-flight entry.
            unsafe { store(hsa_signal_t { handle: signal }, 0) };
        }
    }

    fn copy_time(&self, signal: u64) -> Option<(u64, u64)> {
        let get = self.rt.amd.hsa_amd_profiling_get_async_copy_time_fn?;
        let mut t = hsa_sys::hsa_amd_profiling_async_copy_time_t { start: 0, end: 0 };
        // SAFETY: a pooled signal that completed an async copy issued while
        // async-copy profiling was on, and a valid out-pointer.
        let status = unsafe { get(hsa_signal_t { handle: signal }, &mut t) };
        (status == HSA_STATUS_SUCCESS && t.end != 0).then_some((t.start, t.end))
    }

    fn dispatch_time(&self, agent_handle: u64, signal: u64) -> Option<(u64, u64)> {
        if let Some(memory) = self.memory {
            let agent = hsa_agent_t {
                handle: agent_handle,
            };
            // SAFETY: a pooled signal of `memory` owned by the in-flight
            // entry being retired, whose value the engine saw complete.
            return unsafe { memory.dispatch_time(agent, signal) };
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use rprof_core::engine::{Engine, EngineOptions, QueueContext, RawPacket};
    use rprof_pool::PoolConfig;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// The app's thread writes one in-flight entry per dispatch into the
    /// hand-off queue and the completion thread reads it back: every cache
    /// line it spans moves between the two cores. A dispatch's record rode
    /// in it whole (216 bytes); the queue's fields, the correlation id and
    /// the times are filled in at completion now. (Probe: 128 bytes more per
    /// entry added ~30 ns to the raw-HSA host time per dispatch.)
    #[test]
    fn an_in_flight_entry_spans_at_most_two_and_a_half_cache_lines() {
        let size = std::mem::size_of::<rprof_core::engine::InFlight<PooledSignal>>();
        assert!(size <= 160, "an in-flight entry takes {size} bytes");
    }

    /// A runtime whose signal creation always fails.
    #[derive(Debug)]
    struct NoSignals;

    impl SignalProvider for NoSignals {
        fn create(&self, _initial: i64) -> Result<RawSignal, ProviderError> {
            Err(ProviderError {
                status: hsa_sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES,
            })
        }
        fn reset(&self, _signal: RawSignal, _value: i64) {}
        fn destroy(&self, _signal: RawSignal) {}
    }

    fn kernel_packet() -> RawPacket {
        let mut p = RawPacket::ZERO;
        let header =
            (hsa_sys::HSA_PACKET_TYPE_KERNEL_DISPATCH << hsa_sys::HSA_PACKET_HEADER_TYPE) as u16;
        p.bytes[0..2].copy_from_slice(&header.to_le_bytes());
        p.bytes[32..40].copy_from_slice(&0x1000u64.to_le_bytes());
        p
    }

    #[test]
    fn failing_signal_creation_never_makes_a_launch_wait() {
        let pool: &'static SignalPool<NoSignals> = Box::leak(Box::new(
            SignalPool::new(
                NoSignals,
                PoolConfig {
                    capacity: 64,
                    batch: 16,
                    initial_value: 1,
                },
            )
            .unwrap(),
        ));
        let source = PoolSource::new(pool);
        let engine: Engine<PooledSignal<NoSignals>> = Engine::new(EngineOptions {
            pool_wait: Duration::from_secs(2),
            ..EngineOptions::default()
        });
        let q = Arc::new(QueueContext::new(1, 0, 0));
        let pkt = kernel_packet();
        let t0 = Instant::now();
        let mut written = Vec::new();
        for _ in 0..3 {
            engine.intercept(&q, &[pkt], &source, |out| written.extend_from_slice(out));
        }
        assert!(
            t0.elapsed() < Duration::from_millis(500),
            "3 launches took {:?}",
            t0.elapsed()
        );
        // Passed through unchanged, counted lost, nothing in flight.
        assert_eq!(written, [pkt, pkt, pkt]);
        assert_eq!(engine.counters().lost.load(Ordering::SeqCst), 3);
        assert_eq!(engine.in_flight(), 0);
        assert!(source.failed());
        assert_eq!(pool.stats().create_failures, 1);
    }
}
