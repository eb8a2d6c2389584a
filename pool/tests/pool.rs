//! Pool behaviour with the counting fake provider.
#![cfg(not(loom))]

mod common;

use std::cell::UnsafeCell;
use std::sync::atomic::Ordering;
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use common::{FakeProvider, OUT_OF_RESOURCES};
use rprof_pool::{PoolConfig, PoolError, ProviderError, SignalPool, SignalProvider};

fn pool(capacity: u32, batch: u32) -> SignalPool<FakeProvider> {
    SignalPool::new(
        FakeProvider::new(capacity),
        PoolConfig {
            capacity,
            batch,
            initial_value: 1,
        },
    )
    .unwrap()
}

/// A free signal (the test knows there is one).
fn take(pool: &SignalPool<FakeProvider>) -> rprof_pool::SignalHandle<'_, FakeProvider> {
    pool.try_acquire().unwrap().expect("a free signal")
}

/// A signal, retrying (yielding) while every one is in use, as the engine's interceptor does.
fn take_retrying(pool: &SignalPool<FakeProvider>) -> rprof_pool::SignalHandle<'_, FakeProvider> {
    loop {
        if let Some(h) = pool.try_acquire().unwrap() {
            return h;
        }
        thread::yield_now();
    }
}

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn handles_are_send_and_sync() {
    assert_send_sync::<rprof_pool::SignalHandle<'static, FakeProvider>>();
    assert_send_sync::<SignalPool<FakeProvider>>();
}

#[test]
fn rejects_bad_config() {
    let bad = |capacity, batch| {
        SignalPool::new(
            FakeProvider::new(1),
            PoolConfig {
                capacity,
                batch,
                initial_value: 1,
            },
        )
        .unwrap_err()
    };
    assert!(matches!(bad(0, 1), PoolError::InvalidConfig(_)));
    assert!(matches!(bad(4, 0), PoolError::InvalidConfig(_)));
    assert!(matches!(bad(4, 5), PoolError::InvalidConfig(_)));
    assert!(matches!(bad((1 << 20) + 1, 1), PoolError::InvalidConfig(_)));
}

#[test]
fn the_high_water_keeps_a_peak_after_its_signals_come_back() {
    let pool = pool(16, 16);
    let first: Vec<_> = (0..7).map(|_| take(&pool)).collect();
    drop(first);
    let again: Vec<_> = (0..2).map(|_| take(&pool)).collect();
    let stats = pool.stats();
    assert_eq!(stats.in_use, 2);
    assert_eq!(
        stats.high_water, 7,
        "the peak of seven, gone before the stats were read"
    );
    drop(again);
    assert_eq!(pool.stats().high_water, 7);
}

#[test]
fn creates_lazily_in_batches() {
    let pool = pool(10, 4);
    assert_eq!(pool.provider().creates(), 0);
    let mut held = Vec::new();
    let expected_creates = [4, 4, 4, 4, 8, 8, 8, 8, 10, 10];
    for expected in expected_creates {
        held.push(take(&pool));
        assert_eq!(pool.provider().creates(), expected);
    }
    let stats = pool.stats();
    assert_eq!(stats.created, 10);
    assert_eq!(stats.in_use, 10);
    assert_eq!(stats.high_water, 10);
    assert_eq!(stats.resets, 0);
    // Ten distinct signals, each created with the initial value.
    let mut raws: Vec<u64> = held.iter().map(|h| h.raw().0).collect();
    raws.sort_unstable();
    assert_eq!(raws, (1..=10).collect::<Vec<_>>());
    for h in &held {
        assert_eq!(pool.provider().value(h.raw()), 1);
    }
}

