//! Feeds fixtures of records through `PerfettoSink` and checks the trace with
//! the offline checker `pftrace_check.py` (which decodes with the official
//! Perfetto schema and replays trace_processor's sorting, nesting, interning
//! and flow rules).
//!
//! Standard-mode launch strings are interned (`string_value_iid`), which the
//! checker shows as raw iids, so those tests also decode the trace with the
//! prost types and resolve the iids themselves. The sink's Standard path is
//! checked for steady-state allocations with a per-thread counting
//! allocator.
//!
//! The checker is found through `RPROF_PFTRACE_CHECK`, default
//! `tests/tools/pftrace_check.py` (the team checker, vendored). It
//! needs `pip install perfetto protobuf`. If either is missing the tests
//! fail: they never skip.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use rprof_core::output::perfetto::{KernelArgs, PerfettoOptions, PerfettoSink, LAUNCH_TABLE_LIMIT};
use rprof_core::record::{AgentInfo, DispatchRecord, InterceptRecord, RunInfo, RunMetadata};
use rprof_core::sink::{KernelInfo, RecordSink};
use rprof_perfetto::protos::{debug_annotation, trace_packet::Data, track_event};
use rprof_perfetto::{ClockReadings, WriterOptions};
use serde_json::Value;

/// Counts allocations per thread, so tests running in parallel do not
/// disturb each other's counts.
struct CountingAlloc;

thread_local! {
    static THREAD_ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count_allocation() {
    // A const-initialized Cell without destructor: no lazy init, no allocation.
    let _ = THREAD_ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

fn thread_allocations() -> u64 {
    THREAD_ALLOCATIONS.with(Cell::get)
}

// SAFETY: forwards to the system allocator; only counts calls.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_allocation();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_allocation();
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const PID: u32 = 4242;
const BASE_NS: u64 = 1_000_000_000_000;
const KERNEL_NAMES: [&str; 5] = [
    "vector_add(float*, float const*, int)",
    "saxpy",
    "reduce<256>",
    "transpose",
    "fill_zero",
];

fn checker_path() -> PathBuf {
    match std::env::var_os("RPROF_PFTRACE_CHECK") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools/pftrace_check.py"),
    }
}

/// Runs the checker; panics (fails the test) if it is unavailable or finds errors.
fn check(trace: &Path) -> (Value, String) {
    let checker = checker_path();
    assert!(
        checker.is_file(),
        "pftrace_check.py not found at {} (set RPROF_PFTRACE_CHECK)",
        checker.display()
    );
    let probe = Command::new("python3")
        .args([
            "-c",
            "from perfetto.protos.perfetto.trace import perfetto_trace_pb2",
        ])
        .output()
        .expect("python3 is needed to run pftrace_check.py");
    assert!(
        probe.status.success(),
        "python3 cannot import perfetto_trace_pb2: run `pip install perfetto protobuf`\n{}",
        String::from_utf8_lossy(&probe.stderr)
    );
    let json = trace.with_extension("json");
    let out = Command::new("python3")
        .arg(&checker)
        .arg(trace)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run pftrace_check.py");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "pftrace_check.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    (value, stdout)
}

fn run_info() -> RunInfo {
    RunInfo {
        pid: PID,
        process_name: "vecadd".into(),
        cmdline: vec!["./vecadd".into(), "--n".into(), "1024".into()],
        hostname: "testhost".into(),
        start_ns: BASE_NS - 1_000,
        ..Default::default()
    }
}

fn agents() -> Vec<AgentInfo> {
    vec![
        AgentInfo {
            index: 0,
            name: "gfx90a".into(),
            product_name: "MI210".into(),
            handle: 0x1000,
            compute_units: 104,
            cpu: false,
        },
        AgentInfo {
            index: 1,
            name: "gfx942".into(),
            product_name: "MI300X".into(),
            handle: 0x2000,
            compute_units: 304,
            cpu: false,
        },
    ]
}

/// Records in arrival order, plus the kernel id of every dispatch.
#[derive(Default)]
struct Fixture {
    events: Vec<Event>,
    dispatches: usize,
    intercepts: usize,
}

enum Event {
    Intercept(InterceptRecord),
    Dispatch(DispatchRecord, u64),
}

/// (agent, queue) by batch number.
const QUEUES: [(u32, u64); 3] = [(0, 1), (0, 2), (1, 3)];
const THREADS: [u32; 3] = [PID, PID + 1, PID + 2];

/// 9995 serialized dispatches in batches of 1..=4 on three queues and three
/// threads, each batch's dispatches arriving after the next intercept; then
/// one batch of 5 overlapping dispatches on queue 3 that needs 3 lanes.
fn fixture() -> Fixture {
    let mut f = Fixture::default();
    let mut next_corr = 1u64;
    let mut pending: Vec<Event> = Vec::new();
    let mut remaining = 9995usize;
    let mut k = 0u64;
    let mut batch_start = BASE_NS;
    while remaining > 0 {
        let n = (1 + (k % 4) as usize).min(remaining);
        remaining -= n;
        let (agent, queue) = QUEUES[(k % 3) as usize];
        let thread = THREADS[(k % 3) as usize];
        let t = BASE_NS + k * 10_000;
        f.events.push(Event::Intercept(InterceptRecord {
            thread_id: thread,
            queue_id: queue,
            agent_index: agent,
            begin_ns: t,
            end_ns: t + 500,
            first_correlation_id: (u64::from(PID) << 32) | next_corr,
            dispatch_count: n as u32,
            packet_count: n as u32 + 1,
        }));
        f.intercepts += 1;
        // The previous batch completes after this intercept.
        f.events.append(&mut pending);
        for j in 0..n as u64 {
            let start = t + 1_000 + j * 1_500;
            let kernel_id = 1 + (k * 7 + j) % 5;
            pending.push(Event::Dispatch(
                DispatchRecord {
                    correlation_id: (u64::from(PID) << 32) | next_corr,
                    dispatch_id: next_corr,
                    agent_index: agent,
                    queue_id: queue,
                    thread_id: thread,
                    kernel_object: 0x7f00_0000_0000 + kernel_id * 0x100,
                    grid: [1024 * kernel_id as u32, 1, 1],
                    workgroup: [256, 1, 1],
                    private_segment_size: 0,
                    group_segment_size: 64,
                    enqueue_ns: t + 100 + j,
                    start_ns: start,
                    end_ns: start + 1_000,
                },
                kernel_id,
            ));
            next_corr += 1;
            f.dispatches += 1;
        }
        batch_start = t + 10_000;
        k += 1;
    }
    f.events.append(&mut pending);

    // Overlap batch on queue 3 (agent 1): A [0,100], B [50,150], C [60,70],
    // D [160,200], then E [155,158] arriving last: lanes 0, 1, 2, 0, 1.
    let t = batch_start;
    let first = next_corr;
    f.events.push(Event::Intercept(InterceptRecord {
        thread_id: PID,
        queue_id: 3,
        agent_index: 1,
        begin_ns: t,
        end_ns: t + 20,
        first_correlation_id: (u64::from(PID) << 32) | first,
        dispatch_count: 5,
        packet_count: 5,
    }));
    f.intercepts += 1;
    for (i, (s, e)) in [(0, 100), (50, 150), (60, 70), (160, 200), (155, 158)]
        .into_iter()
        .enumerate()
    {
        let corr = first + i as u64;
        f.events.push(Event::Dispatch(
            DispatchRecord {
                correlation_id: (u64::from(PID) << 32) | corr,
                dispatch_id: corr,
                agent_index: 1,
                queue_id: 3,
                thread_id: PID,
                kernel_object: 0x7f00_0000_0000 + 0x100,
                grid: [4096, 2, 3],
                workgroup: [64, 2, 1],
                private_segment_size: 16,
                group_segment_size: 1024,
                enqueue_ns: t + 5,
                start_ns: t + 30 + s,
                end_ns: t + 30 + e,
            },
            1,
        ));
        f.dispatches += 1;
    }
    f
}

fn write_trace(f: &Fixture, path: &Path, kernel_args: KernelArgs) {
    let options = PerfettoOptions {
        kernel_args,
        clocks: Some(ClockReadings {
            boottime_ns: BASE_NS - 2_000,
            monotonic_ns: BASE_NS - 5_000,
            realtime_ns: 1_700_000_000_000_000_000,
        }),
        ..Default::default()
    };
    let mut sink = PerfettoSink::with_options(path, options).unwrap();
    sink.start(&run_info(), &agents()).unwrap();
    for ev in &f.events {
        match ev {
            Event::Intercept(r) => sink.intercept(r).unwrap(),
            Event::Dispatch(r, kernel_id) => {
                let name = KERNEL_NAMES[*kernel_id as usize - 1];
                let symbol = format!("_Z{}{}", name.len(), name);
                let info = KernelInfo {
                    kernel_id: *kernel_id,
                    display_name: name,
                    symbol_name: &symbol,
                    resources: None,
                };
                sink.dispatch(r, &info).unwrap();
            }
        }
    }
    sink.finish(&RunMetadata {
        dispatches: f.dispatches as u64,
        filtered_out: 3,
        start_clamped: 2,
        end_clamped: 1,
        records_lost: 0,
        end_ns: BASE_NS + 100_000_000,
        ..RunMetadata::default()
    })
    .unwrap();
}

/// A fresh path for `name` (sinks never overwrite a file: an earlier run's
/// file is removed).
fn tmp(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("perfetto_sink")
        .join(name);
    let _ = std::fs::remove_file(&p);
    p
}

struct Parsed {
    json: Value,
    /// uuid -> path
    paths: HashMap<u64, String>,
}

impl Parsed {
    fn slices(&self) -> &Vec<Value> {
        self.json["slices"].as_array().unwrap()
    }
    fn path_of(&self, slice: &Value) -> &str {
        &self.paths[&slice["track"].as_u64().unwrap()]
    }
}

fn parse(json: Value) -> Parsed {
    let paths = json["tracks"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.parse().unwrap(), v["path"].as_str().unwrap().to_owned()))
        .collect();
    Parsed { json, paths }
}

