//! The pool, its handles and its statistics.

use std::fmt;

use crossbeam_utils::CachePadded;

use crate::free_list::FreeList;
use crate::primitive::{lock, AtomicBool, AtomicU32, AtomicU64, Mutex, Ordering};
use crate::provider::{ProviderError, RawSignal, SignalProvider};

/// Largest capacity a pool accepts (slot indices are `u32`; this keeps reference counts and the
/// free list comfortably in range, and is far above the 4096 driver events of a process).
const MAX_CAPACITY: u32 = 1 << 20;

/// How a [`SignalPool`] is sized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Most signals the pool will ever create (1..=1_048_576). Default 256.
    pub capacity: u32,
    /// Signals created at once when the free list is empty (1..=capacity). Default 64.
    pub batch: u32,
    /// Value signals are created with and reset to on release. Default 1 (a completion signal
    /// that the packet processor decrements to 0).
    pub initial_value: i64,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            capacity: 256,
            batch: 64,
            initial_value: 1,
        }
    }
}

/// Why the pool could not hand out a signal or shut down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolError {
    /// The configuration is out of range; the message says which field.
    InvalidConfig(&'static str),
    /// The provider failed while the pool grew and that batch created nothing. `pool_size`
    /// signals exist and are kept; the pool no longer grows.
    Create {
        /// What the provider reported.
        error: ProviderError,
        /// Signals the pool holds (in use or free).
        pool_size: u32,
    },
    /// An earlier creation failure left the pool with no signal at all.
    NoSignals(ProviderError),
    /// The pool was shut down.
    Closed,
    /// [`SignalPool::shutdown`] found handles still alive.
    InUse {
        /// Signals not on the free list when shutdown looked.
        outstanding: u32,
    },
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::InvalidConfig(what) => {
                write!(f, "invalid signal pool configuration: {what}")
            }
            PoolError::Create { error, pool_size } => write!(
                f,
                "{error}; the signal pool keeps its {pool_size} signals and stops growing"
            ),
            PoolError::NoSignals(error) => {
                write!(f, "the signal pool has no signals: {error}")
            }
            PoolError::Closed => write!(f, "the signal pool is shut down"),
            PoolError::InUse { outstanding } => {
                write!(f, "{outstanding} pool signals are still in use")
            }
        }
    }
}

impl std::error::Error for PoolError {}

/// A snapshot of the pool's counters (each read with `Relaxed`; they may be a few operations
/// apart from one another while the pool is busy).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// The configured capacity.
    pub capacity: u32,
    /// Signals created so far (never decreases, at most `capacity`).
    pub created: u32,
    /// Signals currently owned by a handle (derived from the free list's length, so
    /// exact only when no acquire or release is in flight).
    pub in_use: u32,
    /// Largest `in_use` seen.
    pub high_water: u32,
    /// Acquires that found every signal in use and came back empty
    /// ([`SignalPool::try_acquire`] returned `Ok(None)`).
    pub acquire_waits: u64,
    /// Signals reset and returned to the free list (derived from the free list's push count).
    pub resets: u64,
    /// Provider creation failures (each one stops growth, so 0 or 1 in practice).
    pub create_failures: u32,
    /// The last creation failure, if any.
    pub last_create_error: Option<ProviderError>,
}

/// One signal's slot.
struct Slot {
    /// The signal, written once when the slot's batch is created (before its index is first
    /// published on the free list or handed out), read only through a live handle; 0 once
    /// [`SignalPool::trim`] destroyed it (its index is then nowhere: never handed out again).
    raw: AtomicU64,
    /// Whether a handle owns the slot: false exactly while the index is on the free list (or
    /// the slot has no signal yet). Set by the acquirer that popped the index, cleared by the
    /// handle's drop before it pushes the index back; only checked by debug assertions.
    held: AtomicBool,
}

/// State changed only under the growth lock.
struct Growth {
    /// Slots `0..created` hold signals. Mirrors [`SignalPool::created`].
    created: u32,
    /// The first creation failure; set once, after which the pool no longer grows.
    failure: Option<ProviderError>,
    /// `shutdown` destroyed the signals.
    closed: bool,
}

