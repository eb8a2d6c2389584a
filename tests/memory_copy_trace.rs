//! `--memory-copy-trace` end to end on the runtime `RPROF_TEST_ROCM` selects:
//! the raw-HSA program `tests/programs/copies.cpp` (every async-copy entry
//! the runtime has, every direction, a signal shared by four copies, a
//! zero-handle signal, rectangles on the SDMA engine, copies in flight at
//! exit) and the HIP program `hip-tests/memcpy_mix.cpp`, under the `rprof`
//! command. Every count is exact and the same in the CSV, the JSON, the
//! Perfetto trace (slices by name) and the rocpd `memory_copies` view; the
//! app's completion signals complete exactly as without rprof.

mod harness;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use harness::artefacts::{hip_program, program, programs_dir, rprof};
use harness::outputs::{check_pftrace, read_json};
use harness::run::{clear_rprof_env, fresh_dir, run_with, HIP_RUN_TIMEOUT};
use harness::{build, run_with_timeout, Run, Runtime};

/// rocprofv3's columns, then `Bytes`.
const COLUMNS: [&str; 9] = [
    "Kind",
    "Direction",
    "Stream_Id",
    "Source_Agent_Id",
    "Destination_Agent_Id",
    "Correlation_Id",
    "Start_Timestamp",
    "End_Timestamp",
    "Bytes",
];

/// `tests/programs/copies.cpp` built for the selected runtime.
fn copies_program() -> &'static PathBuf {
    static APP: OnceLock<PathBuf> = OnceLock::new();
    APP.get_or_init(|| {
        let src = programs_dir();
        program(
            "g++",
            &src.join("copies.cpp"),
            &[&src.join("hsa_test_util.h")],
            &["-O1".into(), "-std=c++17".into()],
            &["-lhsa-runtime64".into(), "-lpthread".into()],
        )
    })
}

/// `(direction, bytes) -> copies` of the traced entries, from the
/// program's `COPIED` lines (copies the program says ran untraced are not
/// counted).
fn copied(run: &Run) -> BTreeMap<(String, u64), u64> {
    let mut m = BTreeMap::new();
    for line in run.stdout.lines() {
        let Some(rest) = line.strip_prefix("COPIED ") else {
            continue;
        };
        if rest.contains("untraced=1") {
            continue;
        }
        let field = |k: &str| {
            rest.split(' ')
                .find_map(|kv| kv.strip_prefix(k))
                .unwrap_or_else(|| panic!("no {k} in {line:?}"))
        };
        let key = (
            field("direction=").to_string(),
            field("bytes=").parse().unwrap(),
        );
        *m.entry(key).or_default() += field("count=").parse::<u64>().unwrap();
    }
    m
}

/// The program's `key=value` lines.
fn value<'a>(run: &'a Run, key: &str) -> Vec<&'a str> {
    let prefix = format!("{key}=");
    run.stdout
        .lines()
        .filter_map(|l| l.strip_prefix(prefix.as_str()))
        .collect()
}

/// Runs `rprof --memory-copy-trace --kernel-trace` on `program args`, all
/// three formats, outputs `run` in a fresh directory `label`.
fn traced(label: &str, program: &PathBuf, args: &[&str], env: &[(&str, &str)]) -> Run {
    let dir = fresh_dir(label);
    let mut cmd = Runtime::selected().command(rprof(), &[]);
    cmd.args([
        "--memory-copy-trace",
        "--kernel-trace",
        "-o",
        "run",
        "--output-format",
        "csv,json,pftrace,rocpd",
        "-d",
    ])
    .arg(&dir)
    .arg("--")
    .arg(program)
    .args(args);
    clear_rprof_env(&mut cmd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let run = run_with(cmd, dir, HIP_RUN_TIMEOUT);
    run.assert_success();
    run
}

/// What the outputs say about the copies.
#[derive(Debug)]
struct Copies {
    /// `(direction, bytes) -> rows` of `run_memory_copy_trace.csv`.
    csv: BTreeMap<(String, u64), u64>,
    /// The same from `memory_copies` in the JSON.
    json: BTreeMap<(String, u64), u64>,
    /// JSON copies per API entry.
    json_api: BTreeMap<String, u64>,
    /// Perfetto slices per direction name.
    slices: BTreeMap<String, u64>,
    /// Perfetto flows ending on a copy slice.
    flows_to_copies: u64,
    /// The copies' correlation ids.
    ids: std::collections::BTreeSet<u64>,
    /// `(name, size) -> rows` of the rocpd `memory_copies` view.
    rocpd: BTreeMap<(String, u64), u64>,
}

impl Copies {
    /// Per direction, summed over sizes.
    fn per_direction(m: &BTreeMap<(String, u64), u64>) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for ((d, _), n) in m {
            *out.entry(d.clone()).or_default() += n;
        }
        out
    }
}

