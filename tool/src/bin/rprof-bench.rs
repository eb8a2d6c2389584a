//! `rprof-bench`: tracing overhead measured side by side, in one run.
//!
//! Every measurement alternates the untraced run (`rprof --device emulated`,
//! same GPU, same runtime, no tool library) and the traced run
//! (`rprof --kernel-trace`) of the same workload, `--reps` times, and prints
//! medians, ranges and ratios. Timed tests would flake on a shared 2-core
//! machine; this prints figures for `docs/performance.md` instead.
//!
//! Workloads (built by `scripts/bench.sh` before this runs):
//! - `dispatch_bench enqueue|roundtrip` (raw HSA): host time per dispatch on
//!   the submitting thread, and enqueue-to-completion latency seen by the app;
//! - `graph_storm K I` (HIP): a graph of K near-zero kernels launched I
//!   times: whole-run wall time, trace size, resident memory; repeated for
//!   several I to plot overhead against dispatch count (SVG);
//! - the same storm with 20 µs kernels (the "realistic mix").
//!
//! Usage: `rprof-bench --bin-dir target/release --work-dir target/bench
//! [--reps 5] [--quick] [--svg docs/overhead.svg]`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

#[derive(Debug, Clone)]
struct Options {
    bin_dir: PathBuf,
    work_dir: PathBuf,
    reps: usize,
    quick: bool,
    svg: Option<PathBuf>,
    extra: Vec<(String, String)>,
    /// Sections to run (`--only host,roundtrip,storm,mix,memory,serialize,rpc`); all if empty.
    only: Vec<String>,
    /// Graph-storm launch counts (`--launches 200`); the default series if empty.
    launches: Vec<u32>,
    /// `--runtime 6.1|6.4`: every run (traced and untraced) goes through
    /// `scripts/rocm-env.sh VERSION --` (the runtime's root); 5.2 runs on the host.
    runtime: Option<String>,
}

impl Options {
    fn want(&self, section: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|s| s == section)
    }
}

