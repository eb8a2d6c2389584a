//! RPC doorbell tracing: recognising a GPU-to-host RPC server's doorbell
//! waits and turning them into sleep / wake / serve records.
//!
//! # The protocol being observed
//! LLVM libc's GPU RPC server thread sleeps in
//! `hsa_signal_wait_scacquire(doorbell, NE, 0, timeout, BLOCKED)` on an
//! interrupt signal. A device client opening a port adds 1 to the signal's
//! value; if the old value was 0 it writes the signal's event id to the
//! signal's event mailbox and raises an interrupt, which wakes the server.
//! The server subtracts 1 each time it finishes a port; shutdown stores 1.
//!
//! # Recognition rule
//! A wait is a *doorbell wait* when all of these hold:
//! - it is a `BLOCKED` wait (the server sleeps rather than spins);
//! - the condition is `NE` against 0 (wake on any pending client);
//! - the signal is an interrupt signal: its `amd_signal_t` has a non-zero
//!   `event_mailbox_ptr` (the device can wake the host).
//!
//! Limits: a program that waits this way for some other purpose is traced as
//! a doorbell too; a server that waits with another condition (e.g. `GTE 1`)
//! or polls with `ACTIVE` waits is not recognised. A doorbell whose signal has
//! no event (the 4096-event budget exhausted, so ROCr made a polling signal)
//! fails the last rule: such waits are counted as `unrecognised_blocked` in
//! [`RpcCounters`] and reported, never traced wrongly.
//!
//! # From waits to records
//! Per thread, [`DoorbellTracker`] turns the sequence of wait entries and
//! exits into [`RpcWakeRecord`]s: the sleep runs from the first wait entry
//! (consecutive timeouts extend it) to the return that saw a non-zero value;
//! the serve runs from that return to the next wait entry on the same thread.
//! A record is therefore complete when the server next waits (or at
//! shutdown, [`DoorbellTracker::flush`]). The tracker is plain data, owned by
//! one thread: no lock, no allocation.

/// `HSA_SIGNAL_CONDITION_NE`.
pub const CONDITION_NE: u32 = 1;
/// `HSA_WAIT_STATE_BLOCKED`.
pub const WAIT_STATE_BLOCKED: u32 = 0;

/// One doorbell wake of an RPC server thread: sleep, wake, serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RpcWakeRecord {
    /// OS thread id of the server thread.
    pub thread_id: u32,
    /// The doorbell signal handle.
    pub signal: u64,
    /// Entry into the (first) wait of this sleep.
    pub sleep_begin_ns: u64,
    /// Return of the wait that saw pending clients.
    pub wake_ns: u64,
    /// Signal value seen at wake: pending clients (or 1 for a shutdown
    /// store).
    pub value_at_wake: i64,
    /// Next wait entry: end of serving.
    pub serve_end_ns: u64,
    /// Signal value at the next wait entry: clients still pending when the
    /// server went back to sleep (normally 0).
    pub value_at_serve_end: i64,
    /// When the device rang, if the device can tell (the emulated GPU can;
    /// real hardware writes no timestamp with the interrupt). 0 = unknown.
    pub ring_ns: u64,
    /// Waits of this sleep that returned by timeout before the wake.
    pub timeouts: u32,
}

impl RpcWakeRecord {
    /// Time asleep.
    pub fn sleep_ns(&self) -> u64 {
        self.wake_ns.saturating_sub(self.sleep_begin_ns)
    }
    /// Time serving after the wake.
    pub fn serve_ns(&self) -> u64 {
        self.serve_end_ns.saturating_sub(self.wake_ns)
    }
    /// Ring-to-wake latency, when the ring time is known.
    pub fn wake_latency_ns(&self) -> Option<u64> {
        (self.ring_ns != 0).then(|| self.wake_ns.saturating_sub(self.ring_ns))
    }
}

/// Whether a wait has the doorbell shape: `BLOCKED`, condition `NE`, compare
/// value 0. It is a doorbell wait if the signal also has an event mailbox;
/// without one (no driver event left) it is counted as
/// `unrecognised_blocked` instead.
pub fn has_doorbell_shape(condition: u32, compare_value: i64, wait_state: u32) -> bool {
    condition == CONDITION_NE && compare_value == 0 && wait_state == WAIT_STATE_BLOCKED
}

