//! Feeds fixtures of records through `PerfettoSink` and checks the trace with
//! the offline checker `pftrace_check.py` (which decodes with the official
//! Perfetto schema and replays trace_processor's sorting, nesting, interning
//! and flow rules).
//!
//! The checker is found through `RPROF_PFTRACE_CHECK`, default
//! `tests/tools/pftrace_check.py` (the team checker, vendored). It
//! needs `pip install perfetto protobuf`. If either is missing the tests
//! fail: they never skip.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use rprof_core::output::perfetto::{KernelArgs, PerfettoOptions, PerfettoSink};
use rprof_core::record::{AgentInfo, DispatchRecord, InterceptRecord, RunInfo, RunMetadata};
use rprof_core::sink::{KernelInfo, RecordSink};
use rprof_perfetto::ClockReadings;
use serde_json::Value;

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
        },
        AgentInfo {
            index: 1,
            name: "gfx942".into(),
            product_name: "MI300X".into(),
            handle: 0x2000,
            compute_units: 304,
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
    })
    .unwrap();
}

fn tmp(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("perfetto_sink")
        .join(name)
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

    // Kernel table: one instant per kernel.
    let table: Vec<&Value> = slices
        .iter()
        .filter(|s| p.path_of(s) == "kernels")
        .collect();
    assert_eq!(table.len(), 5);
    let saxpy = table.iter().find(|s| s["name"] == "saxpy").unwrap();
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

/// Graph storm: 256 near-zero kernels launched 200 times, one interceptor
/// call per graph launch. Prints the size per dispatch.
#[test]
fn graph_storm_size_per_dispatch() {
    let names: Vec<String> = (0..256)
        .map(|i| format!("graph_node_kernel_{i:03}"))
        .collect();
    for (label, per_dispatch_intercept) in
        [("batched", false), ("one intercept per dispatch", true)]
    {
        let path = tmp(&format!("storm_{per_dispatch_intercept}.pftrace"));
        let mut sink = PerfettoSink::with_options(
            &path,
            PerfettoOptions {
                kernel_args: KernelArgs::Compact,
                clocks: Some(ClockReadings {
                    boottime_ns: BASE_NS,
                    monotonic_ns: BASE_NS,
                    realtime_ns: BASE_NS,
                }),
            },
        )
        .unwrap();
        sink.start(&run_info(), &agents()).unwrap();
        let mut corr = 1u64;
        let mut t = BASE_NS;
        for _launch in 0..200 {
            let dispatch = |i: usize, corr: u64, t: u64| DispatchRecord {
                correlation_id: (u64::from(PID) << 32) | corr,
                dispatch_id: corr,
                agent_index: 0,
                queue_id: 1,
                thread_id: PID,
                kernel_object: 0x7f00_0000_0000 + i as u64 * 0x40,
                grid: [64, 1, 1],
                workgroup: [64, 1, 1],
                private_segment_size: 0,
                group_segment_size: 0,
                enqueue_ns: t,
                start_ns: t + 2_000 + i as u64 * 1_200,
                end_ns: t + 2_000 + i as u64 * 1_200 + 900,
            };
            let intercept = |first: u64, n: u32, t: u64| InterceptRecord {
                thread_id: PID,
                queue_id: 1,
                agent_index: 0,
                begin_ns: t,
                end_ns: t + 1_000,
                first_correlation_id: (u64::from(PID) << 32) | first,
                dispatch_count: n,
                packet_count: n,
            };
            if !per_dispatch_intercept {
                sink.intercept(&intercept(corr, 256, t)).unwrap();
            }
            for (i, name) in names.iter().enumerate() {
                if per_dispatch_intercept {
                    sink.intercept(&intercept(corr, 1, t + i as u64 * 1_200))
                        .unwrap();
                }
                let info = KernelInfo {
                    kernel_id: i as u64 + 1,
                    display_name: name,
                    symbol_name: name,
                };
                sink.dispatch(&dispatch(i, corr, t), &info).unwrap();
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
        // Kernel slice BEGIN (~34 B) + END (18 B), plus 10 B per flow id on the
        // intercept and the intercept slices themselves; see docs/trace-format.md.
        let bound = if per_dispatch_intercept { 100.0 } else { 60.0 };
        assert!(
            per <= bound,
            "{label}: {per:.1} bytes per dispatch > {bound}"
        );
    }
}

/// Benchmark, not a timed test: prints the sink's throughput.
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
        (KernelArgs::Full, 1),
    ] {
        let path = tmp("bench.pftrace");
        let dispatches = 2_000_000u64;
        let started = std::time::Instant::now();
        let mut sink = PerfettoSink::with_options(
            &path,
            PerfettoOptions {
                kernel_args,
                clocks: None,
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
                };
                sink.dispatch(
                    &DispatchRecord {
                        correlation_id: (u64::from(PID) << 32) | n,
                        dispatch_id: n,
                        agent_index: (queue % 2) as u32,
                        queue_id: queue,
                        thread_id: PID,
                        kernel_object: 0x7f00_0000_0000 + k as u64 * 0x40,
                        grid: [65536, 1, 1],
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
        let bytes = std::fs::metadata(&path).unwrap().len();
        println!(
            "PerfettoSink {kernel_args:?}, batches of {batch}: {records} records in {secs:.3} s = {:.2} M records/s, {:.1} bytes/dispatch",
            records as f64 / secs / 1e6,
            bytes as f64 / dispatches as f64
        );
    }
}
