//! The report's sections: each runs its workload pairs and appends its
//! lines (the format `docs/performance.md` quotes).

use std::fmt::Write as _;
use std::path::Path;

use crate::cli::{Options, Section};
use crate::run::{pair, pair_modes, rotate, RunResult, TRACED, UNTRACED};
use crate::stats::{median, median_ci95, median_of, range, rss_delta_mib, wall_ratios};
use crate::Error;

/// The workloads scripts/bench.sh builds, as arguments.
#[derive(Debug, Clone)]
pub struct Workloads {
    /// `dispatch_bench` (raw HSA).
    pub dispatch_bench: String,
    /// The code object `dispatch_bench` loads.
    pub code_object: String,
    /// `graph_storm` (HIP).
    pub storm: String,
    /// `rpc-doorbell`, if built (5.2 only).
    pub rpc: Option<String>,
    /// `hip/memcpy_mix` (hip-tests).
    pub memcpy: String,
    /// `roctx_storm` (hip-tests, linked to the runtime's ROCTx library), if
    /// built (runtimes whose root has ROCTx).
    pub roctx: Option<String>,
}

fn arg(path: &Path) -> Result<String, Error> {
    path.to_str()
        .map(str::to_owned)
        .ok_or_else(|| Error::Setup(format!("{} is not UTF-8", path.display())))
}

impl Workloads {
    /// The workloads in `o.work_dir`; an error naming the first one the
    /// chosen sections need that is missing.
    pub fn find(o: &Options) -> Result<Self, Error> {
        let work = o
            .work_dir
            .canonicalize()
            .unwrap_or_else(|_| o.work_dir.clone());
        let dispatch_bench = work.join("dispatch_bench");
        let code_object = work.join("bench_kernels.hsaco");
        let storm = work.join("graph_storm");
        let rpc = work.join("rpc-doorbell");
        let memcpy = work.join("hip").join("memcpy_mix");
        let roctx = work.join("roctx_storm");
        let raw_hsa =
            o.want(Section::Host) || o.want(Section::Roundtrip) || o.want(Section::Memory);
        let mut needed = if raw_hsa {
            vec![&dispatch_bench, &code_object, &storm]
        } else {
            vec![&storm]
        };
        if o.want(Section::Copies) || o.want(Section::Systrace) {
            needed.push(&memcpy);
        }
        if let Some(p) = needed.into_iter().find(|p| !p.exists()) {
            return Err(Error::Setup(format!(
                "{} missing: run scripts/bench.sh (it builds the workloads)",
                p.display()
            )));
        }
        Ok(Workloads {
            dispatch_bench: arg(&dispatch_bench)?,
            code_object: arg(&code_object)?,
            storm: arg(&storm)?,
            rpc: if rpc.exists() { Some(arg(&rpc)?) } else { None },
            memcpy: arg(&memcpy)?,
            roctx: if roctx.exists() {
                Some(arg(&roctx)?)
            } else {
                None
            },
        })
    }
}

/// One point of the overhead plot: dispatches, median wall ratio, its range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Dispatches per run.
    pub dispatches: f64,
    /// Median traced / untraced wall time.
    pub ratio: f64,
    /// Smallest ratio.
    pub lo: f64,
    /// Largest ratio.
    pub hi: f64,
}

/// The report's first lines.
pub fn header(o: &Options, report: &mut String) {
    let _ = writeln!(
        report,
        "rprof-bench: {} repetitions, alternating untraced/traced",
        o.reps
    );
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let _ = writeln!(
        report,
        "machine: {cpus} CPUs; emulated GPU (gfx90a); release build; ROCm {}",
        o.root().unwrap_or("5.2 (host)")
    );
}

