//! Micro-benchmark: nanoseconds per acquire + release of a pool signal.
//!
//! `cargo run --release -p rprof-pool --example pool_bench [iterations]`
//!
//! The provider's `reset` is one release store (what `hsa_signal_store_screlease` costs on a
//! real signal, minus the call). Figures: single-threaded; two threads on a roomy pool (free
//! list contention only); two threads on a one-signal pool (back-pressure on every cycle); and,
//! as a baseline, a pop + push on crossbeam's `ArrayQueue<u32>`.

use std::hint::black_box;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Instant;

use crossbeam_queue::ArrayQueue;
use rprof_pool::{PoolConfig, ProviderError, RawSignal, SignalPool, SignalProvider};

/// Signals are indices into an array of values.
struct MemoryProvider {
    values: Vec<AtomicI64>,
}

impl SignalProvider for MemoryProvider {
    fn create(&self, initial: i64) -> Result<RawSignal, ProviderError> {
        // Creation is outside the timed loops; a linear search is fine.
        let index = self
            .values
            .iter()
            .position(|v| v.load(Ordering::Relaxed) == i64::MIN)
            .ok_or(ProviderError { status: 0x1008 })?;
        self.values[index].store(initial, Ordering::Relaxed);
        Ok(RawSignal(index as u64))
    }
    fn reset(&self, signal: RawSignal, value: i64) {
        self.values[signal.0 as usize].store(value, Ordering::Release);
    }
    fn destroy(&self, signal: RawSignal) {
        self.values[signal.0 as usize].store(i64::MIN, Ordering::Relaxed);
    }
}

fn pool(capacity: u32) -> SignalPool<MemoryProvider> {
    let provider = MemoryProvider {
        values: (0..capacity).map(|_| AtomicI64::new(i64::MIN)).collect(),
    };
    let config = PoolConfig {
        capacity,
        batch: capacity.min(64),
        initial_value: 1,
    };
    SignalPool::new(provider, config).expect("valid config")
}

/// A signal, retrying (yielding) while every one is in use, as the engine's interceptor does.
fn take(pool: &SignalPool<MemoryProvider>) -> rprof_pool::SignalHandle<'_, MemoryProvider> {
    loop {
        if let Some(handle) = pool.try_acquire().unwrap() {
            return handle;
        }
        thread::yield_now();
    }
}

fn per_op(start: Instant, ops: u64) -> f64 {
    start.elapsed().as_nanos() as f64 / ops as f64
}

fn single_thread(iterations: u64) -> f64 {
    let pool = pool(256);
    drop(take(&pool)); // warm-up: create the first batch
    let start = Instant::now();
    for _ in 0..iterations {
        let handle = take(&pool);
        black_box(handle.raw());
    }
    per_op(start, iterations)
}

fn two_threads(capacity: u32, iterations: u64) -> (f64, u64) {
    let pool = pool(capacity);
    drop(take(&pool));
    let barrier = Barrier::new(2);
    let mut elapsed = [0.0; 2];
    thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let (pool, barrier) = (&pool, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..iterations {
                        let handle = take(pool);
                        black_box(handle.raw());
                    }
                    per_op(start, iterations)
                })
            })
            .collect();
        for (slot, worker) in elapsed.iter_mut().zip(workers) {
            *slot = worker.join().unwrap();
        }
    });
    let stats = pool.stats();
    assert_eq!(stats.resets, 2 * iterations + 1);
    (elapsed.iter().sum::<f64>() / 2.0, stats.acquire_waits)
}

fn array_queue_baseline(iterations: u64) -> f64 {
    let queue = ArrayQueue::new(256);
    for i in 0..256u32 {
        queue.push(i).unwrap();
    }
    let start = Instant::now();
    for _ in 0..iterations {
        let v = queue.pop().unwrap();
        queue.push(black_box(v)).unwrap();
    }
    per_op(start, iterations)
}

fn array_queue_two_threads(iterations: u64) -> f64 {
    let queue = ArrayQueue::new(256);
    for i in 0..256u32 {
        queue.push(i).unwrap();
    }
    let barrier = Barrier::new(2);
    thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let (queue, barrier) = (&queue, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..iterations {
                        let v = queue.pop().unwrap();
                        queue.push(black_box(v)).unwrap();
                    }
                    per_op(start, iterations)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum::<f64>() / 2.0
    })
}

fn main() {
    let iterations: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("iterations must be a number"))
        .unwrap_or(5_000_000);
    println!("rprof-pool acquire+release, {iterations} iterations per thread");
    println!(
        "single thread, capacity 256:          {:7.1} ns/op",
        single_thread(iterations)
    );
    let (ns, waits) = two_threads(256, iterations);
    println!("2 threads, capacity 256 (contention): {ns:7.1} ns/op per thread, {waits} waits");
    let (ns, waits) = two_threads(1, iterations / 10);
    println!(
        "2 threads, capacity 1 (back-pressure): {ns:7.1} ns/op per thread, {waits} waits ({} iterations)",
        iterations / 10
    );
    println!(
        "baseline crossbeam ArrayQueue pop+push: {:6.1} ns/op",
        array_queue_baseline(iterations)
    );
    println!(
        "baseline ArrayQueue, 2 threads:        {:7.1} ns/op per thread",
        array_queue_two_threads(iterations)
    );
}
