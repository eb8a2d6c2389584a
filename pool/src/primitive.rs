//! Synchronisation primitives, switched between `std` and `loom`.
//!
//! Every atomic and lock of the crate comes from here, so that
//! `RUSTFLAGS="--cfg loom"` builds (see `scripts/pool-loom.sh`) run the very same pool
//! and free-list code under loom's model checker.

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
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

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