/// Reads and cross-checks the run's copy outputs: CSV header and columns,
/// distinct correlation ids, ordered timestamps, JSON metadata.
fn copies_of(run: &Run) -> Copies {
    let path = run.output("_memory_copy_trace.csv");
    let mut r = csv::Reader::from_path(&path)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", path.display(), run.stderr));
    assert_eq!(r.headers().unwrap().iter().collect::<Vec<_>>(), COLUMNS);
    let mut csv = BTreeMap::new();
    let mut ids = std::collections::BTreeSet::new();
    for row in r.records() {
        let row = row.unwrap();
        assert_eq!(&row[0], "MEMORY_COPY");
        assert_eq!(&row[2], "0");
        assert!(row[3].starts_with("Agent ") && row[4].starts_with("Agent "));
        let id: u64 = row[5].parse().unwrap();
        assert!(ids.insert(id), "correlation id {id} twice");
        let (start, end): (u64, u64) = (row[6].parse().unwrap(), row[7].parse().unwrap());
        assert!(0 < start && start <= end, "{row:?}");
        *csv.entry((row[1].to_string(), row[8].parse().unwrap()))
            .or_default() += 1;
    }
    let json = read_json(&run.output("_results.json"));
    let mut by = BTreeMap::new();
    let mut json_api = BTreeMap::new();
    let list = json["memory_copies"].as_array().expect("memory_copies");
    for c in list {
        let key = (
            c["operation"].as_str().unwrap().to_string(),
            c["bytes"].as_u64().unwrap(),
        );
        *by.entry(key).or_default() += 1;
        *json_api
            .entry(c["api"].as_str().unwrap().to_string())
            .or_default() += 1;
        assert!(ids.contains(&c["correlation_id"].as_u64().unwrap()));
    }
    assert_eq!(json["metadata"]["memory_copies"], list.len() as u64);
    assert_eq!(json["metadata"]["records_lost"], 0);
    // Copy times come from ROCr's async-copy profiling, never from rprof's
    // clamp, except where the runtime gives none: ROCr 5.2.3 times its
    // host-to-host copies only when the CPU agent has profiling on, which
    // hsa_amd_profiling_async_copy_enable does not turn on.
    let host_to_host_5_2 = u64::from(Runtime::selected() == Runtime::Rocm52)
        * list
            .iter()
            .filter(|c| c["operation"] == "MEMORY_COPY_HOST_TO_HOST")
            .count() as u64;
    // Those are always clamped. Rarely (2 runs in about 30 on 5.2) one more
    // copy's start lands before its call's entry after ROCr's GPU-to-host
    // time translation and is clamped too: allowed, at most one.
    for what in ["start_clamped", "end_clamped"] {
        let n = json["metadata"][what].as_u64().unwrap();
        assert!(
            (host_to_host_5_2..=host_to_host_5_2 + 1).contains(&n),
            "{what} = {n}, expected {host_to_host_5_2} (+1)"
        );
    }
    let p = check_pftrace(&run.output(".pftrace"));
    let slices_json = p.json["slices"].as_array().unwrap();
    let mut slices = BTreeMap::new();
    let mut is_copy = vec![false; slices_json.len()];
    for (i, s) in slices_json.iter().enumerate() {
        let name = s["name"].as_str().unwrap_or("");
        if name.starts_with("MEMORY_COPY_") {
            is_copy[i] = true;
            *slices.entry(name.to_string()).or_default() += 1;
        }
    }
    let flows_to_copies = p.json["flows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| is_copy[f[1].as_u64().unwrap() as usize])
        .count() as u64;
    assert_eq!(p.dangling_flows, 0);
    Copies {
        csv,
        json: by,
        json_api,
        slices,
        flows_to_copies,
        ids,
        rocpd: rocpd_copies(run),
    }
}

/// `(name, size) -> rows` of the `memory_copies` view of the run's rocpd
/// database (which joins both agents, the event, the thread and the
/// process), checked against the table itself.
fn rocpd_copies(run: &Run) -> BTreeMap<(String, u64), u64> {
    let path = run.output("_results.db");
    let db = rusqlite::Connection::open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", path.display(), run.stderr));
    let table: i64 = db
        .query_row("SELECT count(*) FROM rocpd_memory_copy", [], |r| r.get(0))
        .unwrap();
    let mut m = BTreeMap::new();
    let mut stmt = db
        .prepare("SELECT name, size, count(*) FROM memory_copies GROUP BY name, size")
        .unwrap();
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })
        .unwrap();
    for row in rows {
        let (name, size, n) = row.unwrap();
        m.insert((name, size as u64), n as u64);
    }
    assert_eq!(
        m.values().sum::<u64>(),
        table as u64,
        "view rows = table rows"
    );
    m
}

