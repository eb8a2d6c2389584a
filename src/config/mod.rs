//! Trace configuration: the plain struct that the tool library acts on.
//!
//! The `rprof` command line is parsed by clap in the `tool` crate and handed
//! to the traced process through `RPROF_*` environment variables; users of
//! `HSA_TOOLS_LIB` set the same variables by hand. [`TraceConfig::from_env`]
//! is the one place that reads them, so the CLI and the library cannot
//! disagree about a default.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `RPROF_KERNEL_TRACE` | record kernel dispatches | off |
//! | `RPROF_RPC_TRACE` | trace RPC doorbell waits | off |
//! | `RPROF_MARKER_TRACE` | record ROCTx marks and ranges (needs the library preloaded) | off |
//! | `RPROF_KERNEL_RENAME` | name kernels after their enclosing ROCTx range | off |
//! | `RPROF_MEMORY_COPY_TRACE` | record asynchronous memory copies | off |
//! | `RPROF_SERIALIZE_KERNELS` | one kernel at a time per GPU | off |
//! | `RPROF_STATS` | per-kernel statistics at exit | off |
//! | `RPROF_SUMMARY` | per-kernel summary on stderr at exit (rocprofv3's `-S`), no statistics file | off |
//! | `RPROF_TRUNCATE_KERNELS` | keep only the base name of kernels | off |
//! | `RPROF_OUTPUT_DIR` | output directory | `rprof-results` |
//! | `RPROF_OUTPUT_NAME` | file name stem, with placeholders | `%hostname%/%pid%` |
//! | `RPROF_OUTPUT_FORMAT` | comma list of `pftrace`, `csv`, `json`, `rocpd`, or `none` (only the summary: needs `RPROF_STATS` or `RPROF_SUMMARY`) | `pftrace,csv` |
//! | `RPROF_PFTRACE_SPLIT_SECONDS` | start a new Perfetto trace file (`NAME_partK.pftrace`) every N seconds of trace time (decimal, `0.001..=86400`) | one file |
//! | `RPROF_KERNEL_INCLUDE_REGEX` | keep only kernels whose name matches | all |
//! | `RPROF_KERNEL_EXCLUDE_REGEX` | drop kernels whose name matches | none |
//!
//! Measurement and tuning knobs ([`Tuning`], read with the same rules):
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `RPROF_SIGNAL_POOL_SIZE` | timestamp signals, `1..=1048576` | 16384 |
//! | `RPROF_FORWARD_APP_SIGNAL` | who decrements the app's completion signal: `barrier` or `host` | `barrier` |
//! | `RPROF_COMPLETION_MAX_BACKOFF_US` | the completion thread's longest nap, `1..=100000` µs | the engine's (1000) |
//! | `RPROF_INTERCEPT_PASSTHROUGH` | measurement mode: intercept queues, packets unchanged | off |
//! | `RPROF_VERBOSE` | one summary line at the flush | off |
//! | `RPROF_PFTRACE_ENCODING` | `compact` (deltas, compressed bundles) or `plain` | `compact` |
//! | `RPROF_START_DELAY_MS` | tests: the session's start waits this long first, `0..=60000` | 0 |
//!
//! Rules, the same for every variable:
//! - Booleans accept `1/true/yes/on` and `0/false/no/off` (any case); an
//!   empty value is the same as an unset variable.
//! - A malformed value is a [`ConfigError`]: one message naming the variable,
//!   the value and the accepted values; the tool library then traces nothing
//!   (it never falls back to a default silently).
//! - A set `RPROF_*` variable that rprof does not know but that is within a
//!   typo of one it does ([`misspelt_variables`]) gets a warning naming the
//!   closest known one; the run goes on.
//!
//! Placeholders in the name: `%pid%`, `%ppid%`, `%hostname%`, `%rank%` (from
//! the usual MPI and Slurm variables), `%env{VAR}%`.
//!
//! This module owns reading and validating those variables, in parts:
//! `parse` (the rules above), `tuning` ([`Tuning`]), `variables` (the known
//! names and the typo check). It must not act on them (opening files,
//! starting threads is the tool library's job).

use std::fmt;
use std::path::{Path, PathBuf};

use regex::Regex;

