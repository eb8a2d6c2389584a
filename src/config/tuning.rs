//! The measurement and tuning knobs: how rprof traces (signal pool size,
//! who forwards the app's completion signal, the completion thread's
//! longest nap, pass-through mode, the verbose summary, the Perfetto
//! encoding, the interceptor's clock), never what it records.
//!
//! Owns their names, defaults, ranges and meaning, read with the rules of
//! every other variable (`super::parse`); must not act on them (the tool
//! library does).

use std::time::Duration;

use super::parse::{parse_bool, parse_choice, parse_whole};
use super::{ConfigError, EnvSource};

/// Default number of timestamp signals (memory signals: no driver events;
/// created lazily, 256 at a time, only as dispatches are in flight). It covers
/// the ¾ of a 16384-packet ring that rprof lets one queue fill (HIP 6.4's
/// queues; 4096 made HIP 6.4's graph storm wait on the pool, 4-5x slower).
pub const DEFAULT_POOL_SIZE: u32 = 16384;

/// The measurement and tuning knobs (`RPROF_*`, see the module docs): how
/// rprof traces, never what it records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// `RPROF_SIGNAL_POOL_SIZE`: timestamp signals (1..=1048576).
    pub pool_size: u32,
    /// `RPROF_FORWARD_APP_SIGNAL=host`: the completion thread forwards the
    /// app's signal (`barrier`, the default: a barrier packet does).
    pub host_forwarding: bool,
    /// `RPROF_COMPLETION_MAX_BACKOFF_US` (1..=100000); `None`: the engine's
    /// default.
    pub max_backoff: Option<Duration>,
    /// `RPROF_VERBOSE`: a summary line at the flush.
    pub verbose: bool,
    /// `RPROF_INTERCEPT_PASSTHROUGH`: measurement mode (intercept queues
    /// with profiling, packets unchanged).
    pub passthrough: bool,
    /// `RPROF_PFTRACE_ENCODING=plain`: absolute timestamps, no compression
    /// (each packet readable on its own; about 6x larger).
    pub plain_pftrace: bool,
    /// `RPROF_HOST_CLOCK=clock_gettime`: the interceptor reads
    /// `clock_gettime` itself (`auto`, the default: the time-stamp counter
    /// by a fitted line where the kernel keeps time by it; see
    /// `rprof_abi::clock`).
    pub clock_gettime_only: bool,
    /// `RPROF_START_DELAY_MS` (0..=60000): the session's start, on its own
    /// thread, first sleeps this long (tests of what waits for the start).
    pub start_delay: Duration,
    /// `RPROF_TIMESTAMP_SIGNALS=rocr`: the kernels' timestamp signals are
    /// ROCr's (`memory`, the default: records in rprof's own memory, which
    /// cost nothing to create and give up).
    pub rocr_signals: bool,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            pool_size: DEFAULT_POOL_SIZE,
            host_forwarding: false,
            max_backoff: None,
            verbose: false,
            passthrough: false,
            plain_pftrace: false,
            clock_gettime_only: false,
            start_delay: Duration::ZERO,
            rocr_signals: false,
        }
    }
}

