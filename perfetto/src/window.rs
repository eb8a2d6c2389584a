//! The reorder window's ordering: which held event leaves next.
//!
//! Track events reach the writer in completion order, not time order: the
//! interceptor's slices arrive as calls happen (in time order per thread),
//! a kernel's BEGIN and END when the kernel has completed (in time order
//! per queue, but behind the slices of every dispatch enqueued since). The
//! window therefore holds a few ascending runs plus stragglers. [`Order`]
//! keeps up to [`RUNS`] ascending runs, each a deque (an event that is not
//! earlier than a run's newest goes to its back), and a min-heap for the
//! rest: push and pop are a handful of comparisons, where one heap of the
//! whole window paid two sift paths of ~11 levels per event.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Ascending runs kept apart from the heap.
pub const RUNS: usize = 4;

/// A held event's key: (timestamp, push sequence, slot). The sequence makes
/// the order total, so events with one timestamp leave in push order.
pub type Key = (u64, u64, u32);

/// Held events in (timestamp, push sequence) order.
#[derive(Debug)]
pub struct Order {
    /// Each run ascending by key, front = oldest.
    runs: [VecDeque<Key>; RUNS],
    /// Events that fit no run.
    late: BinaryHeap<Reverse<Key>>,
    len: usize,
}

impl Order {
    /// An empty order with room for `capacity` events in each structure
    /// (so that holding up to `capacity` events never allocates).
    pub fn with_capacity(capacity: usize) -> Self {
        Order {
            runs: std::array::from_fn(|_| VecDeque::with_capacity(capacity)),
            late: BinaryHeap::with_capacity(capacity),
            len: 0,
        }
    }

    /// Events held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Holds `key`; its sequence must be larger than every held key's.
    pub fn push(&mut self, key: Key) {
        self.len += 1;
        for run in &mut self.runs {
            if run.back().is_none_or(|b| b.0 <= key.0) {
                run.push_back(key);
                return;
            }
        }
        self.late.push(Reverse(key));
    }

    /// Takes the smallest held key.
    pub fn pop(&mut self) -> Option<Key> {
        let mut best: Option<(Key, Option<usize>)> = self.late.peek().map(|r| (r.0, None));
        for (i, run) in self.runs.iter().enumerate() {
            if let Some(&front) = run.front() {
                if best.is_none_or(|(k, _)| front < k) {
                    best = Some((front, Some(i)));
                }
            }
        }
        let (key, from) = best?;
        match from {
            Some(i) => self.runs[i].pop_front(),
            None => self.late.pop().map(|r| r.0),
        };
        self.len -= 1;
        Some(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a sorted copy, on interleaved ascending streams, stragglers
    /// and ties.
    #[test]
    fn pops_in_key_order() {
        let mut order = Order::with_capacity(64);
        let mut held = Vec::new();
        let mut x: u64 = 7;
        let mut out = Vec::new();
        for i in 0..5_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let ts = match (x >> 60) % 4 {
                0 => i,                                     // an ascending stream
                1 => i / 2,                                 // another, with ties
                2 => i.saturating_sub(50 + (x >> 40) % 40), // stragglers
                _ => 1_000 + i,                             // ahead of everything
            };
            // The push sequence is `i` itself.
            order.push((ts, i, i as u32));
            held.push((ts, i, i as u32));
            if order.len() > 48 {
                out.push(order.pop().unwrap());
                held.sort();
                let min = held.remove(0);
                assert_eq!(*out.last().unwrap(), min);
            }
        }
        while let Some(k) = order.pop() {
            held.sort();
            assert_eq!(k, held.remove(0));
        }
        assert!(order.is_empty() && held.is_empty());
    }
}