#[test]
fn capacity_is_a_hard_bound() {
    let pool = pool(8, 8);
    let held: Vec<_> = (0..8)
        .map(|_| pool.try_acquire().unwrap().unwrap())
        .collect();
    assert!(pool.try_acquire().unwrap().is_none());
    assert!(pool.try_acquire().unwrap().is_none());
    let stats = pool.stats();
    assert_eq!(stats.created, 8);
    assert_eq!(stats.acquire_waits, 2);
    assert_eq!(pool.provider().creates(), 8);
    drop(held);
    assert_eq!(pool.stats().in_use, 0);
    assert_eq!(pool.provider().resets(), 8);
    assert!(pool.try_acquire().unwrap().is_some());
    assert_eq!(pool.provider().creates(), 8);
}

#[test]
fn no_creation_after_warm_up_over_a_million_cycles() {
    let pool = pool(256, 64);
    {
        // Warm up: one batch.
        let h = take(&pool);
        pool.provider().begin_use(h.raw());
        pool.provider().end_use(h.raw());
    }
    assert_eq!(pool.provider().creates(), 64);
    for _ in 0..1_000_000 {
        let h = take(&pool);
        let raw = h.raw();
        pool.provider().begin_use(raw);
        pool.provider().end_use(raw);
        drop(h);
    }
    assert_eq!(pool.provider().creates(), 64);
    assert_eq!(pool.provider().resets(), 1_000_001);
    let stats = pool.stats();
    assert_eq!(stats.created, 64);
    assert_eq!(stats.resets, 1_000_001);
    assert_eq!(stats.in_use, 0);
    assert_eq!(stats.high_water, 1);
    assert_eq!(stats.acquire_waits, 0);
}

#[test]
fn release_resets_to_initial_value() {
    let pool = pool(1, 1);
    let h = take(&pool);
    let raw = h.raw();
    pool.provider().begin_use(raw);
    pool.provider().end_use(raw); // GPU decremented it to 0
    assert_eq!(pool.provider().value(raw), 0);
    drop(h);
    assert_eq!(pool.provider().value(raw), 1);
    assert_eq!(pool.provider().resets(), 1);
    // Same single signal comes back.
    assert_eq!(take(&pool).raw(), raw);
}

#[test]
fn many_retrying_acquirers_all_get_the_signal() {
    let pool = pool(1, 1);
    let held = take(&pool);
    thread::scope(|s| {
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    for _ in 0..100 {
                        let h = take_retrying(&pool);
                        pool.provider().begin_use(h.raw());
                        pool.provider().end_use(h.raw());
                    }
                })
            })
            .collect();
        thread::sleep(Duration::from_millis(100));
        drop(held);
        for w in waiters {
            w.join().unwrap();
        }
    });
    assert_eq!(pool.provider().creates(), 1);
    assert_eq!(pool.provider().resets(), 301);
}

#[test]
fn stress_four_threads_never_double_use() {
    const THREADS: usize = 4;
    const CYCLES: usize = 100_000;
    // Small capacity so threads contend and back-pressure kicks in.
    let pool = pool(3, 2);
    let barrier = Barrier::new(THREADS);
    // Every scoped thread is joined explicitly: ThreadSanitizer sees
    // pthread_join, not the end-of-scope wait of an uninstrumented std
    // (scripts/pool-sanitizers.sh).
    thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let pool = &pool;
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    for i in 0..CYCLES {
                        let h = take_retrying(pool);
                        let raw = h.raw();
                        pool.provider().begin_use(raw);
                        if (i + t) % 3 == 0 {
                            // Released on another thread than the one that acquired it.
                            thread::scope(|s| {
                                s.spawn(move || {
                                    assert_eq!(h.raw(), raw);
                                    pool.provider().end_use(raw);
                                    drop(h);
                                })
                                .join()
                                .unwrap();
                            });
                        } else {
                            pool.provider().end_use(raw);
                            drop(h);
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
    });
    let stats = pool.stats();
    assert_eq!(pool.provider().creates(), 3);
    assert_eq!(stats.created, 3);
    assert_eq!(stats.in_use, 0);
    assert_eq!(stats.resets, (THREADS * CYCLES) as u64);
    assert_eq!(pool.provider().resets(), (THREADS * CYCLES) as u64);
    assert!(stats.high_water <= 3 && stats.high_water >= 1);
}

