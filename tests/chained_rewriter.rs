//! rprof behind a second packet rewriter: `tests/programs/chain_tool.cpp`, an
//! HSA tool loaded after rprof whose interceptor runs first and hands its
//! rewritten packets to rprof's through its writer, as another profiler in
//! the same process would. Each case traces a program with the chain tool in
//! front of rprof, with and without serialization, and checks
//! * exact dispatch counts in CSV, JSON and Perfetto against what the
//!   program reports (`harness::outputs::check_outputs`),
//! * that every dispatch in the trace went through the chain tool (its
//!   `CHAIN kernels=` count),
//! * that every intercept marker the chain tool wrote landed on the kernel
//!   it marks (the chain tool checks each one and reports `misplaced=`),
//! * under serialization, that no two dispatches of an agent overlap.
//!
//! What the chain tool does depends on the runtime (`RPROF_TEST_ROCM`); it is
//! compiled inside the runtime's root and picks its mode from the headers:
//! * 6.1 and 6.4 (ROCr 6.1.2, 6.4.3): per kernel, two writer calls,
//!   `[intercept marker (0xFE), kernel, no-op barrier]` then `[no-op barrier,
//!   no-op barrier]`. The marker's callback gets the hardware packet id its
//!   kernel lands on; rprof's serialization barriers must go in front of the
//!   marker, and rprof must keep ROCr from deferring a write (a deferred
//!   second write aborts ROCr, a deferred marker gets a wrong id).
//! * 5.2 (ROCr 5.2.3): the most a rewriter can do there. 5.2.3's intercept
//!   queue lets an interceptor call its writer only once per call (a second
//!   call jumps through a null pointer inside ROCr) and has no intercept
//!   markers, so the chain tool writes `[kernel, no-op barrier, no-op
//!   barrier]` in one call: rprof gets multi-packet calls with a kernel and
//!   extra packets, on every queue, and must trace each kernel exactly once
//!   and serialize it. The tests assert `mode=single` and no marker checked
//!   there; everything else is asserted exactly as on 6.x. The HIP graph
//!   runs fewer launches there, too few to fill the ring (5.2.3 aborts or
//!   hangs when a rewriter's added packets fill it; see [`graph_launches`]).
//!
//! The raw-HSA `trace_app` runs with `HSA_TOOLS_LIB="<tool> <chain tool>"`
//! (`harness::trace_app`); the HIP graph program runs under the `rprof`
//! command with `HSA_TOOLS_LIB=<chain tool>`, which rprof puts behind its own
//! tool (`harness::hip`). Both outputs are checked by `harness::outputs`.

mod harness;

use std::collections::BTreeMap;

use harness::artefacts::{chain_tool, hip_program};
use harness::outputs::{
    check_outputs, read_json, single_report, summary, CsvDispatch, KernelLaunches, ProcessReport,
};
use harness::trace_app::{run_traced, Load};
use harness::{build, hip, Runtime};

/// What the chain tool reported at exit.
#[derive(Debug)]
struct ChainReport {
    mode: String,
    kernels: u64,
    markers_checked: u64,
    misplaced: u64,
}

/// The `CHAIN ...` line of a program's stdout.
fn chain_report(stdout: &str) -> ChainReport {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("CHAIN "))
        .unwrap_or_else(|| panic!("the chain tool printed no CHAIN line (not loaded?):\n{stdout}"));
    let fields: BTreeMap<&str, &str> = line
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .collect();
    let num = |k: &str| -> u64 {
        fields
            .get(k)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no number {k}= in CHAIN {line}"))
    };
    ChainReport {
        mode: fields.get("mode").copied().unwrap_or("").to_string(),
        kernels: num("kernels"),
        markers_checked: num("markers_checked"),
        misplaced: num("misplaced"),
    }
}

