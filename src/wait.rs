//! rprof's one way to wait: every wait is bounded, paced the same way, and
//! either polls or sleeps on a wake point.
//!
//! Owns the waiting *mechanics* of rprof's threads (the engine's completion
//! and writer threads, interceptors waiting for signals or ring space,
//! teardown waiting for threads); it knows nothing about what is waited for.
//! It must not grow a blocking wait without a bound: every API here takes a
//! deadline or a timeout.
//!
//! Three pieces:
//! - [`Pace`]: how a waiter spends the time between two checks: a number of
//!   `yield_now` rounds, then naps of a fixed length.
//! - [`Wait`]: a bounded poll loop. `Wait::until(deadline, pace)`, then
//!   `while !ready() { if !wait.pause() { break } }`: each [`Wait::pause`]
//!   yields or naps by the pace, never sleeps past the deadline, and returns
//!   `false` once the deadline has passed. [`Wait::renew`] moves the deadline
//!   (a wait bounded by "no progress for T").
//! - [`WakePoint`]: where one background thread sleeps and the hot path pokes
//!   it for the price of one atomic load when nobody sleeps. The sleeping
//!   thread takes a [`Sleeper`] and sleeps with a timeout; producers check
//!   [`WakePoint::is_parked`] / [`WakePoint::is_sleeping`] and
//!   [`WakePoint::notify`]. Built on `crossbeam_utils::sync::Parker`: a
//!   notify that comes before the sleep leaves a token, so the next sleep
//!   returns at once and a wake-up is never lost.
//!
//! - [`Broadcast`]: where any number of threads sleep until something they
//!   check may have changed (interceptors waiting for ring space); the thread
//!   that changes it notifies them all. Each sleep has a timeout.
//!
//! [`Doubling`] is the completion thread's exponential sleep between polls.

use std::sync::atomic::{fence, AtomicU8, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crossbeam_utils::sync::{Parker, Unparker};

/// How a waiter spends the time between two checks: the first `yields`
/// rounds call `std::thread::yield_now`, later rounds nap for `nap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// Rounds spent yielding before the first nap.
    pub yields: u32,
    /// Length of every later nap.
    pub nap: Duration,
}

impl Pace {
    /// `yields` rounds of yielding, then naps of `nap`.
    pub const fn new(yields: u32, nap: Duration) -> Self {
        Pace { yields, nap }
    }

    /// Naps of `nap` from the first round.
    pub const fn naps(nap: Duration) -> Self {
        Pace { yields: 0, nap }
    }

    /// Whether round `round` (from 0) yields rather than naps.
    pub fn yields_at(&self, round: u32) -> bool {
        round < self.yields
    }
}

/// A bounded poll loop: see the module docs.
#[derive(Debug)]
pub struct Wait {
    pace: Pace,
    deadline: Instant,
    rounds: u32,
    /// The time [`Wait::expired`] last found the deadline ahead, for the
    /// next [`Wait::pause`] (one clock read per round, not two).
    checked: Option<Instant>,
}

impl Wait {
    /// A wait that ends at `deadline`.
    pub fn until(deadline: Instant, pace: Pace) -> Self {
        Wait {
            pace,
            deadline,
            rounds: 0,
            checked: None,
        }
    }

    /// A wait that ends `timeout` from now.
    pub fn with_timeout(timeout: Duration, pace: Pace) -> Self {
        Self::until(Instant::now() + timeout, pace)
    }

    /// Pauses done so far.
    pub fn rounds(&self) -> u32 {
        self.rounds
    }

    /// Whether the deadline has passed.
    pub fn expired(&mut self) -> bool {
        let now = Instant::now();
        if now >= self.deadline {
            return true;
        }
        self.checked = Some(now);
        false
    }

    /// Moves the deadline to `deadline` (the pace goes on where it was).
    pub fn renew(&mut self, deadline: Instant) {
        self.deadline = deadline;
        self.checked = None;
    }

