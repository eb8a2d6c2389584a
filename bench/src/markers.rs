//! Section `markers`: the cost of `--marker-trace` per ROCTx marker, on
//! hip-tests' `roctx_storm` (N marks and N push/pop ranges around N small
//! kernels, linked to the runtime's own ROCTx library). Whole-command wall
//! time, alternating untraced, `--kernel-trace` and `--kernel-trace
//! --marker-trace` runs; the marker count is checked exactly from each
//! marker run's `NAME_marker_api_trace.csv` (2N rows). Where the runtime's
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
use crate::stats::{median, median_of, range, wall_ratios};
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
    report.push_str(&lines(n, &runs));
    Ok(())
}

/// The report lines: each mode's median wall time and ratio to untraced, and
/// the time the marker trace adds per marker over `--kernel-trace`.
fn lines(n: u64, runs: &[Vec<RunResult>]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n[--marker-trace: roctx_storm, {n} x (roctxMarkA, roctxRangePushA, 1 kernel, roctxRangePop)]"
    );
    let _ = writeln!(
        out,
        "  {:<36} {:>10} {:>8} {:>13}",
        "mode", "wall s", "ratio", "ratio range"
    );
    let base = median_of(&runs[0], |r| r.wall_s);
    let _ = writeln!(out, "  {:<36} {:>10.3}", "untraced", base);
    for (label, rs) in [
        ("--kernel-trace", &runs[1]),
        ("--kernel-trace --marker-trace", &runs[2]),
    ] {
        let ratios = wall_ratios(&runs[0], rs);
        let (lo, hi) = range(&ratios);
        let _ = writeln!(
            out,
            "  {:<36} {:>10.3} {:>8.2} {:>6.2}-{:<6.2}",
            label,
            median_of(rs, |r| r.wall_s),
            median(&ratios),
            lo,
            hi
        );
    }
    let markers = 2 * n;
    let added = median_of(&runs[2], |r| r.wall_s) - median_of(&runs[1], |r| r.wall_s);
    let _ = writeln!(
        out,
        "  added per marker: {:.2} us ({markers} markers per run, checked in each CSV; \
         (--marker-trace wall - --kernel-trace wall) / markers)",
        added * 1e6 / markers as f64
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(walls: &[f64]) -> Vec<RunResult> {
        walls
            .iter()
            .map(|&wall_s| RunResult {
                wall_s,
                ..Default::default()
            })
            .collect()
    }

    #[test]
    fn lines_give_the_added_time_per_marker_over_the_kernel_trace() {
        let r = vec![
            runs(&[1.0, 1.0, 1.0]),
            runs(&[1.1, 1.1, 1.2]),
            runs(&[1.3, 1.5, 1.5]),
        ];
        assert_eq!(
            lines(1000, &r),
            "\n[--marker-trace: roctx_storm, 1000 x (roctxMarkA, roctxRangePushA, 1 kernel, roctxRangePop)]\n  mode                                     wall s    ratio   ratio range\n  untraced                                  1.000\n  --kernel-trace                            1.100     1.10   1.10-1.20  \n  --kernel-trace --marker-trace             1.500     1.50   1.30-1.50  \n  added per marker: 200.00 us (2000 markers per run, checked in each CSV; (--marker-trace wall - --kernel-trace wall) / markers)\n"
        );
    }
}
