//! Clocks of the emulated machine.
//!
//! The system clock is `CLOCK_BOOTTIME` in nanoseconds (1 GHz), as modern KFD reports it. The GPU clock is a separate
//! 100 MHz counter with an offset, so that ROCr's tick → system-time translation is exercised rather than being an
//! identity: `gpu_ticks = boottime_ns / 10 + 5e9`. The host clocks are read through `rprof-abi`'s `clock` (the one
//! `clock_gettime` wrapper, shared with the tracer); this module owns only the GPU clock's model.

/// Frequency of the system clock reported by `hsaKmtGetClockCounters` (Hz).
pub const SYSTEM_CLOCK_HZ: u64 = 1_000_000_000;
/// Nanoseconds per GPU tick (100 MHz GPU clock).
pub const NS_PER_GPU_TICK: u64 = 10;
/// Frequency of the GPU clock (Hz): what libdrm's `gpu_counter_freq` reports (in kHz) for ROCr >= 6.1.
pub const GPU_CLOCK_HZ: u64 = SYSTEM_CLOCK_HZ / NS_PER_GPU_TICK;
/// Offset added to the GPU counter so that it never equals the system clock.
pub const GPU_TICK_OFFSET: u64 = 5_000_000_000;

/// `CLOCK_BOOTTIME` in nanoseconds: the emulator's time base and the system clock (the same clock the tracer
/// stamps records with, read by `rprof-abi`).
pub fn now_ns() -> u64 {
    rprof_abi::clock::boottime_ns()
}

/// `CLOCK_MONOTONIC_RAW` in nanoseconds (the "CPU clock" of `HsaClockCounters`).
pub fn cpu_ns() -> u64 {
    rprof_abi::clock::now_ns(rprof_abi::clock::Clock::MonotonicRaw)
}

/// GPU ticks at system time `ns`.
pub fn gpu_ticks_at(ns: u64) -> u64 {
    ns / NS_PER_GPU_TICK + GPU_TICK_OFFSET
}

/// System time (ns) of GPU tick `ticks`; inverse of [`gpu_ticks_at`] up to tick granularity.
pub fn ns_of_gpu_ticks(ticks: u64) -> u64 {
    ticks.saturating_sub(GPU_TICK_OFFSET) * NS_PER_GPU_TICK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_clock_round_trips_at_tick_granularity() {
        let ns = 123_456_789_015;
        assert_eq!(gpu_ticks_at(ns), 12_345_678_901 + GPU_TICK_OFFSET);
        assert_eq!(ns_of_gpu_ticks(gpu_ticks_at(ns)), 123_456_789_010);
    }

    #[test]
    fn clocks_advance() {
        let a = now_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = now_ns();
        assert!(b >= a + 2_000_000, "{a} {b}");
    }
}
