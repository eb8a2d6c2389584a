//! The free list: a bounded lock-free MPMC queue of slot indices.
//!
//! The algorithm is Dmitry Vyukov's bounded MPMC queue, the same one behind crossbeam's
//! `ArrayQueue`; this is our own short implementation for `u32` payloads, written with the
//! [`crate::primitive`] atomics so that loom can check it together with the pool.
//!
//! Each cell carries a sequence number that tells whose turn it is:
//! - `seq == pos` — the cell is empty and the producer that claims position `pos` may fill it;
//! - `seq == pos + 1` — the cell holds the value pushed at `pos`, ready for the consumer
//!   that claims position `pos`;
//! - `seq == pos + cells` — the value was taken; the cell waits for the producer of the next lap.
//!
//! Producers claim a position by advancing `tail` with a CAS, consumers by advancing `head`.
//! Between a claim and the matching `seq` store there is a window of a few instructions; a
//! producer or consumer that finds its cell in that state (not full / not empty by the
//! head-tail distance) spins until it is published, as crossbeam's queue does.
//! Positions grow without bound (wrapping arithmetic, compared as signed differences), and a
//! cell is found by `pos & mask`. The value is a plain `u32` in an atomic, so the whole queue is
//! safe code.

use crossbeam_utils::CachePadded;

use crate::primitive::{fence, spin_hint, AtomicU32, AtomicUsize, Ordering};

/// One cell of the ring.
struct Cell {
    /// Turn marker, see the module doc. Written with `Release` after `value` is written or read,
    /// read with `Acquire` before `value` is touched.
    seq: AtomicUsize,
    /// The slot index stored in the cell; only meaningful while `seq == pos + 1`.
    value: AtomicU32,
}

/// Bounded multi-producer multi-consumer queue of `u32` (slot indices).
pub(crate) struct FreeList {
    /// Power-of-two ring of cells; allocated once in [`FreeList::with_capacity`].
    cells: Box<[Cell]>,
    /// `cells.len() - 1`.
    mask: usize,
    /// Next position to pop. Only ever advanced by a successful CAS.
    head: CachePadded<AtomicUsize>,
    /// Next position to push. Only ever advanced by a successful CAS.
    tail: CachePadded<AtomicUsize>,
}

impl FreeList {
    /// A queue that holds at least `capacity` values (rounded up to a power of two).
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        let len = capacity.max(1).next_power_of_two();
        let cells = (0..len)
            .map(|pos| Cell {
                seq: AtomicUsize::new(pos),
                value: AtomicU32::new(0),
            })
            .collect::<Vec<_>>()
            .into_boxed_slice();
        FreeList {
            cells,
            mask: len - 1,
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
        }
    }

    /// Appends `value`. A pop that has claimed the cell but not yet released it is waited for.
    ///
    /// The caller must never hold more than `capacity` values in the queue at once (the pool
    /// pushes only indices of its own slots, each at most once); a push into a full queue would
    /// spin until a value is popped.
    pub(crate) fn push(&self, value: u32) {
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let cell = &self.cells[pos & self.mask];
            let seq = cell.seq.load(Ordering::Acquire);
            let turn = seq.wrapping_sub(pos) as isize;
            if turn == 0 {
                match self.tail.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        cell.value.store(value, Ordering::Relaxed);
                        cell.seq.store(pos.wrapping_add(1), Ordering::Release);
                        return;
                    }
                    Err(current) => pos = current,
                }
            } else if turn < 0 {
                // The cell still holds the value of the previous lap. The queue cannot be full
                // (see `push`), so that lap's consumer has claimed it and is about to hand it
                // back (or our view of `seq` is stale): wait for it. A full check against
                // `head` would be wrong here: under a weak memory model the `head` we read may
                // be stale and make a non-full queue look full, which loom demonstrates.
                spin_hint();
                pos = self.tail.load(Ordering::Relaxed);
            } else {
                // Another producer claimed `pos`; catch up.
                pos = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Removes the oldest value, or `None` if the queue is empty. A push that has claimed its
    /// position but not yet published its value is waited for (a few instructions' window), so
    /// `None` really means empty.
    pub(crate) fn pop(&self) -> Option<u32> {
        let mut pos = self.head.load(Ordering::Relaxed);
        loop {
            let cell = &self.cells[pos & self.mask];
            let seq = cell.seq.load(Ordering::Acquire);
            let turn = seq.wrapping_sub(pos.wrapping_add(1)) as isize;
            if turn == 0 {
                match self.head.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        let value = cell.value.load(Ordering::Relaxed);
                        cell.seq
                            .store(pos.wrapping_add(self.mask + 1), Ordering::Release);
                        return Some(value);
                    }
                    Err(current) => pos = current,
                }
            } else if turn < 0 {
                // Nothing published at `pos`: either the queue is empty, or a producer has
                // claimed `pos` but not yet written its value; wait for that one.
                fence(Ordering::SeqCst);
                if self.tail.load(Ordering::Relaxed) == pos {
                    return None;
                }
                spin_hint();
                pos = self.head.load(Ordering::Relaxed);
            } else {
                pos = self.head.load(Ordering::Relaxed);
            }
        }
    }

    /// Approximate number of queued values (exact when no push or pop is in flight).
    pub(crate) fn len(&self) -> usize {
        // Head first: the tail read afterwards is at least that head.
        let head = self.head.load(Ordering::Acquire);
        let tail = self.tail.load(Ordering::Acquire);
        tail.wrapping_sub(head).min(self.cells.len())
    }

    /// Pushes claimed since the queue was made (positions never wrap on 64-bit targets in
    /// practice: 2^64 pushes).
    pub(crate) fn pushes(&self) -> u64 {
        self.tail.load(Ordering::Acquire) as u64
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::FreeList;

    #[test]
    fn fifo_order_and_bounds() {
        let list = FreeList::with_capacity(3);
        assert_eq!(list.cells.len(), 4);
        assert_eq!(list.pop(), None);
        for v in 10..14 {
            list.push(v);
        }
        assert_eq!(list.len(), 4);
        assert_eq!(list.pushes(), 4);
        for v in 10..14 {
            assert_eq!(list.pop(), Some(v));
        }
        assert_eq!(list.pop(), None);
        // Many laps around the ring.
        for lap in 0..1000u32 {
            list.push(lap);
            list.push(lap + 1);
            assert_eq!(list.pop(), Some(lap));
            assert_eq!(list.pop(), Some(lap + 1));
        }
        assert_eq!(list.len(), 0);
    }
}

#[cfg(all(test, not(loom)))]
mod stress {
    use super::FreeList;

    #[test]
    fn values_circulate_between_threads_without_duplication() {
        let list = FreeList::with_capacity(3);
        for v in 0..3 {
            list.push(v);
        }
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        for _ in 0..200_000 {
                            if let Some(v) = list.pop() {
                                assert!(v < 3);
                                list.push(v);
                            }
                        }
                    })
                })
                .collect();
            // Joined explicitly: ThreadSanitizer sees pthread_join, not
            // the uninstrumented end-of-scope wait.
            for w in workers {
                w.join().unwrap();
            }
        });
        let mut left: Vec<u32> = std::iter::from_fn(|| list.pop()).collect();
        left.sort_unstable();
        assert_eq!(left, vec![0, 1, 2]);
    }
}
