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
//!
//! [`Slots`] holds the events' encoded bytes, which [`Order`]'s keys name by
//! slot index.

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

    /// The smallest held key, left held.
    pub fn peek(&self) -> Option<Key> {
        self.smallest().map(|(key, _)| key)
    }

    /// The smallest held key and where it is: a run's front, or (`None`)
    /// the heap's top.
    fn smallest(&self) -> Option<(Key, Option<usize>)> {
        let mut best: Option<(Key, Option<usize>)> = self.late.peek().map(|r| (r.0, None));
        for (i, run) in self.runs.iter().enumerate() {
            if let Some(&front) = run.front() {
                if best.is_none_or(|(k, _)| front < k) {
                    best = Some((front, Some(i)));
                }
            }
        }
        best
    }

    /// Takes the smallest held key.
    pub fn pop(&mut self) -> Option<Key> {
        let (key, from) = self.smallest()?;
        match from {
            Some(i) => self.runs[i].pop_front(),
            None => self.late.pop().map(|r| r.0),
        };
        self.len -= 1;
        Some(key)
    }
}

/// Bytes a slot holds in place; a larger event is spilled to a vector of
/// its own. A default kernel slice's event is ~40–70 bytes.
pub const SLOT_BYTES: usize = 192;

/// The held events' bytes: fixed-size slots in one zeroed buffer, so
/// building a window is one allocation whose pages are touched only as
/// slots are first used. (A vector per slot cost the writer's thread 2,049
/// allocations when it started, ~100 page-sized heap extensions on glibc's
/// per-thread arena, 0.4–0.7 ms, and as many frees at exit.)
#[derive(Debug)]
pub struct Slots {
    /// Slot `i` holds `flat[i * SLOT_BYTES..][..len[i]]`, unless spilled.
    flat: Vec<u8>,
    /// Bytes held by each slot; [`SPILLED`] when they are in `spill[i]`.
    len: Vec<u32>,
    /// Events larger than a slot, by slot index. Grown only when a slot
    /// first spills; a spilled slot's vector keeps its capacity.
    spill: Vec<Vec<u8>>,
    /// Indices of the free slots.
    free: Vec<u32>,
}

/// `Slots::len` of a slot whose event is in `Slots::spill`.
const SPILLED: u32 = u32::MAX;

impl Slots {
    /// `count` free slots.
    pub fn with_capacity(count: usize) -> Self {
        Slots {
            flat: vec![0; count * SLOT_BYTES],
            len: vec![0; count],
            spill: Vec::new(),
            free: (0..count as u32).rev().collect(),
        }
    }

    /// Stores `parts`, concatenated, in a free slot (a new one if none is
    /// free) and returns its index.
    pub fn store(&mut self, parts: &[&[u8]]) -> u32 {
        let slot = match self.free.pop() {
            Some(i) => i,
            None => {
                self.flat.resize(self.flat.len() + SLOT_BYTES, 0);
                self.len.push(0);
                (self.len.len() - 1) as u32
            }
        };
        let i = slot as usize;
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if total <= SLOT_BYTES {
            let mut at = i * SLOT_BYTES;
            for p in parts {
                self.flat[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
            self.len[i] = total as u32;
        } else {
            if self.spill.len() <= i {
                self.spill.resize_with(i + 1, Vec::new);
            }
            let v = &mut self.spill[i];
            v.clear();
            for p in parts {
                v.extend_from_slice(p);
            }
            self.len[i] = SPILLED;
        }
        slot
    }

    /// The bytes stored in `slot`.
    pub fn get(&self, slot: u32) -> &[u8] {
        let i = slot as usize;
        match self.len[i] {
            SPILLED => &self.spill[i],
            n => &self.flat[i * SLOT_BYTES..][..n as usize],
        }
    }

    /// Frees `slot` for the next [`Slots::store`].
    pub fn release(&mut self, slot: u32) {
        self.free.push(slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Events up to a slot's size stay in place, larger ones spill; every
    /// stored event reads back whole after the slots around it were reused,
    /// and storing more events than slots grows the buffer.
    #[test]
    fn slots_keep_each_event_whole() {
        let mut slots = Slots::with_capacity(4);
        let event = |n: usize, b: u8| vec![b; n];
        let mut held: Vec<(u32, Vec<u8>)> = Vec::new();
        for (k, n) in [1, SLOT_BYTES, SLOT_BYTES + 1, 0, 3 * SLOT_BYTES, 57, 5, 600]
            .into_iter()
            .enumerate()
        {
            let e = event(n, k as u8 + 1);
            let (a, b) = e.split_at(n / 3);
            let slot = slots.store(&[a, &[], b]);
            held.push((slot, e));
            if held.len() > 3 {
                let (old, bytes) = held.remove(0);
                assert_eq!(slots.get(old), &bytes[..]);
                slots.release(old);
            }
        }
        for (slot, bytes) in &held {
            assert_eq!(slots.get(*slot), &bytes[..]);
        }
        let mut grown = Slots::with_capacity(1);
        let a = grown.store(&[b"first"]);
        let b = grown.store(&[b"second"]);
        assert_ne!(a, b);
        assert_eq!(
            (grown.get(a), grown.get(b)),
            (&b"first"[..], &b"second"[..])
        );
    }

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
