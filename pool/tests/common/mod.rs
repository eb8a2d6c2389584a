//! A fake signal provider that counts calls and checks how signals are used.

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};

use rprof_pool::{ProviderError, RawSignal, SignalProvider};

/// Fake signals are numbered 1..=max (0 is never a valid handle, as in ROCr).
pub struct FakeProvider {
    values: Vec<AtomicI64>,
    /// Set while a test holds the signal (see `begin_use` / `end_use`).
    in_use: Vec<AtomicBool>,
    destroyed: Vec<AtomicBool>,
    next: AtomicU32,
    /// `create` fails (status 0x1008) once this many signals exist.
    fail_at: u32,
    pub creates: AtomicU64,
    pub resets: AtomicU64,
    pub destroys: AtomicU64,
    pub failed_creates: AtomicU64,
}

/// `HSA_STATUS_ERROR_OUT_OF_RESOURCES`.
pub const OUT_OF_RESOURCES: u32 = 0x1008;

impl FakeProvider {
    pub fn new(max: u32) -> Self {
        Self::failing_at(max, u32::MAX)
    }

    pub fn failing_at(max: u32, fail_at: u32) -> Self {
        FakeProvider {
            values: (0..max).map(|_| AtomicI64::new(0)).collect(),
            in_use: (0..max).map(|_| AtomicBool::new(false)).collect(),
            destroyed: (0..max).map(|_| AtomicBool::new(false)).collect(),
            next: AtomicU32::new(0),
            fail_at,
            creates: AtomicU64::new(0),
            resets: AtomicU64::new(0),
            destroys: AtomicU64::new(0),
            failed_creates: AtomicU64::new(0),
        }
    }

    fn index(&self, signal: RawSignal) -> usize {
        assert!(
            signal.0 >= 1 && signal.0 <= self.next.load(Ordering::SeqCst) as u64,
            "unknown signal {signal:?}"
        );
        (signal.0 - 1) as usize
    }

    /// Marks `signal` as used by the caller; panics if someone else is using it.
    pub fn begin_use(&self, signal: RawSignal) {
        let i = self.index(signal);
        assert!(
            !self.destroyed[i].load(Ordering::SeqCst),
            "{signal:?} used after destroy"
        );
        assert!(
            !self.in_use[i].swap(true, Ordering::SeqCst),
            "{signal:?} handed out twice at the same time"
        );
        assert_eq!(
            self.values[i].load(Ordering::SeqCst),
            1,
            "{signal:?} not reset before reuse"
        );
    }

    /// Simulates the GPU completing the dispatch and the reader finishing.
    pub fn end_use(&self, signal: RawSignal) {
        let i = self.index(signal);
        self.values[i].store(0, Ordering::SeqCst);
        assert!(
            self.in_use[i].swap(false, Ordering::SeqCst),
            "{signal:?} not in use"
        );
    }

    pub fn value(&self, signal: RawSignal) -> i64 {
        self.values[self.index(signal)].load(Ordering::SeqCst)
    }

    pub fn creates(&self) -> u64 {
        self.creates.load(Ordering::SeqCst)
    }
    pub fn resets(&self) -> u64 {
        self.resets.load(Ordering::SeqCst)
    }
    pub fn destroys(&self) -> u64 {
        self.destroys.load(Ordering::SeqCst)
    }
}

impl SignalProvider for FakeProvider {
    fn create(&self, initial: i64) -> Result<RawSignal, ProviderError> {
        let n = self.next.load(Ordering::SeqCst);
        if n >= self.fail_at || n as usize >= self.values.len() {
            self.failed_creates.fetch_add(1, Ordering::SeqCst);
            return Err(ProviderError {
                status: OUT_OF_RESOURCES,
            });
        }
        // The pool creates under its growth lock, so no two creates race.
        self.next.store(n + 1, Ordering::SeqCst);
        self.values[n as usize].store(initial, Ordering::SeqCst);
        self.creates.fetch_add(1, Ordering::SeqCst);
        Ok(RawSignal(u64::from(n) + 1))
    }

    fn reset(&self, signal: RawSignal, value: i64) {
        let i = self.index(signal);
        assert!(
            !self.destroyed[i].load(Ordering::SeqCst),
            "{signal:?} reset after destroy"
        );
        assert!(
            !self.in_use[i].load(Ordering::SeqCst),
            "{signal:?} reset while a reader still uses it"
        );
        self.values[i].store(value, Ordering::SeqCst);
        self.resets.fetch_add(1, Ordering::SeqCst);
    }

    fn destroy(&self, signal: RawSignal) {
        let i = self.index(signal);
        assert!(
            !self.destroyed[i].swap(true, Ordering::SeqCst),
            "{signal:?} destroyed twice"
        );
        assert!(
            !self.in_use[i].load(Ordering::SeqCst),
            "{signal:?} destroyed while in use"
        );
        self.destroys.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let created = self.next.load(Ordering::SeqCst) as u64;
            assert_eq!(
                self.destroys(),
                created,
                "signals leaked: every created signal must be destroyed"
            );
        }
    }
}