/// Every output holds exactly `expected`.
fn assert_exact(c: &Copies, expected: &BTreeMap<(String, u64), u64>) {
    let total: u64 = expected.values().sum();
    assert_eq!(&c.csv, expected, "CSV");
    assert_eq!(&c.json, expected, "JSON");
    assert_eq!(&c.rocpd, expected, "rocpd memory_copies");
    assert_eq!(c.slices, Copies::per_direction(expected), "Perfetto slices");
    assert_eq!(c.flows_to_copies, total, "Perfetto flows to copies");
}

fn key(direction: &str, bytes: u64) -> (String, u64) {
    (format!("MEMORY_COPY_{direction}"), bytes)
}

/// What `copies mix` issues through the traced entries on this runtime:
/// `_on_engine` exists from ROCr 6.
fn mix_expected(rect: bool) -> BTreeMap<(String, u64), u64> {
    let mut m = BTreeMap::from([
        (key("HOST_TO_DEVICE", 4096), 3),
        (key("DEVICE_TO_DEVICE", 12288), 2),
        (key("DEVICE_TO_HOST", 8192), 3),
        (key("HOST_TO_HOST", 1024), 1),
        (key("HOST_TO_DEVICE", 2048), 4),
    ]);
    if Runtime::selected() != Runtime::Rocm52 {
        m.insert(key("HOST_TO_DEVICE", 16384), 2);
    }
    if rect {
        m.insert(key("HOST_TO_DEVICE", 512), 1);
        m.insert(key("DEVICE_TO_HOST", 512), 1);
    }
    m
}

/// The checks every `copies mix` run shares: the program's own view of its
/// signals and data, and the exact counts.
fn check_mix(run: &Run, rect: bool) -> Copies {
    let expected = mix_expected(rect);
    assert_eq!(copied(run), expected, "the program's report");
    // Every copy's own signal read 0 after the wait (decremented once, never
    // below), and the signal four copies share ended at exactly 0.
    let waits = value(run, "value_after_wait");
    assert_eq!(waits.len(), 9);
    assert!(waits.iter().all(|v| *v == "0"), "{waits:?}");
    assert_eq!(value(run, "shared_value"), ["0"]);
    assert_eq!(value(run, "data_ok"), ["1"]);
    // A zero-handle signal: the runtime's own answer
    // (HSA_STATUS_ERROR_INVALID_ARGUMENT), as without rprof.
    assert_eq!(value(run, "null_signal_status"), [untraced_null_status()]);
    let c = copies_of(run);
    assert_exact(&c, &expected);
    let on_engine = u64::from(Runtime::selected() != Runtime::Rocm52) * 2;
    let rects = u64::from(rect) * 2;
    let linear = expected.values().sum::<u64>() - on_engine - rects;
    let mut api = BTreeMap::from([("hsa_amd_memory_async_copy".to_string(), linear)]);
    if on_engine > 0 {
        api.insert("hsa_amd_memory_async_copy_on_engine".into(), on_engine);
    }
    if rects > 0 {
        api.insert("hsa_amd_memory_async_copy_rect".into(), rects);
    }
    assert_eq!(c.json_api, api);
    c
}

/// What the runtime answers, untraced, to a copy with a zero-handle signal.
fn untraced_null_status() -> &'static str {
    static STATUS: OnceLock<String> = OnceLock::new();
    STATUS.get_or_init(|| {
        let dir = fresh_dir("untraced");
        let mut cmd = Runtime::selected().command(copies_program(), &build().emulator().loader_env);
        cmd.arg("mix").env_remove("HSA_TOOLS_LIB");
        clear_rprof_env(&mut cmd);
        let run = run_with_timeout(cmd, dir);
        run.assert_success();
        let v = value(&run, "null_signal_status");
        assert_eq!(v.len(), 1, "{}", run.stdout);
        v[0].to_string()
    })
}