/// The chain tool passed exactly `dispatches` kernels to rprof, in the mode
/// the runtime allows, and every marker it checked was on its kernel.
fn assert_chain(chain: &ChainReport, dispatches: u64) {
    let (mode, markers) = match Runtime::selected() {
        Runtime::Rocm52 => ("single", 0),
        Runtime::Rocm61 | Runtime::Rocm64 | Runtime::Rocm70 => ("markers", dispatches),
    };
    assert_eq!(
        chain.mode,
        mode,
        "chain tool mode on {:?}",
        Runtime::selected()
    );
    assert_eq!(
        chain.kernels, dispatches,
        "kernels the chain tool rewrote vs dispatches in the trace"
    );
    assert_eq!(
        chain.misplaced, 0,
        "intercept markers not on their kernel: {chain:?}"
    );
    assert_eq!(chain.markers_checked, markers, "markers checked: {chain:?}");
}

/// Pairs of dispatches of one agent that overlap in time.
fn overlaps(rows: &[CsvDispatch]) -> usize {
    let mut per_agent: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    for r in rows {
        per_agent
            .entry(r.agent_id)
            .or_default()
            .push((r.start, r.end));
    }
    let mut n = 0;
    for spans in per_agent.values_mut() {
        spans.sort_unstable();
        let mut latest_end = 0;
        for &(s, e) in spans.iter() {
            if s < latest_end {
                n += 1;
            }
            latest_end = latest_end.max(e);
        }
    }
    n
}

/// 100 µs kernels, so that unserialized kernels of several queues would
/// overlap.
const LONG_KERNELS: (&str, &str) = ("RPROF_EMU_KERNEL_NS", "100000");

/// `trace_app` with the chain tool in front of rprof: the harness's checks of
/// all three outputs against the program's report; returns the CSV rows.
fn trace_app_chained(label: &str, args: &[&str], serialize: bool) -> Vec<CsvDispatch> {
    let a = build();
    let tools = format!("{} {}", a.tool.display(), chain_tool().display());
    let mut env = vec![("HSA_TOOLS_LIB", tools.as_str()), LONG_KERNELS];
    if serialize {
        env.push(("RPROF_SERIALIZE_KERNELS", "1"));
    }
    let run = run_traced(label, args, Load::ToolsLib, &env);
    assert_eq!(
        run.code,
        Some(0),
        "trace_app failed:\n{}\n{}",
        run.stdout,
        run.stderr
    );
    // trace_app's report: `LAUNCHED kernel=<name> count=<n> grid=<x>` (64
    // work-items per group, 1-D) and `TOTAL <n>`; its pid is the traced
    // process's, which the JSON records.
    let (launched, total) = run.launched();
    let json = read_json(&run.output("_results.json"));
    let pid = json["run"]["pid"].as_u64().expect("JSON run.pid") as u32;
    let mut kernels = BTreeMap::new();
    for line in run.stdout.lines().filter(|l| l.starts_with("LAUNCHED ")) {
        let field = |k: &str| {
            line.split(' ')
                .find_map(|kv| kv.strip_prefix(k))
                .unwrap_or_else(|| panic!("no {k} in {line:?}"))
        };
        let name = field("kernel=");
        let grid: u64 = field("grid=").parse().unwrap();
        if launched[name] > 0 {
            kernels.insert(
                name.to_string(),
                KernelLaunches {
                    count: launched[name],
                    grid: [grid, 1, 1],
                    workgroup: [64, 1, 1],
                    fixed_geometry: true,
                },
            );
        }
    }
    let report = ProcessReport {
        pid,
        rank: None,
        kernels,
        total,
    };
    let facts = check_outputs(&run.dir, "run", &report);
    assert_eq!(facts.runtime_kernels, 0, "raw HSA: no runtime kernels");
    assert_chain(&chain_report(&run.stdout), facts.rows.len() as u64);
    facts.rows
}

/// Four threads with a queue each, 50 kernels per thread, rewritten by the
/// chain tool: 200 dispatches.
#[test]
fn trace_app_threads_behind_a_rewriter() {
    let rows = trace_app_chained("chain-threads", &["threads", "4", "50"], false);
    assert_eq!(rows.len(), 200);
}

