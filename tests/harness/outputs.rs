//! Reading a traced run's outputs and checking them against what the
//! program said it launched: the program's `LAUNCHED` report
//! ([`parse_launched`]), `NAME_kernel_trace.csv` ([`read_csv`], header and
//! `Kind` checked), `NAME_results.json` ([`read_json`]), the Perfetto trace
//! through `tests/tools/pftrace_check.py` ([`check_pftrace`]), and all three
//! cross-checked ([`check_outputs`]).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;
use std::process::Command;

use super::repo;
use super::run::{tail, Run};

/// Prefix of the HIP runtime's own blit/fill kernels (ROCclr), which a kernel
/// tracer rightly records but which no program lists in its report.
pub const RUNTIME_KERNEL_PREFIX: &str = "__amd_rocclr_";

/// Columns of `NAME_kernel_trace.csv`, in order.
pub const CSV_COLUMNS: [&str; 24] = [
    "Kind",
    "Agent_Id",
    "Queue_Id",
    "Stream_Id",
    "Thread_Id",
    "Dispatch_Id",
    "Kernel_Id",
    "Kernel_Name",
    "Correlation_Id",
    "Start_Timestamp",
    "End_Timestamp",
    "LDS_Block_Size",
    "Scratch_Size",
    "VGPR_Count",
    "Accum_VGPR_Count",
    "SGPR_Count",
    "Workgroup_Size_X",
    "Workgroup_Size_Y",
    "Workgroup_Size_Z",
    "Grid_Size_X",
    "Grid_Size_Y",
    "Grid_Size_Z",
    "Private_Segment_Size",
    "Group_Segment_Size",
];

/// One kernel name in a program's report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelLaunches {
    /// Launches.
    pub count: u64,
    /// Grid in work-items.
    pub grid: [u64; 3],
    /// Workgroup size.
    pub workgroup: [u64; 3],
    /// Every launch has `grid` and `workgroup` (false: a library's kernel,
    /// launched with whatever geometry the library picks each time; only
    /// counted).
    pub fixed_geometry: bool,
}

/// What one process said it launched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessReport {
    /// Its pid.
    pub pid: u32,
    /// Its rank, if it printed one.
    pub rank: Option<u32>,
    /// Per demangled kernel name.
    pub kernels: BTreeMap<String, KernelLaunches>,
    /// The `total=` line.
    pub total: u64,
}

fn parse_triple(v: &str, line: &str) -> [u64; 3] {
    let parts: Vec<u64> = v
        .split(',')
        .map(|x| {
            x.parse()
                .unwrap_or_else(|_| panic!("bad triple in {line:?}"))
        })
        .collect();
    assert_eq!(parts.len(), 3, "bad triple in {line:?}");
    [parts[0], parts[1], parts[2]]
}

/// Parses every `LAUNCHED` line of `stdout`, per pid, and checks that each
/// process's `total=` equals the sum of its counts.
pub fn parse_launched(stdout: &str) -> BTreeMap<u32, ProcessReport> {
    let mut procs: BTreeMap<u32, ProcessReport> = BTreeMap::new();
    let mut totals_seen: HashSet<u32> = HashSet::new();
    for line in stdout.lines() {
        let Some(rest) = line.strip_prefix("LAUNCHED ") else {
            continue;
        };
        let (fields, kernel) = match rest.split_once(" kernel=") {
            Some((f, k)) => (f, Some(k.to_string())),
            None => (rest, None),
        };
        let mut kv: BTreeMap<&str, &str> = BTreeMap::new();
        for f in fields.split_whitespace() {
            let (k, v) = f
                .split_once('=')
                .unwrap_or_else(|| panic!("bad field {f:?} in {line:?}"));
            kv.insert(k, v);
        }
        let num = |k: &str| -> u64 {
            kv.get(k)
                .unwrap_or_else(|| panic!("no {k}= in {line:?}"))
                .parse()
                .unwrap_or_else(|_| panic!("bad {k}= in {line:?}"))
        };
        let pid = num("pid") as u32;
        let p = procs.entry(pid).or_default();
        p.pid = pid;
        if kv.contains_key("rank") {
            p.rank = Some(num("rank") as u32);
        }
        match kernel {
            Some(name) => {
                let k = KernelLaunches {
                    count: num("count"),
                    grid: parse_triple(kv["grid"], line),
                    workgroup: parse_triple(kv["workgroup"], line),
                    fixed_geometry: true,
                };
                assert!(
                    p.kernels.insert(name.clone(), k).is_none(),
                    "kernel {name:?} reported twice"
                );
            }
            None => {
                p.total = num("total");
                assert!(totals_seen.insert(pid), "two total= lines for pid {pid}");
            }
        }
    }
    for p in procs.values() {
        assert!(
            totals_seen.contains(&p.pid),
            "no total= line for pid {}",
            p.pid
        );
        let sum: u64 = p.kernels.values().map(|k| k.count).sum();
        assert_eq!(
            sum, p.total,
            "pid {}: counts do not add up to total=",
            p.pid
        );
    }
    procs
}