/// Per-thread state machine from doorbell waits to [`RpcWakeRecord`]s.
#[derive(Debug, Clone, Copy, Default)]
pub struct DoorbellTracker {
    /// A wake whose serve has not ended yet.
    serving: Option<RpcWakeRecord>,
    /// The sleep in progress: (signal, begin, timeouts so far).
    sleeping: Option<(u64, u64, u32)>,
}

impl DoorbellTracker {
    /// A thread that is neither asleep nor serving.
    pub const fn new() -> Self {
        DoorbellTracker {
            serving: None,
            sleeping: None,
        }
    }

    /// A wait on `signal` begins at `now`, the signal holding `value`.
    /// Returns the record whose serve this ends, if any.
    pub fn wait_enter(&mut self, signal: u64, now: u64, value: i64) -> Option<RpcWakeRecord> {
        let done = self.serving.take().map(|mut r| {
            r.serve_end_ns = now;
            r.value_at_serve_end = value;
            r
        });
        match self.sleeping {
            // A timed-out wait that returned and is re-entered: same sleep.
            Some((s, _, _)) if s == signal => {}
            _ => self.sleeping = Some((signal, now, 0)),
        }
        done
    }

    /// The wait on `signal` returned at `now` having seen `value`. A zero
    /// value is a timeout (or spurious return): the sleep goes on.
    pub fn wait_exit(&mut self, thread_id: u32, signal: u64, now: u64, value: i64, ring_ns: u64) {
        let Some((s, begin, timeouts)) = self.sleeping else {
            return;
        };
        if s != signal {
            return;
        }
        if value == 0 {
            self.sleeping = Some((s, begin, timeouts + 1));
            return;
        }
        self.sleeping = None;
        self.serving = Some(RpcWakeRecord {
            thread_id,
            signal,
            sleep_begin_ns: begin,
            wake_ns: now,
            value_at_wake: value,
            serve_end_ns: 0,
            value_at_serve_end: 0,
            ring_ns,
            timeouts,
        });
    }

    /// Ends an open serve at `now` (thread exit, shutdown).
    pub fn flush(&mut self, now: u64) -> Option<RpcWakeRecord> {
        self.sleeping = None;
        self.serving.take().map(|mut r| {
            r.serve_end_ns = now;
            r
        })
    }
}

/// Counters reported in the run metadata and by `--stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RpcCounters {
    /// Wakes recorded.
    pub wakes: u64,
    /// Blocked `NE 0` waits on signals without an event (not traced).
    pub unrecognised_blocked: u64,
}

/// Summary figures for `--stats`: wake count, serve-time percentiles and the
/// server's busy share.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RpcSummary {
    /// Wakes.
    pub wakes: u64,
    /// Median serve time, ns.
    pub serve_p50_ns: u64,
    /// 99th percentile serve time, ns.
    pub serve_p99_ns: u64,
    /// Serving time / (serving + sleeping time).
    pub busy_share: f64,
    /// Median ring-to-wake latency, where known.
    pub wake_latency_p50_ns: Option<u64>,
}

/// Collects serve times for [`RpcSummary`] with bounded memory: exact up to
/// a fixed number of samples, then a log-bucketed histogram.
#[derive(Debug, Clone)]
pub struct RpcStats {
    serve: Histogram,
    latency: Histogram,
    wakes: u64,
    sleep_total: u64,
    serve_total: u64,
}

impl Default for RpcStats {
    fn default() -> Self {
        RpcStats {
            serve: Histogram::new(),
            latency: Histogram::new(),
            wakes: 0,
            sleep_total: 0,
            serve_total: 0,
        }
    }
}

impl RpcStats {
    /// Adds one wake.
    pub fn add(&mut self, r: &RpcWakeRecord) {
        self.wakes += 1;
        self.sleep_total += r.sleep_ns();
        self.serve_total += r.serve_ns();
        self.serve.add(r.serve_ns());
        if let Some(l) = r.wake_latency_ns() {
            self.latency.add(l);
        }
    }

    /// The figures so far.
    pub fn summary(&self) -> RpcSummary {
        let busy = self.serve_total + self.sleep_total;
        RpcSummary {
            wakes: self.wakes,
            serve_p50_ns: self.serve.quantile(0.50),
            serve_p99_ns: self.serve.quantile(0.99),
            busy_share: if busy == 0 {
                0.0
            } else {
                self.serve_total as f64 / busy as f64
            },
            wake_latency_p50_ns: (self.latency.count > 0).then(|| self.latency.quantile(0.5)),
        }
    }
}

