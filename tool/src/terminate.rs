//! SIGTERM and SIGINT: flush the trace, then end the way the signal would
//! have ended the process.
//!
//! At `OnLoad`, for each of the two signals whose disposition is still the
//! default (an app that installed its own handler keeps it), rprof installs
//! a handler that only writes the signal number to a pipe (async-signal-
//! safe). A thread of rprof's reads it, runs the flush, restores the
//! default disposition and raises the signal again: the process ends by
//! that signal, with a finished trace. An app that installs a handler later
//! replaces rprof's, and the signal is the app's business.
//!
//! Owns the handlers, the pipe and the signal thread; must not know what a
//! flush does (the session passes it in).
//!
//! # Safety
//! `sigaction`, `pipe2`, `write`, `read`, `raise` at the FFI edge; the
//! handler touches nothing but an atomic and `write(2)`.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// Write end of the pipe the handler writes to (-1: none).
static PIPE_WRITE: AtomicI32 = AtomicI32::new(-1);
/// Which of [`SIGNALS`] rprof's handler was installed for.
static INSTALLED: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];
/// The signals handled.
const SIGNALS: [libc::c_int; 2] = [libc::SIGTERM, libc::SIGINT];

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = PIPE_WRITE.load(Ordering::Relaxed);
    if fd >= 0 {
        let b = sig as u8;
        // SAFETY: write(2) is async-signal-safe; one byte from the stack.
        unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
    }
}

fn handler_address() -> libc::sighandler_t {
    on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t
}

/// The current handler of `sig`.
fn current(sig: libc::c_int) -> libc::sighandler_t {
    // SAFETY: querying the disposition only (null new action).
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old);
        old.sa_sigaction
    }
}

fn set(sig: libc::c_int, handler: libc::sighandler_t) {
    // SAFETY: installing a plain handler (or SIG_DFL) with an empty mask.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = handler;
        act.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaction(sig, &act, std::ptr::null_mut());
    }
}

/// Installs the handlers (where the disposition is the default) and the
/// thread that runs `flush(signal name)` when one arrives.
pub fn install(flush: fn(&str)) {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return;
    }
    let read_fd = fds[0];
    PIPE_WRITE.store(fds[1], Ordering::Release);
    let spawned = std::thread::Builder::new()
        .name("rprof-signals".into())
        .spawn(move || loop {
            let mut b = 0u8;
            // SAFETY: reading one byte into a local from our own pipe.
            let n = unsafe { libc::read(read_fd, (&mut b as *mut u8).cast(), 1) };
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            if n != 1 {
                return;
            }
            let sig = libc::c_int::from(b);
            let name = if sig == libc::SIGINT {
                "SIGINT"
            } else {
                "SIGTERM"
            };
            crate::session::guarded("the signal flush", || (), || flush(name));
            // End as the signal would have: default disposition, again.
            set(sig, libc::SIG_DFL);
            // SAFETY: raising a signal whose action is now the default.
            unsafe { libc::raise(sig) };
        });
    if spawned.is_err() {
        return;
    }
    for (i, &sig) in SIGNALS.iter().enumerate() {
        if current(sig) == libc::SIG_DFL {
            set(sig, handler_address());
            INSTALLED[i].store(true, Ordering::Release);
        }
    }
}

/// In a forked child (no rprof thread reads the pipe): give the signals
/// back their default action where rprof's handler is still installed.
pub fn in_forked_child() {
    for (i, &sig) in SIGNALS.iter().enumerate() {
        if INSTALLED[i].load(Ordering::Acquire) && current(sig) == handler_address() {
            set(sig, libc::SIG_DFL);
        }
    }
}