/// The single process report of a one-process program.
pub fn single_report(run: &Run) -> ProcessReport {
    let procs = parse_launched(&run.stdout);
    assert_eq!(
        procs.len(),
        1,
        "expected one LAUNCHED report, got {}:\n{}",
        procs.len(),
        run.stdout
    );
    procs.into_values().next().expect("one report")
}

/// One CSV row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvDispatch {
    pub agent_id: u64,
    pub queue_id: u64,
    pub thread_id: u64,
    pub dispatch_id: u64,
    pub kernel_id: u64,
    pub kernel_name: String,
    pub correlation_id: u64,
    pub start: u64,
    pub end: u64,
    pub private_segment_size: u64,
    pub group_segment_size: u64,
    pub workgroup: [u64; 3],
    pub grid: [u64; 3],
    pub lds_block_size: u64,
    pub vgpr_count: u64,
    pub accum_vgpr_count: u64,
    pub sgpr_count: u64,
}

/// Reads `NAME_kernel_trace.csv`, checking the header and the `Kind` column.
pub fn read_csv(path: &Path) -> Vec<CsvDispatch> {
    let mut r = csv::Reader::from_path(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let header: Vec<String> = r
        .headers()
        .expect("CSV header")
        .iter()
        .map(str::to_string)
        .collect();
    assert_eq!(header, CSV_COLUMNS, "CSV header of {}", path.display());
    let mut rows = Vec::new();
    for (i, rec) in r.records().enumerate() {
        let rec = rec.unwrap_or_else(|e| panic!("{}: row {i}: {e}", path.display()));
        assert_eq!(rec.len(), CSV_COLUMNS.len(), "row {i} width");
        assert_eq!(&rec[0], "KERNEL_DISPATCH", "row {i} Kind");
        let n = |c: usize| -> u64 {
            rec[c].parse().unwrap_or_else(|_| {
                panic!(
                    "row {i}: column {} is not a number: {:?}",
                    CSV_COLUMNS[c], &rec[c]
                )
            })
        };
        let row = CsvDispatch {
            agent_id: n(1),
            queue_id: n(2),
            thread_id: n(4),
            dispatch_id: n(5),
            kernel_id: n(6),
            kernel_name: rec[7].to_string(),
            correlation_id: n(8),
            start: n(9),
            end: n(10),
            lds_block_size: n(11),
            vgpr_count: n(13),
            accum_vgpr_count: n(14),
            sgpr_count: n(15),
            workgroup: [n(16), n(17), n(18)],
            grid: [n(19), n(20), n(21)],
            private_segment_size: n(22),
            group_segment_size: n(23),
        };
        // No HIP stream information: stream 0, as rocprofv3 writes then.
        assert_eq!(n(3), 0, "row {i} Stream_Id");
        // Scratch_Size is the dispatch's private segment; LDS_Block_Size
        // its group segment rounded up to rocprofv3's 512-byte granule.
        assert_eq!(n(12), row.private_segment_size, "row {i} Scratch_Size");
        assert_eq!(
            row.lds_block_size,
            row.group_segment_size.div_ceil(512) * 512,
            "row {i} LDS_Block_Size"
        );
        rows.push(row);
    }
    rows
}

/// Reads and parses `NAME_results.json`.
pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// What `pftrace_check.py` reports about a trace.
#[derive(Debug, Default)]
pub struct PftraceSummary {
    /// Kernel slices (slices on tracks under a `GPU ...` root track, except
    /// its `copies` tracks) per name.
    pub kernel_slices: BTreeMap<String, u64>,
    /// All kernel slices.
    pub kernel_slice_total: u64,
    /// Slices (instants included) per name on every track, as
    /// trace_processor's `select name, count(*) from slice group by name`.
    pub slices_by_name: BTreeMap<String, u64>,
    /// Kernel slices with a negative or missing duration.
    pub bad_durations: u64,
    /// Flows from an interceptor slice to a kernel slice, per pid of the
    /// thread track the flow starts on.
    pub kernel_flows_by_pid: BTreeMap<u64, u64>,
    /// All flows.
    pub flows: u64,
    /// "flows never terminated" from the checker's summary.
    pub dangling_flows: u64,
    /// Pids of process tracks.
    pub process_pids: BTreeSet<u64>,
    /// The checker's stdout.
    pub report: String,
    /// The checker's JSON (`--json`: tracks, slices, flows, counters).
    pub json: serde_json::Value,
}

/// Runs `tests/tools/pftrace_check.py TRACE --json OUT`; panics if it finds
/// errors, and summarises its JSON.
pub fn check_pftrace(trace: &Path) -> PftraceSummary {
    let script = repo().join("tests/tools/pftrace_check.py");
    let json_out = trace.with_extension("check.json");
    let o = Command::new("python3")
        .arg(&script)
        .arg(trace)
        .arg("--dump")
        .arg("0")
        .arg("--json")
        .arg(&json_out)
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 {}: {e}", script.display()));
    let report = String::from_utf8_lossy(&o.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        !stderr.contains("No module named"),
        "pftrace_check.py needs the Python packages perfetto and protobuf (scripts/setup.sh installs them):\n{stderr}"
    );
    assert!(
        o.status.success(),
        "pftrace_check.py found errors in {}:\n{}\n{}",
        trace.display(),
        tail(&report, 6000),
        stderr
    );
    let v = read_json(&json_out);
    let tracks = v["tracks"].as_object().expect("tracks");
    // Root ancestor of each track.
    let parent_of = |uuid: &str| -> Option<String> {
        let p = tracks.get(uuid)?["parent"].as_u64()?;
        (p != 0).then(|| p.to_string())
    };
    let root_of = |uuid: &str| -> String {
        let mut cur = uuid.to_string();
        for _ in 0..64 {
            match parent_of(&cur) {
                Some(p) => cur = p,
                None => break,
            }
        }
        cur
    };
    let mut s = PftraceSummary {
        report,
        json: v.clone(),
        ..Default::default()
    };
    for t in tracks.values() {
        if t["kind"] == "process" {
            s.process_pids
                .insert(t["pid"].as_u64().expect("process pid"));
        }
    }
    let slices = v["slices"].as_array().expect("slices");
    let mut is_kernel = vec![false; slices.len()];
    for (i, sl) in slices.iter().enumerate() {
        let track = sl["track"].as_u64().expect("slice track").to_string();
        *s.slices_by_name
            .entry(sl["name"].as_str().unwrap_or("<no name>").to_string())
            .or_default() += 1;
        let root = root_of(&track);
        let root_name = tracks
            .get(&root)
            .and_then(|t| t["name"].as_str())
            .unwrap_or("");
        // Memory copies (`--memory-copy-trace`) live on `copies` tracks
        // under their agent's track: not kernels.
        let mut under_copies = false;
        let mut cur = Some(track.clone());
        while let Some(t) = cur {
            let name = tracks
                .get(&t)
                .and_then(|t| t["name"].as_str())
                .unwrap_or("");
            under_copies |= name.starts_with("copies");
            cur = parent_of(&t);
        }
        if root_name.starts_with("GPU ") && !under_copies {
            is_kernel[i] = true;
            s.kernel_slice_total += 1;
            let name = sl["name"].as_str().unwrap_or("<no name>").to_string();
            *s.kernel_slices.entry(name).or_default() += 1;
            if sl["dur"].as_i64().is_none_or(|d| d < 0) {
                s.bad_durations += 1;
            }
        }
    }
    let flows = v["flows"].as_array().expect("flows");
    s.flows = flows.len() as u64;
    for f in flows {
        let from = f[0].as_u64().expect("flow source") as usize;
        let to = f[1].as_u64().expect("flow target") as usize;
        if is_kernel[to] && !is_kernel[from] {
            let track = slices[from]["track"].as_u64().expect("track").to_string();
            let pid = tracks
                .get(&track)
                .and_then(|t| t["pid"].as_u64())
                .unwrap_or(0);
            *s.kernel_flows_by_pid.entry(pid).or_default() += 1;
        }
    }
    s.dangling_flows = s
        .report
        .lines()
        .find_map(|l| l.split("flows never terminated: ").nth(1))
        .and_then(|n| n.trim().parse().ok())
        .expect("checker summary line with 'flows never terminated'");
    s
}

/// What [`check_outputs`] found, for the test's own extra assertions.
#[derive(Debug)]
pub struct TraceFacts {
    /// CSV rows.
    pub rows: Vec<CsvDispatch>,
    /// Rows per kernel name, runtime kernels included.
    pub per_name: BTreeMap<String, u64>,
    /// Dispatches of the HIP runtime's own kernels.
    pub runtime_kernels: u64,
    /// The Perfetto summary.
    pub pftrace: PftraceSummary,
    /// The JSON document.
    pub json: serde_json::Value,
}

impl TraceFacts {
    /// Dispatches of the program's own kernels.
    pub fn program_dispatches(&self) -> u64 {
        self.rows.len() as u64 - self.runtime_kernels
    }

    /// The program's own dispatches (the HIP runtime's kernels left out),
    /// in dispatch-id order.
    pub fn program_rows(&self) -> Vec<&CsvDispatch> {
        let mut rows: Vec<&CsvDispatch> = self
            .rows
            .iter()
            .filter(|r| !r.kernel_name.starts_with(RUNTIME_KERNEL_PREFIX))
            .collect();
        rows.sort_by_key(|r| r.dispatch_id);
        rows
    }

    /// Names of the program's own kernels in the trace.
    pub fn program_kernel_names(&self) -> usize {
        self.per_name
            .keys()
            .filter(|n| !n.starts_with(RUNTIME_KERNEL_PREFIX))
            .count()
    }
}

/// Checks `DIR/NAME{.pftrace,_kernel_trace.csv,_results.json}` against the
/// report of the process that wrote them:
/// * CSV: header; exactly `count` rows per reported kernel name (so names
///   are demangled right) with the reported grid and workgroup sizes (where
///   fixed); no other kernels except the HIP runtime's `__amd_rocclr_*`;
///   dispatch ids exactly 1..=N (unique, none handed out and lost); unique
///   correlation ids; 0 < start <= end; one Kernel_Id per name and one name
///   per Kernel_Id.
/// * JSON: the same dispatches (ids, names, times), `metadata.dispatches` =
///   N, nothing lost, `run.pid` = the reporting pid.
/// * Perfetto: the checker passes; N kernel slices with the same per-name
///   counts, none with a negative duration; every kernel slice has its flow
///   from an interceptor slice of this pid; no dangling flows.
pub fn check_outputs(dir: &Path, name: &str, report: &ProcessReport) -> TraceFacts {
    let csv_path = dir.join(format!("{name}_kernel_trace.csv"));
    let json_path = dir.join(format!("{name}_results.json"));
    let trace_path = dir.join(format!("{name}.pftrace"));
    for p in [&csv_path, &json_path, &trace_path] {
        assert!(
            p.exists(),
            "{} was not written; directory has {:?}",
            p.display(),
            list_dir(dir)
        );
    }

    // ---- CSV
    let rows = read_csv(&csv_path);
    let n = rows.len() as u64;
    let mut per_name: BTreeMap<String, u64> = BTreeMap::new();
    for r in &rows {
        *per_name.entry(r.kernel_name.clone()).or_default() += 1;
    }
    let mut runtime_kernels = 0;
    for (name, count) in &per_name {
        if let Some(k) = report.kernels.get(name) {
            assert_eq!(
                *count, k.count,
                "dispatches of {name:?}: trace has {count}, program launched {}",
                k.count
            );
        } else {
            assert!(
                name.starts_with(RUNTIME_KERNEL_PREFIX),
                "trace has {count} dispatches of {name:?}, which the program did not launch \
                 (a wrongly demangled name?); program kernels: {:?}",
                report.kernels.keys().collect::<Vec<_>>()
            );
            runtime_kernels += count;
        }
    }
    for (name, k) in &report.kernels {
        assert!(
            per_name.contains_key(name),
            "program launched {} x {name:?}, trace has none; trace names: {:?}",
            k.count,
            per_name.keys().collect::<Vec<_>>()
        );
    }
    assert_eq!(
        n - runtime_kernels,
        report.total,
        "program dispatches in the trace vs total="
    );

    let mut ids: Vec<u64> = rows.iter().map(|r| r.dispatch_id).collect();
    ids.sort_unstable();
    let dups = ids.windows(2).filter(|w| w[0] == w[1]).count();
    assert_eq!(dups, 0, "{dups} duplicate dispatch ids");
    assert_eq!(
        ids,
        (1..=n).collect::<Vec<_>>(),
        "dispatch ids are not exactly 1..={n}: an id was handed out for a dispatch that is missing"
    );
    let corr: HashSet<u64> = rows.iter().map(|r| r.correlation_id).collect();
    assert_eq!(corr.len() as u64, n, "correlation ids are not unique");
    let mut id_of_name: BTreeMap<&str, u64> = BTreeMap::new();
    let mut name_of_id: BTreeMap<u64, &str> = BTreeMap::new();
    for r in &rows {
        assert!(
            r.start > 0 && r.end >= r.start,
            "dispatch {} ({}) has start {} end {}",
            r.dispatch_id,
            r.kernel_name,
            r.start,
            r.end
        );
        assert_eq!(
            *id_of_name.entry(&r.kernel_name).or_insert(r.kernel_id),
            r.kernel_id,
            "two Kernel_Ids for {}",
            r.kernel_name
        );
        assert_eq!(
            *name_of_id.entry(r.kernel_id).or_insert(&r.kernel_name),
            r.kernel_name,
            "Kernel_Id {} names two kernels",
            r.kernel_id
        );
        if let Some(k) = report
            .kernels
            .get(&r.kernel_name)
            .filter(|k| k.fixed_geometry)
        {
            assert_eq!(
                r.grid, k.grid,
                "grid of dispatch {} ({})",
                r.dispatch_id, r.kernel_name
            );
            assert_eq!(
                r.workgroup, k.workgroup,
                "workgroup of dispatch {} ({})",
                r.dispatch_id, r.kernel_name
            );
        }
    }

    // ---- JSON
    let json = read_json(&json_path);
    assert_eq!(
        json["run"]["pid"].as_u64(),
        Some(u64::from(report.pid)),
        "JSON run.pid"
    );
    let meta = &json["metadata"];
    assert_eq!(
        meta["dispatches"].as_u64(),
        Some(n),
        "JSON metadata.dispatches vs CSV rows"
    );
    assert_eq!(
        meta["records_lost"].as_u64(),
        Some(0),
        "JSON metadata.records_lost"
    );
    let jd = json["kernel_dispatches"]
        .as_array()
        .expect("kernel_dispatches");
    assert_eq!(jd.len() as u64, n, "JSON kernel_dispatches vs CSV rows");
    let key =
        |id: u64, corr: u64, name: &str, s: u64, e: u64| format!("{id}/{corr}/{name}/{s}/{e}");
    let from_csv: BTreeSet<String> = rows
        .iter()
        .map(|r| {
            key(
                r.dispatch_id,
                r.correlation_id,
                &r.kernel_name,
                r.start,
                r.end,
            )
        })
        .collect();
    let from_json: BTreeSet<String> = jd
        .iter()
        .map(|d| {
            let u = |k: &str| {
                d[k].as_u64()
                    .unwrap_or_else(|| panic!("JSON dispatch without {k}: {d}"))
            };
            key(
                u("dispatch_id"),
                u("correlation_id"),
                d["kernel_name"].as_str().expect("kernel_name"),
                u("start_ns"),
                u("end_ns"),
            )
        })
        .collect();
    assert!(
        from_csv == from_json,
        "JSON and CSV disagree on the dispatches"
    );

    // ---- Perfetto
    let pftrace = check_pftrace(&trace_path);
    assert_eq!(
        pftrace.kernel_slice_total, n,
        "kernel slices in the .pftrace vs dispatches\n{}",
        pftrace.report
    );
    assert_eq!(
        pftrace.kernel_slices, per_name,
        "kernel slices per name in the .pftrace"
    );
    for (name, count) in &per_name {
        assert_eq!(
            pftrace.slices_by_name.get(name),
            Some(count),
            "slices named {name:?} on all tracks of the .pftrace (trace_processor's \
             `select count(*) from slice where name = ...`) vs its dispatches"
        );
    }
    assert_eq!(
        pftrace.bad_durations, 0,
        "kernel slices with negative duration"
    );
    assert_eq!(
        pftrace.process_pids,
        BTreeSet::from([u64::from(report.pid)]),
        "process tracks of the .pftrace"
    );
    assert_eq!(
        pftrace.kernel_flows_by_pid,
        BTreeMap::from([(u64::from(report.pid), n)]),
        "every kernel slice needs one flow from an hsa_queue_write slice of pid {}",
        report.pid
    );
    assert_eq!(pftrace.dangling_flows, 0, "flows never terminated");

    TraceFacts {
        rows,
        per_name,
        runtime_kernels,
        pftrace,
        json,
    }
}

/// File names in `dir`, sorted.
pub fn list_dir(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Output files of a run (checker side files excluded).
pub fn output_files(dir: &Path) -> Vec<String> {
    list_dir(dir)
        .into_iter()
        .filter(|f| !f.ends_with(".check.json"))
        .collect()
}

/// One line for the test log: what ran, how long, how many dispatches.
pub fn summary(label: &str, run: &Run, facts: &TraceFacts) {
    eprintln!(
        "{label}: {} dispatches ({} runtime kernels), {} kernel names, {:.2}s",
        facts.rows.len(),
        facts.runtime_kernels,
        facts.per_name.len(),
        run.elapsed.as_secs_f64()
    );
}

/// What a rocpd database (`NAME_results.db`) answers to a user's first
/// queries, read with SQLite as a user would.
#[derive(Debug, Default)]
pub struct RocpdFacts {
    /// `select count(*) from kernels`.
    pub kernels: u64,
    /// `select name, total_calls from top_kernels`.
    pub top_kernels: BTreeMap<String, u64>,
    /// `select count(*) from kernels where name = ?` for each name of
    /// `top_kernels`.
    pub kernels_where_name: BTreeMap<String, u64>,
    /// `select count(*) from rocpd_kernel_dispatch` (rows the `kernels` view
    /// must all show).
    pub dispatch_rows: u64,
    /// `schema_version` in `rocpd_metadata`.
    pub schema_version: String,
    /// The `(sgpr_count, vgpr_count, accum_vgpr_count)` triples per kernel
    /// name, from the `kernels` view (several where kernels share a
    /// truncated name).
    pub registers: BTreeMap<String, BTreeSet<Registers>>,
}

/// `(sgpr_count, vgpr_count, accum_vgpr_count)` of a kernel in a rocpd
/// database (`None`: NULL, not known).
pub type Registers = (Option<i64>, Option<i64>, Option<i64>);

/// Opens `path` (read-write, so SQLite rolls back a hot journal a killed
/// writer left, as any reader does) and answers [`RocpdFacts`]. Panics if a
/// `kernels` row has a NULL where a dispatch always has a value.
pub fn read_rocpd(path: &Path) -> RocpdFacts {
    let db = rusqlite::Connection::open(path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    db.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    let one = |sql: &str| -> i64 {
        db.query_row(sql, [], |r| r.get(0))
            .unwrap_or_else(|e| panic!("{sql}: {e} ({})", path.display()))
    };
    let mut f = RocpdFacts {
        kernels: one("select count(*) from kernels") as u64,
        dispatch_rows: one("select count(*) from rocpd_kernel_dispatch") as u64,
        schema_version: db
            .query_row(
                "select value from rocpd_metadata where tag = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .expect("schema_version"),
        ..Default::default()
    };
    let mut st = db
        .prepare("select name, total_calls from top_kernels")
        .unwrap();
    let rows = st
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
        .unwrap();
    for row in rows {
        let (name, n) = row.unwrap();
        assert!(
            f.top_kernels.insert(name.clone(), n as u64).is_none(),
            "top_kernels lists {name:?} twice"
        );
    }
    for name in f.top_kernels.keys() {
        let n: i64 = db
            .query_row(
                "select count(*) from kernels where name = ?1",
                [name],
                |r| r.get(0),
            )
            .unwrap();
        f.kernels_where_name.insert(name.clone(), n as u64);
    }
    // Every row whole: the columns a dispatch always has are set.
    let torn = one(
        "select count(*) from kernels where name is null or start is null or \"end\" is null \
         or \"end\" < start or start <= 0 or dispatch_id is null or queue_id is null or tid is null \
         or grid_x is null or workgroup_x is null or corr_id is null",
    );
    assert_eq!(
        torn,
        0,
        "torn rows in the kernels view of {}",
        path.display()
    );
    let mut st = db
        .prepare("select distinct name, sgpr_count, vgpr_count, accum_vgpr_count from kernels")
        .unwrap();
    let rows = st
        .query_map([], |r| {
            Ok((r.get::<_, String>(0)?, (r.get(1)?, r.get(2)?, r.get(3)?)))
        })
        .unwrap();
    for row in rows {
        let (name, regs) = row.unwrap();
        f.registers.entry(name).or_default().insert(regs);
    }
    f
}

/// Checks that the database answers with the CSV's numbers exactly: the
/// `kernels` view holds every dispatch row, `select count(*) from kernels`
/// is the CSV's row count, and `top_kernels` and `kernels where name = K`
/// give the CSV's per-name counts. Returns what it read.
pub fn check_rocpd_against_csv(db: &Path, rows: &[CsvDispatch]) -> RocpdFacts {
    let f = read_rocpd(db);
    let mut per_name: BTreeMap<String, u64> = BTreeMap::new();
    for r in rows {
        *per_name.entry(r.kernel_name.clone()).or_default() += 1;
    }
    assert_eq!(f.schema_version, "3", "rocpd schema version");
    assert_eq!(
        f.kernels,
        rows.len() as u64,
        "select count(*) from kernels vs CSV rows"
    );
    assert_eq!(
        f.dispatch_rows, f.kernels,
        "dispatch rows the kernels view drops"
    );
    assert_eq!(f.top_kernels, per_name, "top_kernels vs CSV rows per name");
    assert_eq!(
        f.kernels_where_name, per_name,
        "kernels where name = ... vs CSV"
    );
    let mut csv_regs: BTreeMap<String, BTreeSet<(u64, u64, u64)>> = BTreeMap::new();
    for r in rows {
        csv_regs.entry(r.kernel_name.clone()).or_default().insert((
            r.sgpr_count,
            r.vgpr_count,
            r.accum_vgpr_count,
        ));
    }
    let db_regs: BTreeMap<String, BTreeSet<(u64, u64, u64)>> = f
        .registers
        .iter()
        .map(|(name, set)| {
            let set = set
                .iter()
                .map(|(s, v, a)| {
                    let n = |x: &Option<i64>| x.unwrap_or(0) as u64;
                    (n(s), n(v), n(a))
                })
                .collect();
            (name.clone(), set)
        })
        .collect();
    assert_eq!(
        db_regs, csv_regs,
        "register counts per name: database vs CSV"
    );
    f
}

/// A kernel's resources as the compiler reports them
/// (`-Rpass-analysis=kernel-resource-usage`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompilerResources {
    pub sgprs: u64,
    pub vgprs: u64,
    pub agprs: u64,
    pub scratch: u64,
    pub lds: u64,
}

/// Compiles the OpenCL `src` for `mcpu` with the selected runtime's clang and
/// `-Rpass-analysis=kernel-resource-usage`, and reads the remarks: per
/// kernel name, what the compiler says it uses.
pub fn compiler_resources(src: &Path, mcpu: &str) -> BTreeMap<String, CompilerResources> {
    use super::runtime::Runtime;
    let rt = Runtime::selected();
    let out = std::env::temp_dir().join(format!(
        "rprof-remarks-{}-{}-{mcpu}.co",
        std::process::id(),
        rt.version()
    ));
    let o = rt
        .tool(rt.kernel_clang())
        .args([
            "-x",
            "cl",
            "-cl-std=CL2.0",
            "-target",
            "amdgcn-amd-amdhsa",
            "-nogpulib",
            "-O2",
            "-Rpass-analysis=kernel-resource-usage",
        ])
        .arg(format!("-mcpu={mcpu}"))
        .arg(src)
        .arg("-o")
        .arg(&out)
        .output()
        .expect("run the runtime's clang");
    let _ = std::fs::remove_file(&out);
    let text = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "clang failed:\n{text}");
    let mut kernels: BTreeMap<String, CompilerResources> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let Some((_, rest)) = line.split_once("remark:") else {
            continue;
        };
        let rest = rest.split(" [-Rpass").next().unwrap().trim();
        let Some((key, value)) = rest.rsplit_once(':') else {
            continue;
        };
        let value = value.trim();
        if key == "Function Name" {
            current = Some(value.to_string());
            kernels.insert(value.to_string(), CompilerResources::default());
            continue;
        }
        let Some(k) = current.as_ref().and_then(|c| kernels.get_mut(c)) else {
            continue;
        };
        let n = || value.parse::<u64>().unwrap_or_else(|_| panic!("{line}"));
        match key {
            // clang >= 21 says TotalSGPRs (the same count, VCC and the
            // other extra SGPRs included, as the metadata's .sgpr_count).
            "SGPRs" | "TotalSGPRs" => k.sgprs = n(),
            "VGPRs" => k.vgprs = n(),
            "AGPRs" => k.agprs = n(),
            "ScratchSize [bytes/lane]" => k.scratch = n(),
            "LDS Size [bytes/block]" => k.lds = n(),
            _ => {}
        }
    }
    assert!(
        !kernels.is_empty(),
        "no kernel-resource-usage remarks:\n{text}"
    );
    kernels
}

/// One kernel object the emulated GPU launched, from its exit report
/// (`RPROF_EMU_EVENT_REPORT`, a `kernel_object=0x.. launches=N symbol=S`
/// line each): what the device ran, counted by the device, independently of
/// rprof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceKernel {
    /// Launches of it.
    pub launches: u64,
    /// Its symbol, `None` where no code object in the emulator's tracked
    /// memory names it (the runtime's own blit kernels on ROCr 5.2 and 6.1).
    pub symbol: Option<String>,
}