fn parse_args() -> Result<Options, String> {
    let mut o = Options {
        bin_dir: PathBuf::from("target/release"),
        work_dir: PathBuf::from("target/bench"),
        reps: 5,
        quick: false,
        svg: None,
        extra: Vec::new(),
        only: Vec::new(),
        launches: Vec::new(),
        runtime: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--bin-dir" => o.bin_dir = PathBuf::from(val()?),
            "--work-dir" => o.work_dir = PathBuf::from(val()?),
            "--reps" => o.reps = val()?.parse().map_err(|e| format!("--reps: {e}"))?,
            "--svg" => o.svg = Some(PathBuf::from(val()?)),
            "--quick" => o.quick = true,
            "--runtime" => {
                let v = val()?;
                o.runtime = (v != "5.2").then_some(v);
            }
            "--only" => o.only = val()?.split(',').map(str::to_owned).collect(),
            "--launches" => {
                o.launches = val()?
                    .split(',')
                    .map(|v| v.parse().map_err(|e| format!("--launches: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--env" => {
                let kv = val()?;
                let (k, v) = kv.split_once('=').ok_or("--env takes KEY=VALUE")?;
                o.extra.push((k.into(), v.into()));
            }
            "-h" | "--help" => {
                println!("usage: rprof-bench [--bin-dir DIR] [--work-dir DIR] [--reps N] [--quick] [--svg FILE] [--env K=V] [--only SECTIONS] [--launches I,...] [--runtime 5.2|6.1|6.4]");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    Ok(o)
}

/// One run of a workload.
#[derive(Debug, Clone, Default)]
struct RunResult {
    wall_s: f64,
    max_rss_kb: u64,
    /// User + system CPU seconds of the run (rprof, the app and the emulated GPU).
    cpu_s: f64,
    values: HashMap<String, String>,
    trace_bytes: u64,
    csv_rows: u64,
}

/// rprof options of an untraced run.
const UNTRACED: &[&str] = &[];
/// rprof options of a kernel-traced run.
const TRACED: &[&str] = &["--kernel-trace"];

/// One run of `app` under `rprof --device emulated MODE`; an empty `mode`
/// is the untraced run.
fn run(o: &Options, mode: &[&str], tag: &str, env: &[(&str, &str)], app: &[&str]) -> RunResult {
    let rprof = o.bin_dir.join("rprof");
    let mut cmd = match &o.runtime {
        Some(v) => {
            let mut c = Command::new("bash");
            c.arg("scripts/rocm-env.sh").arg(v).arg("--").arg(&rprof);
            c
        }
        None => Command::new(&rprof),
    };
    let out_dir = o.work_dir.join("out");
    let traced = !mode.is_empty();
    cmd.args(["--device", "emulated"]).args(mode);
    if traced {
        cmd.arg("-d").arg(&out_dir).args(["-o", tag]);
    }
    cmd.arg("--").args(app);
    for (k, v) in env {
        cmd.env(k, v);
    }
    for (k, v) in &o.extra {
        cmd.env(k, v);
    }
    let err_path = o.work_dir.join("last-stderr.txt");
    let err_file = std::fs::File::create(&err_path).expect("stderr file");
    cmd.stdout(Stdio::piped()).stderr(err_file);
    let start = Instant::now();
    // Reaped below by wait4, which also gives this run's own rusage.
    #[allow(clippy::zombie_processes)]
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", rprof.display()));
    let mut stdout = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut out, &mut stdout);
    }
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: wait4 on our own child with valid out-pointers. The rusage it
    // returns covers that child and the descendants it waited for (the app),
    // so ru_maxrss is this run's peak, not the maximum over all runs.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::wait4(pid, &mut status, 0, &mut ru);
        ru
    };
    let wall_s = start.elapsed().as_secs_f64();
    let exit = std::process::ExitStatus::from_raw(status);
    if !exit.success() {
        eprintln!(
            "rprof-bench: {tag} ({}) failed: status {:?}/{:?}\n{}",
            if traced { "traced" } else { "untraced" },
            exit.code(),
            exit.signal(),
            std::fs::read_to_string(&err_path).unwrap_or_default()
        );
        std::process::exit(1);
    }
    let mut r = RunResult {
        wall_s,
        ..Default::default()
    };
    r.max_rss_kb = ru.ru_maxrss as u64;
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    r.cpu_s = tv(ru.ru_utime) + tv(ru.ru_stime);
    for line in stdout.lines() {
        if let Some((k, v)) = line.split_once('=') {
            r.values.insert(k.trim().to_string(), v.trim().to_string());
        }
    }
    if traced {
        r.trace_bytes = std::fs::metadata(out_dir.join(format!("{tag}.pftrace")))
            .map(|m| m.len())
            .unwrap_or(0);
        // Streamed: reading a large CSV into memory would raise this
        // process's peak RSS, which forked children inherit as the floor of
        // their own `ru_maxrss`.
        r.csv_rows = std::fs::File::open(out_dir.join(format!("{tag}_kernel_trace.csv")))
            .map(|f| {
                std::io::BufRead::lines(std::io::BufReader::new(f))
                    .count()
                    .saturating_sub(1) as u64
            })
            .unwrap_or(0);
    }
    r
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if v.is_empty() {
        return f64::NAN;
    }
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn value(r: &RunResult, key: &str) -> f64 {
    r.values
        .get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Alternates untraced and traced runs; returns both series.
fn pair(
    o: &Options,
    tag: &str,
    env: &[(&str, &str)],
    app: &[&str],
) -> (Vec<RunResult>, Vec<RunResult>) {
    pair_modes(o, tag, UNTRACED, TRACED, env, app)
}

/// Alternates runs in modes `a` and `b`, `o.reps` times each; returns both
/// series.
fn pair_modes(
    o: &Options,
    tag: &str,
    a: &[&str],
    b: &[&str],
    env: &[(&str, &str)],
    app: &[&str],
) -> (Vec<RunResult>, Vec<RunResult>) {
    let (mut ra, mut rb) = (Vec::new(), Vec::new());
    for i in 0..o.reps {
        // Alternate which goes first so drift in machine load cancels out.
        if i % 2 == 0 {
            ra.push(run(o, a, tag, env, app));
            rb.push(run(o, b, tag, env, app));
        } else {
            rb.push(run(o, b, tag, env, app));
            ra.push(run(o, a, tag, env, app));
        }
    }
    (ra, rb)
}

/// Median traced peak RSS minus median untraced peak RSS, in MiB.
fn rss_delta_mib(untraced: &[RunResult], traced: &[RunResult]) -> f64 {
    let mib = |rs: &[RunResult]| median(&mut series(rs, |r| r.max_rss_kb as f64 / 1024.0));
    mib(traced) - mib(untraced)
}

fn series(rs: &[RunResult], f: impl Fn(&RunResult) -> f64) -> Vec<f64> {
    rs.iter().map(f).collect()
}

fn range(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        })
}

fn main() {
    let o = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("rprof-bench: {e}");
            std::process::exit(2);
        }
    };
    let work = o
        .work_dir
        .canonicalize()
        .unwrap_or_else(|_| o.work_dir.clone());
    let dispatch_bench = work.join("dispatch_bench");
    let code_object = work.join("bench_kernels.hsaco");
    let storm = work.join("graph_storm");
    let raw_hsa = o.want("host") || o.want("roundtrip") || o.want("memory");
    let needed: Vec<&PathBuf> = if raw_hsa {
        vec![&dispatch_bench, &code_object, &storm]
    } else {
        vec![&storm]
    };
    for p in needed {
        if !p.exists() {
            eprintln!(
                "rprof-bench: {} missing: run scripts/bench.sh (it builds the workloads)",
                p.display()
            );
            std::process::exit(2);
        }
    }
    let ds = dispatch_bench.to_str().unwrap();
    let co = code_object.to_str().unwrap();
    let gs = storm.to_str().unwrap();
    let n_enqueue = if o.quick { "5000" } else { "20000" };
    let n_round = if o.quick { "2000" } else { "10000" };
    let mut report = String::new();
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
        o.runtime.as_deref().unwrap_or("5.2 (host)")
    );

    // 1. Host time per dispatch on the submitting thread.
    if o.want("host") {
        let (u, t) = pair(&o, "enqueue", &[], &[ds, "enqueue", n_enqueue, co]);
        let (mut up, mut tp) = (
            series(&u, |r| value(r, "enqueue_p50_ns")),
            series(&t, |r| value(r, "enqueue_p50_ns")),
        );
        let (mu, mt) = (median(&mut up), median(&mut tp));
        let (u99, t99) = (
            median(&mut series(&u, |r| value(r, "enqueue_p99_ns"))),
            median(&mut series(&t, |r| value(r, "enqueue_p99_ns"))),
        );
        let _ = writeln!(
        report,
        "\n[host time per dispatch, {n_enqueue} dispatches in bursts of 64]\n  untraced p50 {mu:.0} ns (p99 {u99:.0})\n  traced   p50 {mt:.0} ns (p99 {t99:.0})\n  added    p50 {:.0} ns   (target <= 1000 ns)",
        mt - mu
    );
        let (eu, et) = (
            median(&mut series(&u, |r| value(r, "emu_events"))),
            median(&mut series(&t, |r| value(r, "emu_events"))),
        );
        let _ = writeln!(report, "  driver events live at exit: untraced {eu:.0}, traced {et:.0} (rprof's share: {:.0}; target <= 256)", et - eu);
    }

    // 2. App-visible completion latency.
    if o.want("roundtrip") {
        let (u, t) = pair(&o, "roundtrip", &[], &[ds, "roundtrip", n_round, co]);
        let q = |rs: &[RunResult], k: &str| median(&mut series(rs, |r| value(r, k)));
        let (u50, t50, u99, t99) = (
            q(&u, "roundtrip_p50_ns"),
            q(&t, "roundtrip_p50_ns"),
            q(&u, "roundtrip_p99_ns"),
            q(&t, "roundtrip_p99_ns"),
        );
        let _ = writeln!(
        report,
        "\n[enqueue-to-completion seen by the app, {n_round} single dispatches, ACTIVE wait]\n  untraced p50 {u50:.0} ns  p99 {u99:.0} ns\n  traced   p50 {t50:.0} ns  p99 {t99:.0} ns\n  added    p50 {:.0} ns  p99 {:.0} ns   (targets: p50 <= 20000, p99 <= 200000)",
        t50 - u50,
        t99 - u99
    );
    }

    // 3. Graph storm, overhead against dispatch count.
    let launches: &[u32] = if !o.launches.is_empty() {
        &o.launches
    } else if !o.want("storm") {
        &[]
    } else if o.quick {
        &[10, 50]
    } else {
        &[10, 50, 200, 800]
    };
    let mut points = Vec::new();
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
    for &i in launches {
        let is = i.to_string();
        let (u, t) = pair(&o, &format!("storm{i}"), &[], &[gs, "256", &is]);
        let ratios: Vec<f64> = u.iter().zip(&t).map(|(a, b)| b.wall_s / a.wall_s).collect();
        let mut ratios_m = ratios.clone();
        let ratio = median(&mut ratios_m);
        let (lo, hi) = range(&ratios);
        let dispatches = 256.0 * f64::from(i);
        let bytes = t
            .last()
            .map(|r| r.trace_bytes as f64 / dispatches)
            .unwrap_or(f64::NAN);
        // The app's own memory grows with launches (HIP 5.2.3 graphs); what
        // rprof adds is the traced peak minus the untraced peak.
        let rss = rss_delta_mib(&u, &t);
        let rows = t.last().map(|r| r.csv_rows).unwrap_or(0);
        let _ = writeln!(
            report,
            "  {:>9} {:>12.3} {:>12.3} {:>8.2} {:>6.2}-{:<6.2} {:>10.1} {:>16.1} {:>14.2}   (csv rows {rows})",
            dispatches,
            median(&mut series(&u, |r| r.wall_s)),
            median(&mut series(&t, |r| r.wall_s)),
            ratio,
            lo,
            hi,
            bytes,
            rss,
            (median(&mut series(&t, |r| r.cpu_s)) - median(&mut series(&u, |r| r.cpu_s))) * 1e6
                / dispatches
        );
        points.push((dispatches, ratio, lo, hi));
    }

    // 4. Realistic mix: 20 µs kernels.
    if o.want("mix") {
        let (u, t) = pair(
            &o,
            "mix",
            &[("RPROF_EMU_KERNEL_NS", "20000")],
            &[gs, "256", if o.quick { "5" } else { "20" }],
        );
        let ratios: Vec<f64> = u.iter().zip(&t).map(|(a, b)| b.wall_s / a.wall_s).collect();
        let (lo, hi) = range(&ratios);
        let _ = writeln!(
        report,
        "\n[realistic mix: the storm with 20 us kernels]\n  ratio {:.3} (range {lo:.3}-{hi:.3}; target <= 1.03)",
        median(&mut ratios.clone())
    );
    }

    // 5. Memory: rprof's resident memory against dispatch count (raw HSA, so
    // the app itself stays flat).
    if o.want("memory") {
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
            let (u, t) = pair(&once, "memory", &[], &[ds, "enqueue", n, co]);
            // The app's own peak (VmHWM, printed by dispatch_bench at exit).
            let (um, tm) = (
                value(&u[0], "vmhwm_kb") / 1024.0,
                value(&t[0], "vmhwm_kb") / 1024.0,
            );
            let _ = writeln!(
                report,
                "  {:>10} {:>14.1} {:>12.1} {:>16.1} {:>12.2}",
                n,
                um,
                tm,
                tm - um,
                t[0].wall_s
            );
        }
    }

    // 6. The cost of --serialize-kernels (both runs traced).
    if o.want("serialize") {
        let (a, b) = pair_modes(
            &o,
            "serial",
            TRACED,
            &["--kernel-trace", "--serialize-kernels"],
            &[],
            &[gs, "256", if o.quick { "5" } else { "20" }],
        );
        let ratios: Vec<f64> = a.iter().zip(&b).map(|(x, y)| y.wall_s / x.wall_s).collect();
        let (lo, hi) = range(&ratios);
        let _ = writeln!(
        report,
        "\n[--serialize-kernels: the storm traced, serialized vs not]\n  wall ratio {:.2} (range {lo:.2}-{hi:.2}); dispatches/s {:.0} serialized vs {:.0}",
        median(&mut ratios.clone()),
        b[0].csv_rows as f64 / median(&mut series(&b, |r| r.wall_s)),
        a[0].csv_rows as f64 / median(&mut series(&a, |r| r.wall_s)),
    );
    }

    // 7. The cost of --rpc-trace on the RPC doorbell workload.
    let rpc = work.join("rpc-doorbell");
    if rpc.exists() && o.want("rpc") {
        let rpc_args = [
            rpc.to_str().unwrap(),
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
        let (u, t) = pair_modes(&o, "rpc", UNTRACED, &["--rpc-trace"], &[], &rpc_args);
        let ratios: Vec<f64> = u.iter().zip(&t).map(|(x, y)| y.wall_s / x.wall_s).collect();
        let (lo, hi) = range(&ratios);
        let _ = writeln!(
            report,
            "\n[--rpc-trace: rpc-doorbell, 64 kernels x 8 lanes x 4 calls, a ring per kernel]\n  wall ratio {:.3} (range {lo:.3}-{hi:.3})",
            median(&mut ratios.clone()),
        );
    }

    print!("{report}");
    if let Some(svg) = &o.svg {
        if let Err(e) = std::fs::write(svg, plot(&points)) {
            eprintln!("rprof-bench: cannot write {}: {e}", svg.display());
        } else {
            println!("\nplot written to {}", svg.display());
        }
    }
}