#[cfg(test)]
mod fuzz;
mod parse;
mod tuning;
mod variables;

use parse::{parse_bool, parse_regex, parse_seconds};
pub use tuning::{Tuning, DEFAULT_POOL_SIZE};
pub use variables::{misspelt_variables, Misspelling, KNOWN_VARIABLES};

/// Which files to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputFormats {
    /// `NAME.pftrace`
    pub pftrace: bool,
    /// `NAME_kernel_trace.csv`
    pub csv: bool,
    /// `NAME_results.json`
    pub json: bool,
    /// `NAME_results.db`: a rocpd (schema version 3) SQLite database.
    pub rocpd: bool,
}

impl OutputFormats {
    /// No file at all (`none`): only the summary (`--stats`, `--summary`).
    pub const NONE: OutputFormats = OutputFormats {
        pftrace: false,
        csv: false,
        json: false,
        rocpd: false,
    };

    /// Whether no trace file is written (`none`).
    pub fn is_none(&self) -> bool {
        *self == Self::NONE
    }

    /// Parses a comma-separated list such as `pftrace,csv`, or `none`.
    pub fn parse(list: &str) -> Result<Self, ConfigError> {
        let items: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        if items.iter().any(|i| i.eq_ignore_ascii_case("none")) {
            if items.len() > 1 {
                return Err(ConfigError::new(
                    "RPROF_OUTPUT_FORMAT",
                    format!(
                        "`none` (no trace files) cannot be combined with other formats in `{list}`"
                    ),
                ));
            }
            return Ok(Self::NONE);
        }
        let mut f = Self::NONE;
        for item in items {
            match item.to_ascii_lowercase().as_str() {
                "pftrace" | "perfetto" => f.pftrace = true,
                "csv" => f.csv = true,
                "json" => f.json = true,
                "rocpd" => f.rocpd = true,
                other => {
                    return Err(ConfigError::new(
                        "RPROF_OUTPUT_FORMAT",
                        format!(
                            "unknown format `{other}` (expected pftrace, csv, json, rocpd or none)"
                        ),
                    ))
                }
            }
        }
        if !(f.pftrace || f.csv || f.json || f.rocpd) {
            return Err(ConfigError::new(
                "RPROF_OUTPUT_FORMAT",
                "no output format given".into(),
            ));
        }
        Ok(f)
    }
}

impl Default for OutputFormats {
    fn default() -> Self {
        OutputFormats {
            pftrace: true,
            csv: true,
            json: false,
            rocpd: false,
        }
    }
}

/// Everything the tool library needs to know about what to record and where.
#[derive(Debug, Clone)]
pub struct TraceConfig {
    /// Record kernel dispatches.
    pub kernel_trace: bool,
    /// Trace RPC doorbell waits.
    pub rpc_trace: bool,
    /// Run one traced kernel at a time per GPU agent.
    pub serialize_kernels: bool,
    /// Print and write per-kernel statistics at exit.
    pub stats: bool,
    /// Show kernels by their base name only.
    pub truncate_kernels: bool,
    /// Output directory.
    pub output_dir: PathBuf,
    /// Output file stem after placeholder expansion (may contain `/`).
    pub output_name: String,
    /// Files to write.
    pub formats: OutputFormats,
    /// Keep only kernels whose display name matches.
    pub kernel_include: Option<Regex>,
    /// Drop kernels whose display name matches.
    pub kernel_exclude: Option<Regex>,
    /// The measurement and tuning knobs.
    pub tuning: Tuning,
    /// Record ROCTx marks and ranges.
    pub marker_trace: bool,
    /// Name kernels after their innermost enclosing ROCTx push/pop range.
    pub kernel_rename: bool,
    /// Record asynchronous memory copies (`--memory-copy-trace`).
    pub memory_copy_trace: bool,
    /// Print the per-kernel summary on stderr at exit (`--summary`), without
    /// the statistics file `--stats` writes.
    pub summary: bool,
    /// Start a new Perfetto trace file every this many nanoseconds of trace
    /// time (`--pftrace-split-seconds`); `None`: one file.
    pub pftrace_split_ns: Option<u64>,
}

