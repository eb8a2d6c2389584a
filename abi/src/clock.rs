//! The host clocks, read through one `clock_gettime` wrapper.
//!
//! [`boottime_ns`] (`CLOCK_BOOTTIME`) is rprof's time base: ROCr translates GPU timestamps into it, every record
//! uses it, and the emulated GPU reports it as its system clock. The other clocks are read only to relate it to
//! other time bases (a Perfetto clock snapshot, the "CPU clock" of the thunk's clock counters, test timing).
//!
//! [`fast_boottime_ns`] is the same clock for the interceptor's hot path: where the kernel itself keeps time by
//! the CPU's invariant time-stamp counter, it reads the counter (`rdtsc`, ~12 ns here) and converts it with a
//! line that [`calibrate_fast_clock`] fits to `CLOCK_BOOTTIME` every few milliseconds, instead of calling
//! `clock_gettime` (~30 ns here, two calls per intercepted packet). Until that line exists, on other machines,
//! and whenever the line is stale, it is [`boottime_ns`] itself.

use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};

/// A clock [`now_ns`] can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// `CLOCK_BOOTTIME`: monotonic, counts suspend; rprof's time base.
    Boottime,
    /// `CLOCK_MONOTONIC`.
    Monotonic,
    /// `CLOCK_MONOTONIC_RAW` (not slewed by NTP).
    MonotonicRaw,
    /// `CLOCK_REALTIME` (wall clock).
    Realtime,
    /// `CLOCK_THREAD_CPUTIME_ID`: CPU time of the calling thread.
    ThreadCpu,
}

impl Clock {
    #[inline]
    fn id(self) -> libc::clockid_t {
        match self {
            Clock::Boottime => libc::CLOCK_BOOTTIME,
            Clock::Monotonic => libc::CLOCK_MONOTONIC,
            Clock::MonotonicRaw => libc::CLOCK_MONOTONIC_RAW,
            Clock::Realtime => libc::CLOCK_REALTIME,
            Clock::ThreadCpu => libc::CLOCK_THREAD_CPUTIME_ID,
        }
    }
}