/// An SVG line plot of wall-time ratio against dispatch count (log x).
fn plot(points: &[(f64, f64, f64, f64)]) -> String {
    let (w, h, l, r, t, b) = (640.0, 400.0, 70.0, 20.0, 40.0, 60.0);
    let xs: Vec<f64> = points.iter().map(|p| p.0.log10()).collect();
    let (x0, x1) = (
        xs.iter().cloned().fold(f64::INFINITY, f64::min) - 0.1,
        xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max) + 0.1,
    );
    let ymax = points.iter().map(|p| p.3).fold(1.2f64, f64::max) * 1.1;
    let sx = |x: f64| l + (x - x0) / (x1 - x0) * (w - l - r);
    let sy = |y: f64| h - b - y / ymax * (h - t - b);
    let mut s = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n<text x='{}' y='20' text-anchor='middle' font-size='14'>rprof overhead on a HIP graph storm (emulated GPU)</text>\n",
        w / 2.0
    );
    let _ = writeln!(
        s,
        "<line x1='{l}' y1='{}' x2='{}' y2='{}' stroke='black'/>",
        h - b,
        w - r,
        h - b
    );
    let _ = writeln!(
        s,
        "<line x1='{l}' y1='{t}' x2='{l}' y2='{}' stroke='black'/>",
        h - b
    );
    let mut y = 0.0;
    while y <= ymax {
        let _ = writeln!(s, "<line x1='{l}' y1='{0}' x2='{1}' y2='{0}' stroke='#ddd'/><text x='{2}' y='{3}' text-anchor='end'>{y:.1}x</text>", sy(y), w - r, l - 6.0, sy(y) + 4.0);
        y += if ymax > 4.0 { 1.0 } else { 0.5 };
    }
    let one = sy(1.0);
    let _ = writeln!(
        s,
        "<line x1='{l}' y1='{one}' x2='{}' y2='{one}' stroke='#888' stroke-dasharray='4 3'/>",
        w - r
    );
    let mut path = String::new();
    for (i, p) in points.iter().enumerate() {
        let (x, y) = (sx(p.0.log10()), sy(p.1));
        let _ = write!(path, "{}{x:.1},{y:.1} ", if i == 0 { "M" } else { "L" });
        let _ = writeln!(
            s,
            "<line x1='{x:.1}' y1='{:.1}' x2='{x:.1}' y2='{:.1}' stroke='#c33'/>",
            sy(p.2),
            sy(p.3)
        );
        let _ = writeln!(s, "<circle cx='{x:.1}' cy='{y:.1}' r='4' fill='#c33'/><text x='{x:.1}' y='{}' text-anchor='middle'>{:.0}</text>", h - b + 18.0, p.0);
    }
    let _ = writeln!(
        s,
        "<path d='{path}' fill='none' stroke='#c33' stroke-width='2'/>"
    );
    let _ = writeln!(
        s,
        "<text x='{}' y='{}' text-anchor='middle'>dispatches per run (log scale)</text>",
        (l + w - r) / 2.0,
        h - 15.0
    );
    let _ = writeln!(s, "<text x='15' y='{}' transform='rotate(-90 15 {})' text-anchor='middle'>traced / untraced wall time (median, min-max bars)</text>", (t + h - b) / 2.0, (t + h - b) / 2.0);
    s.push_str("</svg>\n");
    s
}
