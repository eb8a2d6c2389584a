//! Synchronisation primitives, switched between `std` and `loom`.
//!
//! Every atomic, lock and condition variable of the crate comes from here, so that
//! `RUSTFLAGS="--cfg loom"` builds (see `scripts/pool-loom.sh`) run the very same pool
//! and free-list code under loom's model checker.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};

/// Locks `mutex`, ignoring poisoning: the data behind our locks stays consistent even if a
/// provider callback panicked while it was held (every update is a single assignment).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Waits on `condvar`, ignoring poisoning (see [`lock`]).
pub(crate) fn wait<'a, T>(condvar: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    condvar
        .wait(guard)
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether the acquire path may busy-wait before parking. Under loom a spin loop that never
/// yields to the model would explode the state space, so loom builds park at once.
pub(crate) const SPIN_BEFORE_PARKING: bool = cfg!(not(loom));

/// Hint inside a short spin-wait: yields to the model under loom (so the other thread can
/// make progress), a CPU spin hint otherwise.
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}
