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
//! | `RPROF_SERIALIZE_KERNELS` | one kernel at a time per GPU | off |
//! | `RPROF_STATS` | per-kernel statistics at exit | off |
//! | `RPROF_TRUNCATE_KERNELS` | keep only the base name of kernels | off |
//! | `RPROF_OUTPUT_DIR` | output directory | `rprof-results` |
//! | `RPROF_OUTPUT_NAME` | file name stem, with placeholders | `%hostname%/%pid%` |
//! | `RPROF_OUTPUT_FORMAT` | comma list of `pftrace`, `csv`, `json` | `pftrace,csv` |
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
//! This module owns reading and validating those variables; it must not act
//! on them (opening files, starting threads is the tool library's job).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use regex::Regex;

/// Which files to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputFormats {
    /// `NAME.pftrace`
    pub pftrace: bool,
    /// `NAME_kernel_trace.csv`
    pub csv: bool,
    /// `NAME_results.json`
    pub json: bool,
}

impl OutputFormats {
    /// Parses a comma-separated list such as `pftrace,csv`.
    pub fn parse(list: &str) -> Result<Self, ConfigError> {
        let mut f = OutputFormats {
            pftrace: false,
            csv: false,
            json: false,
        };
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match item.to_ascii_lowercase().as_str() {
                "pftrace" | "perfetto" => f.pftrace = true,
                "csv" => f.csv = true,
                "json" => f.json = true,
                other => {
                    return Err(ConfigError::new(
                        "RPROF_OUTPUT_FORMAT",
                        format!("unknown format `{other}` (expected pftrace, csv or json)"),
                    ))
                }
            }
        }
        if !(f.pftrace || f.csv || f.json) {
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
}

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
        })
    }
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
    fn new(variable: &'static str, message: String) -> Self {
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

/// The variable's value, trimmed; `None` when unset or empty.
fn value(env: &dyn EnvSource, name: &str) -> Option<String> {
    env.get(name)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

fn parse_bool(env: &dyn EnvSource, name: &'static str) -> Result<bool, ConfigError> {
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
fn parse_whole<T>(
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
fn parse_choice<const N: usize>(
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

fn parse_regex(env: &dyn EnvSource, name: &'static str) -> Result<Option<Regex>, ConfigError> {
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
        let kernel_trace = parse_bool(env, "RPROF_KERNEL_TRACE")?;
        let rpc_trace = parse_bool(env, "RPROF_RPC_TRACE")?;
        let serialize_kernels = parse_bool(env, "RPROF_SERIALIZE_KERNELS")?;
        let stats = parse_bool(env, "RPROF_STATS")?;
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
        if !(kernel_trace || rpc_trace || serialize_kernels || stats) {
            return Ok(None);
        }
        Ok(Some(TraceConfig {
            // Stats are computed from the kernel trace, and serialization is
            // done by the kernel tracer's interceptor: both imply it.
            kernel_trace: kernel_trace || stats || serialize_kernels,
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
        }))
    }

    /// `DIR/NAME<suffix>`, e.g. `output_path("_kernel_trace.csv")`.
    pub fn output_path(&self, suffix: &str) -> PathBuf {
        self.output_dir
            .join(format!("{}{}", self.output_name, suffix))
    }
}

/// Every `RPROF_*` variable the tool library or the `rprof` command reads
/// (the [`TraceConfig`] and [`Tuning`] ones, and the report pipe the command
/// sets).
pub const KNOWN_VARIABLES: &[&str] = &[
    "RPROF_KERNEL_TRACE",
    "RPROF_RPC_TRACE",
    "RPROF_SERIALIZE_KERNELS",
    "RPROF_STATS",
    "RPROF_TRUNCATE_KERNELS",
    "RPROF_OUTPUT_DIR",
    "RPROF_OUTPUT_NAME",
    "RPROF_OUTPUT_FORMAT",
    "RPROF_KERNEL_INCLUDE_REGEX",
    "RPROF_KERNEL_EXCLUDE_REGEX",
    "RPROF_SIGNAL_POOL_SIZE",
    "RPROF_FORWARD_APP_SIGNAL",
    "RPROF_COMPLETION_MAX_BACKOFF_US",
    "RPROF_INTERCEPT_PASSTHROUGH",
    "RPROF_VERBOSE",
    "RPROF_PFTRACE_ENCODING",
    "RPROF_REPORT_FD",
];

/// `RPROF_*` variables read by others, never flagged as typos: the emulated
/// GPU's (`RPROF_EMU_*`, validated by the emulator), the test harness's and
/// the scripts'.
const OTHER_VARIABLES: &[&str] = &[
    "RPROF_EMU_",
    "RPROF_TEST_",
    "RPROF_BIN",
    "RPROF_UPDATE_SNAPSHOTS",
    "RPROF_FUZZ_ITERATIONS",
    "RPROF_PFTRACE_CHECK",
    "RPROF_SECURITY_RPROF",
    "RPROF_ROCM_ROOTS",
    "RPROF_DEBIAN_MIRROR",
];

/// A set `RPROF_*` variable that rprof does not read but that is within a
/// typo of one it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Misspelling {
    /// The variable as set.
    pub found: String,
    /// The closest known variable.
    pub meant: &'static str,
}

impl fmt::Display for Misspelling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is not a variable rprof knows (ignored); did you mean {}?",
            self.found, self.meant
        )
    }
}

