//! rprof's two background threads, the engine's completion thread and its
//! writer thread, both with the app's share of the CPU and without wake-up
//! preemption, spawned at `OnLoad`.
//!
//! Owns spawning them, their names and priority, and what a panic in one of
//! them degrades to; must not hold tracing logic (that is
//! `rprof_core::engine`) nor stop them (the flush does).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use rprof_core::engine::{CachedKernelNames, Engine};
use rprof_core::kernels::KernelTable;
use rprof_core::record::{AgentInfo, RunInfo};
use rprof_core::sink::RecordSink;

use super::guarded;
use crate::signals::{PooledSignal, RocrBackend};

/// The completion and writer threads.
pub(super) type Threads = (JoinHandle<()>, JoinHandle<()>);

/// Makes the calling thread `SCHED_BATCH`: the app's share of the CPU (its
/// nice value stays the app's), but a wake-up does not preempt the thread
/// that runs. Both of rprof's threads run so.
///
/// The completion thread wakes every few tens of microseconds while kernels
/// finish; preempting the app (or, on the emulated GPU, the command
/// processor) each time cost the 20 µs mix 2-3 % at the plain policy, while
/// nice 10 kept it waiting where the app waits for it (a memory copy's
/// signal, a host-forwarded signal, a serialized kernel's grant, ring
/// space). The writer ran at nice 10 until Nov 27 (session 14): where cores
/// are scarce it was starved, so its backlog filled the record queue (the
/// completion thread then waited for it, and the ring guard for the
/// completion thread) and was written at exit while the app waited; at the
/// app's share the graph storm's kernel phase and exit shortened on ROCr
/// 6.1 and 6.4 (on 5.2 two series disagreed, and the 20 µs mix nets to
/// about nothing: `docs/performance-history.md`). A thread may always choose this
/// policy; failure leaves the default.
fn no_wakeup_preemption() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler on the calling thread (pid 0) with a
    // parameter block we own.
    unsafe {
        libc::sched_setscheduler(0, libc::SCHED_BATCH, &param);
    }
}

/// CPU time each background thread used, in ns, stored when it ends (for
/// the `RPROF_VERBOSE` summary and the benchmark: rprof's own cost, which
/// the whole command's wall time mixes with the app's and the GPU's).
static COMPLETION_CPU_NS: AtomicU64 = AtomicU64::new(0);
static WRITER_CPU_NS: AtomicU64 = AtomicU64::new(0);

/// CPU time of the calling thread, in ns (0 if the clock cannot be read).
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec that we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time so far of a thread that may still run (at exit the completion
/// thread keeps recycling signals; the writer thread frees its sinks after
/// the flush took its outcome), in ns.
fn running_cpu_ns(thread: &JoinHandle<()>) -> Option<u64> {
    use std::os::unix::thread::JoinHandleExt;
    let mut clock: libc::clockid_t = 0;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: the handle keeps the thread joinable (its pthread_t valid);
    // both calls write only the locals passed.
    let rc = unsafe {
        if libc::pthread_getcpuclockid(thread.as_pthread_t(), &mut clock) != 0 {
            return None;
        }
        libc::clock_gettime(clock, &mut ts)
    };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// (completion, writer) CPU time in ns: each handle is its thread's if it
/// may still run (else the time it stored as it ended).
pub(super) fn cpu_ns(
    completion: Option<&JoinHandle<()>>,
    writer: Option<&JoinHandle<()>>,
) -> (u64, u64) {
    let cpu = |t: Option<&JoinHandle<()>>, stored: &AtomicU64| {
        t.filter(|t| !t.is_finished())
            .and_then(running_cpu_ns)
            .unwrap_or_else(|| stored.load(Ordering::Acquire))
    };
    (
        cpu(completion, &COMPLETION_CPU_NS),
        cpu(writer, &WRITER_CPU_NS),
    )
}

/// How long [`start`] waits for its two threads to be running (named, at
/// their policy) before it returns anyway.
const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Starts the completion thread (recycling signals through `backend`) and
/// the writer thread (feeding `sinks`), and returns once both run under
/// their names and policy (a thread names itself when it first runs: until
/// then it would show as its spawner, the session's start thread). The
/// writer thread calls `after_writer` once it has published its outcome
/// (before it frees its sinks).
pub(super) fn start(
    engine: Arc<Engine<PooledSignal>>,
    backend: RocrBackend,
    mut sinks: Vec<Box<dyn RecordSink + Send>>,
    kernels: Arc<KernelTable>,
    run: RunInfo,
    agents: Vec<AgentInfo>,
    after_writer: impl FnOnce() + Send + 'static,
) -> std::io::Result<Threads> {
    let (ready, running) = std::sync::mpsc::sync_channel::<()>(2);
    let e = engine.clone();
    let completion_ready = ready.clone();
    let completion = std::thread::Builder::new()
        .name("rprof-completion".into())
        .spawn(move || {
            no_wakeup_preemption();
            let _ = completion_ready.send(());
            guarded(
                "the completion thread",
                // Nobody completes dispatches any more: trace nothing new,
                // so interceptors never wait for this thread.
                || e.completion_failed(),
                || e.run_completion(&backend),
            );
            COMPLETION_CPU_NS.store(thread_cpu_ns(), Ordering::Release);
        })?;
    let writer = std::thread::Builder::new()
        .name("rprof-writer".into())
        .spawn(move || {
            no_wakeup_preemption();
            let _ = ready.send(());
            let e = engine.clone();
            // The engine publishes the outcome for the flush (a panic: an
            // empty one); the sinks are freed here after it.
            guarded(
                "the writer thread",
                move || e.writer_failed(),
                || {
                    let names = Box::new(CachedKernelNames::new(kernels));
                    engine.run_writer(&mut sinks, names, &run, &agents);
                },
            );
            WRITER_CPU_NS.store(thread_cpu_ns(), Ordering::Release);
            guarded("the writer's end of the flush", || (), after_writer);
            drop(sinks);
        })?;
    for _ in 0..2 {
        if running.recv_timeout(READY_TIMEOUT).is_err() {
            break;
        }
    }
    Ok((completion, writer))
}
