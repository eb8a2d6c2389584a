//! Medians and ranges of the runs' figures.

use crate::run::RunResult;
use crate::Error;

/// The median of `v` (NaN if empty); never panics, NaN sorts last.
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// A distribution-free 95 % confidence interval of the median of `v`: the
/// order statistics `n/2 ± 0.98·√n` (the normal approximation of the
/// binomial count of values below the median). `(NaN, NaN)` below 6 values,
/// where the interval would be the whole range.
pub fn median_ci95(v: &[f64]) -> (f64, f64) {
    let n = v.len();
    if n < 6 {
        return (f64::NAN, f64::NAN);
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let half = 0.98 * (n as f64).sqrt();
    let lo = ((n as f64 / 2.0 - half).floor().max(0.0)) as usize;
    let hi = ((n as f64 / 2.0 + half).ceil() as usize).min(n - 1);
    (v[lo], v[hi])
}

/// `f` of every run.
pub fn series(rs: &[RunResult], f: impl Fn(&RunResult) -> f64) -> Vec<f64> {
    rs.iter().map(f).collect()
}

/// The median of `f` over `rs`.
pub fn median_of(rs: &[RunResult], f: impl Fn(&RunResult) -> f64) -> f64 {
    median(&series(rs, f))
}

/// The median of the workload's printed figure `key` over `rs`; an error if
/// a run did not print it.
pub fn figure(rs: &[RunResult], key: &str) -> Result<f64, Error> {
    let v = rs
        .iter()
        .map(|r| r.figure(key))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(median(&v))
}

/// Smallest and largest of `v`.
pub fn range(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        })
}

/// Per-repetition ratios `b / a` of wall time.
pub fn wall_ratios(a: &[RunResult], b: &[RunResult]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| y.wall_s / x.wall_s).collect()
}

/// Median traced peak RSS minus median untraced peak RSS, in MiB.
pub fn rss_delta_mib(untraced: &[RunResult], traced: &[RunResult]) -> f64 {
    let mib = |rs: &[RunResult]| median_of(rs, |r| r.max_rss_kb as f64 / 1024.0);
    mib(traced) - mib(untraced)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_interval_is_the_order_statistics_around_the_middle() {
        let v: Vec<f64> = (0..100).rev().map(f64::from).collect();
        // 50 ± 0.98 * 10: ranks 40 and 60.
        assert_eq!(median_ci95(&v), (40.0, 60.0));
        let (lo, hi) = median_ci95(&[1.0; 5]);
        assert!(lo.is_nan() && hi.is_nan());
        assert_eq!(median_ci95(&[5.0, 1.0, 4.0, 2.0, 3.0, 6.0]), (1.0, 6.0));
    }

    #[test]
    fn medians_ranges_and_missing_figures() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        // NaN no longer panics the sort.
        assert_eq!(median(&[f64::NAN, 1.0, 2.0]), 2.0);
        assert_eq!(range(&[2.0, 0.5, 3.0]), (0.5, 3.0));
        let mut r = RunResult {
            tag: "enqueue".into(),
            ..Default::default()
        };
        r.values.insert("enqueue_p50_ns".into(), "120".into());
        assert_eq!(
            figure(&[r.clone(), r.clone()], "enqueue_p50_ns").unwrap(),
            120.0
        );
        let e = figure(&[r], "enqueue_p99_ns").unwrap_err().to_string();
        assert_eq!(
            e,
            "enqueue: the workload printed no figure enqueue_p99_ns= (it printed: enqueue_p50_ns)"
        );
    }
}
