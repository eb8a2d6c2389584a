//! Synchronisation primitives, switched between `std` and `loom`.
//!
//! Every atomic and lock of the crate comes from here, so that
//! `RUSTFLAGS="--cfg loom"` builds (see `scripts/pool-loom.sh`) run the very same pool
//! and free-list code under loom's model checker.
//!
//! `--cfg rprof_tsan` (scripts/pool-sanitizers.sh on the stable toolchain, whose std is not instrumented) wraps
//! std's `Mutex` so ThreadSanitizer can see it: its futex lock lives in uninstrumented std, so TSan would take
//! every access it guards for a race. The wrapper adds one instrumented release/acquire pair per critical section.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(all(not(loom), not(rprof_tsan)))]
pub(crate) use std::sync::{Mutex, MutexGuard};

#[cfg(all(not(loom), rprof_tsan))]
pub(crate) use tsan_visible::{Mutex, MutexGuard};

/// std's `Mutex` plus an atomic counter that each critical section acquires on entry and releases on exit: a
/// happens-before edge ThreadSanitizer sees between consecutive holders (the lock's own is invisible to it when
/// std is not instrumented). Correct on its own terms too: the next holder's acquire load reads the previous
/// holder's release increment (or a later one of the same release sequence).
#[cfg(all(not(loom), rprof_tsan))]
mod tsan_visible {
    use std::ops::{Deref, DerefMut};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{LockResult, PoisonError};

    /// A `std::sync::Mutex` whose hand-overs TSan sees.
    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T> {
        inner: std::sync::Mutex<T>,
        seq: AtomicU64,
    }

    /// Guard of [`Mutex`]: releases the counter, then the lock.
    pub(crate) struct MutexGuard<'a, T> {
        guard: std::sync::MutexGuard<'a, T>,
        seq: &'a AtomicU64,
    }

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex {
                inner: std::sync::Mutex::new(value),
                seq: AtomicU64::new(0),
            }
        }

        pub(crate) fn lock(&self) -> LockResult<MutexGuard<'_, T>> {
            let wrap = |guard| {
                self.seq.load(Ordering::Acquire);
                MutexGuard {
                    guard,
                    seq: &self.seq,
                }
            };
            match self.inner.lock() {
                Ok(g) => Ok(wrap(g)),
                Err(p) => Err(PoisonError::new(wrap(p.into_inner()))),
            }
        }
    }

    impl<T> Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            &self.guard
        }
    }

    impl<T> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            &mut self.guard
        }
    }

    impl<T> Drop for MutexGuard<'_, T> {
        fn drop(&mut self) {
            // Runs before the field `guard` unlocks.
            self.seq.fetch_add(1, Ordering::Release);
        }
    }
}

/// Locks `mutex`, ignoring poisoning: the data behind our locks stays consistent even if a
/// provider callback panicked while it was held (every update is a single assignment).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Hint inside a short spin-wait: yields to the model under loom (so the other thread can
/// make progress), a CPU spin hint otherwise.
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}
