//! The process events around a trace that are not HSA calls: `exit` and
//! `quick_exit` (flush), `fork` (the child runs untraced), SIGTERM / SIGINT
//! (flush, then end as the signal would have), and `OnUnload`.
//!
//! Owns registering those handlers and what each one asks of the session;
//! must not implement the flush (see [`super::flush`]) nor the signal
//! handling itself (`crate::terminate`).

use std::sync::atomic::Ordering;

use super::{guarded, session};

extern "C" {
    /// C11 `at_quick_exit` (glibc); not in the `libc` crate.
    fn at_quick_exit(f: extern "C" fn()) -> libc::c_int;
}

/// Registers the exit, fork and termination handlers (once, at `OnLoad`).
pub(super) fn install() {
    // SAFETY: registering a plain extern "C" function with the C library
    // (glibc has both); failure only means no flush at exit, which
    // hsa_shut_down still covers. `quick_exit` runs only the second list.
    unsafe {
        libc::atexit(at_exit);
        at_quick_exit(at_quick_exit_flush);
        // A forked child has none of rprof's threads: it runs untraced.
        libc::pthread_atfork(None, None, Some(in_forked_child));
    }
    // SIGTERM / SIGINT: flush, then end as the signal would have.
    crate::terminate::install(flush_on_signal);
}

/// `OnUnload`: the runtime is unloading rprof (inside `hsa_shut_down`).
pub fn on_unload() {
    if let Some(s) = session() {
        s.finish("OnUnload", false);
        s.end_guard();
        // After an at-exit flush the pool stayed open for the app's last
        // launches; the runtime is going away now, so its signals go back
        // before it counts them (ROCr >= 6 says "Resource leak detected by
        // SharedSignalPool, N Signals leaked" for each one still alive).
        // Only once the device has drained every traced ring: app threads
        // may still be launching while the process exits, and a packet of
        // rprof's still in a ring (a lingering forwarding barrier) must not
        // wait on a destroyed signal. Signals of dispatches given up on stay
        // out, and the pool open.
        let t0 = std::time::Instant::now();
        let closed = if s.hardware_rings_drained() {
            s.close_signal_pools(true)
        } else {
            Err("a traced queue's hardware ring still holds packets, or is not known".to_string())
        };
        if s.verbose {
            match closed {
                Ok(n) => eprintln!(
                    "rprof: unload: {n} timestamp signals destroyed in {:?}",
                    t0.elapsed()
                ),
                Err(e) => eprintln!("rprof: unload: the signal pool stays open ({e})"),
            }
        }
    }
}

/// In a child created by `fork`: the completion and writer threads do not
/// exist there, so stop tracing and never wait for them. (A child made
/// without this handler, by a raw `clone`, is caught by the flush's pid
/// check instead.)
extern "C" fn in_forked_child() {
    guarded(
        "the fork handler",
        || (),
        || {
            if let Some(s) = session() {
                s.finished.store(true, Ordering::Release);
                forget_in_child(s);
            }
        },
    )
}

/// What a child of the traced process does with the session it inherited
/// (from the fork handler, or from the flush when no handler ran: a raw
/// `clone`): nothing is traced, no thread waited for, nothing reported.
pub(super) fn forget_in_child(s: &super::Session) {
    s.engine.forked_child();
    crate::terminate::in_forked_child();
}

/// The flush for SIGTERM / SIGINT (`terminate`), on rprof's signal thread.
fn flush_on_signal(why: &str) {
    if let Some(s) = session() {
        s.finish(why, true);
    }
}

/// `exit`: begins the flush and leaves the writer finishing the outputs
/// while the exit handlers registered before rprof's run (HIP's teardown,
/// which destroys its queues and calls `hsa_shut_down`). The flush ends at
/// `OnUnload` or the last `hsa_shut_down`, or else in the library's
/// destructor, which runs after every exit handler ([`at_library_end`]).
extern "C" fn at_exit() {
    guarded(
        "the exit flush",
        || (),
        || {
            if let Some(s) = session() {
                s.begin_finish("exit", true);
            }
        },
    )
}

/// `quick_exit`: no destructor runs after its handlers, so the whole
/// flush happens here.
extern "C" fn at_quick_exit_flush() {
    guarded(
        "the quick_exit flush",
        || (),
        || {
            if let Some(s) = session() {
                s.finish("quick_exit", true);
            }
        },
    )
}

/// The library's destructor: at the end of `exit`, after every exit
/// handler (glibc runs the loaded objects' destructors last), or when the
/// runtime unloads rprof. Ends a flush `exit` began that neither `OnUnload`
/// nor `hsa_shut_down` ended; never starts one, never waits for a session
/// still starting.
extern "C" fn at_library_end() {
    guarded(
        "the library destructor",
        || (),
        || {
            if let Some(s) = super::SESSION.get() {
                s.end_finish();
            }
        },
    )
}

#[used]
#[link_section = ".fini_array"]
static DESTRUCTOR: extern "C" fn() = at_library_end;
