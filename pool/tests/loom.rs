//! Loom model checks of the pool's races: release vs. a retrying acquire, two threads cycling
//! through one signal, concurrent growth. Run by `scripts/pool-loom.sh` (`RUSTFLAGS="--cfg loom"`), which
//! builds the crate's `primitive` module on loom's atomics, locks and condition variables.
#![cfg(loom)]

mod common;

use common::FakeProvider;
use loom::thread;
use rprof_pool::{PoolConfig, SignalHandle, SignalPool};

/// A signal, retrying (yielding to the model) while every one is in use, as the engine's
/// interceptor does.
fn take_retrying(pool: &'static SignalPool<FakeProvider>) -> SignalHandle<'static, FakeProvider> {
    loop {
        if let Some(h) = pool.try_acquire().unwrap() {
            return h;
        }
        thread::yield_now();
    }
}

/// A pool that lives for the rest of the model run, so handles can move to spawned
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

/// A release on one thread reaches an acquirer retrying on another: it gets the released
/// signal, reset once per use.
#[test]
fn release_reaches_a_retrying_acquirer() {
    loom::model(|| {
        let pool = leaked_pool(1, 1);
        let held = take_retrying(pool);
        let raw = held.raw();
        let waiter = thread::spawn(move || {
            let h = take_retrying(pool);
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
            let h = take_retrying(pool);
            pool.provider().begin_use(h.raw());
            pool.provider().end_use(h.raw());
        });
        let h = take_retrying(pool);
        pool.provider().begin_use(h.raw());
        pool.provider().end_use(h.raw());
        drop(h);
        worker.join().unwrap();
        assert_eq!(pool.provider().creates(), 1);
        assert_eq!(pool.provider().resets(), 2);
    });
}

/// A handle dropped on another thread than the one that acquired it: exactly one reset, and
/// the signal is back on the free list.
#[test]
fn handle_released_on_another_thread() {
    loom::model(|| {
        let pool = leaked_pool(1, 1);
        let handle = take_retrying(pool);
        let raw = handle.raw();
        let releaser = thread::spawn(move || {
            assert_eq!(handle.raw(), raw);
            drop(handle);
        });
        releaser.join().unwrap();
        assert_eq!(pool.provider().resets(), 1);
        assert_eq!(pool.stats().in_use, 0);
        let again = pool.try_acquire().unwrap().expect("signal returned");
        assert_eq!(again.raw(), raw);
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
            let h = take_retrying(pool);
            pool.provider().begin_use(h.raw());
            pool.provider().end_use(h.raw());
        });
        let first = take_retrying(pool);
        let second = take_retrying(pool);
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

/// `trim` racing a release and an acquire: it destroys only signals on the free list (never one
/// held, never one handed out afterwards), keeps one for the acquirer, and shutdown destroys
/// exactly the rest.
#[test]
fn trim_races_a_release_and_an_acquire() {
    loom::model(|| {
        let pool = leaked_pool(2, 2);
        let first = take_retrying(pool);
        let releaser = thread::spawn(move || drop(first));
        let acquirer = thread::spawn(move || {
            let h = take_retrying(pool);
            pool.provider().begin_use(h.raw());
            pool.provider().end_use(h.raw());
        });
        let trimmed = pool.trim(1);
        releaser.join().unwrap();
        acquirer.join().unwrap();
        assert!(trimmed <= 1);
        assert_eq!(u64::from(trimmed), pool.provider().destroys());
        assert_eq!(pool.stats().in_use, 0);
        assert_eq!(pool.shutdown(), Ok(2 - trimmed));
        assert_eq!(pool.provider().destroys(), 2);
    });
}
