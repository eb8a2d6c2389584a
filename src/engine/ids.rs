//! Correlation and dispatch ids, the enqueuing thread id, and the clock
//! (re-exported from `rprof-abi`, the one `clock_gettime` wrapper).
//!
//! # Safety
//! Reading the thread id and `pthread_self` are libc calls, hence two small
//! `unsafe` blocks; nothing else here is unsafe.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Hands out dispatch ids (a per-process 64-bit counter from 1) and
/// correlation ids (`(pid << 32) + counter`, wrapping in 64 bits). Below 2^32
/// dispatches that is `pid << 32 | counter`, so traces of several processes
/// merge without clashes; past 2^32 dispatches the ids keep counting up
/// instead of repeating (a process's ids never repeat before 2^64). One
/// atomic add per interceptor call, however many dispatches the call
/// carries.
#[derive(Debug)]
pub struct IdAllocator {
    pid_high: u64,
    next: AtomicU64,
}

/// A run of consecutive ids reserved by one interceptor call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    pid_high: u64,
    first_dispatch_id: u64,
    count: u64,
}

impl IdRange {
    /// Dispatch id of the `i`-th dispatch of the range.
    pub fn dispatch_id(&self, i: u64) -> u64 {
        debug_assert!(i < self.count);
        self.first_dispatch_id + i
    }

    /// Correlation id of the `i`-th dispatch of the range.
    pub fn correlation_id(&self, i: u64) -> u64 {
        self.pid_high.wrapping_add(self.dispatch_id(i))
    }

    /// Number of ids in the range.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

impl IdAllocator {
    /// An allocator for process `pid`.
    pub fn new(pid: u32) -> Self {
        IdAllocator {
            pid_high: u64::from(pid) << 32,
            next: AtomicU64::new(1),
        }
    }

    /// An allocator for process `pid` whose next dispatch id is `next`
    /// (tests start near 2^32 this way).
    pub fn starting_at(pid: u32, next: u64) -> Self {
        IdAllocator {
            pid_high: u64::from(pid) << 32,
            next: AtomicU64::new(next.max(1)),
        }
    }

    /// Reserves `count` consecutive ids.
    pub fn reserve(&self, count: u64) -> IdRange {
        let first = if count == 0 {
            0
        } else {
            self.next.fetch_add(count, Ordering::Relaxed)
        };
        IdRange {
            pid_high: self.pid_high,
            first_dispatch_id: first,
            count,
        }
    }

    /// The correlation id of dispatch `dispatch_id` (as
    /// [`IdRange::correlation_id`] gives it).
    pub fn correlation_id(&self, dispatch_id: u64) -> u64 {
        self.pid_high.wrapping_add(dispatch_id)
    }