/// Section 1: Host time per dispatch on the submitting thread.
pub fn host_time(o: &Options, w: &Workloads, report: &mut String) -> Result<(), Error> {
    let n = if o.quick { "5000" } else { "20000" };
    let p = pair(
        o,
        "enqueue",
        &[],
        &[&w.dispatch_bench, "enqueue", n, &w.code_object],
    )?;
    let (mu, mt) = p.figures("enqueue_p50_ns")?;
    let (u99, t99) = p.figures("enqueue_p99_ns")?;
    let _ = writeln!(
        report,
        "\n[host time per dispatch, {n} dispatches in bursts of 64]\n  untraced p50 {mu:.0} ns (p99 {u99:.0})\n  traced   p50 {mt:.0} ns (p99 {t99:.0})\n  added    p50 {:.0} ns   (target <= 300 ns)",
        mt - mu
    );
    // The same loop with rprof passing every packet through untouched
    // (intercept queues, no tracing): what the runtime's intercept queue
    // costs by itself, so the rest is rprof's own work.
    let q = pair(
        o,
        "enqueue-passthrough",
        &[("RPROF_INTERCEPT_PASSTHROUGH", "1")],
        &[&w.dispatch_bench, "enqueue", n, &w.code_object],
    )?;
    let (qu, qt) = q.figures("enqueue_p50_ns")?;
    let _ = writeln!(
        report,
        "  of which the runtime's intercept queue alone (rprof passing every packet through, RPROF_INTERCEPT_PASSTHROUGH=1; its own pairs: untraced {qu:.0}, passed through {qt:.0} ns): p50 {:.0} ns; rprof's own part: {:.0} ns",
        qt - qu,
        mt - mu - (qt - qu)
    );
    let (eu, et) = p.figures("emu_events")?;
    let _ = writeln!(
        report,
        "  driver events live at exit: untraced {eu:.0}, traced {et:.0} (rprof's share: {:.0}; target <= 256)",
        et - eu
    );
    Ok(())
}

/// Section 2: App-visible completion latency.
pub fn roundtrip(o: &Options, w: &Workloads, report: &mut String) -> Result<(), Error> {
    let n = if o.quick { "2000" } else { "10000" };
    let p = pair(
        o,
        "roundtrip",
        &[],
        &[&w.dispatch_bench, "roundtrip", n, &w.code_object],
    )?;
    let (u50, t50) = p.figures("roundtrip_p50_ns")?;
    let (u99, t99) = p.figures("roundtrip_p99_ns")?;
    let _ = writeln!(
        report,
        "\n[enqueue-to-completion seen by the app, {n} single dispatches, ACTIVE wait]\n  untraced p50 {u50:.0} ns  p99 {u99:.0} ns\n  traced   p50 {t50:.0} ns  p99 {t99:.0} ns\n  added    p50 {:.0} ns  p99 {:.0} ns   (targets: p50 <= 20000, p99 <= 200000)",
        t50 - u50,
        t99 - u99
    );
    Ok(())
}

/// Section 3: Graph storm, overhead against dispatch count; the plot's points.
pub fn storm(o: &Options, w: &Workloads, report: &mut String) -> Result<Vec<Point>, Error> {
    let launches: &[u32] = if !o.launches.is_empty() {
        &o.launches
    } else if !o.want(Section::Storm) {
        &[]
    } else if o.quick {
        &[10, 50]
    } else {
        &[10, 50, 200, 800]
    };
    if launches.is_empty() {
        return Ok(Vec::new());
    }
    let _ = writeln!(
        report,
        "\n[HIP graph storm: 256 near-zero kernels x I launches; wall time of the whole run]"
    );
    let _ = writeln!(
        report,
        "  {:>9} {:>12} {:>12} {:>8} {:>13} {:>10} {:>16} {:>14}",
        "dispatch",
        "untraced s",
        "traced s",
        "ratio",
        "ratio range",
        "B/dispatch",
        "rprof rss MiB",
        "CPU +us/disp"
    );
    let mut points = Vec::new();
    for &i in launches {
        let p = pair(
            o,
            &format!("storm{i}"),
            &[],
            &[&w.storm, "256", &i.to_string()],
        )?;
        let (u, t) = (&p.a, &p.b);
        let ratios = wall_ratios(u, t);
        let ratio = median(&ratios);
        let (lo, hi) = range(&ratios);
        let (ci_lo, ci_hi) = median_ci95(&ratios);
        let dispatches = 256.0 * f64::from(i);
        let bytes = t
            .last()
            .map(|r| r.trace_bytes as f64 / dispatches)
            .unwrap_or(f64::NAN);
        // The app's own memory grows with launches (HIP 5.2.3 graphs); what
        // rprof adds is the traced peak minus the untraced peak.
        let rss = rss_delta_mib(u, t);
        let rows = t.last().map(|r| r.csv_rows).unwrap_or(0);
        let cpu = (median_of(t, |r| r.cpu_s) - median_of(u, |r| r.cpu_s)) * 1e6 / dispatches;
        let _ = writeln!(
            report,
            "  {:>9} {:>12.3} {:>12.3} {:>8.2} {:>6.2}-{:<6.2} {:>10.1} {:>16.1} {:>14.2}   (csv rows {rows}; 95% interval of the median ratio {ci_lo:.2}-{ci_hi:.2})",
            dispatches,
            median_of(u, |r| r.wall_s),
            median_of(t, |r| r.wall_s),
            ratio,
            lo,
            hi,
            bytes,
            rss,
            cpu
        );
        points.push(Point {
            dispatches,
            ratio,
            lo,
            hi,
        });
    }
    Ok(points)
}

