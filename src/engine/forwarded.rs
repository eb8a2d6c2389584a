//! The kernel times behind the app's own completion signals.
//!
//! With barrier forwarding (the default, `docs/completion.md`) a kernel
//! completes rprof's timestamp signal and a barrier packet after it completes
//! the app's signal, so the packet processor writes the *barrier's* times into
//! the app's signal. An app that reads its kernel's times from its own signal
//! (`hsa_amd_profiling_get_dispatch_time`, which HIP's launch events use) would
//! read the barrier's. This table keeps, per app signal, the kernel it was
//! last forwarded for and, once retired, that kernel's times, so the tool
//! library can answer such a query with the kernel's times.
//!
//! Fixed size, no allocation and no lock on any path: one slot per signal
//! handle's hash, overwritten by the newest kernel forwarded to a signal that
//! hashes there. Every kernel has its own dispatch id, which tags the slot, so
//! a reader accepts times only when the slot's signal, tag and times tag agree
//! before and after it reads them. A lost race (two signals in one slot, a
//! stale retirement) only makes a query fall back to the runtime's answer.
//! Who writes: the interceptor ([`ForwardedTimes::expect`] for a kernel
//! forwarded by barrier, [`ForwardedTimes::forget`] for any other packet that
//! completes an app signal), the completion thread
//! ([`ForwardedTimes::record`]); who reads: the app's thread in the tool's
//! `hsa_amd_profiling_get_dispatch_time` ([`ForwardedTimes::lookup`]).

use std::sync::atomic::{AtomicU64, Ordering};

/// Slots: signals in use at once are HIP's pool (a few hundred).
const SLOTS: usize = 4096;

#[derive(Debug, Default)]
struct Slot {
    /// The app signal's handle (0: none).
    signal: AtomicU64,
    /// Dispatch id of the kernel last forwarded to `signal` (0: none).
    tag: AtomicU64,
    /// Dispatch id whose times `start` and `end` are (0: none yet).
    times_tag: AtomicU64,
    start: AtomicU64,
    end: AtomicU64,
}

/// What the table knows of an app signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardedKernel {
    /// The kernel last forwarded to it finished: its `(start, end)`, as the
    /// runtime gives them for a kernel's own signal.
    Times(u64, u64),
    /// A kernel was forwarded to it and has not been retired yet: its
    /// dispatch id.
    Pending(u64),
    /// Nothing (or the last packet completing it was not a forwarded kernel).
    Unknown,
}

/// See the module docs.
#[derive(Debug)]
pub struct ForwardedTimes {
    slots: Box<[Slot]>,
}

impl Default for ForwardedTimes {
    fn default() -> Self {
        ForwardedTimes {
            slots: (0..SLOTS).map(|_| Slot::default()).collect(),
        }
    }
}