/// Statistics counters. Acquires write none of them in steady state, releases only
/// `high_water` when it rises: `in_use` and `resets` are derived from the free list's positions.
#[derive(Default)]
struct Counters {
    /// Signals handed to the free list or to the acquirer that grew the pool; stored after the
    /// batch's pushes, so `published - free.len()` never counts a signal still being published.
    published: AtomicU32,
    /// Largest in-use count seen by a release, just before it gave its signal back (with the
    /// current count, the largest there has been: [`SignalPool::stats`]).
    high_water: AtomicU32,
    /// Signals `trim` destroyed (their slots hold 0 and their indices are nowhere); written
    /// only under the growth lock. Counted once their index left the free list: `in_use`
    /// counts one as out meanwhile, as it does an acquire in flight.
    trimmed: AtomicU32,
    /// Free-list pushes that were not releases (growth, refused shutdowns):
    /// `resets = free.pushes() - extra_pushes`.
    extra_pushes: AtomicU64,
    /// Acquires that met back-pressure.
    acquire_waits: AtomicU64,
}

/// A bounded pool of reusable signals. See the crate documentation.
pub struct SignalPool<P: SignalProvider> {
    provider: P,
    config: PoolConfig,
    /// Fixed array of `capacity` slots, allocated once in [`SignalPool::new`].
    slots: Box<[Slot]>,
    /// Indices of free slots. Holds at most `created` values, so a push never finds it full.
    free: FreeList,
    /// Number of created signals, for statistics (authoritative copy in `Growth`).
    created: AtomicU32,
    /// True once the pool will never grow again (capacity reached, a creation failed, or
    /// closed): acquirers that find the free list empty then return at once instead of taking
    /// the lock.
    growth_over: AtomicBool,
    growth: Mutex<Growth>,
    /// Set by a successful `shutdown`; later acquires return [`PoolError::Closed`].
    closed: AtomicBool,
    counters: CachePadded<Counters>,
    create_failures: AtomicU32,
}

impl<P: SignalProvider> SignalPool<P> {
    /// Makes an empty pool; no signal is created until the first acquire.
    pub fn new(provider: P, config: PoolConfig) -> Result<Self, PoolError> {
        if config.capacity == 0 || config.capacity > MAX_CAPACITY {
            return Err(PoolError::InvalidConfig("capacity must be in 1..=1048576"));
        }
        if config.batch == 0 || config.batch > config.capacity {
            return Err(PoolError::InvalidConfig("batch must be in 1..=capacity"));
        }
        let slots = (0..config.capacity)
            .map(|_| Slot {
                raw: AtomicU64::new(0),
                held: AtomicBool::new(false),
            })
            .collect::<Vec<_>>()
            .into_boxed_slice();
        Ok(SignalPool {
            provider,
            config,
            slots,
            free: FreeList::with_capacity(config.capacity as usize),
            created: AtomicU32::new(0),
            growth_over: AtomicBool::new(false),
            growth: Mutex::new(Growth {
                created: 0,
                failure: None,
                closed: false,
            }),
            closed: AtomicBool::new(false),
            counters: CachePadded::new(Counters::default()),
            create_failures: AtomicU32::new(0),
        })
    }

    /// The configuration the pool was made with.
    pub fn config(&self) -> PoolConfig {
        self.config
    }

    /// The provider (e.g. to read its own counters).
    pub fn provider(&self) -> &P {
        &self.provider
    }