fn common_assertions(f: &Fixture, p: &Parsed, stdout: &str) {
    assert!(stdout.contains("\n0 errors, 0 warnings"), "{stdout}");
    let slices = p.slices();

    // Kernel slices per kernel name, counted from the fixture.
    let mut expected: BTreeMap<String, usize> = BTreeMap::new();
    for ev in &f.events {
        if let Event::Dispatch(_, id) = ev {
            *expected
                .entry(KERNEL_NAMES[*id as usize - 1].to_owned())
                .or_default() += 1;
        }
    }
    let mut kernels: BTreeMap<String, usize> = BTreeMap::new();
    let mut on_gpu = 0;
    for s in slices {
        if p.path_of(s).starts_with("GPU ") {
            on_gpu += 1;
            *kernels
                .entry(s["name"].as_str().unwrap().to_owned())
                .or_default() += 1;
            assert_eq!(s["depth"], 0, "kernel slices never nest: {s}");
        }
    }
    assert_eq!(on_gpu, 10_000);
    assert_eq!(on_gpu, f.dispatches);
    assert_eq!(kernels, expected);
    // Slices counted by name over every track, as trace_processor's
    // `select count(*) from slice where name = K` does (instants included):
    // exactly K's dispatches, no auxiliary event carries a kernel's name.
    for (name, count) in &expected {
        let by_name = slices.iter().filter(|s| s["name"] == name.as_str()).count();
        assert_eq!(by_name, *count, "slices named {name:?} on all tracks");
    }

    // Intercept slices: one per record, on the thread tracks.
    let intercepts: Vec<&Value> = slices
        .iter()
        .filter(|s| s["name"] == "hsa_queue_write")
        .collect();
    assert_eq!(intercepts.len(), f.intercepts);
    let mut per_thread: BTreeMap<&str, usize> = BTreeMap::new();
    for s in &intercepts {
        *per_thread.entry(p.path_of(s)).or_default() += 1;
    }
    let threads: Vec<&str> = per_thread.keys().copied().collect();
    assert_eq!(threads, ["thread 4243", "thread 4244", "vecadd"]);

    // One flow per dispatch, intercept -> kernel, flow id = correlation id.
    let flows = p.json["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 10_000);
    for fl in flows {
        let (a, b) = (
            &slices[fl[0].as_u64().unwrap() as usize],
            &slices[fl[1].as_u64().unwrap() as usize],
        );
        assert_eq!(a["name"], "hsa_queue_write");
        assert!(p.path_of(b).starts_with("GPU "));
        assert_eq!(fl[2].as_u64().unwrap() >> 32, u64::from(PID));
    }

    // Lanes: queues 1 and 2 serialized (one lane each), queue 3 needs 3.
    let tracks = p.json["tracks"].as_object().unwrap();
    let lanes = |queue_path: &str| {
        tracks
            .values()
            .filter(|t| {
                t["path"].as_str().unwrap()
                    == format!(
                        "{queue_path} / queue {}",
                        queue_path.rsplit(' ').next().unwrap()
                    )
            })
            .count()
    };
    assert_eq!(lanes("GPU 0 (gfx90a) / queue 1"), 1);
    assert_eq!(lanes("GPU 0 (gfx90a) / queue 2"), 1);
    assert_eq!(lanes("GPU 1 (gfx942) / queue 3"), 3);

    // The overlap batch: lanes 0, 1, 2, 0, 1 in arrival order, timestamps untouched.
    let t0 = slices
        .iter()
        .filter(|s| p.path_of(s).starts_with("GPU 1 (gfx942)"))
        .map(|s| s["ts"].as_u64().unwrap())
        .max()
        .unwrap()
        - 30
        - 160;
    let lane_of = |start: u64, dur: u64| {
        let s = slices
            .iter()
            .find(|s| s["ts"].as_u64() == Some(t0 + 30 + start) && s["dur"].as_u64() == Some(dur))
            .unwrap_or_else(|| panic!("no slice at +{start}"));
        s["track"].as_u64().unwrap()
    };
    let (a, b, c, d, e) = (
        lane_of(0, 100),
        lane_of(50, 100),
        lane_of(60, 10),
        lane_of(160, 40),
        lane_of(155, 3),
    );
    assert_eq!(a, d);
    assert_eq!(b, e);
    assert!(a != b && b != c && a != c);

    // Metadata instant on the process track.
    let meta = slices.iter().find(|s| s["name"] == "rprof run").unwrap();
    assert_eq!(p.path_of(meta), "vecadd");
    assert_eq!(meta["args"]["dispatches"], 10_000);
    assert_eq!(meta["args"]["filtered_out"], 3);
    assert_eq!(meta["args"]["hostname"], "testhost");
    assert_eq!(meta["ts"], BASE_NS + 100_000_000);

    // Kernel table: one "kernel symbol" instant per kernel, named by its arg.
    let table: Vec<&Value> = slices
        .iter()
        .filter(|s| p.path_of(s) == "kernels")
        .collect();
    assert_eq!(table.len(), 5);
    assert!(table.iter().all(|s| s["name"] == "kernel symbol"));
    let saxpy = table
        .iter()
        .find(|s| s["args"]["kernel_name"] == "saxpy")
        .unwrap();
    assert_eq!(saxpy["args"]["kernel_id"], 2);
    assert_eq!(saxpy["args"]["kernel_object"], 0x7f00_0000_0200u64);
    assert_eq!(saxpy["args"]["symbol_name"], "_Z5saxpy");
    assert_eq!(saxpy["dur"], 0);
}

#[test]
fn full_args_fixture_passes_checker_with_exact_counts() {
    let f = fixture();
    let path = tmp("full.pftrace");
    write_trace(&f, &path, KernelArgs::Full);
    let (json, stdout) = check(&path);
    let p = parse(json);
    common_assertions(&f, &p, &stdout);

    // Args of the first overlap dispatch (A), the 9996th dispatch.
    let a = p
        .slices()
        .iter()
        .find(|s| s["args"]["dispatch_id"] == 9996)
        .unwrap();
    let corr = (u64::from(PID) << 32) | 9996;
    let expected = serde_json::json!({
        "correlation_id": corr,
        "dispatch_id": 9996,
        "kernel_id": 1,
        "kernel_object": 0x7f00_0000_0100u64,
        "grid.x": 4096, "grid.y": 2, "grid.z": 3,
        "workgroup.x": 64, "workgroup.y": 2, "workgroup.z": 1,
        "private_segment_size": 16,
        "group_segment_size": 1024,
        "enqueue_ns": a["ts"].as_u64().unwrap() - 30 + 5,
        "queue_id": 3,
        "thread_id": PID,
    });
    assert_eq!(a["args"], expected);
    assert_eq!(a["name"], KERNEL_NAMES[0]);
    assert_eq!(a["dur"], 100);

    let i = p
        .slices()
        .iter()
        .find(|s| s["name"] == "hsa_queue_write" && s["args"]["dispatch_count"] == 5)
        .unwrap();
    assert_eq!(
        i["args"],
        serde_json::json!({"queue_id": 3, "packet_count": 5, "dispatch_count": 5})
    );
}

#[test]
fn compact_fixture_passes_checker_without_kernel_args() {
    let f = fixture();
    let path = tmp("compact.pftrace");
    write_trace(&f, &path, KernelArgs::Compact);
    let (json, stdout) = check(&path);
    let p = parse(json);
    common_assertions(&f, &p, &stdout);
    let intercepts: HashMap<u64, &InterceptRecord> = f
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Intercept(r) => Some((r.begin_ns, r)),
            Event::Dispatch(..) => None,
        })
        .collect();
    let mut checked = 0;
    for s in p.slices() {
        if p.path_of(s).starts_with("GPU ") {
            assert_eq!(s["args"], serde_json::json!({}), "{s}");
        }
        if s["name"] == "hsa_queue_write" {
            let rec = &intercepts[&s["ts"].as_u64().unwrap()];
            let expected = if rec.packet_count == rec.dispatch_count {
                serde_json::json!({})
            } else {
                serde_json::json!({ "packet_count": rec.packet_count })
            };
            assert_eq!(s["args"], expected, "{s}");
            checked += 1;
        }
    }
    assert_eq!(checked, f.intercepts);
}