/// Pairs of the mix per `--reps`: a run takes half a second, and the
/// ratio of one pair spreads over about ±20 % (HIP's start-up, which the
/// 20 µs kernels do not dominate), so a 1.02× target needs many pairs for a
/// median good to about ±0.01.
const MIX_PAIRS_PER_REP: usize = 3;

/// What one mix measurement gives: the median wall ratio (traced over
/// untraced), the 95 % interval of that median, the range of the ratios and
/// the untraced median wall time.
struct MixRatio {
    median: f64,
    ci: (f64, f64),
    range: (f64, f64),
    untraced_s: f64,
}

/// The storm with 20 µs kernels and `launches` graph launches, `o.reps`
/// alternating pairs.
fn mix_ratio(o: &Options, w: &Workloads, tag: &str, launches: &str) -> Result<MixRatio, Error> {
    let p = pair(
        o,
        tag,
        &[("RPROF_EMU_KERNEL_NS", "20000")],
        &[&w.storm, "256", launches],
    )?;
    let ratios = wall_ratios(&p.a, &p.b);
    Ok(MixRatio {
        median: median(&ratios),
        ci: median_ci95(&ratios),
        range: range(&ratios),
        untraced_s: median_of(&p.a, |r| r.wall_s),
    })
}

/// Section 4: Realistic mix: 20 µs kernels; then the same kernels launched
/// ten times as often (a third of the pairs), where the per-process cost
/// (start-up and exit) no longer decides the ratio.
pub fn mix(o: &Options, w: &Workloads, report: &mut String) -> Result<(), Error> {
    let launches = if o.quick { "5" } else { "20" };
    let short = Options {
        reps: o.reps * MIX_PAIRS_PER_REP,
        ..o.clone()
    };
    let m = mix_ratio(&short, w, "mix", launches)?;
    let _ = writeln!(
        report,
        "\n[realistic mix: the storm with 20 us kernels, {} pairs]\n  ratio {:.3} (95% interval of the median {:.3}-{:.3}; range {:.3}-{:.3}; target <= 1.02)",
        short.reps, m.median, m.ci.0, m.ci.1, m.range.0, m.range.1
    );
    // The same kernels ten times as often: the per-process cost (start-up
    // and exit, a few ms on ROCr >= 6) is spread over a ~1.4 s run, so the
    // ratio shows what rprof adds per dispatch of a 20 us kernel.
    let long_launches: u32 = if o.quick { 20 } else { 200 };
    let m = mix_ratio(o, w, "mixlong", &long_launches.to_string())?;
    let _ = writeln!(
        report,
        "  the same kernels x {long_launches} launches ({} dispatches, {} pairs; the per-process cost spread thin): ratio {:.3} (95% interval {:.3}-{:.3}; range {:.3}-{:.3}; untraced median {:.3} s)",
        256 * long_launches,
        o.reps,
        m.median,
        m.ci.0,
        m.ci.1,
        m.range.0,
        m.range.1,
        m.untraced_s
    );
    Ok(())
}

/// Section 5: Memory: rprof's resident memory against dispatch count (raw HSA, so
/// the app itself stays flat).
pub fn memory(o: &Options, w: &Workloads, report: &mut String) -> Result<(), Error> {
    let counts: &[&str] = if o.quick {
        &["100000", "1000000"]
    } else {
        &["100000", "1000000", "10000000"]
    };
    let _ = writeln!(
        report,
        "\n[memory: raw-HSA enqueue loop, one run each; target: flat within 16 MiB]"
    );
    let _ = writeln!(
        report,
        "  {:>10} {:>14} {:>12} {:>16} {:>12}",
        "dispatches", "untraced MiB", "traced MiB", "rprof adds MiB", "traced s"
    );
    let once = Options {
        reps: 1,
        ..o.clone()
    };
    for n in counts {
        let p = pair(
            &once,
            "memory",
            &[],
            &[&w.dispatch_bench, "enqueue", n, &w.code_object],
        )?;
        // The app's own peak (VmHWM, printed by dispatch_bench at exit).
        let (um, tm) = p.figures("vmhwm_kb")?;
        let (um, tm) = (um / 1024.0, tm / 1024.0);
        let traced_s = median_of(&p.b, |r| r.wall_s);
        let _ = writeln!(
            report,
            "  {:>10} {:>14.1} {:>12.1} {:>16.1} {:>12.2}",
            n,
            um,
            tm,
            tm - um,
            traced_s
        );
    }
    Ok(())
}

