//! Section `markers`: the cost of `--marker-trace` per ROCTx marker, on
//! hip-tests' `roctx_storm` (N marks and N push/pop ranges around N small
//! kernels, linked to the runtime's own ROCTx library). Whole-command wall
//! time, alternating untraced, `--kernel-trace` and `--kernel-trace
//! --marker-trace` runs; the marker count is checked exactly from each
//! marker run's `NAME_marker_api_trace.csv` (2N rows). The workload also
//! times each of its 3N ROCTx calls on its own thread and prints their p50
//! and mean: what a marker costs the app's thread in each mode, free of the
//! start-up and exit noise in the wall times. Where the runtime's
//! root has no ROCTx library (5.2, the host) the workload is not built and
//! the section falls back to the preload cost on the graph storm
//! ([`crate::sections::markers`]).
//!
//! Owns this section's workload choice and report lines; must not run
//! anything itself (`crate::run` does).

use std::fmt::Write as _;

use crate::cli::Options;
use crate::run::{rotate, RunResult, TRACED, UNTRACED};
use crate::sections::Workloads;
use crate::stats::{figure, median, median_of, range, wall_ratios};
use crate::Error;

/// The marker-trace mode: kernels and markers (so that the added time over
/// `--kernel-trace` is the markers' alone).
const MARKERS: &[&str] = &["--kernel-trace", "--marker-trace"];

/// Runs the section (see the module doc).
pub fn markers(o: &Options, w: &Workloads, report: &mut String) -> Result<(), Error> {
    let Some(roctx) = &w.roctx else {
        let _ = writeln!(
            report,
            "\n[--marker-trace: no ROCTx workload on this runtime (its root has no ROCTx library); the storm instead]"
        );
        return crate::sections::markers(o, w, report);
    };
    let n: u64 = if o.quick { 500 } else { 2000 };
    let runs = rotate(
        o,
        "markers",
        &[UNTRACED, TRACED, MARKERS],
        &[],
        &[roctx, &n.to_string()],
    )?;
    if let Some(bad) = runs[2].iter().find(|r| r.marker_rows != 2 * n) {
        return Err(Error::Setup(format!(
            "roctx_storm {n}: a --marker-trace run wrote {} marker rows, expected {}",
            bad.marker_rows,
            2 * n
        )));
    }
    report.push_str(&lines(n, &runs)?);
    Ok(())
}

/// The ROCTx call times `roctx_storm` prints, as (key, column title, scale):
/// p50, p99 and mean in ns, the slowest call in µs (the first marker of a
/// run can wait for rprof's session to finish starting).
const CALL_FIGURES: [(&str, &str, f64); 4] = [
    ("roctx_call_p50_ns", "p50 ns", 1.0),
    ("roctx_call_p99_ns", "p99 ns", 1.0),
    ("roctx_call_max_ns", "max us", 1e-3),
    ("roctx_call_mean_ns", "mean ns", 1.0),
];