/// The launch string Standard mode writes for `rec`.
fn launch_text(rec: &DispatchRecord) -> String {
    format!(
        "grid {}x{}x{} wg {}x{}x{} lds {} scratch {}",
        rec.grid[0],
        rec.grid[1],
        rec.grid[2],
        rec.workgroup[0],
        rec.workgroup[1],
        rec.workgroup[2],
        rec.group_segment_size,
        rec.private_segment_size
    )
}

/// A decoded value of a kernel-slice arg.
#[derive(Debug, Clone, PartialEq)]
enum Decoded {
    Uint(u64),
    /// An interned string, resolved through `debug_annotation_string_values`.
    Interned(u64, String),
}

/// Decodes `path` with the prost types and returns the args of every slice
/// BEGIN, by arg name, in file order, with interned names and string values
/// resolved (panics on an unresolved iid). Also returns how many string
/// values were defined.
fn decode_slice_args(path: &Path) -> (Vec<BTreeMap<String, Decoded>>, usize) {
    let bytes = std::fs::read(path).unwrap();
    let trace = rprof_perfetto::decode_trace(&bytes).unwrap();
    let mut names: HashMap<u64, String> = HashMap::new();
    let mut values: HashMap<u64, String> = HashMap::new();
    let mut slices = Vec::new();
    for p in &trace.packet {
        if let Some(d) = &p.interned_data {
            for n in &d.debug_annotation_names {
                names.insert(n.iid.unwrap(), n.name.clone().unwrap());
            }
            for v in &d.debug_annotation_string_values {
                let text = String::from_utf8(v.str.clone().unwrap()).unwrap();
                assert!(
                    values.insert(v.iid.unwrap(), text).is_none(),
                    "string value iid {:?} defined twice",
                    v.iid
                );
            }
        }
        let Some(Data::TrackEvent(e)) = &p.data else {
            continue;
        };
        if e.r#type != Some(track_event::Type::SliceBegin as i32) {
            continue;
        }
        let mut args = BTreeMap::new();
        for a in &e.debug_annotations {
            let Some(debug_annotation::NameField::NameIid(name)) = a.name_field else {
                panic!("arg without interned name: {a:?}");
            };
            let value = match a.value {
                Some(debug_annotation::Value::UintValue(v)) => Decoded::Uint(v),
                Some(debug_annotation::Value::StringValueIid(iid)) => {
                    assert_eq!(p.sequence_flags.unwrap_or(0) & 2, 2, "iid without flag");
                    let text = values
                        .get(&iid)
                        .unwrap_or_else(|| panic!("string value iid {iid} used before definition"));
                    Decoded::Interned(iid, text.clone())
                }
                ref other => panic!("unexpected kernel arg value {other:?}"),
            };
            args.insert(names[&name].clone(), value);
        }
        slices.push(args);
    }
    (slices, values.len())
}