impl ForwardedTimes {
    fn slot(&self, signal: u64) -> &Slot {
        let i = (signal.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize;
        &self.slots[i % SLOTS]
    }

    /// Kernel `dispatch_id` completes the app's `signal` through a barrier.
    pub fn expect(&self, signal: u64, dispatch_id: u64) {
        if signal == 0 {
            return;
        }
        let s = self.slot(signal);
        s.tag.store(0, Ordering::Release);
        s.signal.store(signal, Ordering::Release);
        s.tag.store(dispatch_id, Ordering::Release);
    }

    /// Some other packet completes the app's `signal`: its times are that
    /// packet's own from now on.
    pub fn forget(&self, signal: u64) {
        if signal == 0 {
            return;
        }
        let s = self.slot(signal);
        if s.signal.load(Ordering::Acquire) == signal {
            s.tag.store(0, Ordering::Release);
        }
    }

    /// Kernel `dispatch_id`, forwarded to `signal`, ran from `start` to
    /// `end`.
    pub fn record(&self, signal: u64, dispatch_id: u64, start: u64, end: u64) {
        let s = self.slot(signal);
        if s.tag.load(Ordering::Acquire) != dispatch_id
            || s.signal.load(Ordering::Acquire) != signal
        {
            return;
        }
        s.times_tag.store(0, Ordering::Release);
        s.start.store(start, Ordering::Release);
        s.end.store(end, Ordering::Release);
        s.times_tag.store(dispatch_id, Ordering::Release);
    }

    /// What is known of the kernel last forwarded to `signal`.
    pub fn lookup(&self, signal: u64) -> ForwardedKernel {
        if signal == 0 {
            return ForwardedKernel::Unknown;
        }
        let s = self.slot(signal);
        let tag = s.tag.load(Ordering::Acquire);
        if tag == 0 || s.signal.load(Ordering::Acquire) != signal {
            return ForwardedKernel::Unknown;
        }
        let before = s.times_tag.load(Ordering::Acquire);
        let (start, end) = (
            s.start.load(Ordering::Acquire),
            s.end.load(Ordering::Acquire),
        );
        let after = s.times_tag.load(Ordering::Acquire);
        let still =
            s.tag.load(Ordering::Acquire) == tag && s.signal.load(Ordering::Acquire) == signal;
        match (still, before == tag && after == tag) {
            (true, true) => ForwardedKernel::Times(start, end),
            (true, false) => ForwardedKernel::Pending(tag),
            (false, _) => ForwardedKernel::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forwarded_kernels_times_are_known_once_retired() {
        let t = ForwardedTimes::default();
        assert_eq!(t.lookup(0x1000), ForwardedKernel::Unknown);
        t.expect(0x1000, 7);
        assert_eq!(t.lookup(0x1000), ForwardedKernel::Pending(7));
        t.record(0x1000, 7, 100, 250);
        assert_eq!(t.lookup(0x1000), ForwardedKernel::Times(100, 250));
        // The next kernel forwarded to the same signal replaces it.
        t.expect(0x1000, 9);
        assert_eq!(t.lookup(0x1000), ForwardedKernel::Pending(9));
        // A late retirement of the earlier kernel changes nothing.
        t.record(0x1000, 7, 1, 2);
        assert_eq!(t.lookup(0x1000), ForwardedKernel::Pending(9));
        t.record(0x1000, 9, 300, 400);
        assert_eq!(t.lookup(0x1000), ForwardedKernel::Times(300, 400));
    }

    #[test]
    fn another_packet_completing_the_signal_makes_it_unknown() {
        let t = ForwardedTimes::default();
        t.expect(0x2000, 3);
        t.record(0x2000, 3, 10, 20);
        // A marker (barrier packet) the app completes with the same signal.
        t.forget(0x2000);
        assert_eq!(t.lookup(0x2000), ForwardedKernel::Unknown);
        // Its late retirement cannot bring the kernel back.
        t.record(0x2000, 3, 10, 20);
        assert_eq!(t.lookup(0x2000), ForwardedKernel::Unknown);
        // Forgetting another signal leaves a slot alone.
        t.expect(0x3000, 4);
        t.forget(0x4000);
        assert_eq!(t.lookup(0x3000), ForwardedKernel::Pending(4));
    }

    #[test]
    fn two_signals_in_one_slot_never_give_each_others_times() {
        let t = ForwardedTimes::default();
        // Find a second signal that shares 0x1000's slot.
        let first = 0x1000u64;
        let other = (1..u64::from(u32::MAX))
            .map(|i| first + i * 64)
            .find(|&s| std::ptr::eq(t.slot(s), t.slot(first)))
            .expect("a colliding signal");
        t.expect(first, 1);
        t.record(first, 1, 5, 6);
        t.expect(other, 2);
        assert_eq!(t.lookup(first), ForwardedKernel::Unknown);
        assert_eq!(t.lookup(other), ForwardedKernel::Pending(2));
        t.record(first, 1, 5, 6);
        assert_eq!(t.lookup(other), ForwardedKernel::Pending(2));
    }
}
