//! Section `peer`: AMD's `rocprofv3` beside rprof, in the same root, on the
//! same runtime, on the same emulated GPU.
//!
//! Owns the peer's runs and their report; it must not change how the other
//! sections run rprof (`run.rs`). The peer root is the one
//! `../shared/tools/peer-rocprofv3/build.sh` makes (Debian sid, ROCr 6.4.3,
//! HIP 6.4.3, rocprofiler-sdk 0.6.0 in `/opt/rocprofiler-sdk`);
//! `scripts/bench.sh --peer-root PATH` compiles the workloads inside it into
//! `WORK/peer-hip/`. Every run goes through `scripts/rocm-env.sh PATH --`:
//!
//! - untraced: `env LD_PRELOAD=librprof_emu_kfd.so APP` (the app alone on the
//!   emulated GPU, no launcher);
//! - rprof: `rprof --device emulated --kernel-trace -d DIR -o TAG -- APP`
//!   (the host's release build; it preloads the emulator itself);
//! - rocprofv3: `env LD_PRELOAD=librprof_emu_kfd.so LD_LIBRARY_PATH=WORK/peer-aqlprofile
//!   HSA_TOOLS_LIB=<the root's HSA bridge> rocprofv3 --kernel-trace -d DIR -o TAG -- APP`
//!   (rocprofv3 appends its own libraries to `LD_PRELOAD`, so the emulator
//!   stays first; the bridge hands Debian's ROCr API table to the SDK; the
//!   query-only aqlprofile of `bench/peer/aqlprofile_query.c` answers the
//!   counter-metadata queries rocprofv3's tool makes at start-up, which the
//!   recipe's all-failing stub turns into `std::terminate`).
//!
//! The three modes rotate `--reps` times. Each run writes into a directory
//! of its own, so "output bytes" is every file the tool wrote. Dispatch
//! counts are the rows of each tool's `*_kernel_trace.csv` per kernel name,
//! checked against what the workload launches.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::cli::Options;
use crate::stats::{median, range};
use crate::Error;

/// rocprofv3 inside the peer root.
pub const ROCPROFV3: &str = "/opt/rocprofiler-sdk/bin/rocprofv3";
/// The HSA tool that hands Debian's ROCr API table to rocprofiler-sdk
/// (Debian's ROCr has no rocprofiler-register; see the recipe's README, W9).
pub const HSA_BRIDGE: &str = "/opt/rocprofiler-sdk/lib/librocprofiler-sdk-hsa-bridge.so";

/// Who runs the workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// The app alone on the emulated GPU.
    Untraced,
    /// `rprof --device emulated TRACE...`.
    Rprof,
    /// `rocprofv3 TRACE...` with the emulator preloaded first.
    Rocprofv3,
}

impl Tool {
    fn label(self, trace: &[&str]) -> String {
        match self {
            Tool::Untraced => "untraced".into(),
            Tool::Rprof => format!("rprof {}", trace.join(" ")),
            Tool::Rocprofv3 => format!("rocprofv3 {}", trace.join(" ")),
        }
    }

    fn dir_name(self) -> &'static str {
        match self {
            Tool::Untraced => "untraced",
            Tool::Rprof => "rprof",
            Tool::Rocprofv3 => "rocprofv3",
        }
    }
}

/// The peer root, the tools and the workloads, as arguments.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The root (absolute path), for `scripts/rocm-env.sh`.
    pub root: String,
    /// `rprof` (the host's release build; runs in any root).
    pub rprof: String,
    /// `librprof_emu_kfd.so` (absolute: the same path inside the root).
    pub emulator: String,
    /// `graph_storm`, built inside the peer root.
    pub storm: String,
    /// `memcpy_mix`, built inside the peer root.
    pub memcpy: String,
    /// The directory of the query-only aqlprofile (`bench/peer/`), first on
    /// rocprofv3's `LD_LIBRARY_PATH`.
    pub aqlprofile: String,
    /// Where each run's outputs go (`WORK/out/peer/<tool>-<tag>/`).
    pub out: PathBuf,
}