#[test]
fn raw_hsa_copies_in_every_direction_on_the_blit_path() {
    let run = traced(
        "blit",
        copies_program(),
        &["mix"],
        &[("HSA_ENABLE_SDMA", "0")],
    );
    check_mix(&run, false);
}

#[test]
fn raw_hsa_copies_and_rectangles_on_the_sdma_engine() {
    let run = traced(
        "sdma",
        copies_program(),
        &["mix", "rect"],
        &[("RPROF_EMU_SDMA", "1")],
    );
    check_mix(&run, true);
    assert_eq!(value(&run, "rect_ok"), ["1"]);
}

#[test]
fn copies_in_flight_at_exit_are_waited_for() {
    // Four copies held back by a dependency signal that is released 300 ms
    // after main called exit(): the flush at exit waits for them.
    let run = traced("exit", copies_program(), &["exit", "4"], &[]);
    let expected = BTreeMap::from([(key("HOST_TO_DEVICE", 4096), 4)]);
    assert_eq!(copied(&run), expected);
    assert_exact(&copies_of(&run), &expected);
}

#[test]
fn copies_that_never_finish_are_counted_lost_after_the_bounded_wait() {
    // Three copies held back by a dependency signal nobody releases: the
    // flush at exit waits its 10 s, then counts them lost.
    let run = traced("stuck", copies_program(), &["stuck", "3"], &[]);
    assert_eq!(
        copied(&run),
        BTreeMap::from([(key("HOST_TO_DEVICE", 4096), 3)])
    );
    assert!(
        run.stderr
            .contains("rprof: 3 dispatches or memory copies were still running after 10s at exit"),
        "{}",
        run.stderr
    );
    assert!(!run.output("_memory_copy_trace.csv").exists());
    let json = read_json(&run.output("_results.json"));
    assert_eq!(json["memory_copies"].as_array().unwrap().len(), 0);
    assert!(rocpd_copies(&run).is_empty());
    assert_eq!(json["metadata"]["memory_copies"], 0);
    assert_eq!(json["metadata"]["records_lost"], 3);
    let p = check_pftrace(&run.output(".pftrace"));
    assert_eq!(p.dangling_flows, 0);
}

#[test]
fn hip_memcpy_in_each_direction() {
    // memcpy_mix, 5 rounds: pageable hipMemcpy H2D and D2H of 16 KiB, pinned
    // hipMemcpyAsync H2D, D2D and D2H of 1 MiB. What reaches the traced
    // entries depends on HIP: 5.2.3 and 5.7.1 stage pageable copies through
    // hsa_amd_memory_async_copy; 6.4.3 copies them with blit kernels
    // (`__amd_rocclr_copyBuffer`, in the kernel trace).
    // Device-to-device on one GPU is a blit kernel everywhere (a kernel
    // dispatch, not a copy), as rocprofv3 sees it too.
    let rounds = 5;
    let run = traced(
        "hip_memcpy_mix",
        &hip_program("memcpy_mix"),
        &[&rounds.to_string()],
        &[],
    );
    let mut expected = BTreeMap::from([
        (key("HOST_TO_DEVICE", 1 << 20), rounds),
        (key("DEVICE_TO_HOST", 1 << 20), rounds),
    ]);
    // The rest are HIP's blit kernels, in the kernel trace: one D2D per
    // round, plus the two pageable copies per round on 6.4.3.
    let mut blits = rounds;
    // HIP 6.4.3 (on ROCr 6.4.3 and 7.0) copies pageable memory with a blit kernel.
    if !matches!(Runtime::selected(), Runtime::Rocm64 | Runtime::Rocm70) {
        expected.insert(key("HOST_TO_DEVICE", 16384), rounds);
        expected.insert(key("DEVICE_TO_HOST", 16384), rounds);
    } else {
        blits += 2 * rounds;
    }
    let copies = copies_of(&run);
    assert_exact(&copies, &expected);
    let kernels = harness::outputs::read_csv(&run.output("_kernel_trace.csv"));
    // One id space: no kernel shares a correlation id with a copy.
    assert!(kernels
        .iter()
        .all(|k| !copies.ids.contains(&k.correlation_id)));
    let named = |prefix: &str| {
        kernels
            .iter()
            .filter(|k| k.kernel_name.starts_with(prefix))
            .count() as u64
    };
    assert_eq!(named("__amd_rocclr_copyBuffer"), blits);
    assert_eq!(named("scale("), rounds);
    assert_eq!(named("add_one("), rounds);
    assert_eq!(kernels.len() as u64, blits + 2 * rounds);
}
