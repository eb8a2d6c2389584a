//! The rules every `RPROF_*` value is read with: trimmed, empty is unset,
//! booleans in four spellings, whole numbers in a range, one of a list,
//! regular expressions; a malformed value is a [`ConfigError`] naming the
//! variable, the value and what is accepted.
//!
//! Owns those rules; must not know which variable means what.

use std::fmt;

use regex::Regex;

use super::{ConfigError, EnvSource};

/// The variable's value, trimmed; `None` when unset or empty.
pub(super) fn value(env: &dyn EnvSource, name: &str) -> Option<String> {
    env.get(name)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

pub(super) fn parse_bool(env: &dyn EnvSource, name: &'static str) -> Result<bool, ConfigError> {
    let Some(v) = value(env, name) else {
        return Ok(false);
    };
    match v.to_ascii_lowercase().as_str() {
        "0" | "false" | "no" | "off" => Ok(false),
        "1" | "true" | "yes" | "on" => Ok(true),
        _ => Err(ConfigError::new(
            name,
            format!("`{v}` is not a boolean (use 1/0, true/false, yes/no or on/off)"),
        )),
    }
}

/// A whole number in `lo..=hi`, or `None` when unset.
pub(super) fn parse_whole<T>(
    env: &dyn EnvSource,
    name: &'static str,
    lo: T,
    hi: T,
) -> Result<Option<T>, ConfigError>
where
    T: std::str::FromStr + PartialOrd + fmt::Display,
{
    let Some(v) = value(env, name) else {
        return Ok(None);
    };
    match v.parse::<T>() {
        Ok(n) if n >= lo && n <= hi => Ok(Some(n)),
        _ => Err(ConfigError::new(
            name,
            format!("`{v}` is not a whole number in {lo}..={hi}"),
        )),
    }
}

/// The index of the value among `choices` (any case), or `None` when unset.
pub(super) fn parse_choice<const N: usize>(
    env: &dyn EnvSource,
    name: &'static str,
    choices: [&str; N],
) -> Result<Option<usize>, ConfigError> {
    let Some(v) = value(env, name) else {
        return Ok(None);
    };
    match choices.iter().position(|c| c.eq_ignore_ascii_case(&v)) {
        Some(i) => Ok(Some(i)),
        None => Err(ConfigError::new(
            name,
            format!("`{v}` is not one of {}", choices.join(", ")),
        )),
    }
}

pub(super) fn parse_regex(
    env: &dyn EnvSource,
    name: &'static str,
) -> Result<Option<Regex>, ConfigError> {
    match env.get(name) {
        None => Ok(None),
        Some(v) if v.is_empty() => Ok(None),
        Some(v) => Regex::new(&v).map(Some).map_err(|e| {
            // The regex crate's message spans several lines (pattern,
            // caret, error); keep the one-line message users grep for.
            let text = e.to_string();
            let why = text
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim()
                .trim_start_matches("error: ")
                .to_string();
            ConfigError::new(name, format!("invalid regex {v:?}: {why}"))
        }),
    }
}

/// A duration in seconds (decimal, e.g. `10` or `0.5`) in `lo_ms..=hi_s`,
/// as whole nanoseconds; `None` when unset.
pub(super) fn parse_seconds(
    env: &dyn EnvSource,
    name: &'static str,
    lo_ms: u64,
    hi_s: u64,
) -> Result<Option<u64>, ConfigError> {
    let Some(v) = value(env, name) else {
        return Ok(None);
    };
    let ns = v
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite())
        .map(|s| (s * 1e9).round())
        .filter(|&ns| ns >= (lo_ms * 1_000_000) as f64 && ns <= (hi_s * 1_000_000_000) as f64);
    match ns {
        Some(ns) => Ok(Some(ns as u64)),
        None => Err(ConfigError::new(
            name,
            format!(
                "`{v}` is not a number of seconds in {}..={hi_s} (e.g. 10 or 0.5)",
                lo_ms as f64 / 1000.0
            ),
        )),
    }
}
