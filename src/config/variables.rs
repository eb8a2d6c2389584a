//! Which `RPROF_*` variables exist, and which set ones look like typos of
//! them (warned about by the tool library; the run goes on).
//!
//! Owns the list of known names and the closeness rule; must not read
//! values.

use std::fmt;

/// Every `RPROF_*` variable the tool library or the `rprof` command reads
/// (the [`super::TraceConfig`] and [`super::Tuning`] ones, and the report
/// pipe the command sets).
pub const KNOWN_VARIABLES: &[&str] = &[
    "RPROF_KERNEL_TRACE",
    "RPROF_SYS_TRACE",
    "RPROF_RPC_TRACE",
    "RPROF_MARKER_TRACE",
    "RPROF_KERNEL_RENAME",
    "RPROF_MEMORY_COPY_TRACE",
    "RPROF_SERIALIZE_KERNELS",
    "RPROF_STATS",
    "RPROF_SUMMARY",
    "RPROF_PFTRACE_SPLIT_SECONDS",
    "RPROF_TRUNCATE_KERNELS",
    "RPROF_OUTPUT_DIR",
    "RPROF_OUTPUT_NAME",
    "RPROF_OUTPUT_FORMAT",
    "RPROF_KERNEL_INCLUDE_REGEX",
    "RPROF_KERNEL_EXCLUDE_REGEX",
    "RPROF_SIGNAL_POOL_SIZE",
    "RPROF_FORWARD_APP_SIGNAL",
    "RPROF_COMPLETION_MAX_BACKOFF_US",
    "RPROF_START_DELAY_MS",
    "RPROF_INTERCEPT_PASSTHROUGH",
    "RPROF_VERBOSE",
    "RPROF_PFTRACE_ENCODING",
    "RPROF_HOST_CLOCK",
    "RPROF_TIMESTAMP_SIGNALS",
    "RPROF_REPORT_DIR",
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
/// known, not another tool's (the emulator's `RPROF_EMU_*`, the tests' and
/// the scripts'), and at most two edits (one for short names; letter case
/// is not counted) from a known name.
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

#[cfg(test)]
mod tests {
    use super::*;

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
            "RPROF_REPORT_DIR",
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