impl Tuning {
    /// Reads the knobs from any source; a malformed value is an error naming
    /// the variable.
    pub fn from_source(env: &dyn EnvSource) -> Result<Tuning, ConfigError> {
        let d = Tuning::default();
        Ok(Tuning {
            pool_size: parse_whole(env, "RPROF_SIGNAL_POOL_SIZE", 1u32, 1 << 20)?
                .unwrap_or(d.pool_size),
            host_forwarding: parse_choice(env, "RPROF_FORWARD_APP_SIGNAL", ["barrier", "host"])?
                == Some(1),
            max_backoff: parse_whole(env, "RPROF_COMPLETION_MAX_BACKOFF_US", 1u64, 100_000)?
                .map(Duration::from_micros),
            verbose: parse_bool(env, "RPROF_VERBOSE")?,
            passthrough: parse_bool(env, "RPROF_INTERCEPT_PASSTHROUGH")?,
            plain_pftrace: parse_choice(env, "RPROF_PFTRACE_ENCODING", ["compact", "plain"])?
                == Some(1),
            clock_gettime_only: parse_choice(env, "RPROF_HOST_CLOCK", ["auto", "clock_gettime"])?
                == Some(1),
            start_delay: parse_whole(env, "RPROF_START_DELAY_MS", 0u64, 60_000)?
                .map_or(d.start_delay, Duration::from_millis),
            rocr_signals: parse_choice(env, "RPROF_TIMESTAMP_SIGNALS", ["memory", "rocr"])?
                == Some(1),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{env, facts};
    use crate::config::TraceConfig;

    fn tuning(pairs: &[(&str, &str)]) -> Result<Tuning, ConfigError> {
        Tuning::from_source(&env(pairs))
    }

    #[test]
    fn tuning_defaults_and_good_values() {
        let d = tuning(&[]).unwrap();
        assert_eq!(d, Tuning::default());
        assert_eq!(d.pool_size, DEFAULT_POOL_SIZE);
        assert!(!d.host_forwarding && !d.verbose && !d.passthrough && !d.plain_pftrace);
        assert!(!d.clock_gettime_only && !d.rocr_signals);
        assert_eq!(d.max_backoff, None);
        assert_eq!(d.start_delay, Duration::ZERO);
        let t = tuning(&[
            ("RPROF_SIGNAL_POOL_SIZE", "64"),
            ("RPROF_FORWARD_APP_SIGNAL", "host"),
            ("RPROF_COMPLETION_MAX_BACKOFF_US", "250"),
            ("RPROF_VERBOSE", "1"),
            ("RPROF_INTERCEPT_PASSTHROUGH", "0"),
            ("RPROF_PFTRACE_ENCODING", "plain"),
            ("RPROF_HOST_CLOCK", "clock_gettime"),
            ("RPROF_START_DELAY_MS", "1500"),
            ("RPROF_TIMESTAMP_SIGNALS", "rocr"),
        ])
        .unwrap();
        assert!(t.clock_gettime_only && t.rocr_signals);
        assert_eq!(t.start_delay, Duration::from_millis(1500));
        assert_eq!(t.pool_size, 64);
        assert!(t.host_forwarding && t.verbose && !t.passthrough && t.plain_pftrace);
        assert_eq!(t.max_backoff, Some(Duration::from_micros(250)));
        let t = tuning(&[
            ("RPROF_FORWARD_APP_SIGNAL", "barrier"),
            ("RPROF_PFTRACE_ENCODING", "compact"),
            ("RPROF_HOST_CLOCK", "auto"),
            ("RPROF_COMPLETION_MAX_BACKOFF_US", "100000"),
            ("RPROF_SIGNAL_POOL_SIZE", "1048576"),
            ("RPROF_TIMESTAMP_SIGNALS", "memory"),
        ])
        .unwrap();
        assert!(!t.host_forwarding && !t.plain_pftrace && !t.clock_gettime_only);
        assert!(!t.rocr_signals);
        assert_eq!(t.pool_size, 1 << 20);
        assert_eq!(t.max_backoff, Some(Duration::from_millis(100)));
    }

    #[test]
    fn malformed_tuning_values_are_errors_naming_the_variable() {
        for (k, v, accepted) in [
            ("RPROF_SIGNAL_POOL_SIZE", "abc", "1..=1048576"),
            ("RPROF_SIGNAL_POOL_SIZE", "0", "1..=1048576"),
            ("RPROF_SIGNAL_POOL_SIZE", "2000000", "1..=1048576"),
            ("RPROF_SIGNAL_POOL_SIZE", "-1", "1..=1048576"),
            ("RPROF_FORWARD_APP_SIGNAL", "maybe", "barrier, host"),
            ("RPROF_COMPLETION_MAX_BACKOFF_US", "1ms", "1..=100000"),
            ("RPROF_COMPLETION_MAX_BACKOFF_US", "0", "1..=100000"),
            ("RPROF_VERBOSE", "loud", "true/false"),
            ("RPROF_INTERCEPT_PASSTHROUGH", "2", "yes/no"),
            ("RPROF_PFTRACE_ENCODING", "zip", "compact, plain"),
            ("RPROF_HOST_CLOCK", "tsc", "auto, clock_gettime"),
            ("RPROF_START_DELAY_MS", "60001", "0..=60000"),
            ("RPROF_TIMESTAMP_SIGNALS", "hsa", "memory, rocr"),
        ] {
            let e = tuning(&[(k, v)]).unwrap_err();
            assert_eq!(e.variable, k);
            let text = e.to_string();
            assert!(text.starts_with(&format!("{k}: `{v}`")), "{text}");
            assert!(text.contains(accepted), "{text}");
            // The same through the whole configuration (as the library
            // and the `rprof` command read it).
            let e =
                TraceConfig::from_source(&env(&[("RPROF_KERNEL_TRACE", "1"), (k, v)]), &facts())
                    .unwrap_err();
            assert_eq!(e.variable, k);
        }
    }
}