/// The current value of `clock` in nanoseconds (0 if the kernel could not read it, which no Linux rprof
/// supports does for these clocks).
#[inline]
pub fn now_ns(clock: Clock) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec and the id is one of the builtin clocks every supported Linux
    // has; on failure `ts` stays zeroed.
    unsafe { libc::clock_gettime(clock.id(), &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// `CLOCK_BOOTTIME` in nanoseconds: the clock ROCr translates GPU timestamps into, and the one every rprof
/// record (and the emulated GPU's system clock) uses.
#[inline]
pub fn boottime_ns() -> u64 {
    now_ns(Clock::Boottime)
}

/// Whether the kernel keeps `CLOCK_BOOTTIME` by an invariant time-stamp counter that every CPU shares: x86-64,
/// the counter neither changes rate nor stops (`constant_tsc`, `nonstop_tsc`), and the kernel's clocksource is
/// `tsc` (it switches away from the counter when it finds the CPUs' counters out of step). Only then may
/// [`fast_boottime_ns`] read it.
pub fn tsc_keeps_time() -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    let source =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .unwrap_or_default();
    // The first CPU's flags (the kernel requires the same of every CPU for a `tsc` clocksource); read up to that
    // line only: /proc/cpuinfo is long on large machines.
    let flags = std::fs::File::open("/proc/cpuinfo")
        .ok()
        .and_then(|f| {
            std::io::BufRead::lines(std::io::BufReader::new(f))
                .map_while(Result::ok)
                .find(|l| l.starts_with("flags"))
        })
        .unwrap_or_default();
    let has = |f: &str| flags.split_whitespace().any(|w| w == f);
    source.trim() == "tsc" && has("constant_tsc") && has("nonstop_tsc")
}

/// The CPU's time-stamp counter (0 where there is none).
#[inline]
fn tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` reads a counter; every x86-64 CPU has it and it has no preconditions.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

/// How long a fitted line may be extrapolated past its base before [`fast_boottime_ns`] falls back to
/// `clock_gettime` (the calibrating thread parks when nothing is in flight): 50 ms. A slope fitted over 10 ms
/// from pairs good to ~20 ns is good to a few ppm, a fraction of a microsecond over that time.
const LINE_LIFETIME_NS: u64 = 50_000_000;
/// How often the line is refitted (and, halved, the shortest base its slope is measured over).
const CALIBRATION_PERIOD_NS: u64 = 10_000_000;
/// A counter-and-clock pair whose two counter reads lie further apart than this many ticks was interrupted
/// (preempted, or an interrupt came) and is read again.
const PAIR_MAX_TICKS: u64 = 2_000;
/// Largest gap between a fresh line and the clock that a calibration absorbs smoothly (by steering the slope);
/// beyond it (a suspend, a clock step) the line restarts at the clock. Refitted every 10 ms, the gap is tens of
/// nanoseconds.
const MAX_SMOOTH_ERROR_NS: i64 = 2_000;
/// Most the steered slope may differ from the measured one, in parts per 2^32 of it (about 120 ppm: 1.2 µs of
/// gap closed per 10 ms period).
const MAX_STEER: u64 = 1 << 19;

/// Refits in a row that found a fresh line more than `MAX_SMOOTH_ERROR_NS` off the clock, after which the counter
/// is not trusted any more and the fast clock turns itself off for the rest of the process (the kernel may have
/// found the counter unstable and switched clocksource after rprof looked).
const MAX_RESTARTS_IN_A_ROW: u32 = 3;

/// The line [`fast_boottime_ns`] converts counter readings with, published by a sequence lock: `seq` is 0 until
/// the first line exists and odd while one is being written; `base_tsc`, `base_ns`, `mult` and `valid_until_tsc`
/// are read only between two equal even values of it. One process-wide instance ([`LINE`]); tests make their own
/// and feed it made-up readings.
struct FastLine {
    seq: AtomicU64,
    /// Counter value at the line's base.
    base_tsc: AtomicU64,
    /// `CLOCK_BOOTTIME` at `base_tsc`.
    base_ns: AtomicU64,
    /// Slope: nanoseconds per tick, fixed point with 32 fraction bits.
    mult: AtomicU64,
    /// Counter value past which the line is stale ([`LINE_LIFETIME_NS`]); 0 once the fast clock turned itself off.
    valid_until_tsc: AtomicU64,
    /// The calibrator's own state, under its lock: the last pair it measured (counter, clock), 0 before the
    /// first, and how many refits in a row restarted a fresh line.
    anchor_tsc: AtomicU64,
    anchor_ns: AtomicU64,
    restarts: AtomicU32,
    /// Lines fitted so far.
    lines: AtomicU64,
    /// Whether [`enable_fast_clock`] was called (and the counter keeps time), and the counter has not been given
    /// up since.
    enabled: AtomicBool,
}

/// The process's line.
static LINE: FastLine = FastLine::new();

impl FastLine {
    const fn new() -> Self {
        FastLine {
            seq: AtomicU64::new(0),
            base_tsc: AtomicU64::new(0),
            base_ns: AtomicU64::new(0),
            mult: AtomicU64::new(0),
            valid_until_tsc: AtomicU64::new(0),
            anchor_tsc: AtomicU64::new(0),
            anchor_ns: AtomicU64::new(0),
            restarts: AtomicU32::new(0),
            lines: AtomicU64::new(0),
            enabled: AtomicBool::new(false),
        }
    }

    /// The clock at counter value `now` read along the line, or `None` (read the clock itself) when there is no
    /// fresh line or one is being written. `now` must be read after `seq` (the caller passes a closure).
    #[inline]
    fn convert(&self, now: impl FnOnce() -> u64) -> Option<u64> {
        let seq = self.seq.load(Ordering::Acquire);
        if seq == 0 || seq & 1 == 1 {
            return None;
        }
        let base_tsc = self.base_tsc.load(Ordering::Relaxed);
        let base_ns = self.base_ns.load(Ordering::Relaxed);
        let mult = self.mult.load(Ordering::Relaxed);
        let valid_until = self.valid_until_tsc.load(Ordering::Relaxed);
        let now = now();
        fence(Ordering::Acquire);
        if self.seq.load(Ordering::Relaxed) != seq || now < base_tsc || now > valid_until {
            return None;
        }
        Some(on_line(now, base_tsc, base_ns, mult))
    }

    /// Whether a refit is due at counter value `now_tsc` / clock `now_ns`, each read only when needed (the first
    /// line's wait is timed by the clock, later ones by the counter).
    fn due(&self, seq: u64, now_tsc: impl FnOnce() -> u64, now_ns: impl FnOnce() -> u64) -> bool {
        let anchor_tsc = self.anchor_tsc.load(Ordering::Relaxed);
        if anchor_tsc == 0 {
            return true;
        }
        if seq == 0 {
            return now_ns().saturating_sub(self.anchor_ns.load(Ordering::Relaxed))
                >= CALIBRATION_PERIOD_NS;
        }
        let mult = self.mult.load(Ordering::Relaxed).max(1);
        let period_ticks = (u128::from(CALIBRATION_PERIOD_NS) << 32) / u128::from(mult);
        u128::from(now_tsc().wrapping_sub(anchor_tsc)) >= period_ticks
    }

    /// One calibration (see [`calibrate_fast_clock`]) with `now_tsc` and `now_ns` to read the counter and the
    /// clock for the due check (nothing is read while the fast clock is off) and `pair` to take a
    /// counter-and-clock pair.
    fn calibrate(
        &self,
        now_tsc: impl FnOnce() -> u64,
        now_ns: impl FnOnce() -> u64,
        pair: impl FnOnce() -> Option<(u64, u64)>,
    ) {
        if !self.enabled.load(Ordering::Acquire) {
            return;
        }
        let seq = self.seq.load(Ordering::Acquire);
        if seq & 1 == 1 || !self.due(seq, now_tsc, now_ns) {
            return;
        }
        // The lock: odd while this call works.
        if self
            .seq
            .compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let next = self.fit(seq, pair());
        self.seq.store(next, Ordering::Release);
    }

    /// The fit itself, with the lock held (`seq` is the value before it), from the pair `(counter, clock)` just
    /// read; returns the sequence value to publish (`seq + 2` after a new line, back to an even value without
    /// one).
    fn fit(&self, seq: u64, pair: Option<(u64, u64)>) -> u64 {
        let unchanged = if seq == 0 { 0 } else { seq + 2 };
        let Some((now_tsc, now_ns)) = pair else {
            return unchanged;
        };
        let (anchor_tsc, anchor_ns) = (
            self.anchor_tsc.load(Ordering::Relaxed),
            self.anchor_ns.load(Ordering::Relaxed),
        );
        if anchor_tsc == 0 || now_tsc <= anchor_tsc || now_ns <= anchor_ns {
            self.anchor_tsc.store(now_tsc, Ordering::Relaxed);
            self.anchor_ns.store(now_ns, Ordering::Relaxed);
            return unchanged;
        }
        let elapsed_ns = now_ns - anchor_ns;
        // The due check paces the fits; half a period is the shortest base the slope is measured over.
        if elapsed_ns < CALIBRATION_PERIOD_NS / 2 {
            return unchanged;
        }
        let ticks = now_tsc - anchor_tsc;
        let measured = ((u128::from(elapsed_ns) << 32) / u128::from(ticks)) as u64;
        self.anchor_tsc.store(now_tsc, Ordering::Relaxed);
        self.anchor_ns.store(now_ns, Ordering::Relaxed);
        if measured == 0 {
            return unchanged;
        }
        let (mut base_ns, mut mult) = (now_ns, measured);
        // A stale line was not read (readers fell back to the clock itself): the new one starts at the clock.
        let fresh = seq != 0 && now_tsc <= self.valid_until_tsc.load(Ordering::Relaxed);
        if fresh {
            let current = on_line(
                now_tsc,
                self.base_tsc.load(Ordering::Relaxed),
                self.base_ns.load(Ordering::Relaxed),
                self.mult.load(Ordering::Relaxed),
            );
            let error = now_ns.wrapping_sub(current) as i64;
            if error.abs() <= MAX_SMOOTH_ERROR_NS {
                // Continue from where the line stands; close the gap over the next period.
                self.restarts.store(0, Ordering::Relaxed);
                base_ns = current;
                let bound = (i128::from(measured) * i128::from(MAX_STEER)) >> 32;
                let steer = ((i128::from(error) << 32) / i128::from(ticks)).clamp(-bound, bound);
                mult = (i128::from(measured) + steer).max(1) as u64;
            } else if self.restarts.fetch_add(1, Ordering::Relaxed) + 1 >= MAX_RESTARTS_IN_A_ROW {
                // The counter does not keep time (any more): off for good, readers use the clock.
                self.enabled.store(false, Ordering::Release);
                self.valid_until_tsc.store(0, Ordering::Relaxed);
                return seq + 2;
            } else {
                // Restart at the clock with the old slope: the one measured across the jump is off too.
                mult = self.mult.load(Ordering::Relaxed).max(1);
            }
        }
        let lifetime_ticks = ((u128::from(LINE_LIFETIME_NS) << 32) / u128::from(mult)) as u64;
        self.base_tsc.store(now_tsc, Ordering::Relaxed);
        self.base_ns.store(base_ns, Ordering::Relaxed);
        self.mult.store(mult, Ordering::Relaxed);
        self.valid_until_tsc
            .store(now_tsc.saturating_add(lifetime_ticks), Ordering::Relaxed);
        self.lines.fetch_add(1, Ordering::Relaxed);
        seq + 2
    }
}

/// Lets [`fast_boottime_ns`] read the time-stamp counter once [`calibrate_fast_clock`] has fitted a line, if
/// [`tsc_keeps_time`]. Returns whether it will.
pub fn enable_fast_clock() -> bool {
    let ok = tsc_keeps_time();
    LINE.enabled.store(ok, Ordering::Release);
    ok
}

/// Whether [`fast_boottime_ns`] reads the counter now (a line exists and is fresh).
pub fn fast_clock_active() -> bool {
    LINE.convert(tsc).is_some()
}

/// How many lines [`calibrate_fast_clock`] has fitted in this process (for the verbose summary and tests).
pub fn fast_clock_lines() -> u64 {
    LINE.lines.load(Ordering::Relaxed)
}

/// Whether the fast clock is on: [`enable_fast_clock`] found that the counter keeps time, and no refit has given
/// it up since (then [`fast_boottime_ns`] reads the counter whenever a fresh line exists).
pub fn fast_clock_enabled() -> bool {
    LINE.enabled.load(Ordering::Acquire)
}

/// `ns = base_ns + (tsc - base_tsc) * mult / 2^32`.
#[inline]
fn on_line(tsc: u64, base_tsc: u64, base_ns: u64, mult: u64) -> u64 {
    let ticks = tsc.wrapping_sub(base_tsc);
    base_ns.wrapping_add(((u128::from(ticks) * u128::from(mult)) >> 32) as u64)
}

/// `CLOCK_BOOTTIME` in nanoseconds, as [`boottime_ns`], read from the time-stamp counter while a fresh fitted
/// line exists (see the module docs); within the fit's error (tens of nanoseconds) of `clock_gettime`.
#[inline]
pub fn fast_boottime_ns() -> u64 {
    LINE.convert(tsc).unwrap_or_else(boottime_ns)
}

/// One reading of the counter and the clock together: the clock read between two counter reads, paired with
/// their midpoint. `None` when every try was interrupted.
fn read_pair() -> Option<(u64, u64)> {
    for _ in 0..4 {
        let before = tsc();
        let ns = boottime_ns();
        let after = tsc();
        if after >= before && after - before <= PAIR_MAX_TICKS {
            return Some((before + (after - before) / 2, ns));
        }
    }
    None
}

/// Fits the line [`fast_boottime_ns`] reads by, if the fast clock is enabled and the last fit is at least
/// `CALIBRATION_PERIOD_NS` (10 ms) old; cheap otherwise (a few loads and a counter read; one load while the fast
/// clock is off). Called by one thread that runs while dispatches are in flight (rprof's completion thread); a
/// concurrent call returns at once.
///
/// Each new line starts where the current (fresh) one stands at the new pair's counter value, so readings stay
/// continuous, and its slope is the measured one steered (by at most `MAX_STEER`, ~120 ppm) to meet the clock one
/// period later: the line follows `CLOCK_BOOTTIME` as NTP slews it without ever stepping back. A gap beyond
/// `MAX_SMOOTH_ERROR_NS` (2 µs), or a stale line, restarts the line at the clock; three such gaps in a row turn
/// the fast clock off.
pub fn calibrate_fast_clock() {
    LINE.calibrate(tsc, boottime_ns, read_pair);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boottime_advances_with_real_time() {
        let a = boottime_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = boottime_ns();
        assert!(b >= a + 2_000_000, "{a} {b}");
    }

    #[test]
    fn every_clock_reads_a_nonzero_time() {
        for c in [
            Clock::Boottime,
            Clock::Monotonic,
            Clock::MonotonicRaw,
            Clock::Realtime,
            Clock::ThreadCpu,
        ] {
            assert!(now_ns(c) > 0, "{c:?}");
        }
        // The wall clock is past 2020-01-01.
        assert!(now_ns(Clock::Realtime) > 1_577_836_800 * 1_000_000_000);
    }

    /// The fast clock agrees with `clock_gettime` (within 2 µs, far below any gap between an enqueue and the
    /// device starting the kernel) and never steps back while it reads by a line, also across new lines. Where the counter does not
    /// keep time it is `clock_gettime` itself. One test: the line is process-wide.
    #[test]
    fn fast_clock_follows_boottime_and_never_steps_back() {
        let counter = enable_fast_clock();
        assert_eq!(counter, tsc_keeps_time());
        let start = boottime_ns();
        let mut last = 0;
        let mut lines = 0;
        let mut previous_seq = LINE.seq.load(Ordering::Acquire);
        let line = || {
            (
                LINE.base_tsc.load(Ordering::Relaxed),
                LINE.base_ns.load(Ordering::Relaxed),
                LINE.mult.load(Ordering::Relaxed),
            )
        };
        while boottime_ns() - start < 120_000_000 {
            let old = line();
            calibrate_fast_clock();
            let seq = LINE.seq.load(Ordering::Acquire);
            if seq != previous_seq {
                let new = line();
                if previous_seq != 0 && new != old {
                    // A new line starts where the old one stood.
                    let stood = on_line(new.0, old.0, old.1, old.2);
                    assert!(
                        stood.abs_diff(new.1) <= 1,
                        "new line at {} where the old stood at {stood}",
                        new.1
                    );
                }
                lines += 1;
                previous_seq = seq;
            }
            let mut on_line_before = false;
            for _ in 0..100 {
                let before = boottime_ns();
                let on_line = fast_clock_active();
                let fast = fast_boottime_ns();
                let after = boottime_ns();
                if on_line && on_line_before {
                    assert!(fast >= last, "stepped back: {fast} after {last}");
                }
                on_line_before = on_line && fast_clock_active();
                assert!(
                    fast + 2_000 >= before && fast <= after + 2_000,
                    "{fast} not within 2 us of [{before}, {after}]"
                );
                last = fast;
            }
        }
        assert_eq!(fast_clock_active(), counter);
        if counter {
            // 120 ms in 10 ms periods: a line every period after the first.
            assert!(lines >= 8, "{lines} lines");
            assert!(fast_clock_lines() >= 8, "{} lines", fast_clock_lines());
        }
        // Nobody calibrates for longer than a line lives: readings fall back to the clock itself, and the next
        // calibration starts a line at the clock again.
        std::thread::sleep(std::time::Duration::from_millis(60));
        assert!(!fast_clock_active());
        let (before, fast, after) = (boottime_ns(), fast_boottime_ns(), boottime_ns());
        assert!(
            before <= fast && fast <= after,
            "{fast} not in [{before}, {after}]"
        );
        calibrate_fast_clock();
        assert_eq!(fast_clock_active(), counter);
        let (before, fast, after) = (boottime_ns(), fast_boottime_ns(), boottime_ns());
        assert!(
            fast + 2_000 >= before && fast <= after + 2_000,
            "{fast} not within 2 us of [{before}, {after}]"
        );
    }

    /// A line fed made-up readings: the counter ticks 3 times per nanosecond of the clock (times `1 + ppm`).
    struct Machine {
        line: FastLine,
        tsc: u64,
        ns: u64,
        noise: u64,
    }

    impl Machine {
        fn new() -> Self {
            let line = FastLine::new();
            line.enabled.store(true, Ordering::Release);
            Machine {
                line,
                tsc: 5_000_000_000_000,
                ns: 1_000_000_000_000,
                noise: 12345,
            }
        }

        /// A machine whose line was fitted over 50 ms of a steady clock.
        fn fitted() -> Self {
            let mut m = Machine::new();
            for _ in 0..5 {
                m.pass(10_000_000, 0);
                m.calibrate();
            }
            m
        }

        /// Lets `ns` nanoseconds of the clock pass, the clock running `ppm` parts per million fast of the counter.
        fn pass(&mut self, ns: u64, ppm: i64) {
            self.tsc += 3 * ns;
            self.ns = (self.ns as i64 + ns as i64 + ns as i64 * ppm / 1_000_000) as u64;
        }

        /// A calibration whose pair is off by up to ±20 ns (a made-up, repeatable noise).
        fn calibrate(&mut self) {
            self.noise = self
                .noise
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let off = (self.noise >> 33) % 41;
            let pair_ns = self.ns + off - 20;
            let (tsc, ns) = (self.tsc, self.ns);
            self.line.calibrate(|| tsc, || ns, || Some((tsc, pair_ns)));
        }

        fn read(&self) -> Option<u64> {
            self.line.convert(|| self.tsc)
        }

        fn params(&self) -> (u64, u64, u64) {
            (
                self.line.base_tsc.load(Ordering::Relaxed),
                self.line.base_ns.load(Ordering::Relaxed),
                self.line.mult.load(Ordering::Relaxed),
            )
        }
    }

    /// Fitted every 10 ms, the line stays within tens of nanoseconds of a steady clock and within a microsecond of
    /// one that NTP slews by 100 ppm; each new line starts where the old one stood, so readings never step back.
    #[test]
    fn lines_follow_a_slewed_clock_without_stepping_back() {
        let mut m = Machine::new();
        let mut last = 0;
        let mut worst = [0u64; 2];
        for step in 0..2_000u64 {
            // 1 ms steps; the clock runs 100 ppm fast from 200 ms on.
            let ppm = if step < 200 { 0 } else { 100 };
            m.pass(1_000_000, ppm);
            let before = m.params();
            m.calibrate();
            let after = m.params();
            if before.2 != 0 && after != before {
                let stood = on_line(after.0, before.0, before.1, before.2);
                assert!(
                    stood.abs_diff(after.1) <= 1,
                    "step {step}: a line starts at {} where the old stood at {stood}",
                    after.1
                );
            }
            if let Some(read) = m.read() {
                assert!(read >= last, "step {step}: {read} after {last}");
                last = read;
                let phase = usize::from(step >= 200);
                // Judged once a phase is 40 ms old (the first lines, then the steering, settle).
                if step > 40 + 200 * phase as u64 {
                    worst[phase] = worst[phase].max(read.abs_diff(m.ns));
                }
            }
        }
        assert!(m.line.lines.load(Ordering::Relaxed) >= 190);
        assert!(worst[0] <= 60, "steady clock: off by {} ns", worst[0]);
        assert!(worst[1] <= 1_500, "slewed clock: off by {} ns", worst[1]);
    }

    /// A refit after the line went stale starts at the clock, not where the stale line would stand.
    #[test]
    fn a_refit_after_a_stale_line_starts_at_the_clock() {
        let mut m = Machine::fitted();
        assert!(m.read().is_some());
        // 80 ms without a calibration, the clock 20 ppm fast meanwhile: stale, so readers use the clock.
        m.pass(80_000_000, 20);
        assert_eq!(m.read(), None);
        let (tsc, ns) = (m.tsc, m.ns);
        m.line.calibrate(|| tsc, || ns, || Some((tsc, ns)));
        assert_eq!(m.params().1, ns);
        assert_eq!(m.read(), Some(ns));
    }

    /// A counter that jumps against the clock restarts the line; three times in a row turn the fast clock off.
    #[test]
    fn a_counter_that_keeps_jumping_turns_the_fast_clock_off() {
        let mut m = Machine::fitted();
        // Twice a jump, then a good period: the count starts again.
        for _ in 0..2 {
            m.pass(10_000_000, 0);
            m.tsc += 30_000; // 10 µs of ticks
            m.calibrate();
            assert!(m.line.enabled.load(Ordering::Acquire));
        }
        m.pass(10_000_000, 0);
        m.calibrate();
        assert_eq!(m.line.restarts.load(Ordering::Relaxed), 0);
        for i in 0..3 {
            m.pass(10_000_000, 0);
            m.tsc += 30_000;
            m.calibrate();
            assert_eq!(
                m.line.enabled.load(Ordering::Acquire),
                i < 2,
                "jump {i}, restarts {}",
                m.line.restarts.load(Ordering::Relaxed)
            );
        }
        assert_eq!(m.read(), None);
        m.pass(10_000_000, 0);
        m.calibrate();
        assert_eq!(m.read(), None, "off for good");
    }
}