    /// Number of dispatch ids handed out so far.
    pub fn issued(&self) -> u64 {
        self.next.load(Ordering::Relaxed) - 1
    }
}

pub use rprof_abi::clock::{boottime_ns, fast_boottime_ns};

/// Threads that took an id with [`current_thread_id`] and have exited since
/// the process started: a [`LastWriter`] entry is valid only while this is
/// what it was when the entry was written, because the C library hands an
/// exited thread's `pthread_self()` to the next thread it creates.
static THREAD_EXITS: AtomicU64 = AtomicU64::new(0);

/// Counts its thread's exit in [`THREAD_EXITS`] (a thread-local's
/// destructor: it runs before the thread's descriptor can be reused).
struct ExitNotice;

impl Drop for ExitNotice {
    fn drop(&mut self) {
        THREAD_EXITS.fetch_add(1, Ordering::Release);
    }
}

thread_local! {
    static THREAD_ID: Cell<u32> = const { Cell::new(0) };
    static EXIT_NOTICE: ExitNotice = const { ExitNotice };
}

/// The calling thread's OS thread id, cached per thread after the first
/// call (one `gettid` system call per thread).
pub fn current_thread_id() -> u32 {
    THREAD_ID.with(|c| {
        let cached = c.get();
        if cached != 0 {
            return cached;
        }
        // Touching it registers its destructor: this thread's exit is
        // counted. (A thread already being torn down cannot register; such a
        // thread is never cached by a `LastWriter`.)
        let _ = EXIT_NOTICE.try_with(|_| ());
        // SAFETY: `gettid` takes no arguments and cannot fail.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        c.set(tid);
        tid
    })
}

/// Whether the calling thread's exit will be counted in [`THREAD_EXITS`].
fn exit_is_counted() -> bool {
    EXIT_NOTICE.try_with(|_| ()).is_ok()
}

/// A one-entry cache of [`current_thread_id`] keyed by `pthread_self()` (a register read), for the thread that
/// writes to one queue over and over. Threads may race on it (nothing here relies on the runtime calling the
/// interceptor under the queue's lock).
///
/// Invariants: `thread_id` and `exits` are written only by the one thread that moved `key` to `REPLACING` with a
/// compare-exchange, and that thread publishes its own `pthread_self()` in `key` afterwards; a thread that loses
/// the exchange returns its id without caching it. So writes never interleave, and a reader that sees its own
/// key before and after reading `thread_id` read its own id: any other writer's id store is ordered after that
/// writer's exchange, which the second key load would then see. A `pthread_self()` value outlives its thread
/// (the C library gives it to the next thread it creates), so an entry also holds `THREAD_EXITS` as it was
/// when written and is used only while no thread has exited since: the writer, alive when it wrote, has not.
#[derive(Debug, Default)]
pub struct LastWriter {
    /// `pthread_self()` of the thread whose id `thread_id` holds; 0 while empty, `REPLACING` while
    /// one thread replaces it.
    key: AtomicU64,
    thread_id: std::sync::atomic::AtomicU32,
    /// [`THREAD_EXITS`] when the entry was written.
    exits: AtomicU64,
}

impl LastWriter {
    /// The key while one thread owns the entry (no `pthread_t` is all ones).
    const REPLACING: u64 = u64::MAX;

    /// The calling thread's id, from the cache when it is this thread's.
    #[inline]
    pub fn thread_id(&self) -> u32 {
        // SAFETY: `pthread_self` has no preconditions and cannot fail.
        let me = unsafe { libc::pthread_self() } as u64;
        let seen = self.key.load(Ordering::Acquire);
        if seen == me {
            let id = self.thread_id.load(Ordering::Acquire);
            let exits = self.exits.load(Ordering::Acquire);
            if self.key.load(Ordering::Acquire) == me
                && exits == THREAD_EXITS.load(Ordering::Acquire)
            {
                return id;
            }
        }
        let id = current_thread_id();
        let exits = THREAD_EXITS.load(Ordering::Acquire);
        if seen != Self::REPLACING
            && exit_is_counted()
            && self
                .key
                .compare_exchange(seen, Self::REPLACING, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            self.thread_id.store(id, Ordering::Release);
            self.exits.store(exits, Ordering::Release);
            self.key.store(me, Ordering::Release);
        }
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_consecutive_and_tagged_with_the_pid() {
        let ids = IdAllocator::new(0x1234);
        let a = ids.reserve(3);
        let none = ids.reserve(0);
        let b = ids.reserve(2);
        assert!(none.is_empty());
        assert_eq!((a.dispatch_id(0), a.dispatch_id(2)), (1, 3));
        assert_eq!(b.dispatch_id(0), 4);
        assert_eq!(a.correlation_id(1), 0x1234_0000_0002);
        assert_eq!(b.correlation_id(1), 0x1234_0000_0005);
        assert_eq!(ids.issued(), 5);
    }

    #[test]
    fn ids_do_not_repeat_after_two_to_the_32_dispatches() {
        let early = IdAllocator::new(0x1234).reserve(3);
        let ids = IdAllocator::starting_at(0x1234, (1 << 32) - 1);
        let r = ids.reserve(3);
        assert_eq!(r.dispatch_id(0), (1 << 32) - 1);
        assert_eq!(r.dispatch_id(2), (1 << 32) + 1);
        assert_eq!(r.correlation_id(0), 0x1234_ffff_ffff);
        assert_eq!(r.correlation_id(1), 0x1235_0000_0000);
        assert_eq!(r.correlation_id(2), 0x1235_0000_0001);
        // Consecutive: a batch's ids are first + i, as the sinks assume.
        for i in 0..3 {
            assert_eq!(r.correlation_id(i), r.correlation_id(0) + i);
        }
        // None of them equals an id the process handed out at the start.
        for i in 0..3 {
            for j in 0..3 {
                assert_ne!(r.correlation_id(i), early.correlation_id(j));
            }
        }
        assert_eq!(ids.issued(), (1 << 32) + 1);
    }

    #[test]
    fn ids_are_unique_across_threads() {
        let ids = std::sync::Arc::new(IdAllocator::new(7));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let ids = ids.clone();
                std::thread::spawn(move || {
                    let mut v = Vec::new();
                    for n in 0..1000u64 {
                        let r = ids.reserve(n % 3 + 1);
                        for i in 0..r.len() {
                            v.push(r.correlation_id(i));
                        }
                    }
                    v
                })
            })
            .collect();
        let mut all: Vec<u64> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
        assert_eq!(n as u64, ids.issued());
    }

