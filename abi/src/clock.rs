//! The host clocks, read through one `clock_gettime` wrapper.
//!
//! [`boottime_ns`] (`CLOCK_BOOTTIME`) is rprof's time base: ROCr translates GPU timestamps into it, every record
//! uses it, and the emulated GPU reports it as its system clock. The other clocks are read only to relate it to
//! other time bases (a Perfetto clock snapshot, the "CPU clock" of the thunk's clock counters, test timing).

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
}