fn abs(p: &Path) -> Result<String, Error> {
    let p = p
        .canonicalize()
        .map_err(|e| Error::Setup(format!("{}: {e}", p.display())))?;
    p.to_str()
        .map(str::to_owned)
        .ok_or_else(|| Error::Setup(format!("{} is not UTF-8", p.display())))
}

impl Peer {
    /// The peer root of `o` and what runs in it; an error saying what is
    /// missing and how to make it.
    pub fn find(o: &Options) -> Result<Self, Error> {
        let root = o.peer_root.as_ref().ok_or_else(|| {
            Error::Setup(
                "section peer needs --peer-root PATH: the rocprofv3 root made by \
                 ../shared/tools/peer-rocprofv3/build.sh (e.g. /var/tmp/peer-roots/sid); \
                 scripts/bench.sh --runtime 6.4 --peer-root PATH --only peer builds its workloads"
                    .into(),
            )
        })?;
        let rocprofv3 = root.join(ROCPROFV3.trim_start_matches('/'));
        if !rocprofv3.exists() {
            return Err(Error::Setup(format!(
                "{} missing: no rocprofv3 in the peer root {} (build it with \
                 ../shared/tools/peer-rocprofv3/build.sh, see its README)",
                rocprofv3.display(),
                root.display()
            )));
        }
        let bridge = root.join(HSA_BRIDGE.trim_start_matches('/'));
        if !bridge.exists() {
            return Err(Error::Setup(format!(
                "{} missing: the peer root lacks the HSA bridge rocprofv3 needs on Debian's ROCr",
                bridge.display()
            )));
        }
        let hip = o.work_dir.join("peer-hip");
        let need = |p: PathBuf, what: &str| {
            if p.exists() {
                abs(&p)
            } else {
                Err(Error::Setup(format!(
                    "{} missing: {what} (scripts/bench.sh --peer-root PATH builds it inside the peer root)",
                    p.display()
                )))
            }
        };
        Ok(Peer {
            root: abs(root)?,
            rprof: need(o.bin_dir.join("rprof"), "rprof's release build")?,
            emulator: need(
                o.bin_dir.join("librprof_emu_kfd.so"),
                "the emulator's KFD front-end (cargo build --release -p rprof-emu-kfd)",
            )?,
            storm: need(hip.join("graph_storm"), "graph_storm for the peer root")?,
            memcpy: need(hip.join("memcpy_mix"), "memcpy_mix for the peer root")?,
            aqlprofile: need(
                o.work_dir.join("peer-aqlprofile"),
                "the query-only aqlprofile rocprofv3 needs at start-up (bench/peer/aqlprofile_query.c)",
            )?,
            out: o.work_dir.join("out").join("peer"),
        })
    }

    /// The command running `app` under `tool` with `trace` options, writing
    /// into `dir`.
    pub fn command(&self, tool: Tool, trace: &[&str], dir: &Path, app: &[&str]) -> Command {
        let mut c = Command::new("bash");
        c.arg("scripts/rocm-env.sh").arg(&self.root).arg("--");
        let preload = format!("LD_PRELOAD={}", self.emulator);
        match tool {
            Tool::Untraced => {
                c.arg("env").arg(&preload);
            }
            Tool::Rprof => {
                c.arg(&self.rprof)
                    .args(["--device", "emulated"])
                    .args(trace);
                c.arg("-d").arg(dir).args(["-o", "run", "--"]);
            }
            Tool::Rocprofv3 => {
                c.arg("env")
                    .arg(&preload)
                    .arg(format!("LD_LIBRARY_PATH={}", self.aqlprofile))
                    .arg(format!("HSA_TOOLS_LIB={HSA_BRIDGE}"))
                    .arg(ROCPROFV3)
                    .args(trace);
                c.arg("-d").arg(dir).args(["-o", "run", "--"]);
            }
        }
        c.args(app);
        // Neither tool's inherited settings leak into the other's runs.
        for k in ["LD_PRELOAD", "HSA_TOOLS_LIB", "LD_LIBRARY_PATH"] {
            c.env_remove(k);
        }
        c
    }
}