/// A configuration value that rprof cannot use. The message names the
/// variable so the user can fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The environment variable (or option) at fault.
    pub variable: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl ConfigError {
    /// The error; control characters the message quotes from a value (a
    /// newline in an environment variable) are escaped, so it stays one line.
    fn new(variable: &'static str, message: String) -> Self {
        let message = if message.contains(char::is_control) {
            message
                .chars()
                .map(|c| {
                    if c.is_control() {
                        c.escape_default().to_string()
                    } else {
                        c.to_string()
                    }
                })
                .collect()
        } else {
            message
        };
        ConfigError { variable, message }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.variable, self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Where the values come from: the process environment in production, a
/// closure in tests.
pub trait EnvSource {
    /// The value of `name`, if set.
    fn get(&self, name: &str) -> Option<String>;
}

impl<F: Fn(&str) -> Option<String>> EnvSource for F {
    fn get(&self, name: &str) -> Option<String> {
        self(name)
    }
}

struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn get(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

/// The boolean `RPROF_*` switch `name` in the process environment, read by
/// the rules [`TraceConfig`] reads it with; a malformed value reads as off
/// (the configuration itself reports it). For the few places that must know
/// a switch before the configuration is read (the ROCTx entry points, which
/// an app may call before the runtime loads the tool).
pub fn process_switch(name: &'static str) -> bool {
    parse::parse_bool(&ProcessEnv, name).unwrap_or(false)
}

/// Facts about the process used to expand output-name placeholders.
#[derive(Debug, Clone)]
pub struct ProcessFacts {
    /// `%pid%`
    pub pid: u32,
    /// `%ppid%`
    pub ppid: u32,
    /// `%hostname%`
    pub hostname: String,
}

impl ProcessFacts {
    /// Reads them from the running process.
    pub fn current() -> Self {
        ProcessFacts {
            pid: std::process::id(),
            ppid: std::os::unix::process::parent_id(),
            hostname: hostname(),
        }
    }
}

/// The host name from `/proc/sys/kernel/hostname` (or `localhost`).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// Variables that carry a process's MPI rank, in order of preference.
pub const RANK_VARIABLES: &[&str] = &[
    "OMPI_COMM_WORLD_RANK",
    "PMIX_RANK",
    "PMI_RANK",
    "MV2_COMM_WORLD_RANK",
    "SLURM_PROCID",
];

/// Expands the output-name placeholders. Unknown `%...%` sequences are an
/// error, so a typo does not silently become part of a file name.
pub fn expand_output_name(
    pattern: &str,
    facts: &ProcessFacts,
    env: &dyn EnvSource,
) -> Result<String, ConfigError> {
    const VAR: &str = "RPROF_OUTPUT_NAME";
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut rest = pattern;
    while let Some(start) = rest.find('%') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let Some(end) = after.find('%') else {
            return Err(ConfigError::new(
                VAR,
                format!("unterminated placeholder in `{pattern}`"),
            ));
        };
        let key = &after[..end];
        match key {
            "pid" => out.push_str(&facts.pid.to_string()),
            "ppid" => out.push_str(&facts.ppid.to_string()),
            "hostname" => out.push_str(&facts.hostname),
            "rank" => {
                let rank = RANK_VARIABLES.iter().find_map(|v| env.get(v));
                out.push_str(rank.as_deref().unwrap_or("0"));
            }
            _ if key.starts_with("env{") && key.ends_with('}') => {
                let var = &key[4..key.len() - 1];
                out.push_str(&env.get(var).unwrap_or_default());
            }
            _ => {
                return Err(ConfigError::new(
                    VAR,
                    format!("unknown placeholder `%{key}%` (known: %pid%, %ppid%, %hostname%, %rank%, %env{{VAR}}%)"),
                ))
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    if out.is_empty() || out.split('/').any(|c| c == "..") {
        return Err(ConfigError::new(
            VAR,
            format!("`{pattern}` gives an unusable file name `{out}`"),
        ));
    }
    Ok(out)
}

impl TraceConfig {
    /// Reads the configuration of this process. `Ok(None)`: nothing to trace.
    pub fn from_env() -> Result<Option<TraceConfig>, ConfigError> {
        Self::from_source(&ProcessEnv, &ProcessFacts::current())
    }

    /// Reads the configuration from any source (tests).
    pub fn from_source(
        env: &dyn EnvSource,
        facts: &ProcessFacts,
    ) -> Result<Option<TraceConfig>, ConfigError> {
        // --sys-trace: every trace rprof has (kernels, ROCTx markers, memory
        // copies; the rpc trace is rprof's own diagnostic of GPU-to-host
        // calls, not a rocprofv3 trace, and stays separate).
        let sys_trace = parse_bool(env, "RPROF_SYS_TRACE")?;
        let kernel_trace = parse_bool(env, "RPROF_KERNEL_TRACE")? || sys_trace;
        let rpc_trace = parse_bool(env, "RPROF_RPC_TRACE")?;
        let memory_copy_trace = parse_bool(env, "RPROF_MEMORY_COPY_TRACE")? || sys_trace;
        let serialize_kernels = parse_bool(env, "RPROF_SERIALIZE_KERNELS")?;
        let stats = parse_bool(env, "RPROF_STATS")?;
        let summary = parse_bool(env, "RPROF_SUMMARY")?;
        let truncate_kernels = parse_bool(env, "RPROF_TRUNCATE_KERNELS")?;
        let formats = match env.get("RPROF_OUTPUT_FORMAT") {
            Some(v) => OutputFormats::parse(&v)?,
            None => OutputFormats::default(),
        };
        let kernel_include = parse_regex(env, "RPROF_KERNEL_INCLUDE_REGEX")?;
        let kernel_exclude = parse_regex(env, "RPROF_KERNEL_EXCLUDE_REGEX")?;
        let output_dir = PathBuf::from(
            env.get("RPROF_OUTPUT_DIR")
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "rprof-results".into()),
        );
        let pattern = env
            .get("RPROF_OUTPUT_NAME")
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "%hostname%/%pid%".into());
        let output_name = expand_output_name(&pattern, facts, env)?;
        let tuning = Tuning::from_source(env)?;
        let marker_trace = parse_bool(env, "RPROF_MARKER_TRACE")? || sys_trace;
        let kernel_rename = parse_bool(env, "RPROF_KERNEL_RENAME")?;
        let pftrace_split_ns = parse_seconds(env, "RPROF_PFTRACE_SPLIT_SECONDS", 1, 86_400)?;
        if !(kernel_trace
            || rpc_trace
            || serialize_kernels
            || stats
            || summary
            || marker_trace
            || memory_copy_trace)
        {
            return Ok(None);
        }
        if formats.is_none() && !(stats || summary) {
            return Err(ConfigError::new(
                "RPROF_OUTPUT_FORMAT",
                "`none` writes no trace file, so the run would leave nothing: add --stats \
                 (RPROF_STATS, the summary and NAME_kernel_stats.csv) or --summary (RPROF_SUMMARY, \
                 the summary on stderr only)"
                    .into(),
            ));
        }
        if pftrace_split_ns.is_some() && !formats.pftrace {
            return Err(ConfigError::new(
                "RPROF_PFTRACE_SPLIT_SECONDS",
                "splits the Perfetto trace, but the output formats (--output-format, \
                 RPROF_OUTPUT_FORMAT) do not include pftrace"
                    .into(),
            ));
        }
        Ok(Some(TraceConfig {
            // Stats and the summary are computed from the kernel trace, and
            // serialization is done by the kernel tracer's interceptor: they
            // imply it.
            kernel_trace: kernel_trace || stats || summary || serialize_kernels,
            rpc_trace,
            serialize_kernels,
            stats,
            truncate_kernels,
            output_dir,
            output_name,
            formats,
            kernel_include,
            kernel_exclude,
            tuning,
            marker_trace,
            kernel_rename,
            memory_copy_trace,
            summary,
            pftrace_split_ns,
        }))
    }

    /// `DIR/NAME<suffix>`, e.g. `output_path("_kernel_trace.csv")`.
    pub fn output_path(&self, suffix: &str) -> PathBuf {
        self.output_dir
            .join(format!("{}{}", self.output_name, suffix))
    }
}

/// Creates the parent directory of `path`.
pub fn ensure_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => std::fs::create_dir_all(p),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{KernelTable, NamePolicy};
    use std::collections::HashMap;

    pub(super) fn facts() -> ProcessFacts {
        ProcessFacts {
            pid: 42,
            ppid: 7,
            hostname: "node1".into(),
        }
    }

    pub(super) fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| map.get(k).cloned()
    }

    #[test]
    fn nothing_requested_means_none() {
        assert!(TraceConfig::from_source(&env(&[]), &facts())
            .unwrap()
            .is_none());
    }

    #[test]
    fn defaults() {
        let c = TraceConfig::from_source(&env(&[("RPROF_KERNEL_TRACE", "1")]), &facts())
            .unwrap()
            .unwrap();
        assert_eq!(c.output_name, "node1/42");
        assert_eq!(c.output_dir, PathBuf::from("rprof-results"));
        assert_eq!(
            c.formats,
            OutputFormats {
                pftrace: true,
                csv: true,
                json: false,
                rocpd: false
            }
        );
        assert_eq!(
            c.output_path(".pftrace"),
            PathBuf::from("rprof-results/node1/42.pftrace")
        );
    }

    #[test]
    fn placeholders_expand() {
        let e = env(&[("SLURM_PROCID", "3"), ("JOB", "abc")]);
        let n =
            expand_output_name("%hostname%-%env{JOB}%/r%rank%_%pid%_%ppid%", &facts(), &e).unwrap();
        assert_eq!(n, "node1-abc/r3_42_7");
        let e = env(&[("OMPI_COMM_WORLD_RANK", "5"), ("SLURM_PROCID", "3")]);
        assert_eq!(expand_output_name("%rank%", &facts(), &e).unwrap(), "5");
    }

    #[test]
    fn bad_values_are_named() {
        let err = TraceConfig::from_source(&env(&[("RPROF_KERNEL_TRACE", "maybe")]), &facts())
            .unwrap_err();
        assert_eq!(err.variable, "RPROF_KERNEL_TRACE");
        let err = TraceConfig::from_source(
            &env(&[
                ("RPROF_KERNEL_TRACE", "1"),
                ("RPROF_KERNEL_INCLUDE_REGEX", "("),
            ]),
            &facts(),
        )
        .unwrap_err();
        assert_eq!(err.variable, "RPROF_KERNEL_INCLUDE_REGEX");
        let err = expand_output_name("%bogus%", &facts(), &env(&[])).unwrap_err();
        assert!(err.message.contains("%bogus%"), "{err}");
        assert!(expand_output_name("../x", &facts(), &env(&[])).is_err());
        assert!(OutputFormats::parse("csv,xml").is_err());
    }

    #[test]
    fn stats_and_serialization_imply_the_kernel_trace() {
        for var in ["RPROF_STATS", "RPROF_SERIALIZE_KERNELS"] {
            let c = TraceConfig::from_source(&env(&[(var, "1")]), &facts())
                .unwrap()
                .unwrap();
            assert!(c.kernel_trace, "{var}");
        }
        let c = TraceConfig::from_source(&env(&[("RPROF_RPC_TRACE", "1")]), &facts())
            .unwrap()
            .unwrap();
        assert!(c.rpc_trace && !c.kernel_trace);
    }

    #[test]
    fn sys_trace_turns_on_every_trace() {
        let c = TraceConfig::from_source(&env(&[("RPROF_SYS_TRACE", "1")]), &facts())
            .unwrap()
            .unwrap();
        assert!(c.kernel_trace && c.marker_trace && c.memory_copy_trace && !c.rpc_trace);
        assert!(
            TraceConfig::from_source(&env(&[("RPROF_SYS_TRACE", "0")]), &facts())
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn none_is_the_summary_alone() {
        assert!(OutputFormats::parse("none").unwrap().is_none());
        assert!(OutputFormats::parse(" NONE ").unwrap().is_none());
        let e = OutputFormats::parse("none,csv").unwrap_err();
        assert!(e.message.contains("cannot be combined"), "{e}");
        assert!(OutputFormats::parse("").is_err());
        for var in ["RPROF_STATS", "RPROF_SUMMARY"] {
            let c = TraceConfig::from_source(
                &env(&[(var, "1"), ("RPROF_OUTPUT_FORMAT", "none")]),
                &facts(),
            )
            .unwrap()
            .unwrap();
            assert!(c.formats.is_none() && c.kernel_trace, "{var}");
            assert_eq!(
                (c.stats, c.summary),
                (var == "RPROF_STATS", var == "RPROF_SUMMARY")
            );
        }
        let e = TraceConfig::from_source(
            &env(&[("RPROF_KERNEL_TRACE", "1"), ("RPROF_OUTPUT_FORMAT", "none")]),
            &facts(),
        )
        .unwrap_err();
        assert_eq!(e.variable, "RPROF_OUTPUT_FORMAT");
        assert!(e.message.contains("--summary"), "{e}");
    }

    #[test]
    fn the_split_interval_is_seconds_and_needs_the_perfetto_trace() {
        let get = |v: &str, formats: &str| {
            TraceConfig::from_source(
                &env(&[
                    ("RPROF_KERNEL_TRACE", "1"),
                    ("RPROF_PFTRACE_SPLIT_SECONDS", v),
                    ("RPROF_OUTPUT_FORMAT", formats),
                ]),
                &facts(),
            )
        };
        let ns = |v: &str| get(v, "pftrace").unwrap().unwrap().pftrace_split_ns;
        assert_eq!(ns("10"), Some(10_000_000_000));
        assert_eq!(ns(" 0.25 "), Some(250_000_000));
        assert_eq!(ns("0.001"), Some(1_000_000));
        assert_eq!(ns(""), None);
        for bad in ["0", "-1", "0.0005", "86401", "ten", "nan", "inf", "1e400"] {
            let e = get(bad, "pftrace").unwrap_err();
            assert_eq!(e.variable, "RPROF_PFTRACE_SPLIT_SECONDS", "{bad}");
            assert!(e.message.contains("not a number of seconds"), "{e}");
        }
        let e = get("10", "csv").unwrap_err();
        assert_eq!(e.variable, "RPROF_PFTRACE_SPLIT_SECONDS");
        assert!(e.message.contains("do not include pftrace"), "{e}");
    }

    #[test]
    fn rocpd_is_a_format() {
        let f = OutputFormats::parse("rocpd").unwrap();
        assert!(f.rocpd && !f.csv && !f.json && !f.pftrace);
        let f = OutputFormats::parse("csv,ROCPD").unwrap();
        assert!(f.rocpd && f.csv);
    }

    #[test]
    fn filters() {
        let c = TraceConfig::from_source(
            &env(&[
                ("RPROF_KERNEL_TRACE", "1"),
                ("RPROF_KERNEL_INCLUDE_REGEX", "^add"),
                ("RPROF_KERNEL_EXCLUDE_REGEX", "slow"),
            ]),
            &facts(),
        )
        .unwrap()
        .unwrap();
        let kernels = KernelTable::new(NamePolicy::from_config(&c));
        assert!(kernels.insert(1, "add_f32").keep());
        assert!(!kernels.insert(2, "mul").keep());
        assert!(!kernels.insert(3, "add_slow").keep());
    }

    #[test]
    fn every_boolean_spelling_and_empty_means_unset() {
        for (v, on) in [
            ("1", true),
            ("true", true),
            ("YES", true),
            ("On", true),
            (" 1 ", true),
            ("0", false),
            ("false", false),
            ("no", false),
            ("OFF", false),
            ("", false),
        ] {
            let t = Tuning::from_source(&env(&[
                ("RPROF_VERBOSE", v),
                ("RPROF_INTERCEPT_PASSTHROUGH", v),
            ]))
            .unwrap();
            assert_eq!((t.verbose, t.passthrough), (on, on), "{v:?}");
            let c = TraceConfig::from_source(
                &env(&[("RPROF_RPC_TRACE", "1"), ("RPROF_STATS", v)]),
                &facts(),
            )
            .unwrap()
            .unwrap();
            assert_eq!(c.stats, on, "{v:?}");
        }
    }

    #[test]
    fn the_tuning_reaches_the_configuration() {
        let c = TraceConfig::from_source(
            &env(&[("RPROF_KERNEL_TRACE", "1"), ("RPROF_VERBOSE", "yes")]),
            &facts(),
        )
        .unwrap()
        .unwrap();
        assert!(c.tuning.verbose);
        assert_eq!(c.tuning.pool_size, DEFAULT_POOL_SIZE);
    }
}