    #[test]
    fn thread_id_is_cached_and_per_thread() {
        let me = current_thread_id();
        assert_eq!(me, current_thread_id());
        let other = std::thread::spawn(current_thread_id).join().unwrap();
        assert_ne!(me, other);
        assert!(me > 0 && other > 0);
    }

    #[test]
    fn a_queues_cached_writer_id_is_always_the_callers() {
        let cache = std::sync::Arc::new(LastWriter::default());
        assert_eq!(cache.thread_id(), current_thread_id());
        assert_eq!(cache.thread_id(), current_thread_id());
        // Four threads take turns on one cache as fast as they can: each
        // must always get its own id, never the last writer's.
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let cache = cache.clone();
                std::thread::spawn(move || {
                    let me = current_thread_id();
                    (0..200_000).all(|_| cache.thread_id() == me)
                })
            })
            .collect();
        for h in handles {
            assert!(h.join().unwrap());
        }
    }

    /// Runs one thread on `cache` to its end: its `pthread_self()`, the id
    /// the cache gave it and its real id.
    fn one_thread_on(cache: &std::sync::Arc<LastWriter>) -> (u64, u32, u32) {
        let c = cache.clone();
        std::thread::spawn(move || {
            // SAFETY: `pthread_self` has no preconditions.
            let me = unsafe { libc::pthread_self() } as u64;
            (me, c.thread_id(), current_thread_id())
        })
        .join()
        .unwrap()
    }

    #[test]
    fn a_thread_that_reuses_an_exited_writers_handle_gets_its_own_id() {
        // glibc hands an exited thread's descriptor (the `pthread_self`
        // value) to the next thread it creates: the cache must not take the
        // new thread for the old one.
        let cache = std::sync::Arc::new(LastWriter::default());
        let mut reused = 0;
        for _ in 0..50 {
            let (first, cached, real) = one_thread_on(&cache);
            assert_eq!(cached, real, "a new thread got an exited thread's id");
            let (second, cached, real) = one_thread_on(&cache);
            assert_eq!(cached, real, "a new thread got an exited thread's id");
            reused += u32::from(second == first);
        }
        // The case under test happened (else the test would prove nothing).
        assert!(reused > 0, "no handle was reused in 50 tries");
    }

    #[test]
    fn boottime_moves_forward() {
        let a = boottime_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = boottime_ns();
        assert!(b >= a + 2_000_000);
    }
}