/// One run of a workload under one tool.
#[derive(Debug, Clone, Default)]
pub struct PeerRun {
    /// Wall time of the whole command.
    pub wall_s: f64,
    /// Peak resident memory of the largest process of the run.
    pub max_rss_kb: u64,
    /// Bytes of every file the tool wrote.
    pub out_bytes: u64,
    /// Rows of `*_kernel_trace.csv` per kernel name.
    pub kernels: BTreeMap<String, u64>,
    /// Rows of `*_memory_copy_trace.csv`.
    pub copies: u64,
}

/// Runs `cmd` (stdout discarded, stderr kept in `err_path`) and measures it:
/// wall time and the peak RSS `wait4` reports for it and its descendants.
fn timed(mut cmd: Command, what: &str, err_path: &Path) -> Result<PeerRun, Error> {
    let err_file = std::fs::File::create(err_path)
        .map_err(|e| Error::Failed(format!("cannot create {}: {e}", err_path.display())))?;
    cmd.stdout(Stdio::null()).stderr(err_file);
    let start = Instant::now();
    // Reaped below by wait4, which also gives this run's own rusage.
    #[allow(clippy::zombie_processes)]
    let child = cmd
        .spawn()
        .map_err(|e| Error::Failed(format!("{what}: cannot run bash: {e}")))?;
    let (exit, ru) = crate::run::wait_with_rusage(&child);
    let wall_s = start.elapsed().as_secs_f64();
    if !exit.success() {
        let err = std::fs::read_to_string(err_path).unwrap_or_default();
        let tail: Vec<&str> = err.lines().rev().take(12).collect();
        return Err(Error::Failed(format!(
            "{what} failed: status {:?}/{:?}; last lines of stderr:\n{}",
            exit.code(),
            exit.signal(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )));
    }
    Ok(PeerRun {
        wall_s,
        max_rss_kb: ru.ru_maxrss as u64,
        ..Default::default()
    })
}

/// The fields of one CSV line (RFC 4180 quoting: `"a,b"`, `""` inside quotes).
pub fn csv_fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut field)),
            _ => field.push(c),
        }
    }
    out.push(field);
    out
}

/// Rows per `Kernel_Name` of a kernel-trace CSV (either tool's: both name
/// the column `Kernel_Name`); an error if there is no such column. Records
/// spanning lines are not expected (kernel names hold no newline).
pub fn kernel_rows(text: &str) -> Result<BTreeMap<String, u64>, String> {
    let mut lines = text.lines();
    let header = csv_fields(lines.next().unwrap_or_default());
    let col = header
        .iter()
        .position(|h| h == "Kernel_Name")
        .ok_or_else(|| format!("no Kernel_Name column in {header:?}"))?;
    let mut rows = BTreeMap::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let name = csv_fields(line).into_iter().nth(col).unwrap_or_default();
        *rows.entry(name).or_insert(0) += 1;
    }
    Ok(rows)
}

/// Every regular file under `dir`, recursively: (path, bytes).
fn files(dir: &Path, out: &mut Vec<(PathBuf, u64)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Ok(t) = e.file_type() else { continue };
        if t.is_dir() {
            files(&e.path(), out);
        } else if t.is_file() {
            out.push((e.path(), e.metadata().map_or(0, |m| m.len())));
        }
    }
}