#[test]
fn standard_is_the_default() {
    assert_eq!(KernelArgs::default(), KernelArgs::Standard);
    assert_eq!(PerfettoOptions::default().kernel_args, KernelArgs::Standard);
}

#[test]
fn standard_fixture_has_dispatch_id_and_interned_launch_on_every_kernel() {
    let f = fixture();
    let path = tmp("standard.pftrace");
    write_trace(&f, &path, KernelArgs::Standard);
    let (json, stdout) = check(&path);
    let p = parse(json);
    common_assertions(&f, &p, &stdout);

    // Every dispatch starts at a distinct time: find its record by start.
    let by_start: HashMap<u64, &DispatchRecord> = f
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Dispatch(r, _) => Some((r.start_ns, r)),
            Event::Intercept(_) => None,
        })
        .collect();
    assert_eq!(by_start.len(), f.dispatches);

    // Through the checker: exactly the args dispatch_id (right value) and
    // launch (shown as its raw iid), one iid per distinct configuration.
    let mut iid_of: HashMap<String, u64> = HashMap::new();
    let mut kernels = 0;
    for s in p.slices() {
        if !p.path_of(s).starts_with("GPU ") {
            continue;
        }
        kernels += 1;
        let rec = by_start[&s["ts"].as_u64().unwrap()];
        let args = s["args"].as_object().unwrap();
        let keys: Vec<&str> = args.keys().map(String::as_str).collect();
        assert_eq!(keys, ["dispatch_id", "launch"], "{s}");
        assert_eq!(args["dispatch_id"], rec.dispatch_id, "{s}");
        let iid = args["launch"].as_u64().unwrap();
        let prev = *iid_of.entry(launch_text(rec)).or_insert(iid);
        assert_eq!(prev, iid, "one iid per configuration: {s}");
    }
    assert_eq!(kernels, 10_000);
    // Five kernels with their own grid, plus the overlap batch's configuration.
    assert_eq!(iid_of.len(), 6);
    let distinct: BTreeSet<u64> = iid_of.values().copied().collect();
    assert_eq!(distinct.len(), 6);

    // Through the prost types: resolve every launch iid to its text.
    let by_id: HashMap<u64, &DispatchRecord> =
        by_start.values().map(|r| (r.dispatch_id, *r)).collect();
    let (slices, defined) = decode_slice_args(&path);
    assert_eq!(defined, 6, "each configuration is defined once");
    let mut checked = 0;
    for args in slices.iter().filter(|a| a.contains_key("launch")) {
        let Decoded::Uint(id) = args["dispatch_id"] else {
            panic!("{args:?}")
        };
        let Decoded::Interned(iid, text) = &args["launch"] else {
            panic!("{args:?}")
        };
        assert_eq!(args.len(), 2);
        assert_eq!(*text, launch_text(by_id[&id]));
        assert_eq!(iid_of[text], *iid);
        checked += 1;
    }
    assert_eq!(checked, 10_000);
    // Known dispatches, spelled out.
    let launch_of = |id: u64| {
        slices
            .iter()
            .find(|a| a.get("dispatch_id") == Some(&Decoded::Uint(id)))
            .map(|a| match &a["launch"] {
                Decoded::Interned(_, t) => t.clone(),
                other => panic!("{other:?}"),
            })
            .unwrap()
    };
    // Dispatch 1: kernel 1 of the serialized part (grid 1024 * kernel_id).
    assert_eq!(launch_of(1), "grid 1024x1x1 wg 256x1x1 lds 64 scratch 0");
    // Dispatch 2: first of the second batch, kernel 1 + 7 % 5 = 3.
    assert_eq!(launch_of(2), "grid 3072x1x1 wg 256x1x1 lds 64 scratch 0");
    // Dispatch 9996: the first of the overlap batch.
    assert_eq!(
        launch_of(9996),
        "grid 4096x2x3 wg 64x2x1 lds 1024 scratch 16"
    );
}