/// Log-linear histogram: 64 power-of-two ranges × 16 linear sub-buckets;
/// quantiles are exact to 1/16 of their power of two.
#[derive(Debug, Clone)]
struct Histogram {
    buckets: Box<[u64; 64 * 16]>,
    count: u64,
}

impl Histogram {
    fn new() -> Self {
        Histogram {
            buckets: Box::new([0; 64 * 16]),
            count: 0,
        }
    }

    fn index(v: u64) -> usize {
        if v < 16 {
            return v as usize;
        }
        let log = 63 - v.leading_zeros() as usize; // >= 4
        let sub = ((v >> (log - 4)) & 15) as usize;
        (log - 3) * 16 + sub
    }

    fn lower_bound(i: usize) -> u64 {
        if i < 16 {
            return i as u64;
        }
        let log = i / 16 + 3;
        let sub = (i % 16) as u64;
        (1u64 << log) + (sub << (log - 4))
    }

    fn add(&mut self, v: u64) {
        self.buckets[Self::index(v)] += 1;
        self.count += 1;
    }

    fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Self::lower_bound(i);
            }
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognition_rule() {
        // The mailbox half of the rule (no event: counted, not traced) is
        // tested end to end in tests/rpc_trace.rs.
        assert!(has_doorbell_shape(CONDITION_NE, 0, WAIT_STATE_BLOCKED));
        assert!(!has_doorbell_shape(CONDITION_NE, 0, 1)); // ACTIVE
        assert!(!has_doorbell_shape(0, 0, WAIT_STATE_BLOCKED)); // EQ
        assert!(!has_doorbell_shape(CONDITION_NE, 5, WAIT_STATE_BLOCKED));
        assert!(!has_doorbell_shape(CONDITION_NE, 1, WAIT_STATE_BLOCKED));
    }

    #[test]
    fn timeouts_extend_the_sleep_and_next_wait_ends_the_serve() {
        let mut t = DoorbellTracker::default();
        assert_eq!(t.wait_enter(7, 100, 0), None);
        t.wait_exit(1, 7, 150, 0, 0); // timeout
        assert_eq!(t.wait_enter(7, 151, 0), None);
        t.wait_exit(1, 7, 300, 3, 290);
        let r = t.wait_enter(7, 450, 1).unwrap();
        assert_eq!(
            r,
            RpcWakeRecord {
                thread_id: 1,
                signal: 7,
                sleep_begin_ns: 100,
                wake_ns: 300,
                value_at_wake: 3,
                serve_end_ns: 450,
                value_at_serve_end: 1,
                ring_ns: 290,
                timeouts: 1
            }
        );
        assert_eq!(
            (r.sleep_ns(), r.serve_ns(), r.wake_latency_ns()),
            (200, 150, Some(10))
        );
        t.wait_exit(1, 7, 500, 1, 0);
        let last = t.flush(600).unwrap();
        assert_eq!(
            (
                last.sleep_begin_ns,
                last.wake_ns,
                last.serve_end_ns,
                last.wake_latency_ns()
            ),
            (450, 500, 600, None)
        );
        assert_eq!(t.flush(700), None);
    }

    #[test]
    fn summary_percentiles_and_busy_share() {
        let mut s = RpcStats::default();
        for i in 0..100u64 {
            s.add(&RpcWakeRecord {
                sleep_begin_ns: 0,
                wake_ns: 1000,
                serve_end_ns: 1000 + (i + 1) * 10,
                ..Default::default()
            });
        }
        let m = s.summary();
        assert_eq!(m.wakes, 100);
        // p50 = 500 ns, p99 = 990 ns, within the histogram's 1/16 resolution.
        assert!((480..=500).contains(&m.serve_p50_ns), "{m:?}");
        assert!((960..=990).contains(&m.serve_p99_ns), "{m:?}");
        let serve: u64 = (1..=100).map(|i| i * 10).sum();
        assert!((m.busy_share - serve as f64 / (serve + 100_000) as f64).abs() < 1e-12);
        assert_eq!(m.wake_latency_p50_ns, None);
    }

    #[test]
    fn histogram_buckets_are_monotonic_and_tight() {
        for v in [0u64, 1, 15, 16, 17, 31, 32, 1000, 123_456_789, u64::MAX / 2] {
            let i = Histogram::index(v);
            let lo = Histogram::lower_bound(i);
            assert!(lo <= v && v - lo <= v / 16 + 1, "v={v} lo={lo}");
        }
    }
}
