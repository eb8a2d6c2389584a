//! rprof's two background threads: the engine's completion thread and its
//! writer thread, spawned at `OnLoad` at a lower priority than the app's.
//!
//! Owns spawning them, their names and priority, and what a panic in one of
//! them degrades to; must not hold tracing logic (that is
//! `rprof_core::engine`) nor stop them (the flush does).

use std::sync::Arc;
use std::thread::JoinHandle;

use rprof_core::engine::{Engine, WriterOutcome};
use rprof_core::kernels::KernelTable;
use rprof_core::record::{AgentInfo, RunInfo};
use rprof_core::sink::RecordSink;

use super::guarded;
use crate::signals::{PooledSignal, RocrBackend};

/// The completion and writer threads.
pub(super) type Threads = (JoinHandle<()>, JoinHandle<WriterOutcome>);

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

/// Starts the completion thread (recycling signals through `backend`) and
/// the writer thread (feeding `sinks`).
pub(super) fn start(
    engine: Arc<Engine<PooledSignal>>,
    backend: RocrBackend,
    mut sinks: Vec<Box<dyn RecordSink + Send>>,
    kernels: Arc<KernelTable>,
    run: RunInfo,
    agents: Vec<AgentInfo>,
) -> std::io::Result<Threads> {
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