/// Past `LAUNCH_TABLE_LIMIT` distinct configurations, new ones are written
/// as inline uint args; known ones keep using their iid.
#[test]
fn standard_launch_table_is_bounded() {
    let path = tmp("standard_overflow.pftrace");
    let mut sink = PerfettoSink::with_options(
        &path,
        PerfettoOptions {
            kernel_args: KernelArgs::Standard,
            clocks: Some(ClockReadings::default()),
            ..Default::default()
        },
    )
    .unwrap();
    sink.start(&run_info(), &agents()).unwrap();
    let limit = LAUNCH_TABLE_LIMIT as u32;
    // Grid x = 1..=limit + 3, then grid x = 1 again.
    let grids: Vec<u32> = (1..=limit + 3).chain([1]).collect();
    let info = KernelInfo {
        kernel_id: 1,
        display_name: "k",
        symbol_name: "_Z1kv",
        resources: None,
    };
    for (n, &grid_x) in grids.iter().enumerate() {
        let t = BASE_NS + n as u64 * 100;
        sink.dispatch(
            &DispatchRecord {
                correlation_id: n as u64 + 1,
                dispatch_id: n as u64 + 1,
                agent_index: 0,
                queue_id: 1,
                thread_id: PID,
                kernel_object: 0x7f00_0000_0000,
                grid: [grid_x, 1, 1],
                workgroup: [64, 1, 1],
                private_segment_size: 8,
                group_segment_size: 32,
                enqueue_ns: t,
                start_ns: t,
                end_ns: t + 50,
            },
            &info,
        )
        .unwrap();
    }
    sink.finish(&RunMetadata::default()).unwrap();

    let (slices, defined) = decode_slice_args(&path);
    assert_eq!(defined, LAUNCH_TABLE_LIMIT);
    assert_eq!(slices.len(), grids.len());
    for (n, args) in slices.iter().enumerate() {
        let grid_x = grids[n];
        assert_eq!(args["dispatch_id"], Decoded::Uint(n as u64 + 1));
        if grid_x <= limit {
            assert_eq!(args.len(), 2, "{args:?}");
            let Decoded::Interned(_, text) = &args["launch"] else {
                panic!("{args:?}")
            };
            assert_eq!(
                *text,
                format!("grid {grid_x}x1x1 wg 64x1x1 lds 32 scratch 8")
            );
        } else {
            let expected: BTreeMap<String, Decoded> = [
                ("dispatch_id", n as u64 + 1),
                ("grid.x", u64::from(grid_x)),
                ("grid.y", 1),
                ("grid.z", 1),
                ("workgroup.x", 64),
                ("workgroup.y", 1),
                ("workgroup.z", 1),
                ("group_segment_size", 32),
                ("private_segment_size", 8),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), Decoded::Uint(v)))
            .collect();
            assert_eq!(*args, expected);
        }
    }
    // The last dispatch reuses configuration 1's iid.
    assert_eq!(slices.last().unwrap()["launch"], slices[0]["launch"]);
}

/// Graph-storm dispatches: 256 kernels, eight launch configurations.
fn storm_dispatch(i: usize, corr: u64, t: u64) -> DispatchRecord {
    DispatchRecord {
        correlation_id: (u64::from(PID) << 32) | corr,
        dispatch_id: corr,
        agent_index: 0,
        queue_id: 1,
        thread_id: PID,
        kernel_object: 0x7f00_0000_0000 + i as u64 * 0x40,
        grid: [64 << (i % 8), 1, 1],
        workgroup: [64, 1, 1],
        private_segment_size: 0,
        group_segment_size: if i % 2 == 0 { 0 } else { 512 },
        enqueue_ns: t,
        start_ns: t + 2_000 + i as u64 * 1_200,
        end_ns: t + 2_000 + i as u64 * 1_200 + 900,
    }
}

fn storm_intercept(first: u64, n: u32, t: u64) -> InterceptRecord {
    InterceptRecord {
        thread_id: PID,
        queue_id: 1,
        agent_index: 0,
        begin_ns: t,
        end_ns: t + 1_000,
        first_correlation_id: (u64::from(PID) << 32) | first,
        dispatch_count: n,
        packet_count: n,
    }
}

/// Once every thread, queue, lane, kernel and launch configuration has been
/// seen, the Standard path (intercept + dispatch) allocates nothing.
#[test]
fn standard_steady_state_does_not_allocate() {
    let names: Vec<String> = (0..256)
        .map(|i| format!("graph_node_kernel_{i:03}"))
        .collect();
    let path = tmp("standard_no_alloc.pftrace");
    let mut sink = PerfettoSink::with_options(
        &path,
        PerfettoOptions {
            kernel_args: KernelArgs::Standard,
            clocks: Some(ClockReadings::default()),
            ..Default::default()
        },
    )
    .unwrap();
    sink.start(&run_info(), &agents()).unwrap();
    let mut corr = 1u64;
    let mut t = BASE_NS;
    let mut before = 0;
    // Launch 0 defines everything; the buffers grow during the first few.
    let warm = 2;
    for launch in 0..50 {
        if launch == warm {
            before = thread_allocations();
        }
        for (i, name) in names.iter().enumerate() {
            sink.intercept(&storm_intercept(corr, 1, t + i as u64 * 1_200))
                .unwrap();
            let info = KernelInfo {
                kernel_id: i as u64 + 1,
                display_name: name,
                symbol_name: name,
                resources: None,
            };
            sink.dispatch(&storm_dispatch(i, corr, t), &info).unwrap();
            corr += 1;
        }
        t += 2_000 + 256 * 1_200 + 10_000;
    }
    let after = thread_allocations();
    sink.finish(&RunMetadata::default()).unwrap();
    assert!(before > 0, "the counter counts (warm-up allocates)");
    assert_eq!(
        after - before,
        0,
        "allocations in {} steady-state launches",
        50 - warm
    );
}

