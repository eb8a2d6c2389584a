//! Section `scale` (only with `--only scale`: minutes per run): millions of
//! dispatches under `rprof --kernel-trace` with the default outputs, on the
//! HIP graph storm (`graph_storm 256 I`) and on eight threads launching into
//! HIP streams that share HIP's four hardware queues (`hip/threads 8 P`:
//! 8 × 1.25 P dispatches). For each size (`--scale-sizes`, default 100 k,
//! 1 M, 10 M):
//!
//! - exact counts: the CSV's rows per kernel name and the Perfetto trace's
//!   kernel slices per name (streamed with
//!   [`rprof_perfetto::count_slices`]) against what the program says it
//!   launched;
//! - no record lost: the run summary's `lost` counter (`RPROF_VERBOSE`);
//! - memory: peak RSS of the traced and the untraced run, and rprof's share
//!   (the difference), which must not grow with the dispatch count;
//! - wall time, trace bytes per dispatch, the queues used (distinct
//!   `Queue_Id`s in the CSV).
//!
//! One traced and one untraced run per size (`--reps` does not apply: a
//! 10 M run takes minutes). Owns this section only; the runs go through
//! [`crate::run::run`] like every other section.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::BufRead;
use std::path::Path;

use crate::cli::Options;
use crate::run::{run, RunResult, TRACED, UNTRACED};
use crate::sections::Workloads;
use crate::Error;

/// The default sizes (dispatches per run).
pub const DEFAULT_SIZES: &[u64] = &[100_000, 1_000_000, 10_000_000];

/// What a program said it launched (`LAUNCHED ... kernel=NAME` lines of
/// hip-tests' launch log), per kernel name.
fn launched(stdout: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for l in stdout.lines().filter(|l| l.starts_with("LAUNCHED ")) {
        let (Some(count), Some(name)) = (
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("count="))
                .and_then(|c| c.parse::<u64>().ok()),
            l.split_once(" kernel=").map(|(_, n)| n.to_string()),
        ) else {
            continue;
        };
        *m.entry(name).or_insert(0) += count;
    }
    m
}

/// Splits one CSV line into fields (double-quoted fields may hold commas;
/// `""` is a quote).
fn csv_fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out
}

/// The kernel-trace CSV's rows per kernel name and its distinct queue ids,
/// streamed.
fn csv_counts(path: &Path) -> Result<(BTreeMap<String, u64>, BTreeSet<String>), Error> {
    let f = std::fs::File::open(path)
        .map_err(|e| Error::Failed(format!("cannot open {}: {e}", path.display())))?;
    let mut lines = std::io::BufReader::with_capacity(1 << 20, f).lines();
    let header = csv_fields(&lines.next().and_then(Result::ok).unwrap_or_default());
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| Error::Failed(format!("{}: no column {name}", path.display())))
    };
    let (name_col, queue_col) = (col("Kernel_Name")?, col("Queue_Id")?);
    let mut by_name = BTreeMap::new();
    let mut queues = BTreeSet::new();
    for line in lines {
        let line = line.map_err(|e| Error::Failed(format!("{}: {e}", path.display())))?;
        let f = csv_fields(&line);
        if let (Some(n), Some(q)) = (f.get(name_col), f.get(queue_col)) {
            *by_name.entry(n.clone()).or_insert(0) += 1;
            if !queues.contains(q) {
                queues.insert(q.clone());
            }
        }
    }
    Ok((by_name, queues))
}

/// The `lost` figure of the run summary `RPROF_VERBOSE` prints
/// ("..., N lost, ...").
fn lost(stderr: &str) -> Option<u64> {
    let line = stderr.lines().find(|l| l.contains(" dispatches written"))?;
    let before = line.split(" lost").next()?;
    before.rsplit(' ').next()?.parse().ok()
}

