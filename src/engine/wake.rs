//! A sleep/wake point for one background thread that the hot path can poke
//! for the price of one atomic load when nobody sleeps.

use std::sync::atomic::{fence, AtomicU8, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// The thread is running.
const AWAKE: u8 = 0;
/// The thread sleeps for a short backoff while work is outstanding.
const BACKOFF: u8 = 1;
/// The thread has nothing to do and sleeps until woken (or a long timeout).
const PARKED: u8 = 2;

/// What a sleeping thread is waiting for, as seen by the waker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SleepKind {
    /// Short sleep while work is outstanding; wake only when urgent.
    Backoff,
    /// Nothing outstanding; wake on any new work.
    Parked,
}

/// Sleep/wake point. The sleeper announces its state before it re-checks
/// for work and sleeps on a condvar; a producer that finds a sleeper takes
/// the mutex before notifying, so a wake-up is never lost (the sleeper holds
/// the mutex from before it announces until it waits).
#[derive(Debug, Default)]
pub struct Wake {
    state: AtomicU8,
    pending: Mutex<bool>,
    cv: Condvar,
}

impl Wake {
    /// A wake point with nobody asleep.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sleeps up to `timeout` unless `has_work()` (checked after announcing
    /// the sleep) says there is something to do, or until [`Wake::notify`].
    pub fn sleep(&self, kind: SleepKind, timeout: Duration, has_work: impl Fn() -> bool) {
        let mut pending = match self.pending.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        self.state.store(
            match kind {
                SleepKind::Backoff => BACKOFF,
                SleepKind::Parked => PARKED,
            },
            Ordering::SeqCst,
        );
        fence(Ordering::SeqCst);
        if !*pending && !has_work() {
            pending = match self.cv.wait_timeout_while(pending, timeout, |p| !*p) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        *pending = false;
        self.state.store(AWAKE, Ordering::SeqCst);
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

    /// Wakes the thread if it sleeps (or is about to).
    pub fn notify(&self) {
        let mut pending = match self.pending.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        *pending = true;
        self.cv.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn parked_sleeper_is_woken_promptly() {
        let wake = Arc::new(Wake::new());
        let work = Arc::new(AtomicBool::new(false));
        let (w2, k2) = (wake.clone(), work.clone());
        let t = std::thread::spawn(move || {
            let t0 = Instant::now();
            while !k2.load(Ordering::SeqCst) {
                w2.sleep(SleepKind::Parked, Duration::from_secs(10), || {
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
        let wake = Wake::new();
        let t0 = Instant::now();
        wake.sleep(SleepKind::Backoff, Duration::from_secs(10), || true);
        assert!(t0.elapsed() < Duration::from_secs(5));
        assert!(!wake.is_sleeping());
    }

    #[test]
    fn many_handoffs_never_lose_a_wakeup() {
        let wake = Arc::new(Wake::new());
        let counter = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let seen = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (w2, c2, s2) = (wake.clone(), counter.clone(), seen.clone());
        let consumer = std::thread::spawn(move || {
            while s2.load(Ordering::SeqCst) < 2000 {
                let c = c2.load(Ordering::SeqCst);
                if c > s2.load(Ordering::SeqCst) {
                    s2.store(c, Ordering::SeqCst);
                    continue;
                }
                let s = s2.load(Ordering::SeqCst);
                w2.sleep(SleepKind::Parked, Duration::from_secs(30), || {
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
}