/// Section 6: The cost of --serialize-kernels (both runs traced).
pub fn serialize(o: &Options, w: &Workloads, report: &mut String) -> Result<(), Error> {
    let launches = if o.quick { "5" } else { "20" };
    let p = pair_modes(
        o,
        "serial",
        TRACED,
        &["--kernel-trace", "--serialize-kernels"],
        &[],
        &[&w.storm, "256", launches],
    )?;
    let ratios = wall_ratios(&p.a, &p.b);
    let (lo, hi) = range(&ratios);
    let rows = |rs: &[crate::run::RunResult]| rs.first().map_or(f64::NAN, |r| r.csv_rows as f64);
    let _ = writeln!(
        report,
        "\n[--serialize-kernels: the storm traced, serialized vs not]\n  wall ratio {:.2} (range {lo:.2}-{hi:.2}); dispatches/s {:.0} serialized vs {:.0}",
        median(&ratios),
        rows(&p.b) / median_of(&p.b, |r| r.wall_s),
        rows(&p.a) / median_of(&p.a, |r| r.wall_s),
    );
    Ok(())
}

/// Section 7: The cost of --rpc-trace on the RPC doorbell workload (if built).
pub fn rpc(o: &Options, w: &Workloads, report: &mut String) -> Result<(), Error> {
    let Some(rpc) = &w.rpc else {
        return Ok(());
    };
    let args = [
        rpc.as_str(),
        "--kernels",
        "64",
        "--lanes",
        "8",
        "--calls",
        "4",
        "--drain-between",
        "--wait-timeout-ms",
        "0",
    ];
    let p = pair_modes(o, "rpc", UNTRACED, &["--rpc-trace"], &[], &args)?;
    let ratios = wall_ratios(&p.a, &p.b);
    let (lo, hi) = range(&ratios);
    let _ = writeln!(
        report,
        "\n[--rpc-trace: rpc-doorbell, 64 kernels x 8 lanes x 4 calls, a ring per kernel]\n  wall ratio {:.3} (range {lo:.3}-{hi:.3})",
        median(&ratios),
    );
    Ok(())
}

/// What a trace-cost section divides its added time by.
#[derive(Debug, Clone, Copy)]
enum Per {
    /// Kernel dispatches (rows of the kernel-trace CSV of the `--kernel-trace` runs).
    Dispatch,
    /// Memory copies (rows of the memory-copy CSV of the new trace's runs).
    Copy,
}

/// The lines of a trace-cost section: the untraced, `--kernel-trace` and
/// `new` runs' median wall times, each traced mode's ratio to untraced (and
/// its range), and the time each adds per dispatch or copy when the count is
/// known.
fn cost_lines(title: &str, new: &str, runs: &[Vec<RunResult>], per: Per, report: &mut String) {
    let _ = writeln!(report, "\n[{title}]");
    let _ = writeln!(
        report,
        "  {:<36} {:>10} {:>8} {:>13} {:>16}",
        "mode", "wall s", "ratio", "ratio range", "added us/unit"
    );
    let untraced = &runs[0];
    let base = median_of(untraced, |r| r.wall_s);
    let (count, unit) = match per {
        Per::Dispatch => (runs[1].last().map_or(0, |r| r.csv_rows), "dispatches"),
        Per::Copy => (runs[2].last().map_or(0, |r| r.copy_rows), "copies"),
    };
    let _ = writeln!(report, "  {:<36} {:>10.3}", "untraced", base);
    for (label, rs) in [("--kernel-trace", &runs[1]), (new, &runs[2])] {
        let ratios = wall_ratios(untraced, rs);
        let (lo, hi) = range(&ratios);
        let wall = median_of(rs, |r| r.wall_s);
        let added = if count > 0 {
            format!("{:.2}", (wall - base) * 1e6 / count as f64)
        } else {
            "-".into()
        };
        let _ = writeln!(
            report,
            "  {:<36} {:>10.3} {:>8.2} {:>6.2}-{:<6.2} {:>16}",
            label,
            wall,
            median(&ratios),
            lo,
            hi,
            added
        );
    }
    let _ = writeln!(
        report,
        "  ({count} {unit} per run; added = (wall - untraced) / {unit})"
    );
}