    /// Takes a free signal without waiting: `Ok(None)` means all `capacity` signals (or all the
    /// pool could create) are in use. Grows by one batch if the free list is empty and the pool
    /// may still grow.
    ///
    /// Errors: [`PoolError::Create`] if growing was needed and the provider created nothing,
    /// [`PoolError::NoSignals`] if an earlier failure left the pool empty, [`PoolError::Closed`]
    /// after [`SignalPool::shutdown`].
    pub fn try_acquire(&self) -> Result<Option<SignalHandle<'_, P>>, PoolError> {
        if let Some(index) = self.free.pop() {
            return Ok(Some(self.claim(index)));
        }
        match self.grow()? {
            Some(index) => Ok(Some(self.claim(index))),
            None => {
                self.counters.acquire_waits.fetch_add(1, Ordering::Relaxed);
                Ok(None)
            }
        }
    }

    /// Destroys every signal if none is in use, and closes the pool: later acquires fail with
    /// [`PoolError::Closed`]. Returns how many signals were destroyed. If handles are
    /// alive, nothing changes and [`PoolError::InUse`] says how many signals are out.
    ///
    /// Dropping the pool does the same; use this when the pool lives in a `static`.
    pub fn shutdown(&self) -> Result<u32, PoolError> {
        let mut growth = lock(&self.growth);
        if growth.closed {
            return Err(PoolError::Closed);
        }
        // Signals `trim` destroyed are on no list: only the others are waited for.
        let live = growth.created - self.counters.trimmed.load(Ordering::Acquire);
        // Take every index off the free list: nobody can acquire them meanwhile, and the
        // growth lock keeps `created` and `trimmed` fixed. Shutdown is rare, so it may allocate.
        let mut drained = Vec::with_capacity(live as usize);
        while drained.len() < live as usize {
            match self.free.pop() {
                Some(index) => drained.push(index),
                None => break,
            }
        }
        if drained.len() < live as usize {
            // Some signal is out (or on its way back): put back what we took.
            let outstanding = live - drained.len() as u32;
            drop(growth);
            self.counters
                .extra_pushes
                .fetch_add(drained.len() as u64, Ordering::Release);
            for index in drained {
                self.push_free(index);
            }
            return Err(PoolError::InUse { outstanding });
        }
        growth.closed = true;
        self.growth_over.store(true, Ordering::SeqCst);
        self.closed.store(true, Ordering::SeqCst);
        self.destroy_live(growth.created);
        drop(growth);
        Ok(live)
    }

    /// Destroys the free signals beyond the first `keep` for good, while the pool stays open:
    /// for the end of a run, when most of the signals a burst needed sit idle and destroying
    /// them later would hold up whoever closes the pool. The pool stops growing (the trimmed
    /// slots are never refilled): acquirers then share the signals left, as when the capacity
    /// is reached. Returns how many signals it destroyed; handles out are never touched.
    pub fn trim(&self, keep: u32) -> u32 {
        let growth = lock(&self.growth);
        if growth.closed {
            return 0;
        }
        // No growth from here on: `created` stays what it is, holes included.
        self.growth_over.store(true, Ordering::SeqCst);
        let mut destroyed = 0;
        while self.free.len() > keep as usize {
            let Some(index) = self.free.pop() else {
                break;
            };
            // Popping the index made this thread its only owner, as an acquirer; it is never
            // pushed back, so nobody reads the slot again (shutdown and drop skip 0).
            let slot = &self.slots[index as usize];
            self.counters.trimmed.fetch_add(1, Ordering::Release);
            self.provider
                .destroy(RawSignal(slot.raw.swap(0, Ordering::Relaxed)));
            destroyed += 1;
        }
        drop(growth);
        destroyed
    }

    /// Destroys the signals of slots `0..created` that `trim` left (under the growth lock).
    fn destroy_live(&self, created: u32) {
        for slot in &self.slots[..created as usize] {
            let raw = slot.raw.load(Ordering::Relaxed);
            if raw != 0 {
                self.provider.destroy(RawSignal(raw));
            }
        }
    }

    /// Current counters.
    pub fn stats(&self) -> PoolStats {
        let growth = lock(&self.growth);
        PoolStats {
            capacity: self.config.capacity,
            created: self.created.load(Ordering::Relaxed),
            in_use: self.in_use(),
            high_water: self
                .counters
                .high_water
                .load(Ordering::Relaxed)
                .max(self.in_use()),
            acquire_waits: self.counters.acquire_waits.load(Ordering::Relaxed),
            resets: self
                .free
                .pushes()
                .saturating_sub(self.counters.extra_pushes.load(Ordering::Acquire)),
            create_failures: self.create_failures.load(Ordering::Relaxed),
            last_create_error: growth.failure,
        }
    }

    /// Hands out slot `index`, just popped from the free list or just created.
    fn claim(&self, index: u32) -> SignalHandle<'_, P> {
        let held = &self.slots[index as usize].held;
        debug_assert!(
            !held.load(Ordering::Relaxed),
            "slot {index} handed out while in use"
        );
        // Popping the index made this thread the slot's only owner: a plain store suffices.
        held.store(true, Ordering::Relaxed);
        SignalHandle { pool: self, index }
    }

    /// Signals not on the free list (exact when no acquire or release is in flight).
    fn in_use(&self) -> u32 {
        let published = self.counters.published.load(Ordering::Acquire);
        let trimmed = self.counters.trimmed.load(Ordering::Acquire);
        published
            .saturating_sub(trimmed)
            .saturating_sub(self.free.len() as u32)
    }

    /// The signal in slot `index`; the caller holds a reference.
    fn raw(&self, index: u32) -> RawSignal {
        RawSignal(self.slots[index as usize].raw.load(Ordering::Relaxed))
    }

    /// Gives slot `index` back: resets its signal and puts the index on the free list. Only
    /// its one handle calls this, once, so no reference count and no fence are needed: the
    /// free list's push publishes the reset to the next acquirer.
    fn release(&self, index: u32) {
        let slot = &self.slots[index as usize];
        self.provider.reset(
            RawSignal(slot.raw.load(Ordering::Relaxed)),
            self.config.initial_value,
        );
        slot.held.store(false, Ordering::Relaxed);
        // The in-use count only falls at a release, so its peaks are the counts just before one
        // (and, at any time, the current count: see `stats`). Noting them here keeps the free
        // list's push end, which releasers write, out of the acquirer's path.
        let in_use = self.in_use();
        if in_use > self.counters.high_water.load(Ordering::Relaxed) {
            self.counters
                .high_water
                .fetch_max(in_use, Ordering::Relaxed);
        }
        self.push_free(index);
    }

    /// Puts `index` on the free list.
    fn push_free(&self, index: u32) {
        // Never full: it holds only indices of created slots, each at most once (held == false).
        self.free.push(index);
    }

    /// Creates one batch if the pool may still grow. `Ok(Some(index))`: a slot for the caller
    /// (created, or freed while we waited for the lock). `Ok(None)`: the pool will never grow.
    fn grow(&self) -> Result<Option<u32>, PoolError> {
        if self.growth_over.load(Ordering::Acquire) {
            return self.no_growth();
        }
        let mut growth = lock(&self.growth);
        if growth.closed {
            return Err(PoolError::Closed);
        }
        // Another thread may have grown the pool, or a signal came back, while we waited.
        if let Some(index) = self.free.pop() {
            return Ok(Some(index));
        }
        // Set only under this lock (a creation failure, the capacity reached, `trim`), so
        // exact here, also for a grower that passed the check above before it was set.
        if self.growth_over.load(Ordering::Acquire) {
            drop(growth);
            return self.no_growth();
        }
        let start = growth.created;
        let end = (start + self.config.batch).min(self.config.capacity);
        let mut made = start;
        let mut failure = None;
        while made < end {
            match self.provider.create(self.config.initial_value) {
                Ok(raw) => {
                    self.slots[made as usize]
                        .raw
                        .store(raw.0, Ordering::Relaxed);
                    made += 1;
                }
                Err(error) => {
                    failure = Some(error);
                    break;
                }
            }
        }
        growth.created = made;
        self.created.store(made, Ordering::Relaxed);
        if let Some(error) = failure {
            growth.failure = Some(error);
            self.create_failures.fetch_add(1, Ordering::Relaxed);
        }
        if failure.is_some() || made == self.config.capacity {
            self.growth_over.store(true, Ordering::Release);
        }
        drop(growth);
        if made == start {
            let error = failure.unwrap_or(ProviderError { status: 0 });
            return Err(PoolError::Create {
                error,
                pool_size: made,
            });
        }
        // Keep the first new slot for the caller, publish the others.
        self.counters
            .extra_pushes
            .fetch_add(u64::from(made - start - 1), Ordering::Release);
        for index in start + 1..made {
            self.push_free(index);
        }
        self.counters.published.store(made, Ordering::Release);
        Ok(Some(start))
    }

    /// The outcome of `grow` once growth is over for good.
    fn no_growth(&self) -> Result<Option<u32>, PoolError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(PoolError::Closed);
        }
        if self.created.load(Ordering::Relaxed) == 0 {
            let failure = lock(&self.growth).failure;
            return Err(PoolError::NoSignals(
                failure.unwrap_or(ProviderError { status: 0 }),
            ));
        }
        Ok(None)
    }
}