/// Graph storm: 256 near-zero kernels (eight launch configurations) launched
/// 200 times, with one interceptor call per graph launch ("batched") or one
/// per dispatch (ROCr 5.2.3 calls the interceptor once per packet). Prints
/// the size per dispatch of every mode and guards it against regressions;
/// the figures are in docs/trace-format.md.
#[test]
fn graph_storm_size_per_dispatch() {
    let names: Vec<String> = (0..256)
        .map(|i| format!("graph_node_kernel_{i:03}"))
        .collect();
    let plain = WriterOptions::plain();
    let delta = WriterOptions {
        compress: false,
        ..WriterOptions::default()
    };
    let default = WriterOptions::default();
    // (mode, one intercept per dispatch, encoding, bound in bytes per dispatch)
    let cases = [
        (KernelArgs::Compact, false, plain, 60.0),
        (KernelArgs::Compact, true, plain, 98.0),
        (KernelArgs::Standard, false, plain, 76.0),
        (KernelArgs::Standard, true, plain, 114.0),
        (KernelArgs::Full, false, plain, 215.0),
        (KernelArgs::Full, true, plain, 253.0),
        (KernelArgs::Compact, false, delta, 300.0),
        (KernelArgs::Compact, true, delta, 300.0),
        (KernelArgs::Standard, false, delta, 300.0),
        (KernelArgs::Standard, true, delta, 300.0),
        (KernelArgs::Full, false, delta, 300.0),
        (KernelArgs::Full, true, delta, 300.0),
        (KernelArgs::Compact, false, default, 10.0),
        (KernelArgs::Compact, true, default, 15.0),
        (KernelArgs::Standard, false, default, 15.0),
        (KernelArgs::Standard, true, default, 15.0),
        (KernelArgs::Full, false, default, 40.0),
        (KernelArgs::Full, true, default, 40.0),
    ];
    for (kernel_args, per_dispatch_intercept, encoding, bound) in cases {
        let enc = match (encoding.delta_timestamps, encoding.compress) {
            (false, false) => "plain",
            (true, false) => "delta",
            _ => "delta+deflate",
        };
        let label = format!(
            "{kernel_args:?}, {}, {enc}",
            if per_dispatch_intercept {
                "one intercept per dispatch"
            } else {
                "one intercept per launch"
            }
        );
        let path = tmp(&format!(
            "storm_{kernel_args:?}_{per_dispatch_intercept}_{enc}.pftrace"
        ));
        let mut sink = PerfettoSink::with_options(
            &path,
            PerfettoOptions {
                kernel_args,
                clocks: Some(ClockReadings {
                    boottime_ns: BASE_NS,
                    monotonic_ns: BASE_NS,
                    realtime_ns: BASE_NS,
                }),
                encoding,
            },
        )
        .unwrap();
        sink.start(&run_info(), &agents()).unwrap();
        let mut corr = 1u64;
        let mut t = BASE_NS;
        for _launch in 0..200 {
            if !per_dispatch_intercept {
                sink.intercept(&storm_intercept(corr, 256, t)).unwrap();
            }
            for (i, name) in names.iter().enumerate() {
                if per_dispatch_intercept {
                    sink.intercept(&storm_intercept(corr, 1, t + i as u64 * 1_200))
                        .unwrap();
                }
                let info = KernelInfo {
                    kernel_id: i as u64 + 1,
                    display_name: name,
                    symbol_name: name,
                    resources: None,
                };
                sink.dispatch(&storm_dispatch(i, corr, t), &info).unwrap();
                corr += 1;
            }
            t += 2_000 + 256 * 1_200 + 10_000;
        }
        sink.finish(&RunMetadata {
            dispatches: 51_200,
            ..Default::default()
        })
        .unwrap();
        let bytes = std::fs::metadata(&path).unwrap().len();
        let per = bytes as f64 / 51_200.0;
        println!("graph storm ({label}): {bytes} bytes, {per:.1} bytes per dispatch");
        assert!(
            per <= bound,
            "{label}: {per:.1} bytes per dispatch > {bound}"
        );
    }
}

/// CPU time (user + system) of the calling thread: on a shared machine it
/// varies much less than wall time.
fn thread_cpu_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0);
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Benchmark, not a timed test: prints the sink's throughput.
/// Wall-clock figures include the file writes; the CPU-second figure is
/// the one to compare across runs on a loaded machine.
/// `cargo test --release --test perfetto_sink -- --ignored --nocapture`
#[test]
#[ignore = "benchmark; prints figures"]
fn bench_sink_throughput() {
    let names: Vec<String> = (0..256)
        .map(|i| format!("graph_node_kernel_{i:03}"))
        .collect();
    for (kernel_args, batch) in [
        (KernelArgs::Compact, 1u64),
        (KernelArgs::Compact, 256),
        (KernelArgs::Standard, 1),
        (KernelArgs::Standard, 256),
        (KernelArgs::Full, 1),
        (KernelArgs::Full, 256),
    ] {
        let path = tmp("bench.pftrace");
        let dispatches = 2_000_000u64;
        let started = std::time::Instant::now();
        let cpu_started = thread_cpu_secs();
        let mut sink = PerfettoSink::with_options(
            &path,
            PerfettoOptions {
                kernel_args,
                clocks: None,
                ..Default::default()
            },
        )
        .unwrap();
        sink.start(&run_info(), &agents()).unwrap();
        let mut records = 0u64;
        let mut d = 0u64;
        while d < dispatches {
            let t = BASE_NS + d * 2_000;
            let queue = 1 + (d / batch) % 4;
            sink.intercept(&InterceptRecord {
                thread_id: PID + (queue as u32 % 2),
                queue_id: queue,
                agent_index: (queue % 2) as u32,
                begin_ns: t,
                end_ns: t + 500,
                first_correlation_id: (u64::from(PID) << 32) | (d + 1),
                dispatch_count: batch as u32,
                packet_count: batch as u32,
            })
            .unwrap();
            records += 1;
            for i in 0..batch {
                let n = d + i + 1;
                let k = (n % 256) as usize;
                let start = t + 1_000 + i * 1_200;
                let info = KernelInfo {
                    kernel_id: k as u64 + 1,
                    display_name: &names[k],
                    symbol_name: &names[k],
                    resources: None,
                };
                sink.dispatch(
                    &DispatchRecord {
                        correlation_id: (u64::from(PID) << 32) | n,
                        dispatch_id: n,
                        agent_index: (queue % 2) as u32,
                        queue_id: queue,
                        thread_id: PID,
                        kernel_object: 0x7f00_0000_0000 + k as u64 * 0x40,
                        grid: [65536 >> (k % 8), 1, 1],
                        workgroup: [256, 1, 1],
                        private_segment_size: 0,
                        group_segment_size: 0,
                        enqueue_ns: t + 100,
                        start_ns: start,
                        end_ns: start + 900,
                    },
                    &info,
                )
                .unwrap();
                records += 1;
            }
            d += batch;
        }
        sink.finish(&RunMetadata::default()).unwrap();
        let secs = started.elapsed().as_secs_f64();
        let cpu = thread_cpu_secs() - cpu_started;
        let bytes = std::fs::metadata(&path).unwrap().len();
        println!(
            "PerfettoSink {kernel_args:?}, batches of {batch}: {records} records in {secs:.3} s = {:.2} M records/s ({cpu:.3} s CPU = {:.2} M records per CPU-second), {:.1} bytes/dispatch",
            records as f64 / secs / 1e6,
            records as f64 / cpu / 1e6,
            bytes as f64 / dispatches as f64
        );
    }
}