/// The kernels of an emulator exit report, by kernel object.
pub fn device_kernels(report: &str) -> BTreeMap<u64, DeviceKernel> {
    let mut out = BTreeMap::new();
    for line in report.lines() {
        let Some(rest) = line.strip_prefix("kernel_object=0x") else {
            continue;
        };
        let mut fields = rest.splitn(3, ' ');
        let object = u64::from_str_radix(fields.next().unwrap_or(""), 16)
            .unwrap_or_else(|e| panic!("{line}: {e}"));
        let launches = fields
            .next()
            .and_then(|f| f.strip_prefix("launches="))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{line}: no launches="));
        let symbol = fields
            .next()
            .and_then(|f| f.strip_prefix("symbol="))
            .unwrap_or_else(|| panic!("{line}: no symbol="));
        let symbol = (symbol != "-").then(|| symbol.to_owned());
        let old = out.insert(object, DeviceKernel { launches, symbol });
        assert!(
            old.is_none(),
            "kernel object {object:#x} twice in the report"
        );
    }
    out
}

/// Checks the JSON's dispatches against what the device ran: every kernel
/// object in the JSON was launched by the device exactly as often, under the
/// same symbol; every other kernel object the device launched has no symbol
/// (it is the runtime's own code, run on its internal queues, which no tool
/// of the API tables sees). Returns the launches of those.
pub fn check_against_device(facts: &TraceFacts, report: &str) -> u64 {
    let device = device_kernels(report);
    let mut traced: BTreeMap<u64, (u64, String)> = BTreeMap::new();
    for d in facts.json["kernel_dispatches"]
        .as_array()
        .expect("kernel_dispatches")
    {
        let object = d["kernel_object"].as_u64().expect("kernel_object");
        let symbol = d["symbol_name"].as_str().expect("symbol_name");
        let e = traced.entry(object).or_insert((0, symbol.to_owned()));
        assert_eq!(e.1, symbol, "two symbols for kernel object {object:#x}");
        e.0 += 1;
    }
    for (object, (count, symbol)) in &traced {
        let ran = device
            .get(object)
            .unwrap_or_else(|| panic!("{symbol} ({object:#x}) traced but never run: {device:#?}"));
        assert_eq!(
            (ran.launches, ran.symbol.as_deref()),
            (*count, Some(symbol.as_str())),
            "kernel object {object:#x}: the device's launches and symbol against the trace's"
        );
    }
    let mut internal = 0;
    for (object, k) in &device {
        if !traced.contains_key(object) {
            assert_eq!(
                k.symbol, None,
                "the device ran {object:#x} {} times, the trace has none",
                k.launches
            );
            internal += k.launches;
        }
    }
    internal
}
