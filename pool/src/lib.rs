//! A bounded pool of reusable HSA completion signals with owned handles.
//!
//! rprof's queue interceptor gives each kernel dispatch a completion signal of its own so it
//! can read the dispatch's GPU timestamps once it is done. Two failure modes of earlier tools
//! shape this crate: reading a signal after it was given back to its pool, and creating a new
//! signal (one driver event each, out of a per-process budget of 4096) per dispatch. Here both
//! are impossible by construction.
//!
//! It keeps only what its one user needs: the tool's interceptor (`tool/src/signals.rs`) takes
//! signals with [`SignalPool::try_acquire`], never blocks on the pool (it waits, bounded, in the
//! engine, and passes a kernel through untraced when the wait ends), and gives each signal one
//! owner. So there is no blocking acquire and no shared ownership, and a release pays neither a
//! waiter check nor a reference-count fence.
//!
//! # Types
//! - [`SignalProvider`] creates, resets and destroys [`RawSignal`]s. The tool implements it with
//!   ROCr; tests with a counting fake. The pool never calls ROCr directly.
//! - [`SignalPool`] owns up to [`PoolConfig::capacity`] signals. They are created lazily, one
//!   batch of [`PoolConfig::batch`] at a time, when the free list is empty, and are then reused
//!   for the pool's whole life: after warm-up no dispatch creates a signal. They are destroyed
//!   only by [`SignalPool::shutdown`] or by dropping the pool, never while a handle is out, or,
//!   free ones beyond a number kept, by [`SignalPool::trim`] (the end of a run), which also
//!   stops the pool's growth.
//! - [`SignalHandle`] is what [`SignalPool::try_acquire`] returns: owned, `Send`, not `Clone`.
//!   The signal is reset to [`PoolConfig::initial_value`] and goes back on the free list when the
//!   handle is dropped. [`RawSignal`] is only reachable through `raw()` on a live handle, which
//!   borrows the pool, so the pool cannot be dropped while one is alive.
//! - [`PoolStats`] reports created signals, signals in use, the high-water mark, how often an
//!   acquire came back empty, resets and creation failures.
//!
//! # Invariants
//! - A slot index is in exactly one place: on the free list, or owned by one handle. Popping an
//!   index from the free list is the only way to get one, so a signal is never handed out twice
//!   at the same time.
//! - Only slots `0..created` ever hold a signal; `created` grows by batches under a lock and
//!   never exceeds the capacity; a slot's signal never changes once created, except that `trim`
//!   sets it to 0 once it destroyed it (the index is then on no list, so no one reads it again;
//!   `shutdown` and drop skip 0).
//! - Acquire and release allocate nothing and take no lock in steady state: acquire pops an index
//!   from the free list, release resets the signal and pushes the index back. The lock is taken
//!   only to grow (at most `capacity / batch` times).
//!
//! # Design
//! The free list is a bounded lock-free MPMC ring of slot indices following Dmitry Vyukov's
//! bounded queue, the algorithm crossbeam's `ArrayQueue` uses: every cell has a sequence number
//! saying whether it is ready for the producer or the consumer of a given position, and
//! producers and consumers claim positions by CAS on a tail and a head counter. Our version holds
//! `u32` values in atomics (no unsafe code at all), and is built on the `primitive` module's
//! atomics (std or loom) so loom checks it together with the pool (`scripts/pool-loom.sh`).
//!
//! The pool never puts more indices on the free list than it has slots, so a push never meets
//! a full ring; a push or pop that meets a cell another thread has claimed but not yet
//! published waits the few instructions until it is. `PoolStats::in_use` and `resets` are
//! derived from the ring's positions, so the hot path updates no shared counter beyond the
//! ring itself; `high_water` is noted by releases (the in-use count peaks just before one), so an
//! acquire reads nothing but its end of the ring and the slot it takes.
//!
//! If the provider fails to create a signal (driver events exhausted), the pool keeps what it
//! has, stops growing, counts the failure in [`PoolStats`] and, if that batch created nothing,
//! returns [`PoolError::Create`] so the caller can fall back.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod free_list;
mod pool;
mod primitive;
mod provider;

pub use pool::{PoolConfig, PoolError, PoolStats, SignalHandle, SignalPool};
pub use provider::{ProviderError, RawSignal, SignalProvider};