/// The variables among `names` that look like typos of a known one: not
/// known, not another tool's ([`OTHER_VARIABLES`]), and at most two edits
/// (one for short names; letter case is not counted) from a known name.
pub fn misspelt_variables<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<Misspelling> {
    names
        .into_iter()
        .filter(|n| n.get(..6).is_some_and(|p| p.eq_ignore_ascii_case("RPROF_")))
        .filter(|n| !KNOWN_VARIABLES.contains(n))
        .filter(|n| !OTHER_VARIABLES.iter().any(|o| n.starts_with(o) || n == o))
        .filter_map(|n| {
            let typed = n[6..].to_ascii_uppercase();
            let (meant, distance) = KNOWN_VARIABLES
                .iter()
                .map(|k| (*k, edit_distance(&typed, &k[6..])))
                .min_by_key(|&(_, d)| d)?;
            let allowed = if meant.len() - 6 >= 6 { 2 } else { 1 };
            (distance <= allowed).then(|| Misspelling {
                found: n.to_string(),
                meant,
            })
        })
        .collect()
}

/// Edits (insert, delete, replace, swap two neighbours) from `a` to `b`.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // rows[i][j]: distance between a[..i] and b[..j].
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let replace = rows[i - 1][j - 1] + usize::from(a[i - 1] != b[j - 1]);
            let mut d = replace.min(rows[i - 1][j] + 1).min(rows[i][j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = d;
        }
    }
    rows[a.len()][b.len()]
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

    fn facts() -> ProcessFacts {
        ProcessFacts {
            pid: 42,
            ppid: 7,
            hostname: "node1".into(),
        }
    }

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
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
                json: false
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
        assert!(kernels.insert(1, "add_f32").keep);
        assert!(!kernels.insert(2, "mul").keep);
        assert!(!kernels.insert(3, "add_slow").keep);
    }

    fn tuning(pairs: &[(&str, &str)]) -> Result<Tuning, ConfigError> {
        Tuning::from_source(&env(pairs))
    }

    #[test]
    fn tuning_defaults_and_good_values() {
        let d = tuning(&[]).unwrap();
        assert_eq!(d, Tuning::default());
        assert_eq!(d.pool_size, DEFAULT_POOL_SIZE);
        assert!(!d.host_forwarding && !d.verbose && !d.passthrough && !d.plain_pftrace);
        assert_eq!(d.max_backoff, None);
        let t = tuning(&[
            ("RPROF_SIGNAL_POOL_SIZE", "64"),
            ("RPROF_FORWARD_APP_SIGNAL", "host"),
            ("RPROF_COMPLETION_MAX_BACKOFF_US", "250"),
            ("RPROF_VERBOSE", "1"),
            ("RPROF_INTERCEPT_PASSTHROUGH", "0"),
            ("RPROF_PFTRACE_ENCODING", "plain"),
        ])
        .unwrap();
        assert_eq!(t.pool_size, 64);
        assert!(t.host_forwarding && t.verbose && !t.passthrough && t.plain_pftrace);
        assert_eq!(t.max_backoff, Some(Duration::from_micros(250)));
        let t = tuning(&[
            ("RPROF_FORWARD_APP_SIGNAL", "barrier"),
            ("RPROF_PFTRACE_ENCODING", "compact"),
            ("RPROF_COMPLETION_MAX_BACKOFF_US", "100000"),
            ("RPROF_SIGNAL_POOL_SIZE", "1048576"),
        ])
        .unwrap();
        assert!(!t.host_forwarding && !t.plain_pftrace);
        assert_eq!(t.pool_size, 1 << 20);
        assert_eq!(t.max_backoff, Some(Duration::from_millis(100)));
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
            let t = tuning(&[("RPROF_VERBOSE", v), ("RPROF_INTERCEPT_PASSTHROUGH", v)]).unwrap();
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

    #[test]
    fn typos_of_known_variables_are_named_with_the_closest() {
        let found = misspelt_variables([
            "RPROF_VERBOS",
            "RPROF_SIGNAL_POOL_SZIE",
            "RPROF_KERNEL_TRACES",
            "rprof_stats",
            "RPROF_OUTPUT_DIRR",
            // Known, or another tool's: never flagged.
            "RPROF_VERBOSE",
            "RPROF_REPORT_FD",
            "RPROF_EMU_GPUS",
            "RPROF_TEST_ROCM",
            "RPROF_BIN",
            // Not close to anything: left alone.
            "RPROF_SOMETHING_ELSE",
            "RPROF_",
            "PATH",
            "RPROF_STAT",
            "RPROF_STA",
        ]);
        let pairs: Vec<(&str, &str)> = found.iter().map(|m| (m.found.as_str(), m.meant)).collect();
        assert_eq!(
            pairs,
            [
                ("RPROF_VERBOS", "RPROF_VERBOSE"),
                ("RPROF_SIGNAL_POOL_SZIE", "RPROF_SIGNAL_POOL_SIZE"),
                ("RPROF_KERNEL_TRACES", "RPROF_KERNEL_TRACE"),
                ("rprof_stats", "RPROF_STATS"),
                ("RPROF_OUTPUT_DIRR", "RPROF_OUTPUT_DIR"),
                ("RPROF_STAT", "RPROF_STATS"),
            ]
        );
        assert_eq!(
            found[0].to_string(),
            "RPROF_VERBOS is not a variable rprof knows (ignored); did you mean RPROF_VERBOSE?"
        );
        assert_eq!(edit_distance("ab", "ba"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