/// RPC doorbell wakes (`--rpc-trace`): a server thread that also submits a
/// kernel while serving. Every wake gives one `sleep` and one `serve` slice
/// on the server's thread track, a `wake` instant with the pending count,
/// and two values on the doorbell's counter track; the CSV and JSON sinks
/// get one row each.
#[test]
fn rpc_wakes_become_sleep_serve_slices_counters_and_rows() {
    use rprof_core::output::csv::CsvSink;
    use rprof_core::output::json::JsonSink;
    use rprof_core::output::perfetto::{
        RPC_COUNTER_TRACK_PREFIX, RPC_SERVE_SLICE_NAME, RPC_SLEEP_SLICE_NAME, RPC_WAKE_INSTANT_NAME,
    };
    use rprof_core::rpc::RpcWakeRecord;

    const SERVER: u32 = PID + 9;
    const DOORBELL: u64 = 0x7f00_dead_0000;
    const WAKES: u64 = 50;
    let dir = tmp("rpc");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("rpc.pftrace");
    let csv_path = dir.join("rpc_kernel_trace.csv");
    let json_path = dir.join("rpc_results.json");
    let options = PerfettoOptions {
        clocks: Some(ClockReadings {
            boottime_ns: BASE_NS,
            monotonic_ns: BASE_NS,
            realtime_ns: BASE_NS,
        }),
        ..PerfettoOptions::default()
    };
    let mut sinks: Vec<Box<dyn RecordSink>> = vec![
        Box::new(PerfettoSink::with_options(&trace, options).unwrap()),
        Box::new(CsvSink::create(&csv_path).unwrap()),
        Box::new(JsonSink::create(&json_path).unwrap()),
    ];
    for s in sinks.iter_mut() {
        s.start(&run_info(), &agents()).unwrap();
    }
    let mut t = BASE_NS;
    for i in 0..WAKES {
        let wake = RpcWakeRecord {
            thread_id: SERVER,
            signal: DOORBELL,
            sleep_begin_ns: t,
            wake_ns: t + 10_000,
            value_at_wake: (i % 4 + 1) as i64,
            serve_end_ns: t + 15_000,
            value_at_serve_end: 0,
            ring_ns: if i % 2 == 0 { t + 9_000 } else { 0 },
            timeouts: (i % 3) as u32,
        };
        // The server submits one kernel in the middle of its serve.
        let corr = (u64::from(PID) << 32) | (i + 1);
        let intercept = InterceptRecord {
            thread_id: SERVER,
            queue_id: 1,
            agent_index: 0,
            begin_ns: t + 11_000,
            end_ns: t + 11_500,
            first_correlation_id: corr,
            dispatch_count: 1,
            packet_count: 1,
        };
        let dispatch = DispatchRecord {
            correlation_id: corr,
            dispatch_id: i + 1,
            queue_id: 1,
            thread_id: SERVER,
            kernel_object: 0x5000,
            grid: [64, 1, 1],
            workgroup: [64, 1, 1],
            enqueue_ns: t + 11_200,
            start_ns: t + 12_000,
            end_ns: t + 13_000,
            ..DispatchRecord::default()
        };
        let k = KernelInfo {
            kernel_id: 1,
            display_name: "rpc_client",
            symbol_name: "rpc_client",
            resources: None,
        };
        for s in sinks.iter_mut() {
            s.intercept(&intercept).unwrap();
            s.dispatch(&dispatch, &k).unwrap();
            s.rpc_wake(&wake).unwrap();
        }
        t += 20_000;
    }
    let meta = RunMetadata {
        dispatches: WAKES,
        rpc_wakes: WAKES,
        rpc_unrecognised_waits: 2,
        ..RunMetadata::default()
    };
    for s in sinks.iter_mut() {
        s.finish(&meta).unwrap();
    }

    let (json, stdout) = check(&trace);
    assert!(stdout.contains("0 errors"), "{stdout}");
    let p = parse(json);
    let count = |name: &str| p.slices().iter().filter(|s| s["name"] == name).count() as u64;
    assert_eq!(count(RPC_SLEEP_SLICE_NAME), WAKES);
    assert_eq!(count(RPC_SERVE_SLICE_NAME), WAKES);
    assert_eq!(count(RPC_WAKE_INSTANT_NAME), WAKES);
    assert_eq!(count("hsa_queue_write"), WAKES);
    // Exactly its dispatches: the `kernels` track's instant is named
    // "kernel symbol" and carries the kernel's name as an arg.
    assert_eq!(count("rpc_client"), WAKES);
    assert_eq!(count("kernel symbol"), 1);
    let server_path = format!("thread {SERVER}");
    for s in p.slices() {
        let name = s["name"].as_str().unwrap();
        if [
            RPC_SLEEP_SLICE_NAME,
            RPC_SERVE_SLICE_NAME,
            RPC_WAKE_INSTANT_NAME,
            "hsa_queue_write",
        ]
        .contains(&name)
        {
            assert!(p.path_of(s).ends_with(&server_path), "{s}");
        }
        // The submission nests inside the serve slice.
        if name == "hsa_queue_write" {
            assert_eq!(s["depth"], 1, "{s}");
        }
    }
    let first_wake = p
        .slices()
        .iter()
        .find(|s| s["name"] == RPC_WAKE_INSTANT_NAME)
        .unwrap();
    assert_eq!(first_wake["args"]["pending"], 1);
    assert_eq!(first_wake["args"]["wake_latency_ns"], 1_000);
    let first_sleep = p
        .slices()
        .iter()
        .find(|s| s["name"] == RPC_SLEEP_SLICE_NAME)
        .unwrap();
    assert_eq!(first_sleep["dur"], 10_000);
    let counter_name = format!("{RPC_COUNTER_TRACK_PREFIX} {DOORBELL:#x}");
    let (uuid, _) = p
        .paths
        .iter()
        .find(|(_, path)| path.ends_with(&counter_name))
        .expect("counter track");
    let values = p.json["counters"][uuid.to_string()].as_array().unwrap();
    assert_eq!(values.len() as u64, 2 * WAKES);
    assert_eq!(values[0][1], 1);
    assert_eq!(values[1][1], 0);

    let csv = std::fs::read_to_string(dir.join("rpc_rpc_trace.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next().unwrap(),
        "Thread_Id,Doorbell_Signal,Sleep_Begin_Timestamp,Wake_Timestamp,Serve_End_Timestamp,Sleep_Ns,Serve_Ns,Pending_At_Wake,Pending_At_Serve_End,Timeouts,Ring_Timestamp,Wake_Latency_Ns"
    );
    assert_eq!(
        lines.next().unwrap(),
        format!(
            "{SERVER},{DOORBELL:#x},{},{},{},10000,5000,1,0,0,{},1000",
            BASE_NS,
            BASE_NS + 10_000,
            BASE_NS + 15_000,
            BASE_NS + 9_000
        )
    );
    assert_eq!(
        lines.next().unwrap(),
        format!(
            "{SERVER},{DOORBELL:#x},{},{},{},10000,5000,2,0,1,,",
            BASE_NS + 20_000,
            BASE_NS + 30_000,
            BASE_NS + 35_000
        )
    );
    assert_eq!(csv.lines().count() as u64, WAKES + 1);

    let json: Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    let wakes = json["rpc_wakes"].as_array().unwrap();
    assert_eq!(wakes.len() as u64, WAKES);
    assert_eq!(wakes[0]["serve_ns"], 5_000);
    assert_eq!(wakes[1]["ring_ns"], Value::Null);
    assert_eq!(
        json["kernel_dispatches"].as_array().unwrap().len() as u64,
        WAKES
    );
    assert_eq!(json["metadata"]["rpc_wakes"], WAKES);
    assert_eq!(json["metadata"]["rpc_unrecognised_waits"], 2);
    assert!(!dir.join("rpc_results.json.rpc.tmp").exists());
}

#[test]
fn memory_copies_become_lane_slices_with_flows_and_rows() {
    use rprof_core::output::csv::CsvSink;
    use rprof_core::output::json::JsonSink;
    use rprof_core::record::{CopyApi, CopyDirection, MemoryCopyRecord};

    let dir = tmp("copies");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("copies.pftrace");
    let csv_path = dir.join("copies_kernel_trace.csv");
    let json_path = dir.join("copies_results.json");
    let mut all = agents();
    all.push(AgentInfo {
        index: 2,
        name: "cpu".into(),
        product_name: "host".into(),
        handle: 0x3000,
        compute_units: 2,
        cpu: true,
    });
    let mut sinks: Vec<Box<dyn RecordSink>> = vec![
        Box::new(PerfettoSink::create(&trace).unwrap()),
        Box::new(CsvSink::create(&csv_path).unwrap()),
        Box::new(JsonSink::create(&json_path).unwrap()),
    ];
    for s in sinks.iter_mut() {
        s.start(&run_info(), &all).unwrap();
    }
    // 10 H2D copies to GPU 0 that all overlap (one shared signal), 3 D2H from
    // GPU 1 on engine 0x2, 2 H2H on the CPU: 10 lanes, 1 lane, 1 lane.
    let mut n = 0u64;
    let mut copy = |direction, src, dst, engine, api, start: u64, end: u64| {
        n += 1;
        MemoryCopyRecord {
            correlation_id: (u64::from(PID) << 32) + n,
            thread_id: PID,
            src_agent: src,
            dst_agent: dst,
            direction,
            api,
            engine,
            bytes: 100 * n,
            enqueue_ns: start - 50,
            call_end_ns: start - 40,
            start_ns: start,
            end_ns: end,
        }
    };
    let mut recs = Vec::new();
    for i in 0..10 {
        recs.push(copy(
            CopyDirection::HostToDevice,
            2,
            0,
            0,
            CopyApi::AsyncCopy,
            BASE_NS + 1_000 + i * 10,
            BASE_NS + 5_000,
        ));
    }
    for i in 0..3 {
        recs.push(copy(
            CopyDirection::DeviceToHost,
            1,
            2,
            2,
            CopyApi::OnEngine,
            BASE_NS + 10_000 + i * 1_000,
            BASE_NS + 10_500 + i * 1_000,
        ));
    }
    for i in 0..2 {
        recs.push(copy(
            CopyDirection::HostToHost,
            2,
            2,
            0,
            CopyApi::Rect,
            BASE_NS + 20_000 + i * 1_000,
            BASE_NS + 20_500 + i * 1_000,
        ));
    }
    for r in &recs {
        for s in sinks.iter_mut() {
            s.memory_copy(r).unwrap();
        }
    }
    let meta = RunMetadata {
        memory_copies: recs.len() as u64,
        ..RunMetadata::default()
    };
    for s in sinks.iter_mut() {
        s.finish(&meta).unwrap();
    }

    let (json, stdout) = check(&trace);
    assert!(stdout.contains("0 errors"), "{stdout}");
    let p = parse(json);
    let mut by_name: BTreeMap<String, u64> = BTreeMap::new();
    let mut lanes: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for s in p.slices() {
        let name = s["name"].as_str().unwrap().to_owned();
        if name.starts_with("MEMORY_COPY_") {
            lanes
                .entry(p.path_of(s).to_owned())
                .or_default()
                .insert(s["track"].as_u64().unwrap());
            assert_eq!(s["args"]["copy_bytes"].as_u64().unwrap() % 100, 0, "{s:?}");
        }
        *by_name.entry(name).or_default() += 1;
    }
    assert_eq!(by_name["MEMORY_COPY_HOST_TO_DEVICE"], 10);
    assert_eq!(by_name["MEMORY_COPY_DEVICE_TO_HOST"], 3);
    assert_eq!(by_name["MEMORY_COPY_HOST_TO_HOST"], 2);
    assert_eq!(by_name["hsa_amd_memory_async_copy"], 10);
    assert_eq!(by_name["hsa_amd_memory_async_copy_on_engine"], 3);
    assert_eq!(by_name["hsa_amd_memory_async_copy_rect"], 2);
    let lanes: BTreeMap<String, usize> = lanes.into_iter().map(|(k, v)| (k, v.len())).collect();
    assert_eq!(
        lanes,
        BTreeMap::from([
            ("CPU 2 (cpu) / copies / copies".to_owned(), 1),
            ("GPU 0 (gfx90a) / copies / copies".to_owned(), 10),
            (
                "GPU 1 (gfx942) / copies engine 0x2 / copies engine 0x2".to_owned(),
                1
            ),
        ])
    );
    assert_eq!(p.json["flows"].as_array().unwrap().len(), recs.len());

    let csv = std::fs::read_to_string(dir.join("copies_memory_copy_trace.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(
        rows[0],
        "Kind,Direction,Stream_Id,Source_Agent_Id,Destination_Agent_Id,Correlation_Id,Start_Timestamp,End_Timestamp,Bytes"
    );
    assert_eq!(rows.len(), 1 + recs.len());
    assert_eq!(
        rows[11],
        format!(
            "MEMORY_COPY,MEMORY_COPY_DEVICE_TO_HOST,0,Agent 1,Agent 2,{},{},{},1100",
            (u64::from(PID) << 32) + 11,
            BASE_NS + 10_000,
            BASE_NS + 10_500
        )
    );
    let j: Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    let copies = j["memory_copies"].as_array().unwrap();
    assert_eq!(copies.len(), recs.len());
    assert_eq!(copies[10]["operation"], "MEMORY_COPY_DEVICE_TO_HOST");
    assert_eq!(copies[10]["api"], "hsa_amd_memory_async_copy_on_engine");
    assert_eq!(copies[10]["engine"], 2);
    assert_eq!(j["metadata"]["memory_copies"], 15);
    assert_eq!(j["agents"][2]["type"], "CPU");
}