/// One workload of the section: its label and its arguments for `n`
/// dispatches (rounded up to the workload's unit), with the exact count.
fn shapes(w: &Workloads, threads: &str, n: u64) -> Vec<(String, Vec<String>, u64)> {
    let launches = n.div_ceil(256);
    let per_thread = n.div_ceil(10);
    vec![
        (
            "storm".into(),
            vec![w.storm.clone(), "256".into(), launches.to_string()],
            256 * launches,
        ),
        (
            "threads8".into(),
            vec![threads.into(), "8".into(), per_thread.to_string()],
            // thread t launches P of its own kernel and P / 4 ticks.
            8 * (per_thread + per_thread / 4),
        ),
    ]
}

/// Section `scale`.
pub fn scale(o: &Options, w: &Workloads, report: &mut String) -> Result<(), Error> {
    let sizes: Vec<u64> = if o.scale_sizes.is_empty() {
        DEFAULT_SIZES.to_vec()
    } else {
        o.scale_sizes.clone()
    };
    let threads = o.work_dir.join("hip").join("threads");
    let threads = threads
        .canonicalize()
        .unwrap_or(threads)
        .to_str()
        .map(str::to_owned)
        .ok_or_else(|| Error::Setup("hip/threads: path is not UTF-8".into()))?;
    if !Path::new(&threads).exists() {
        return Err(Error::Setup(format!(
            "{threads} missing: run scripts/bench.sh (hip-tests/build.sh builds it)"
        )));
    }
    let _ = writeln!(
        report,
        "\n[scale: default outputs (pftrace,csv), one untraced and one traced run per size]"
    );
    let _ = writeln!(
        report,
        "  {:<9} {:>11} {:>9} {:>9} {:>6} {:>12} {:>12} {:>10} {:>7} {:>5} {:>6}",
        "workload",
        "dispatches",
        "untr. s",
        "traced s",
        "ratio",
        "untr. MiB",
        "traced MiB",
        "rprof MiB",
        "B/disp",
        "lost",
        "queues"
    );
    let verbose = [("RPROF_VERBOSE", "1")];
    let mut all_exact = true;
    for &n in &sizes {
        for (label, args, truth) in shapes(w, &threads, n) {
            let app: Vec<&str> = args.iter().map(String::as_str).collect();
            let tag = format!("scale-{label}-{n}");
            let u = run(o, UNTRACED, &tag, &[], &app)?;
            let t = run(o, TRACED, &tag, &verbose, &app)?;
            let stderr =
                std::fs::read_to_string(o.work_dir.join("last-stderr.txt")).unwrap_or_default();
            let (exact, queues) = check_counts(o, &tag, &t, truth)?;
            all_exact &= exact.is_empty();
            let lost = lost(&stderr);
            let mib = |r: &RunResult| r.max_rss_kb as f64 / 1024.0;
            let _ = writeln!(
                report,
                "  {:<9} {:>11} {:>9.2} {:>9.2} {:>5.2}x {:>12.1} {:>12.1} {:>10.1} {:>7.1} {:>5} {:>6}",
                label,
                truth,
                u.wall_s,
                t.wall_s,
                t.wall_s / u.wall_s,
                mib(&u),
                mib(&t),
                mib(&t) - mib(&u),
                t.trace_bytes as f64 / truth as f64,
                lost.map_or("?".to_string(), |l| l.to_string()),
                queues
            );
            if !exact.is_empty() {
                let _ = writeln!(report, "    COUNTS DIFFER: {exact}");
            }
            // The traces of the large runs take gigabytes: keep the last
            // one only (removed by the next run of the same tag anyway).
            remove_big_outputs(o, &tag, n);
        }
    }
    let _ = writeln!(
        report,
        "  counts: {} (CSV rows and Perfetto kernel slices per kernel name against the program's launch log)",
        if all_exact { "exact in every run" } else { "NOT exact (see above)" }
    );
    if all_exact {
        Ok(())
    } else {
        Err(Error::Failed(format!("scale: counts differ\n{report}")))
    }
}

