//! The gate between `OnLoad` and a session that starts on a thread of its
//! own: whoever needs the session while its start runs waits here (bounded),
//! so every hook sees either the whole session or none.
//!
//! Owns the start's state and the wait; must not build the session (see
//! `super::start_beside`) nor hold it (`super::SESSION` does).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use rprof_core::wait::{poll_until, Pace};

/// No start is running (none was asked for, `OnLoad` built the session
/// itself, or the start has ended, well or not).
const SETTLED: u8 = 0;
/// A thread is building the session.
const RUNNING: u8 = 1;

/// How a caller waits for the start: a few yields, then 20 µs naps (plain
/// atomics and sleeps, so a signal handler may wait too).
const PACE: Pace = Pace::new(16, Duration::from_micros(20));

thread_local! {
    /// The calling thread is the one building the session: it never waits
    /// for itself.
    static BUILDING: Cell<bool> = const { Cell::new(false) };
}

/// Where a session's start stands, and the wait for it.
#[derive(Debug)]
pub(super) struct StartGate {
    /// [`SETTLED`] or [`RUNNING`]; set to `RUNNING` before the building
    /// thread exists, back to `SETTLED` (release) after the session was
    /// published or given up.
    state: AtomicU8,
    /// The process whose thread runs the start: a forked child has no such
    /// thread and must never wait for it.
    pid: AtomicI32,
    /// The longest a caller waits.
    timeout: Duration,
    /// The "did not start in time" message was printed.
    said: AtomicBool,
}

impl StartGate {
    /// A gate with no start running; callers wait at most `timeout` once
    /// one does.
    pub(super) const fn new(timeout: Duration) -> Self {
        StartGate {
            state: AtomicU8::new(SETTLED),
            pid: AtomicI32::new(0),
            timeout,
            said: AtomicBool::new(false),
        }
    }

    /// A start begins (called before its thread is spawned).
    pub(super) fn begin(&self) {
        self.pid.store(this_process(), Ordering::Relaxed);
        self.state.store(RUNNING, Ordering::Release);
    }

    /// Runs `build` as the start: the calling thread is marked as the
    /// builder (it never waits for itself) and the gate opens when `build`
    /// returns, also if it panicked.
    pub(super) fn build(&self, build: impl FnOnce()) {
        struct Open<'a>(&'a StartGate);
        impl Drop for Open<'_> {
            fn drop(&mut self) {
                BUILDING.with(|b| b.set(false));
                self.0.state.store(SETTLED, Ordering::Release);
            }
        }
        BUILDING.with(|b| b.set(true));
        let _open = Open(self);
        build();
    }

    /// Whether a start runs for this process (false in a forked child,
    /// which has no such thread).
    pub(super) fn running_here(&self) -> bool {
        self.state.load(Ordering::Acquire) == RUNNING
            && self.pid.load(Ordering::Relaxed) == this_process()
    }

    /// Waits until no start runs: returns at once when none does, in a
    /// forked child, and on the building thread. Returns whether the start
    /// is settled (false: it ran past the timeout; said once on stderr).
    pub(super) fn wait(&self) -> bool {
        if self.state.load(Ordering::Acquire) != RUNNING
            || self.pid.load(Ordering::Relaxed) != this_process()
            || BUILDING.with(Cell::get)
        {
            return true;
        }
        let settled = poll_until(Instant::now() + self.timeout, PACE, || {
            self.state.load(Ordering::Acquire) != RUNNING
        });
        if !settled && !self.said.swap(true, Ordering::Relaxed) {
            eprintln!(
                "rprof: the tracing session did not start within {} s; calls go on untraced until it does",
                self.timeout.as_secs()
            );
        }
        settled
    }
}

/// This process's id (the `getpid` a forked child sees as its own).
fn this_process() -> i32 {
    std::process::id() as i32
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    /// A start that takes `delay` on another thread, publishing `value`
    /// into `published` just before the gate opens.
    fn slow_start(
        gate: &'static StartGate,
        published: Arc<AtomicU64>,
        value: u64,
        delay: Duration,
    ) -> std::thread::JoinHandle<()> {
        gate.begin();
        std::thread::spawn(move || {
            gate.build(|| {
                std::thread::sleep(delay);
                published.store(value, Ordering::Relaxed);
            })
        })
    }

    /// Asserts that `gate.wait()` returns settled without waiting: every
    /// gate here waits up to 10 s, so a wait that happened takes far longer
    /// than the bound, even on a loaded machine.
    fn returns_at_once(gate: &StartGate) {
        let t0 = Instant::now();
        assert!(gate.wait());
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    }

    #[test]
    fn a_caller_waits_until_the_start_has_published_its_result() {
        static GATE: StartGate = StartGate::new(Duration::from_secs(10));
        let published = Arc::new(AtomicU64::new(0));
        let t0 = Instant::now();
        let h = slow_start(&GATE, published.clone(), 7, Duration::from_millis(150));
        assert!(GATE.wait());
        assert!(
            t0.elapsed() >= Duration::from_millis(150),
            "{:?}",
            t0.elapsed()
        );
        assert_eq!(published.load(Ordering::Relaxed), 7);
        h.join().unwrap();
        // Settled: the next caller does not wait.
        returns_at_once(&GATE);
    }

    #[test]
    fn no_start_running_means_no_wait() {
        static GATE: StartGate = StartGate::new(Duration::from_secs(10));
        returns_at_once(&GATE);
    }

    #[test]
    fn the_building_thread_never_waits_for_itself() {
        static GATE: StartGate = StartGate::new(Duration::from_secs(10));
        GATE.begin();
        GATE.build(|| returns_at_once(&GATE));
    }

    #[test]
    fn a_start_that_panics_still_opens_the_gate() {
        static GATE: StartGate = StartGate::new(Duration::from_secs(10));
        GATE.begin();
        let h = std::thread::spawn(|| GATE.build(|| panic!("start failed")));
        assert!(h.join().is_err());
        returns_at_once(&GATE);
    }

    #[test]
    fn a_start_past_the_timeout_lets_the_caller_go_on() {
        static GATE: StartGate = StartGate::new(Duration::from_millis(100));
        let published = Arc::new(AtomicU64::new(0));
        let h = slow_start(&GATE, published.clone(), 1, Duration::from_secs(3));
        let t0 = Instant::now();
        assert!(!GATE.wait());
        let waited = t0.elapsed();
        assert!(waited >= Duration::from_millis(100), "{waited:?}");
        assert_eq!(published.load(Ordering::Relaxed), 0);
        h.join().unwrap();
        assert!(GATE.wait());
        assert_eq!(published.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_process_other_than_the_starting_one_does_not_wait() {
        static GATE: StartGate = StartGate::new(Duration::from_secs(10));
        GATE.begin();
        // As a forked child sees it: the start's pid is not its own.
        GATE.pid.store(this_process() + 1, Ordering::Relaxed);
        returns_at_once(&GATE);
    }
}