impl<P: SignalProvider> Drop for SignalPool<P> {
    /// Destroys every created signal (unless `shutdown` already did). Handles borrow the pool,
    /// so none is alive here.
    fn drop(&mut self) {
        let growth = lock(&self.growth);
        if growth.closed {
            return;
        }
        self.destroy_live(growth.created);
    }
}

impl<P: SignalProvider> fmt::Debug for SignalPool<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SignalPool")
            .field("config", &self.config)
            .field("free", &self.free.len())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// The owner of one pool signal: not `Clone`, `Send` (and `Sync`), borrowing the pool.
///
/// The signal goes back to the pool (reset to the pool's initial value) when this handle is
/// dropped.
pub struct SignalHandle<'pool, P: SignalProvider> {
    pool: &'pool SignalPool<P>,
    /// Slot index; this handle owns the slot.
    index: u32,
}

impl<P: SignalProvider> SignalHandle<'_, P> {
    /// The signal, to put in a dispatch packet or read timestamps from. Valid while `self` lives.
    pub fn raw(&self) -> RawSignal {
        self.pool.raw(self.index)
    }

    /// The slot index (stable for the pool's life; useful as a compact key).
    pub fn slot(&self) -> u32 {
        self.index
    }
}

impl<P: SignalProvider> Drop for SignalHandle<'_, P> {
    fn drop(&mut self) {
        self.pool.release(self.index);
    }
}

impl<P: SignalProvider> fmt::Debug for SignalHandle<'_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SignalHandle")
            .field("slot", &self.index)
            .field("raw", &self.raw())
            .finish()
    }
}
