//! The measurement and tuning knobs outside `TraceConfig`
//! (`docs/architecture.md`, "Knobs outside `TraceConfig`"), read strictly:
//! a malformed value is a configuration error (one message, the app runs
//! untraced), never silently replaced by a default.

use std::time::Duration;

/// Default number of timestamp signals (memory signals: no driver events;
/// created lazily, 256 at a time, only as dispatches are in flight). It covers
/// the ¾ of a 16384-packet ring that rprof lets one queue fill (HIP 6.4's
/// queues; 4096 made HIP 6.4's graph storm wait on the pool, 4-5x slower).
pub const DEFAULT_POOL_SIZE: u32 = 16384;

/// The knobs' values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// `RPROF_SIGNAL_POOL_SIZE`: timestamp signals (1..=1048576).
    pub pool_size: u32,
    /// `RPROF_FORWARD_APP_SIGNAL=host`: the completion thread forwards the
    /// app's signal (`barrier`, the default: a barrier packet does).
    pub host_forwarding: bool,
    /// `RPROF_COMPLETION_MAX_BACKOFF_US` (1..=100000).
    pub max_backoff: Option<Duration>,
    /// `RPROF_VERBOSE`: a summary line at the flush.
    pub verbose: bool,
    /// `RPROF_INTERCEPT_PASSTHROUGH=1`: measurement mode.
    pub passthrough: bool,
}

fn whole<T: std::str::FromStr + PartialOrd + std::fmt::Display>(
    name: &str,
    v: &str,
    lo: T,
    hi: T,
) -> Result<T, String> {
    match v.trim().parse::<T>() {
        Ok(n) if n >= lo && n <= hi => Ok(n),
        _ => Err(format!(
            "{name}={v:?}: expected a whole number in {lo}..={hi}"
        )),
    }
}

fn switch(name: &str, v: &str) -> Result<bool, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "" | "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(format!("{name}={v:?}: expected 1 or 0")),
    }
}

impl Tuning {
    /// Reads the knobs through `get` (the environment in the library).
    pub fn from_source(get: impl Fn(&str) -> Option<String>) -> Result<Tuning, String> {
        let pool_size = match get("RPROF_SIGNAL_POOL_SIZE") {
            Some(v) => whole("RPROF_SIGNAL_POOL_SIZE", &v, 1u32, 1 << 20)?,
            None => DEFAULT_POOL_SIZE,
        };
        let host_forwarding = match get("RPROF_FORWARD_APP_SIGNAL").as_deref() {
            None | Some("barrier") => false,
            Some("host") => true,
            Some(v) => {
                return Err(format!(
                    "RPROF_FORWARD_APP_SIGNAL={v:?}: expected barrier or host"
                ))
            }
        };
        let max_backoff = match get("RPROF_COMPLETION_MAX_BACKOFF_US") {
            Some(v) => Some(Duration::from_micros(whole(
                "RPROF_COMPLETION_MAX_BACKOFF_US",
                &v,
                1u64,
                100_000,
            )?)),
            None => None,
        };
        let verbose = match get("RPROF_VERBOSE") {
            Some(v) => switch("RPROF_VERBOSE", &v)?,
            None => false,
        };
        let passthrough = match get("RPROF_INTERCEPT_PASSTHROUGH") {
            Some(v) => switch("RPROF_INTERCEPT_PASSTHROUGH", &v)?,
            None => false,
        };
        Ok(Tuning {
            pool_size,
            host_forwarding,
            max_backoff,
            verbose,
            passthrough,
        })
    }

    /// Reads the knobs from the environment.
    pub fn from_env() -> Result<Tuning, String> {
        Self::from_source(|k| std::env::var(k).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&str, &str)]) -> Result<Tuning, String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Tuning::from_source(move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults_and_good_values() {
        let d = with(&[]).unwrap();
        assert_eq!(d.pool_size, DEFAULT_POOL_SIZE);
        assert!(!d.host_forwarding && !d.verbose && !d.passthrough);
        assert_eq!(d.max_backoff, None);
        let t = with(&[
            ("RPROF_SIGNAL_POOL_SIZE", "64"),
            ("RPROF_FORWARD_APP_SIGNAL", "host"),
            ("RPROF_COMPLETION_MAX_BACKOFF_US", "250"),
            ("RPROF_VERBOSE", "1"),
            ("RPROF_INTERCEPT_PASSTHROUGH", "0"),
        ])
        .unwrap();
        assert_eq!(t.pool_size, 64);
        assert!(t.host_forwarding && t.verbose && !t.passthrough);
        assert_eq!(t.max_backoff, Some(Duration::from_micros(250)));
    }

    #[test]
    fn malformed_values_are_errors_naming_the_variable() {
        for (k, v) in [
            ("RPROF_SIGNAL_POOL_SIZE", "abc"),
            ("RPROF_SIGNAL_POOL_SIZE", "0"),
            ("RPROF_SIGNAL_POOL_SIZE", "2000000"),
            ("RPROF_SIGNAL_POOL_SIZE", "-1"),
            ("RPROF_FORWARD_APP_SIGNAL", "maybe"),
            ("RPROF_COMPLETION_MAX_BACKOFF_US", "1ms"),
            ("RPROF_COMPLETION_MAX_BACKOFF_US", "0"),
            ("RPROF_VERBOSE", "loud"),
            ("RPROF_INTERCEPT_PASSTHROUGH", "2"),
        ] {
            let e = with(&[(k, v)]).unwrap_err();
            assert!(e.starts_with(&format!("{k}=")), "{e}");
        }
    }
}
