//! Loom model checks of the pool's races: release vs. parked acquire, share drops on two
//! threads, concurrent growth. Run by `scripts/pool-loom.sh` (`RUSTFLAGS="--cfg loom"`), which
//! builds the crate's `primitive` module on loom's atomics, locks and condition variables.
#![cfg(loom)]

mod common;

use common::FakeProvider;
use loom::thread;
use rprof_pool::{PoolConfig, SignalPool};

/// A pool that lives for the rest of the model run, so handles and shares can move to spawned
/// (`'static`) loom threads.
fn leaked_pool(capacity: u32, batch: u32) -> &'static SignalPool<FakeProvider> {
    let pool = SignalPool::new(
        FakeProvider::new(capacity),
        PoolConfig {
            capacity,
            batch,
            initial_value: 1,
        },
    )
    .unwrap();
    Box::leak(Box::new(pool))
}

/// A release on one thread must wake an acquirer parked (or about to park) on another: loom
/// reports a deadlock if the wake-up can be lost.
#[test]
fn release_wakes_parked_acquirer() {
    loom::model(|| {
        let pool = leaked_pool(1, 1);
        let held = pool.acquire().unwrap();
        let raw = held.raw();
        let waiter = thread::spawn(move || {
            let h = pool.acquire().unwrap();
            pool.provider().begin_use(h.raw());
            pool.provider().end_use(h.raw());
            h.raw()
        });
        pool.provider().begin_use(raw);
        pool.provider().end_use(raw);
        drop(held);
        assert_eq!(waiter.join().unwrap(), raw);
        assert_eq!(pool.provider().creates(), 1);
        assert_eq!(pool.provider().resets(), 2);
        assert_eq!(pool.stats().in_use, 0);
    });
}

/// Two threads cycling through one signal never hold it at the same time, and neither hangs.
#[test]
fn two_acquirers_one_signal_never_double_use() {
    loom::model(|| {
        let pool = leaked_pool(1, 1);
        let worker = thread::spawn(move || {
            let h = pool.acquire().unwrap();
            pool.provider().begin_use(h.raw());
            pool.provider().end_use(h.raw());
        });
        let h = pool.acquire().unwrap();
        pool.provider().begin_use(h.raw());
        pool.provider().end_use(h.raw());
        drop(h);
        worker.join().unwrap();
        assert_eq!(pool.provider().creates(), 1);
        assert_eq!(pool.provider().resets(), 2);
    });
}

/// The handle and a share dropped on different threads: exactly one reset, after both, and the
/// signal is back on the free list.
#[test]
fn share_and_handle_dropped_concurrently() {
    loom::model(|| {
        let pool = leaked_pool(1, 1);
        let handle = pool.acquire().unwrap();
        let raw = handle.raw();
        let share = handle.share();
        let reader = thread::spawn(move || {
            assert_eq!(share.raw(), raw);
            drop(share);
        });
        drop(handle);
        reader.join().unwrap();
        assert_eq!(pool.provider().resets(), 1);
        assert_eq!(pool.stats().in_use, 0);
        let again = pool.try_acquire().unwrap().expect("signal returned");
        assert_eq!(again.raw(), raw);
    });
}

/// A share dropped on another thread while a third party waits for the signal.
#[test]
fn share_drop_wakes_waiter() {
    loom::model(|| {
        let pool = leaked_pool(1, 1);
        let handle = pool.acquire().unwrap();
        let share = handle.share();
        drop(handle);
        let waiter = thread::spawn(move || pool.acquire().unwrap().raw());
        drop(share);
        let raw = waiter.join().unwrap();
        assert_eq!(raw.0, 1);
        assert_eq!(pool.provider().resets(), 2);
    });
}

/// Two threads growing the pool at once, each keeping its signal: distinct signals, each
/// created exactly once, and a third acquire finds the pool at capacity.
#[test]
fn concurrent_growth_creates_each_signal_once() {
    loom::model(|| {
        let pool = leaked_pool(2, 1);
        let other = thread::spawn(move || pool.try_acquire().unwrap().expect("room for two"));
        let mine = pool.try_acquire().unwrap().expect("room for two");
        let theirs = other.join().unwrap();
        assert_ne!(mine.raw(), theirs.raw());
        assert_eq!(pool.provider().creates(), 2);
        assert_eq!(pool.stats().created, 2);
        assert!(pool.try_acquire().unwrap().is_none());
    });
}

/// Growth, back-pressure and release interleaved: one thread takes a signal and gives it back
/// while the other needs both signals at once, so it may have to grow, wait, or reuse.
#[test]
fn growth_wait_and_release_interleaved() {
    loom::model(|| {
        let pool = leaked_pool(2, 1);
        let quick = thread::spawn(move || {
            let h = pool.acquire().unwrap();
            pool.provider().begin_use(h.raw());
            pool.provider().end_use(h.raw());
        });
        let first = pool.acquire().unwrap();
        let second = pool.acquire().unwrap();
        assert_ne!(first.raw(), second.raw());
        drop(first);
        drop(second);
        quick.join().unwrap();
        let stats = pool.stats();
        assert_eq!(stats.in_use, 0);
        assert_eq!(stats.resets, 3);
        assert_eq!(pool.provider().resets(), 3);
        assert!(stats.created >= 1 && stats.created <= 2);
        assert_eq!(u64::from(stats.created), pool.provider().creates());
    });
}