    /// Pauses once by the pace, never past the deadline. Returns `false`
    /// (without pausing) once the deadline has passed (as of this call, or
    /// of an [`Wait::expired`] that found it ahead right before).
    pub fn pause(&mut self) -> bool {
        let now = self.checked.take().unwrap_or_else(Instant::now);
        if now >= self.deadline {
            return false;
        }
        if self.pace.yields_at(self.rounds) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(self.pace.nap.min(self.deadline - now));
        }
        self.rounds = self.rounds.saturating_add(1);
        true
    }
}

/// Polls `ready` until it returns `true` (then `true`) or `deadline` passes
/// (then `false`, after one last look).
pub fn poll_until(deadline: Instant, pace: Pace, mut ready: impl FnMut() -> bool) -> bool {
    let mut wait = Wait::until(deadline, pace);
    loop {
        if ready() {
            return true;
        }
        if !wait.pause() {
            return ready();
        }
    }
}

/// An exponential sleep length between `min` and `max`: [`Doubling::step`]
/// returns the current length and doubles it (up to `max`),
/// [`Doubling::halve`] halves it (down to `min`); [`Doubling::reset`]
/// starts again from `min`.
#[derive(Debug, Clone, Copy)]
pub struct Doubling {
    min: Duration,
    max: Duration,
    current: Duration,
}

impl Doubling {
    /// From `min` (capped at `max`) to `max`.
    pub fn new(min: Duration, max: Duration) -> Self {
        let min = min.min(max);
        Doubling {
            min,
            max,
            current: min,
        }
    }

    /// The current length.
    pub fn current(&self) -> Duration {
        self.current
    }

    /// The current length; the next call returns twice it (at most `max`).
    pub fn step(&mut self) -> Duration {
        let d = self.current;
        self.current = (self.current * 2).min(self.max);
        d
    }

    /// Half the current length (at least `min`).
    pub fn halve(&mut self) {
        self.current = (self.current / 2).max(self.min);
    }

    /// Back to `min`.
    pub fn reset(&mut self) {
        self.current = self.min;
    }
}

/// The sleeping thread is running.
const AWAKE: u8 = 0;
/// It sleeps for a short backoff while work is outstanding.
const BACKOFF: u8 = 1;
/// It has nothing to do and sleeps until woken (or its timeout).
const PARKED: u8 = 2;

/// What a sleeping thread is waiting for, as seen by producers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SleepKind {
    /// Short sleep while work is outstanding; wake only when urgent.
    Backoff,
    /// Nothing outstanding; wake on any new work.
    Parked,
}

/// Where one background thread sleeps: see the module docs.
///
/// The sleeper announces its state (`SeqCst`), fences, re-checks for work,
/// and only then parks; a producer makes its work visible, fences, and reads
/// the state. Either the sleeper sees the work or the producer sees the
/// sleeper, and a notify before the park leaves the parker's token, so the
/// park returns at once.
#[derive(Debug)]
pub struct WakePoint {
    state: AtomicU8,
    /// The parker of the registered sleeper, while none is registered.
    parker: Mutex<Option<Parker>>,
    unparker: Unparker,
}

impl Default for WakePoint {
    fn default() -> Self {
        Self::new()
    }
}

impl WakePoint {
    /// A wake point with nobody asleep.
    pub fn new() -> Self {
        let parker = Parker::new();
        let unparker = parker.unparker().clone();
        WakePoint {
            state: AtomicU8::new(AWAKE),
            parker: Mutex::new(Some(parker)),
            unparker,
        }
    }