impl Peer {
    /// One run of `app` under `tool`, in a fresh output directory.
    fn run(
        &self,
        o: &Options,
        tool: Tool,
        trace: &[&str],
        tag: &str,
        env: &[(&str, &str)],
        app: &[&str],
    ) -> Result<PeerRun, Error> {
        let dir = self.out.join(format!("{}-{tag}", tool.dir_name()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::Failed(format!("cannot create {}: {e}", dir.display())))?;
        let dir = dir.canonicalize().unwrap_or(dir);
        let mut cmd = self.command(tool, trace, &dir, app);
        for (k, v) in env
            .iter()
            .copied()
            .chain(o.extra.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        {
            cmd.env(k, v);
        }
        let what = format!("{tag} ({})", tool.label(trace));
        let mut r = timed(cmd, &what, &o.work_dir.join("last-stderr.txt"))?;
        let mut written = Vec::new();
        files(&dir, &mut written);
        r.out_bytes = written.iter().map(|(_, n)| n).sum();
        for (path, _) in &written {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.ends_with("kernel_trace.csv") {
                let text = std::fs::read_to_string(path).unwrap_or_default();
                let rows = kernel_rows(&text)
                    .map_err(|e| Error::Failed(format!("{what}: {}: {e}", path.display())))?;
                for (k, n) in rows {
                    *r.kernels.entry(k).or_insert(0) += n;
                }
            } else if name.ends_with("memory_copy_trace.csv") {
                let text = std::fs::read_to_string(path).unwrap_or_default();
                r.copies += text
                    .lines()
                    .filter(|l| !l.is_empty())
                    .count()
                    .saturating_sub(1) as u64;
            }
        }
        Ok(r)
    }
}

/// What a workload launches: dispatches per kernel name, copies.
#[derive(Debug, Clone, Default)]
pub struct Truth {
    /// Dispatches per kernel name.
    pub kernels: BTreeMap<String, u64>,
    /// Memory copies (0: not counted).
    pub copies: u64,
}

impl Truth {
    /// `graph_storm K I`: `graph_node<k>` launched I times each, plus the
    /// one fill kernel of its `hipMemset`.
    pub fn storm(kernels: u32, launches: u32) -> Self {
        let mut t = Truth::default();
        for k in 0..kernels {
            t.kernels.insert(
                format!("void graph_node<{k}>(int*, int)"),
                u64::from(launches),
            );
        }
        t.kernels.insert("__amd_rocclr_fillBufferAligned".into(), 1);
        t
    }

    /// `memcpy_mix R` on HIP 6.4.3 (the peer root's): of its 5 HIP copies a
    /// round, the pinned H2D and D2H go to the copy engine (2 copy records a
    /// round); the pageable H2D and D2H and the D2D run as HIP's
    /// `__amd_rocclr_copyBuffer` blit kernel, which kernel traces show. The
    /// kernels are not counted here (only copies are traced).
    pub fn memcpy_mix(rounds: u32) -> Self {
        Truth {
            kernels: BTreeMap::new(),
            copies: 2 * u64::from(rounds),
        }
    }

    /// Total dispatches.
    pub fn dispatches(&self) -> u64 {
        self.kernels.values().sum()
    }
}

/// How a tool's per-kernel counts compare with the truth: "exact", or the
/// total and the first kernels that differ.
pub fn count_verdict(truth: &Truth, got: &BTreeMap<String, u64>) -> String {
    let total: u64 = got.values().sum();
    let mut diffs = Vec::new();
    for (k, &want) in &truth.kernels {
        let have = got.get(k).copied().unwrap_or(0);
        if have != want {
            diffs.push(format!("{k}: {have} of {want}"));
        }
    }
    for (k, &have) in got {
        if !truth.kernels.contains_key(k) {
            diffs.push(format!("unexpected {k}: {have}"));
        }
    }
    if diffs.is_empty() {
        format!("{total} exact")
    } else {
        let n = diffs.len();
        diffs.truncate(3);
        format!(
            "{total} WRONG ({n} kernels differ: {}{})",
            diffs.join("; "),
            if n > 3 { "; ..." } else { "" }
        )
    }
}

/// One tool's runs in a comparison (or why it failed).
struct Column {
    tool: Tool,
    runs: Vec<PeerRun>,
    failed: Option<String>,
}

/// Rotates untraced, rprof and rocprofv3 runs of `app` (`o.reps` each) and
/// appends the comparison table.
#[allow(clippy::too_many_arguments)]
fn compare(
    o: &Options,
    p: &Peer,
    title: &str,
    tag: &str,
    trace: &[&str],
    truth: &Truth,
    env: &[(&str, &str)],
    app: &[&str],
    report: &mut String,
) -> Result<(), Error> {
    let tools = [Tool::Untraced, Tool::Rprof, Tool::Rocprofv3];
    let mut cols: Vec<Column> = tools
        .iter()
        .map(|&tool| Column {
            tool,
            runs: Vec::new(),
            failed: None,
        })
        .collect();
    for i in 0..o.reps {
        for k in 0..cols.len() {
            let c = &mut cols[(i + k) % tools.len()];
            if c.failed.is_some() {
                continue;
            }
            match p.run(o, c.tool, trace, tag, env, app) {
                Ok(r) => c.runs.push(r),
                // The untraced run must work; a tool that fails is reported.
                Err(e) if c.tool != Tool::Untraced => c.failed = Some(e.to_string()),
                Err(e) => return Err(e),
            }
        }
    }
    // What the added time and the output are divided by: dispatches, or
    // copies when only copies are traced.
    let (units, unit) = if truth.kernels.is_empty() {
        (truth.copies as f64, "copy")
    } else {
        (truth.dispatches() as f64, "disp")
    };
    let _ = writeln!(report, "\n[{title}]");
    let _ = writeln!(
        report,
        "  {:<30} {:>8} {:>6} {:>11} {:>10} {:>10} {:>8}  counts (vs what the app launched)",
        "tool",
        "wall s",
        "ratio",
        "range",
        format!("+us/{unit}"),
        format!("out B/{unit}"),
        "RSS MiB"
    );
    let untraced = &cols[0].runs;
    let base = median(&untraced.iter().map(|r| r.wall_s).collect::<Vec<_>>());
    let mut added = Vec::new();
    for c in &cols {
        let label = c.tool.label(trace);
        if let Some(e) = &c.failed {
            let _ = writeln!(
                report,
                "  {label:<30} FAILED: {}",
                e.replace('\n', "\n      ")
            );
            added.push(f64::NAN);
            continue;
        }
        let walls: Vec<f64> = c.runs.iter().map(|r| r.wall_s).collect();
        let wall = median(&walls);
        let ratios: Vec<f64> = untraced
            .iter()
            .zip(&c.runs)
            .map(|(u, t)| t.wall_s / u.wall_s)
            .collect();
        let (lo, hi) = range(&ratios);
        let rss = median(
            &c.runs
                .iter()
                .map(|r| r.max_rss_kb as f64 / 1024.0)
                .collect::<Vec<_>>(),
        );
        let plus = (wall - base) * 1e6 / units;
        added.push(plus);
        if c.tool == Tool::Untraced {
            let launched = if truth.kernels.is_empty() {
                format!("{} copies", truth.copies)
            } else {
                format!("{} dispatches", truth.dispatches())
            };
            let _ = writeln!(
                report,
                "  {label:<30} {wall:>8.3} {:>6} {:>11} {:>10} {:>10} {rss:>8.1}  ({launched} launched)",
                "1.00", "", "", ""
            );
            continue;
        }
        let last = c.runs.last().cloned().unwrap_or_default();
        let mut counts = if truth.kernels.is_empty() {
            String::new()
        } else {
            count_verdict(truth, &last.kernels)
        };
        if truth.copies > 0 {
            let sep = if counts.is_empty() { "" } else { "; " };
            let verdict = if last.copies == truth.copies {
                "exact"
            } else {
                "WRONG"
            };
            let _ = write!(
                counts,
                "{sep}copy rows {} of {} {verdict}",
                last.copies, truth.copies
            );
        }
        let _ = writeln!(
            report,
            "  {label:<30} {wall:>8.3} {:>6.2} {:>5.2}-{:<5.2} {plus:>10.2} {:>10.1} {rss:>8.1}  {counts}",
            median(&ratios),
            lo,
            hi,
            last.out_bytes as f64 / units,
        );
    }
    let walls: Vec<f64> = cols
        .iter()
        .map(|c| median(&c.runs.iter().map(|r| r.wall_s).collect::<Vec<_>>()))
        .collect();
    if let ([_, r, v], [_, rw, vw]) = (&added[..], &walls[..]) {
        let _ = writeln!(report, "  {}", verdict(*r, *v, *rw, *vw, unit));
    }
    Ok(())
}

/// The comparison's last line: rprof's added time as a share of
/// rocprofv3's (the target is at most a third), and the two tools' median
/// wall times side by side. On a loaded machine the untraced median can
/// exceed a traced one: then "added" means nothing and only the direct
/// ratio is given.
pub fn verdict(r_added: f64, v_added: f64, r_wall: f64, v_wall: f64, unit: &str) -> String {
    let direct = format!("rprof's wall time is {:.2}x rocprofv3's", r_wall / v_wall);
    if !(r_added.is_finite() && v_added.is_finite()) {
        return direct;
    }
    if v_added <= 0.0 || r_added <= 0.0 {
        return format!(
            "{direct}; added time not comparable (rprof {r_added:+.2}, rocprofv3 {v_added:+.2} us/{unit}: an untraced median above a traced one is noise)"
        );
    }
    let share = r_added / v_added;
    format!(
        "{direct}; rprof adds {share:.2} of rocprofv3's added time ({r_added:.2} vs {v_added:.2} us/{unit}; target <= 0.33: {})",
        if share <= 1.0 / 3.0 { "met" } else { "MISSED" }
    )
}

/// Section `peer`: rocprofv3 beside rprof on the graph storm and the 20 µs
/// mix (and the copy trace on memcpy_mix), all in the peer root.
pub fn peer(o: &Options, report: &mut String) -> Result<(), Error> {
    let p = Peer::find(o)?;
    let _ = writeln!(
        report,
        "\n[peer: rocprofv3 (rocprofiler-sdk 0.6.0) beside rprof, both in {} (ROCr 6.4.3, HIP 6.4.3), emulated GPU; modes rotated, {} reps]",
        p.root, o.reps
    );
    let launches: u32 = if o.quick { 20 } else { 200 };
    let kt: &[&str] = &["--kernel-trace"];
    let l = launches.to_string();
    compare(
        o,
        &p,
        &format!("peer storm: HIP graph storm, 256 near-zero kernels x {launches} launches, --kernel-trace"),
        "storm",
        kt,
        &Truth::storm(256, launches),
        &[],
        &[&p.storm, "256", &l],
        report,
    )?;
    let mix_launches: u32 = if o.quick { 5 } else { 20 };
    let ml = mix_launches.to_string();
    compare(
        o,
        &p,
        &format!(
            "peer mix: the storm with 20 us kernels, 256 x {mix_launches} launches, --kernel-trace"
        ),
        "mix",
        kt,
        &Truth::storm(256, mix_launches),
        &[("RPROF_EMU_KERNEL_NS", "20000")],
        &[&p.storm, "256", &ml],
        report,
    )?;
    let rounds: u32 = if o.quick { 10 } else { 40 };
    let r = rounds.to_string();
    compare(
        o,
        &p,
        &format!("peer copies: memcpy_mix, {rounds} rounds of 5 HIP copies (2 by the copy engine) around 2 kernels, --memory-copy-trace"),
        "copies",
        &["--memory-copy-trace"],
        &Truth::memcpy_mix(rounds),
        &[],
        &[&p.memcpy, &r],
        report,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_follow_quoting() {
        assert_eq!(csv_fields("a,\"b, c\",d"), ["a", "b, c", "d"]);
        assert_eq!(csv_fields("\"x\"\"y\",,"), ["x\"y", "", ""]);
        assert_eq!(csv_fields(""), [""]);
    }

    #[test]
    fn kernel_rows_count_each_name_in_either_tools_csv() {
        // rprof's header is bare, rocprofv3's quoted; names hold commas.
        let rprof = "Kind,Agent_Id,Kernel_Name,Start\nKERNEL_DISPATCH,0,\"void graph_node<0>(int*, int)\",1\nKERNEL_DISPATCH,0,\"void graph_node<0>(int*, int)\",2\nKERNEL_DISPATCH,0,__amd_rocclr_fillBufferAligned,3\n";
        let rows = kernel_rows(rprof).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows["void graph_node<0>(int*, int)"], 2);
        assert_eq!(rows["__amd_rocclr_fillBufferAligned"], 1);
        let peer =
            "\"Kind\",\"Kernel_Name\"\n\"KERNEL_DISPATCH\",\"void graph_node<1>(int*, int)\"\n";
        assert_eq!(
            kernel_rows(peer).unwrap()["void graph_node<1>(int*, int)"],
            1
        );
        assert!(kernel_rows("Kind,Name\n").is_err());
    }

    #[test]
    fn verdicts_name_what_differs() {
        let t = Truth::storm(2, 3);
        assert_eq!(t.dispatches(), 7);
        let mut got: BTreeMap<String, u64> = t.kernels.clone();
        assert_eq!(count_verdict(&t, &got), "7 exact");
        got.insert("void graph_node<1>(int*, int)".into(), 2);
        got.insert("extra".into(), 1);
        assert_eq!(
            count_verdict(&t, &got),
            "7 WRONG (2 kernels differ: void graph_node<1>(int*, int): 2 of 3; unexpected extra: 1)"
        );
    }

    #[test]
    fn verdicts_compare_added_time_only_when_both_add() {
        assert_eq!(
            verdict(1.0, 4.0, 2.0, 5.0, "disp"),
            "rprof's wall time is 0.40x rocprofv3's; rprof adds 0.25 of rocprofv3's added time (1.00 vs 4.00 us/disp; target <= 0.33: met)"
        );
        assert!(verdict(2.0, 4.0, 3.0, 5.0, "disp").ends_with("target <= 0.33: MISSED)"));
        assert!(
            verdict(-1.0, 4.0, 1.0, 5.0, "copy").contains("added time not comparable (rprof -1.00")
        );
        assert_eq!(
            verdict(f64::NAN, 4.0, f64::NAN, 5.0, "disp"),
            "rprof's wall time is NaNx rocprofv3's"
        );
    }

    #[test]
    fn commands_keep_the_emulator_first_and_the_bridge_for_rocprofv3() {
        let p = Peer {
            root: "/r".into(),
            rprof: "/b/rprof".into(),
            emulator: "/b/librprof_emu_kfd.so".into(),
            storm: "/w/graph_storm".into(),
            memcpy: "/w/memcpy_mix".into(),
            aqlprofile: "/w/aql".into(),
            out: "/w/out".into(),
        };
        let args = |t: Tool| -> Vec<String> {
            p.command(
                t,
                &["--kernel-trace"],
                Path::new("/d"),
                &["/w/graph_storm", "256", "1"],
            )
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
        };
        assert_eq!(
            args(Tool::Untraced).join(" "),
            "scripts/rocm-env.sh /r -- env LD_PRELOAD=/b/librprof_emu_kfd.so /w/graph_storm 256 1"
        );
        assert_eq!(
            args(Tool::Rprof).join(" "),
            "scripts/rocm-env.sh /r -- /b/rprof --device emulated --kernel-trace -d /d -o run -- /w/graph_storm 256 1"
        );
        assert_eq!(
            args(Tool::Rocprofv3).join(" "),
            format!("scripts/rocm-env.sh /r -- env LD_PRELOAD=/b/librprof_emu_kfd.so LD_LIBRARY_PATH=/w/aql HSA_TOOLS_LIB={HSA_BRIDGE} {ROCPROFV3} --kernel-trace -d /d -o run -- /w/graph_storm 256 1")
        );
    }
}