/// Plain (non-atomic) state per signal, touched only by the thread holding
/// that signal's handle, as the engine touches a dispatch's signal.
struct PerSignal(Vec<UnsafeCell<u64>>);

// SAFETY: cell `i` is only accessed by the one thread holding signal `i`
// (the pool hands each signal to one holder at a time), or by the test
// thread after every worker was joined.
unsafe impl Sync for PerSignal {}

#[test]
fn a_release_publishes_the_holders_writes_to_the_next_holder() {
    // The free list's release/acquire hand-over is all that orders one
    // holder's plain writes before the next holder's: a weakened ordering
    // there is a data race ThreadSanitizer reports
    // (scripts/pool-sanitizers.sh), and may lose counts here.
    const THREADS: usize = 4;
    const CYCLES: u64 = 50_000;
    let pool = pool(3, 3);
    let cells = PerSignal((0..=3).map(|_| UnsafeCell::new(0)).collect());
    thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let (pool, cells) = (&pool, &cells);
                s.spawn(move || {
                    for _ in 0..CYCLES {
                        let h = take_retrying(pool);
                        // SAFETY: this thread holds the signal's handle
                        // until the drop below; nobody else touches its cell.
                        unsafe { *cells.0[h.raw().0 as usize].get() += 1 };
                        drop(h);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
    });
    // SAFETY: every worker was joined; this thread is the only one left.
    let counted: u64 = cells.0.iter().map(|c| unsafe { *c.get() }).sum();
    assert_eq!(counted, THREADS as u64 * CYCLES);
}

#[test]
fn stress_with_growth_under_contention() {
    const THREADS: usize = 4;
    let pool = pool(256, 64);
    let barrier = Barrier::new(THREADS);
    thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let pool = &pool;
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    for _ in 0..20_000 {
                        // Hold several at once to force growth while others acquire.
                        let hs: Vec<_> = (0..40).map(|_| take_retrying(pool)).collect();
                        for h in &hs {
                            pool.provider().begin_use(h.raw());
                        }
                        for h in &hs {
                            pool.provider().end_use(h.raw());
                        }
                        drop(hs);
                        if pool.stats().created == 256 {
                            break;
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
    });
    let stats = pool.stats();
    assert_eq!(stats.created as u64, pool.provider().creates());
    assert_eq!(stats.created % 64, 0);
    assert!(stats.created >= 64 && stats.created <= 256);
    assert_eq!(stats.in_use, 0);
}

#[test]
fn creation_failure_keeps_existing_signals() {
    // Events run out after 5 signals: the second batch of 4 creates only one.
    let pool = SignalPool::new(
        FakeProvider::failing_at(16, 5),
        PoolConfig {
            capacity: 16,
            batch: 4,
            initial_value: 1,
        },
    )
    .unwrap();
    let held: Vec<_> = (0..5).map(|_| take(&pool)).collect();
    let stats = pool.stats();
    assert_eq!(stats.created, 5);
    assert_eq!(stats.create_failures, 1);
    assert_eq!(
        stats.last_create_error,
        Some(ProviderError {
            status: OUT_OF_RESOURCES
        })
    );
    assert_eq!(pool.provider().failed_creates.load(Ordering::SeqCst), 1);
    // No more growth attempts: the pool is now bounded at 5 and applies back-pressure.
    assert!(pool.try_acquire().unwrap().is_none());
    assert_eq!(pool.provider().failed_creates.load(Ordering::SeqCst), 1);
    drop(held);
    let again: Vec<_> = (0..5).map(|_| take(&pool)).collect();
    assert_eq!(pool.provider().creates(), 5);
    drop(again);
}

#[test]
fn creation_failure_with_nothing_created_is_an_error() {
    let pool = SignalPool::new(
        FakeProvider::failing_at(8, 0),
        PoolConfig {
            capacity: 8,
            batch: 4,
            initial_value: 1,
        },
    )
    .unwrap();
    let error = ProviderError {
        status: OUT_OF_RESOURCES,
    };
    assert_eq!(
        pool.try_acquire().unwrap_err(),
        PoolError::Create {
            error,
            pool_size: 0
        }
    );
    // Later calls fail at once instead of waiting forever or retrying the provider.
    for _ in 0..2 {
        assert_eq!(pool.try_acquire().unwrap_err(), PoolError::NoSignals(error));
    }
    assert_eq!(pool.provider().failed_creates.load(Ordering::SeqCst), 1);
    assert_eq!(pool.stats().create_failures, 1);
}

#[test]
fn batch_failing_after_earlier_batches_errors_only_if_empty() {
    // Exactly one full batch, then failure: the next growth creates nothing.
    let pool = SignalPool::new(
        FakeProvider::failing_at(8, 4),
        PoolConfig {
            capacity: 8,
            batch: 4,
            initial_value: 1,
        },
    )
    .unwrap();
    let held: Vec<_> = (0..4).map(|_| take(&pool)).collect();
    let error = ProviderError {
        status: OUT_OF_RESOURCES,
    };
    assert_eq!(
        pool.try_acquire().unwrap_err(),
        PoolError::Create {
            error,
            pool_size: 4
        }
    );
    // From then on it is a pool of 4 with back-pressure.
    assert!(pool.try_acquire().unwrap().is_none());
    drop(held);
    assert!(pool.try_acquire().unwrap().is_some());
    assert_eq!(pool.provider().creates(), 4);
}

#[test]
fn shutdown_refuses_while_in_use_then_destroys_everything() {
    let pool = pool(8, 4);
    let h = take(&pool);
    let h2 = take(&pool);
    let other = take(&pool);
    drop(other);
    assert_eq!(pool.shutdown(), Err(PoolError::InUse { outstanding: 2 }));
    assert_eq!(pool.provider().destroys(), 0);
    // The pool still works after a refused shutdown.
    let again = take(&pool);
    drop(again);
    drop(h);
    assert_eq!(pool.shutdown(), Err(PoolError::InUse { outstanding: 1 }));
    drop(h2);
    assert_eq!(pool.shutdown(), Ok(4));
    assert_eq!(pool.provider().destroys(), 4);
    assert_eq!(pool.try_acquire().unwrap_err(), PoolError::Closed);
    assert_eq!(pool.shutdown(), Err(PoolError::Closed));
    drop(pool); // no second destroy (the fake panics on one)
}

#[test]
fn shutdown_with_a_handle_out_then_after_release() {
    let pool = pool(1, 1);
    let held = take(&pool);
    thread::scope(|s| {
        let acquirer = s.spawn(|| take_retrying(&pool).raw());
        thread::sleep(Duration::from_millis(100));
        assert_eq!(pool.shutdown(), Err(PoolError::InUse { outstanding: 1 }));
        drop(held);
        // The retrying acquirer gets the released signal, not Closed.
        assert_eq!(acquirer.join().unwrap().0, 1);
    });
    assert_eq!(pool.shutdown(), Ok(1));
    thread::scope(|s| {
        let acquirer = s.spawn(|| pool.try_acquire().map(|h| h.is_some()));
        assert_eq!(acquirer.join().unwrap(), Err(PoolError::Closed));
    });
}

#[test]
fn drop_destroys_each_created_signal_once() {
    let pool = pool(100, 30);
    let held: Vec<_> = (0..31).map(|_| take(&pool)).collect();
    drop(held);
    let provider_destroys = {
        let p = &pool;
        p.provider().destroys()
    };
    assert_eq!(provider_destroys, 0);
    // FakeProvider's own Drop asserts destroys == creates (60).
    drop(pool);
}

#[test]
fn error_messages_say_what_happened() {
    let e = PoolError::Create {
        error: ProviderError { status: 0x1008 },
        pool_size: 5,
    };
    assert_eq!(
        e.to_string(),
        "signal creation failed with status 0x1008; the signal pool keeps its 5 signals and stops growing"
    );
    assert_eq!(
        PoolError::InUse { outstanding: 2 }.to_string(),
        "2 pool signals are still in use"
    );
}

/// A provider whose every call is a no-op, to check the trait is object-friendly enough for
/// the tool to wrap ROCr.
struct Noop;
impl SignalProvider for Noop {
    fn create(&self, _: i64) -> Result<rprof_pool::RawSignal, ProviderError> {
        Ok(rprof_pool::RawSignal(7))
    }
    fn reset(&self, _: rprof_pool::RawSignal, _: i64) {}
    fn destroy(&self, _: rprof_pool::RawSignal) {}
}

#[test]
fn debug_output_names_slot_and_signal() {
    let pool = SignalPool::new(Noop, PoolConfig::default()).unwrap();
    let h = pool.try_acquire().unwrap().expect("a free signal");
    assert_eq!(
        format!("{h:?}"),
        "SignalHandle { slot: 0, raw: RawSignal(7) }"
    );

    assert_eq!(pool.stats().created, 64);
}

#[test]
fn trim_destroys_the_idle_signals_beyond_keep_and_shutdown_the_rest() {
    let pool = pool(64, 16);
    let mut held: Vec<_> = (0..40).map(|_| take(&pool)).collect();
    assert_eq!(pool.provider().creates(), 48);
    held.truncate(10);
    // 8 never handed out + 30 given back are free; 10 are out.
    assert_eq!(pool.trim(4), 34);
    assert_eq!(pool.provider().destroys(), 34);
    let stats = pool.stats();
    assert_eq!((stats.created, stats.in_use), (48, 10));
    // The 4 kept are handed out; then the pool does not grow again.
    held.extend((0..4).map(|_| take(&pool)));
    assert!(pool.try_acquire().unwrap().is_none());
    assert_eq!(pool.provider().creates(), 48);
    // A signal given back is handed out again.
    held.pop();
    held.push(take(&pool));
    for h in &held {
        pool.provider().begin_use(h.raw());
        pool.provider().end_use(h.raw());
    }
    assert_eq!(pool.shutdown(), Err(PoolError::InUse { outstanding: 14 }));
    drop(held);
    assert_eq!(pool.stats().in_use, 0);
    assert_eq!(pool.shutdown(), Ok(14));
    assert_eq!(pool.provider().destroys(), 48);
}

#[test]
fn trim_while_other_threads_cycle_signals_destroys_only_idle_ones() {
    let pool = pool(256, 32);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let barrier = Barrier::new(4);
    thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                barrier.wait();
                // One signal at a time (holding several while retrying could deadlock once
                // the trimmed pool no longer grows), many in flight across the threads.
                while !stop.load(Ordering::Relaxed) {
                    let h = take_retrying(&pool);
                    pool.provider().begin_use(h.raw());
                    thread::yield_now();
                    pool.provider().end_use(h.raw());
                }
            });
        }
        barrier.wait();
        // Idle signals for trim to find.
        let burst: Vec<_> = (0..100).map(|_| take_retrying(&pool)).collect();
        drop(burst);
        thread::sleep(Duration::from_millis(20));
        assert!(pool.trim(8) > 0);
        thread::sleep(Duration::from_millis(20));
        stop.store(true, Ordering::Relaxed);
    });
    let created = pool.stats().created;
    let trimmed = pool.provider().destroys();
    assert_eq!(pool.stats().in_use, 0);
    assert_eq!(pool.shutdown(), Ok(created - trimmed as u32));
    assert_eq!(pool.provider().destroys(), u64::from(created));
}