    /// The sleeping side, for the one thread that sleeps here (until the
    /// [`Sleeper`] is dropped). A second sleeper at the same time gets a
    /// parker nobody notifies: it still wakes at every timeout.
    pub fn sleeper(&self) -> Sleeper<'_> {
        let registered = match self.parker.lock() {
            Ok(mut g) => g.take(),
            Err(p) => p.into_inner().take(),
        };
        let (parker, registered) = match registered {
            Some(p) => (p, true),
            None => (Parker::new(), false),
        };
        Sleeper {
            point: self,
            parker: Some(parker),
            registered,
        }
    }

    /// Whether the thread is parked (idle), as seen now.
    pub fn is_parked(&self) -> bool {
        fence(Ordering::SeqCst);
        self.state.load(Ordering::SeqCst) == PARKED
    }

    /// Whether the thread sleeps at all, as seen now.
    pub fn is_sleeping(&self) -> bool {
        fence(Ordering::SeqCst);
        self.state.load(Ordering::SeqCst) != AWAKE
    }

    /// Wakes the thread if it sleeps, or makes its next sleep return at once.
    pub fn notify(&self) {
        self.unparker.unpark();
    }
}

/// Where any number of threads sleep until a condition they check may have
/// become true, each with a timeout; the thread that changes the condition
/// calls [`Broadcast::notify_all`].
///
/// Built on a mutex and a condition variable, taken only by a thread about
/// to sleep and by a notifier that knows someone sleeps (it keeps its own
/// count of sleepers, e.g. [`QueueContext`](crate::engine::QueueContext)'s
/// ring waiters): a waiter checks `ready` with the mutex held, so a change
/// made before the notifier takes the mutex is either seen by that check or
/// wakes the sleep. A notify with nobody asleep is lost, by design: the
/// sleeper checks `ready` first.
#[derive(Debug, Default)]
pub struct Broadcast {
    lock: Mutex<()>,
    cond: Condvar,
}

impl Broadcast {
    /// Nobody asleep.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sleeps up to `timeout` unless `ready()` (checked with the mutex
    /// held) is already true; returns `ready()` as seen on waking (a wake
    /// may be a timeout, a notify for another waiter's condition, or
    /// spurious).
    pub fn wait(&self, timeout: Duration, ready: impl Fn() -> bool) -> bool {
        let guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        if ready() {
            return true;
        }
        let (guard, _) = self
            .cond
            .wait_timeout(guard, timeout)
            .unwrap_or_else(PoisonError::into_inner);
        drop(guard);
        ready()
    }

    /// Wakes every thread sleeping in [`Broadcast::wait`] now.
    pub fn notify_all(&self) {
        // Taking the mutex orders this notify after any waiter's check of
        // its condition: one that checked before the change now sleeps.
        drop(self.lock.lock().unwrap_or_else(PoisonError::into_inner));
        self.cond.notify_all();
    }
}

/// The sleeping side of a [`WakePoint`] (see [`WakePoint::sleeper`]).
#[derive(Debug)]
pub struct Sleeper<'a> {
    point: &'a WakePoint,
    parker: Option<Parker>,
    registered: bool,
}

impl Sleeper<'_> {
    /// Sleeps up to `timeout` unless `has_work()` (checked after announcing
    /// the sleep) says there is something to do, or until
    /// [`WakePoint::notify`] (also one that came since the last sleep).
    pub fn sleep(&self, kind: SleepKind, timeout: Duration, has_work: impl Fn() -> bool) {
        let Some(parker) = self.parker.as_ref() else {
            return;
        };
        self.point.state.store(
            match kind {
                SleepKind::Backoff => BACKOFF,
                SleepKind::Parked => PARKED,
            },
            Ordering::SeqCst,
        );
        fence(Ordering::SeqCst);
        if !has_work() {
            parker.park_timeout(timeout);
        }
        self.point.state.store(AWAKE, Ordering::SeqCst);
    }

    /// Round `round` of a paced wait: yields while the pace yields, else
    /// sleeps here for the pace's nap (woken early by a notify).
    pub fn pause(&self, pace: Pace, round: u32, kind: SleepKind, has_work: impl Fn() -> bool) {
        if pace.yields_at(round) {
            std::thread::yield_now();
        } else {
            self.sleep(kind, pace.nap, has_work);
        }
    }
}