/// The report lines: each mode's median wall time and ratio to untraced, the
/// ROCTx calls' own times on the app's thread (medians over the runs of each
/// run's figure), the time the marker trace adds per marker over
/// `--kernel-trace` by wall time, and per call on the app's thread; an error
/// if a run printed no call times.
fn lines(n: u64, runs: &[Vec<RunResult>]) -> Result<String, Error> {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n[--marker-trace: roctx_storm, {n} x (roctxMarkA, roctxRangePushA, 1 kernel, roctxRangePop); \
         ROCTx calls timed by the app]"
    );
    let _ = write!(
        out,
        "  {:<36} {:>10} {:>8} {:>13}",
        "mode", "wall s", "ratio", "ratio range"
    );
    for (_, title, _) in CALL_FIGURES {
        let _ = write!(out, " {title:>8}");
    }
    out.push('\n');
    let modes = [
        ("untraced", &runs[0]),
        ("--kernel-trace", &runs[1]),
        ("--kernel-trace --marker-trace", &runs[2]),
    ];
    let mut calls = [[0.0; 4]; 3];
    for (i, (_, rs)) in modes.iter().enumerate() {
        for (j, (key, _, _)) in CALL_FIGURES.iter().enumerate() {
            calls[i][j] = figure(rs, key)?;
        }
    }
    for (i, (label, rs)) in modes.iter().enumerate() {
        let wall = median_of(rs, |r| r.wall_s);
        if i == 0 {
            let _ = write!(out, "  {label:<36} {wall:>10.3} {:>8} {:>13}", "", "");
        } else {
            let ratios = wall_ratios(&runs[0], rs);
            let (lo, hi) = range(&ratios);
            let _ = write!(
                out,
                "  {label:<36} {wall:>10.3} {:>8.2} {lo:>6.2}-{hi:<6.2}",
                median(&ratios)
            );
        }
        for (j, (_, _, scale)) in CALL_FIGURES.iter().enumerate() {
            let _ = write!(out, " {:>8.0}", calls[i][j] * scale);
        }
        out.push('\n');
    }
    let markers = 2 * n;
    let added = median_of(&runs[2], |r| r.wall_s) - median_of(&runs[1], |r| r.wall_s);
    let _ = writeln!(
        out,
        "  added per marker: {:.2} us ({markers} markers per run, checked in each CSV; \
         (--marker-trace wall - --kernel-trace wall) / markers)",
        added * 1e6 / markers as f64
    );
    let _ = writeln!(
        out,
        "  added per ROCTx call on the app's thread: p50 {:+.0} ns, mean {:+.0} ns \
         ({} calls per run; --marker-trace against --kernel-trace)",
        calls[2][0] - calls[1][0],
        calls[2][3] - calls[1][3],
        3 * n
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs of `walls` seconds whose workload printed the ROCTx calls'
    /// p50 and mean `(p50, mean)` in ns (p99 = 2 x p50, slowest = 1000 x
    /// p50).
    fn runs(walls: &[f64], calls: &[(u64, f64)]) -> Vec<RunResult> {
        walls
            .iter()
            .zip(calls)
            .map(|(&wall_s, &(p50, mean))| RunResult {
                wall_s,
                values: [
                    ("roctx_call_p50_ns".to_string(), p50.to_string()),
                    ("roctx_call_p99_ns".to_string(), (2 * p50).to_string()),
                    ("roctx_call_max_ns".to_string(), (1000 * p50).to_string()),
                    ("roctx_call_mean_ns".to_string(), mean.to_string()),
                ]
                .into_iter()
                .collect(),
                ..Default::default()
            })
            .collect()
    }

    #[test]
    fn lines_give_the_added_time_per_marker_over_the_kernel_trace() {
        let r = vec![
            runs(&[1.0, 1.0, 1.0], &[(40, 45.0), (42, 50.5), (41, 47.0)]),
            runs(&[1.1, 1.1, 1.2], &[(44, 46.0), (43, 49.0), (45, 44.0)]),
            runs(
                &[1.3, 1.5, 1.5],
                &[(250, 400.0), (260, 380.0), (255, 390.5)],
            ),
        ];
        assert_eq!(
            lines(1000, &r).unwrap(),
            "\n[--marker-trace: roctx_storm, 1000 x (roctxMarkA, roctxRangePushA, 1 kernel, roctxRangePop); \
             ROCTx calls timed by the app]\n  \
             mode                                     wall s    ratio   ratio range   p50 ns   p99 ns   max us  mean ns\n  \
             untraced                                  1.000                              41       82       41       47\n  \
             --kernel-trace                            1.100     1.10   1.10-1.20         44       88       44       46\n  \
             --kernel-trace --marker-trace             1.500     1.50   1.30-1.50        255      510      255      390\n  \
             added per marker: 200.00 us (2000 markers per run, checked in each CSV; (--marker-trace wall - --kernel-trace wall) / markers)\n  \
             added per ROCTx call on the app's thread: p50 +211 ns, mean +344 ns (3000 calls per run; --marker-trace against --kernel-trace)\n"
        );
    }

    #[test]
    fn a_run_without_call_times_is_an_error() {
        let mut r = vec![
            runs(&[1.0], &[(40, 45.0)]),
            runs(&[1.1], &[(41, 46.0)]),
            runs(&[1.3], &[(250, 400.0)]),
        ];
        r[2][0].values.clear();
        let err = lines(1000, &r).unwrap_err().to_string();
        assert!(err.contains("roctx_call_p50_ns"), "{err}");
    }
}