/// Section 8: The cost of --memory-copy-trace on hip-tests' memcpy_mix.
pub fn copies(o: &Options, w: &Workloads, report: &mut String) -> Result<(), Error> {
    let rounds = if o.quick { "10" } else { "40" };
    let new: &[&str] = &["--memory-copy-trace"];
    let runs = rotate(
        o,
        "copies",
        &[UNTRACED, TRACED, new],
        &[],
        &[&w.memcpy, rounds],
    )?;
    cost_lines(
        &format!("--memory-copy-trace: memcpy_mix, {rounds} rounds of copies around 2 kernels"),
        "--memory-copy-trace",
        &runs,
        Per::Copy,
        report,
    );
    Ok(())
}

/// Section 9: The cost of --marker-trace. On the graph storm, which calls no
/// ROCTx: what it measures is the marker library's preload and the
/// interposition, not a cost per marker.
pub fn markers(o: &Options, w: &Workloads, report: &mut String) -> Result<(), Error> {
    let launches = if o.quick { "5" } else { "20" };
    let new: &[&str] = &["--marker-trace"];
    let runs = rotate(
        o,
        "markers",
        &[UNTRACED, TRACED, new],
        &[],
        &[&w.storm, "256", launches],
    )?;
    cost_lines(
        &format!("--marker-trace: the storm, 256 kernels x {launches} launches, no markers (preload + interposition cost)"),
        "--marker-trace",
        &runs,
        Per::Dispatch,
        report,
    );
    Ok(())
}

/// Section 10: The cost of --sys-trace on hip-tests' memcpy_mix.
pub fn sys_trace(o: &Options, w: &Workloads, report: &mut String) -> Result<(), Error> {
    let rounds = if o.quick { "10" } else { "40" };
    let new: &[&str] = &["--sys-trace"];
    let runs = rotate(
        o,
        "systrace",
        &[UNTRACED, TRACED, new],
        &[],
        &[&w.memcpy, rounds],
    )?;
    cost_lines(
        &format!("--sys-trace: memcpy_mix, {rounds} rounds of copies around 2 kernels"),
        "--sys-trace",
        &runs,
        Per::Copy,
        report,
    );
    Ok(())
}

/// Section 11: The rocpd writer's cost: the storm kernel-traced with the
/// default formats (pftrace, csv) and with `--output-format rocpd`.
pub fn rocpd(o: &Options, w: &Workloads, report: &mut String) -> Result<(), Error> {
    let launches = if o.quick { "5" } else { "20" };
    let new: &[&str] = &["--kernel-trace", "--output-format", "rocpd"];
    let runs = rotate(
        o,
        "rocpd",
        &[UNTRACED, TRACED, new],
        &[],
        &[&w.storm, "256", launches],
    )?;
    cost_lines(
        &format!("rocpd writer: the storm, 256 kernels x {launches} launches; --kernel-trace writes pftrace,csv"),
        "--kernel-trace --output-format rocpd",
        &runs,
        Per::Dispatch,
        report,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(walls: &[f64], kernel_rows: u64, copy_rows: u64) -> Vec<RunResult> {
        walls
            .iter()
            .map(|&wall_s| RunResult {
                wall_s,
                csv_rows: kernel_rows,
                copy_rows,
                ..Default::default()
            })
            .collect()
    }

    #[test]
    fn cost_lines_print_medians_ratios_and_added_time_per_unit() {
        let r = vec![
            runs(&[1.0, 2.0, 1.0], 0, 0),
            runs(&[1.1, 2.2, 1.1], 100, 0),
            runs(&[1.2, 2.4, 1.3], 0, 200),
        ];
        let mut text = String::new();
        cost_lines("t", "--memory-copy-trace", &r, Per::Copy, &mut text);
        assert_eq!(
            text,
            "\n[t]\n  mode                                     wall s    ratio   ratio range    added us/unit\n  untraced                                  1.000\n  --kernel-trace                            1.100     1.10   1.10-1.10             500.00\n  --memory-copy-trace                       1.300     1.20   1.20-1.30            1500.00\n  (200 copies per run; added = (wall - untraced) / copies)\n"
        );
        let mut text = String::new();
        cost_lines("t", "x", &r, Per::Dispatch, &mut text);
        assert!(text.contains("(100 dispatches per run"), "{text}");
    }
}