impl Drop for Sleeper<'_> {
    fn drop(&mut self) {
        if self.registered {
            let parker = self.parker.take();
            match self.point.parker.lock() {
                Ok(mut g) => *g = parker,
                Err(p) => *p.into_inner() = parker,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use std::sync::Arc;

    #[test]
    fn a_broadcast_wakes_every_waiter_and_never_sleeps_on_a_true_condition() {
        let room = Arc::new(Broadcast::new());
        let open = Arc::new(AtomicBool::new(false));
        // Already true: no sleep at all.
        let t = Instant::now();
        assert!(room.wait(Duration::from_secs(10), || true));
        assert!(t.elapsed() < Duration::from_secs(1));
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let (room, open) = (room.clone(), open.clone());
                std::thread::spawn(move || {
                    let t = Instant::now();
                    let ready = room.wait(Duration::from_secs(10), || open.load(Ordering::SeqCst));
                    (ready, t.elapsed())
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        open.store(true, Ordering::SeqCst);
        room.notify_all();
        for w in waiters {
            let (ready, waited) = w.join().unwrap();
            assert!(ready);
            assert!(waited < Duration::from_secs(5), "{waited:?}");
        }
        // Nobody notifies: the timeout ends the sleep, condition false.
        let t = Instant::now();
        assert!(!room.wait(Duration::from_millis(20), || false));
        assert!(t.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn parked_sleeper_is_woken_promptly() {
        let wake = Arc::new(WakePoint::new());
        let work = Arc::new(AtomicBool::new(false));
        let (w2, k2) = (wake.clone(), work.clone());
        let t = std::thread::spawn(move || {
            let sleeper = w2.sleeper();
            let t0 = Instant::now();
            while !k2.load(Ordering::SeqCst) {
                sleeper.sleep(SleepKind::Parked, Duration::from_secs(10), || {
                    k2.load(Ordering::SeqCst)
                });
            }
            t0.elapsed()
        });
        std::thread::sleep(Duration::from_millis(20));
        work.store(true, Ordering::SeqCst);
        if wake.is_sleeping() {
            wake.notify();
        }
        let waited = t.join().unwrap();
        assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    }

    #[test]
    fn no_sleep_when_work_is_there() {
        let wake = WakePoint::new();
        let t0 = Instant::now();
        wake.sleeper()
            .sleep(SleepKind::Backoff, Duration::from_secs(10), || true);
        assert!(t0.elapsed() < Duration::from_secs(5));
        assert!(!wake.is_sleeping());
    }

    #[test]
    fn a_notify_before_the_sleep_is_not_lost() {
        let wake = WakePoint::new();
        let sleeper = wake.sleeper();
        wake.notify();
        let t0 = Instant::now();
        sleeper.sleep(SleepKind::Parked, Duration::from_secs(10), || false);
        assert!(t0.elapsed() < Duration::from_secs(5));
        // The token is used up: the next sleep lasts its timeout.
        let t0 = Instant::now();
        sleeper.sleep(SleepKind::Parked, Duration::from_millis(20), || false);
        assert!(t0.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn a_second_sleeper_times_out_and_the_parker_comes_back() {
        let wake = WakePoint::new();
        {
            let first = wake.sleeper();
            let second = wake.sleeper();
            assert!(first.registered && !second.registered);
            wake.notify();
            let t0 = Instant::now();
            second.sleep(SleepKind::Parked, Duration::from_millis(20), || false);
            assert!(t0.elapsed() >= Duration::from_millis(20));
        }
        // Both dropped: a new sleeper is the registered one again, and the
        // earlier notify's token is still there for it.
        let again = wake.sleeper();
        assert!(again.registered);
        let t0 = Instant::now();
        again.sleep(SleepKind::Parked, Duration::from_secs(10), || false);
        assert!(t0.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn many_handoffs_never_lose_a_wakeup() {
        let wake = Arc::new(WakePoint::new());
        let counter = Arc::new(AtomicU64::new(0));
        let seen = Arc::new(AtomicU64::new(0));
        let (w2, c2, s2) = (wake.clone(), counter.clone(), seen.clone());
        let consumer = std::thread::spawn(move || {
            let sleeper = w2.sleeper();
            while s2.load(Ordering::SeqCst) < 2000 {
                let c = c2.load(Ordering::SeqCst);
                if c > s2.load(Ordering::SeqCst) {
                    s2.store(c, Ordering::SeqCst);
                    continue;
                }
                let s = s2.load(Ordering::SeqCst);
                sleeper.sleep(SleepKind::Parked, Duration::from_secs(30), || {
                    c2.load(Ordering::SeqCst) > s
                });
            }
        });
        for _ in 0..2000 {
            counter.fetch_add(1, Ordering::SeqCst);
            if wake.is_parked() {
                wake.notify();
            }
            while seen.load(Ordering::SeqCst) < counter.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
        }
        consumer.join().unwrap();
    }

    #[test]
    fn a_wait_paces_by_yields_then_naps_and_never_passes_its_deadline() {
        let pace = Pace::new(3, Duration::from_millis(5));
        assert!(pace.yields_at(2) && !pace.yields_at(3));
        let mut wait = Wait::with_timeout(Duration::from_millis(40), pace);
        let t0 = Instant::now();
        let mut pauses = 0;
        while wait.pause() {
            pauses += 1;
        }
        let took = t0.elapsed();
        assert_eq!(wait.rounds(), pauses);
        assert!(wait.expired());
        // Three yields, then naps of 5 ms (the last one cut at the
        // deadline): at most 8 or 9 naps in 40 ms (fewer when a loaded
        // machine oversleeps a nap; never more, never none).
        assert!((3 + 1..=3 + 9).contains(&pauses), "{pauses} pauses");
        assert!(took >= Duration::from_millis(40), "{took:?}");
        // The last nap is cut at the deadline: what is left is scheduling
        // delay (generous bound: this runs beside other tests on 2 cores).
        assert!(took < Duration::from_millis(40 + 500), "{took:?}");
        // Past the deadline, a pause returns at once.
        assert!(!wait.pause());
        assert_eq!(wait.rounds(), pauses);
    }

    #[test]
    fn renew_moves_the_deadline() {
        let mut wait = Wait::with_timeout(Duration::ZERO, Pace::naps(Duration::from_millis(1)));
        assert!(!wait.pause());
        wait.renew(Instant::now() + Duration::from_millis(50));
        assert!(wait.pause());
        assert_eq!(wait.rounds(), 1);
    }

    #[test]
    fn poll_until_is_bounded_and_stops_early() {
        let pace = Pace::new(2, Duration::from_millis(1));
        let mut calls = 0;
        assert!(poll_until(
            Instant::now() + Duration::from_secs(10),
            pace,
            || {
                calls += 1;
                calls == 4
            }
        ));
        assert_eq!(calls, 4);
        let t0 = Instant::now();
        assert!(!poll_until(
            Instant::now() + Duration::from_millis(20),
            pace,
            || false
        ));
        assert!(t0.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn doubling_doubles_up_to_max_and_resets() {
        let mut d = Doubling::new(Duration::from_micros(100), Duration::from_micros(350));
        let got: Vec<_> = (0..5).map(|_| d.step().as_micros()).collect();
        assert_eq!(got, [100, 200, 350, 350, 350]);
        d.reset();
        assert_eq!(d.step(), Duration::from_micros(100));
        // A min above max is capped.
        let mut d = Doubling::new(Duration::from_millis(5), Duration::from_millis(1));
        assert_eq!(d.current(), Duration::from_millis(1));
        assert_eq!(d.step(), Duration::from_millis(1));
    }
}