/// Compares the traced run's CSV and Perfetto counts per kernel name with
/// the program's launch log; returns what differs (empty: exact) and the
/// number of queues the CSV names.
fn check_counts(
    o: &Options,
    tag: &str,
    t: &RunResult,
    truth: u64,
) -> Result<(String, usize), Error> {
    let out = o.work_dir.join("out");
    let want = launched(&t.stdout);
    let (csv, queues) = csv_counts(&out.join(format!("{tag}_kernel_trace.csv")))?;
    let trace = out.join(format!("{tag}.pftrace"));
    let f = std::fs::File::open(&trace)
        .map_err(|e| Error::Failed(format!("cannot open {}: {e}", trace.display())))?;
    let counts = rprof_perfetto::count_slices(f)
        .map_err(|e| Error::Failed(format!("{}: {e}", trace.display())))?;
    // The runtime's own kernels (HIP's fill kernel for hipMemset) are not
    // in the launch log: compare the program's kernels, and require the
    // others to be the same in both outputs.
    let of = |m: &BTreeMap<String, u64>| -> BTreeMap<String, u64> {
        want.keys()
            .map(|k| (k.clone(), m.get(k).copied().unwrap_or(0)))
            .collect()
    };
    let others = |m: &BTreeMap<String, u64>| -> BTreeMap<String, u64> {
        csv.keys()
            .filter(|k| !want.contains_key(*k))
            .map(|k| (k.clone(), m.get(k).copied().unwrap_or(0)))
            .collect()
    };
    let mut diff = String::new();
    let total: u64 = want.values().sum();
    if total != truth {
        let _ = write!(diff, "launch log total {total} != {truth}; ");
    }
    if of(&csv) != want {
        let _ = write!(
            diff,
            "CSV {} rows per name differ; ",
            csv.values().sum::<u64>()
        );
    }
    if of(&counts.slices) != want || others(&counts.slices) != others(&csv) {
        let _ = write!(
            diff,
            "pftrace slices per name differ from the CSV ({} kernel slices); ",
            of(&counts.slices).values().sum::<u64>()
        );
    }
    Ok((diff, queues.len()))
}

/// Removes a large run's trace and CSV once counted.
fn remove_big_outputs(o: &Options, tag: &str, n: u64) {
    if n < 1_000_000 {
        return;
    }
    let out = o.work_dir.join("out");
    for suffix in [".pftrace", "_kernel_trace.csv"] {
        let _ = std::fs::remove_file(out.join(format!("{tag}{suffix}")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_logs_csv_lines_and_the_lost_counter_are_read() {
        let out = "LAUNCHED pid=7 count=5 grid=1,1,1 workgroup=64,1,1 kernel=void graph_node<0>(int*, int)\nLAUNCHED pid=7 count=2 grid=1,1,1 workgroup=64,1,1 kernel=tick(unsigned int*)\nLAUNCHED pid=7 count=1 grid=1,1,1 workgroup=64,1,1 kernel=tick(unsigned int*)\nLAUNCHED pid=7 total=8\n";
        let m = launched(out);
        assert_eq!(m.get("void graph_node<0>(int*, int)"), Some(&5));
        assert_eq!(m.get("tick(unsigned int*)"), Some(&3));
        assert_eq!(m.len(), 2);
        assert_eq!(
            csv_fields(r#"K,0,1,"void f<1>(int*, int)",x"#),
            ["K", "0", "1", "void f<1>(int*, int)", "x"]
        );
        assert_eq!(csv_fields(r#""a""b",c"#), ["a\"b", "c"]);
        assert_eq!(
            lost("rprof: finished at exit in 1s (device 2ms, threads 998ms): 10 dispatches written, 0 filtered out, 3 lost, clamps"),
            Some(3)
        );
        assert_eq!(lost("nothing"), None);
    }
}