/// The same under serialization: rprof's barriers go in front of the chain
/// tool's markers (on 6.x) and no two kernels overlap.
#[test]
fn trace_app_threads_behind_a_rewriter_serialized() {
    let rows = trace_app_chained("chain-threads-serialized", &["threads", "4", "50"], true);
    assert_eq!(rows.len(), 200);
    assert_eq!(
        overlaps(&rows),
        0,
        "overlapping dispatches under serialization"
    );
}

/// Cross-queue dependencies enqueued backwards, serialized behind the
/// rewriter: no deadlock, 40 dispatches, no overlap.
#[test]
fn trace_app_crossdep_behind_a_rewriter_serialized() {
    let rows = trace_app_chained("chain-crossdep-serialized", &["crossdep", "20"], true);
    assert_eq!(rows.len(), 40);
    assert_eq!(
        overlaps(&rows),
        0,
        "overlapping dispatches under serialization"
    );
}

/// `hip-tests/graph_storm 64 I` (64 kernels captured into a graph, launched
/// I times: 64 x I program dispatches plus HIP's own blits) under the `rprof`
/// command with the chain tool behind rprof's tool.
///
/// On 6.1 and 6.4, I = 80: enough launches that, with the chain tool's five
/// ring slots per kernel, the hardware ring fills. Unless rprof waits for
/// room before each write (`Session::make_room`), ROCr 6.1.2 and 6.4.3 defer
/// a write and abort at the chain tool's second writer call (`Assertion
/// queue->overflow_.empty()`; measured with the wait disabled: 64 x 80
/// aborts on both, 64 x 20 does not fill the ring).
///
/// On 5.2, I = 2 (128 kernels: with the chain tool's two barriers, rprof's
/// forwarding barrier and, serialized, its two gate barriers, at most 774
/// hidden-ring slots even if nothing completed). ROCr 5.2.3 has no
/// intercept markers, so rprof cannot learn the hardware ring there; its
/// guard (`QueueContext::with_ring`) keeps only the slots of rprof's own
/// traced packets below three quarters of the ring, and the two barriers the
/// chain tool adds per kernel are not counted. When the device lags, the
/// hidden ring fills and ROCr 5.2.3 aborts or hangs: measured, 64 x 80
/// aborted plain and serialized (`intercept_queue.cpp:149 ...
/// overflow_.empty()`), and 64 x 20 serialized hung once on the loaded
/// machine after passing twice. A known limit (reported), not what this
/// case tests; 64 x 2 cannot reach it.
fn graph_launches() -> u64 {
    match Runtime::selected() {
        Runtime::Rocm52 => 2,
        Runtime::Rocm61 | Runtime::Rocm64 | Runtime::Rocm70 => 80,
    }
}

fn graph_storm_chained(label: &str, serialize: bool) -> Vec<CsvDispatch> {
    let program = hip_program("graph_storm");
    let chain = chain_tool().to_str().expect("UTF-8 path").to_string();
    let mut extra = vec!["-o", label];
    if serialize {
        extra.push("--serialize-kernels");
    }
    let launches = graph_launches();
    let launches_arg = launches.to_string();
    let run = hip::run_traced(
        label,
        &extra,
        &program,
        &["64", &launches_arg],
        &[("HSA_TOOLS_LIB", chain.as_str()), LONG_KERNELS],
    );
    run.assert_success();
    let report = single_report(&run);
    let facts = check_outputs(&run.dir, label, &report);
    assert_eq!(facts.program_dispatches(), 64 * launches);
    assert_eq!(facts.program_kernel_names(), 64, "one name per graph node");
    assert_chain(&chain_report(&run.stdout), facts.rows.len() as u64);
    summary(label, &run, &facts);
    facts.rows
}

#[test]
fn hip_graph_behind_a_rewriter() {
    graph_storm_chained("chain-graph_storm", false);
}

#[test]
fn hip_graph_behind_a_rewriter_serialized() {
    let rows = graph_storm_chained("chain-graph_storm-serialized", true);
    assert_eq!(
        overlaps(&rows),
        0,
        "overlapping dispatches under serialization"
    );
}
