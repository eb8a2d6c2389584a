//! Kernel dispatch tracing end to end: raw-HSA programs on the real ROCr over
//! the emulated GPU, with `librprof_tool.so` loaded, checked against what the
//! programs say they launched.

mod harness;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::process::Command;
use std::time::Duration;

use harness::matrix::{FORMATS, TRACE_CONFIGS};
use harness::outputs::{
    check_pftrace, check_rocpd_against_csv, compiler_resources, output_files, read_csv, read_json,
    read_rocpd, CsvDispatch as Row,
};
use harness::run::number_after;
use harness::trace_app::{rprof_traced, run_rprof, run_rprof_into, run_traced, Load};
use harness::{build, run_dir, Run};

/// Grid size the program uses for each kernel.
fn grid_of(name: &str) -> u64 {
    match name {
        "alpha" => 64,
        "beta_kernel" => 128,
        "gamma_with_a_longer_name" => 192,
        other => panic!("unexpected kernel {other:?}"),
    }
}

/// Everything that must hold for a complete trace of `run`: exact counts per
/// kernel, unique ids, dispatch ids 1..=n, start <= end, geometry, and the
/// JSON metadata. Returns the rows.
fn assert_complete_trace(run: &Run) -> Vec<Row> {
    assert_eq!(
        run.code,
        Some(0),
        "program failed:\n{}\n{}",
        run.stdout,
        run.stderr
    );
    let (launched, total) = run.launched();
    let rows = read_csv(&run.output("_kernel_trace.csv"));
    assert_eq!(rows.len() as u64, total, "stderr:\n{}", run.stderr);
    let mut per_kernel: BTreeMap<String, u64> = BTreeMap::new();
    for r in &rows {
        *per_kernel.entry(r.kernel_name.clone()).or_default() += 1;
    }
    let launched: BTreeMap<String, u64> = launched.into_iter().filter(|(_, n)| *n > 0).collect();
    assert_eq!(per_kernel, launched);
    let correlation: HashSet<u64> = rows.iter().map(|r| r.correlation_id).collect();
    assert_eq!(
        correlation.len(),
        rows.len(),
        "correlation ids must be unique"
    );
    let dispatch: BTreeSet<u64> = rows.iter().map(|r| r.dispatch_id).collect();
    assert_eq!(
        dispatch,
        (1..=total).collect::<BTreeSet<u64>>(),
        "dispatch ids are 1..=n"
    );
    let pid = {
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(run.output("_results.json")).unwrap()).unwrap();
        let meta = &json["metadata"];
        assert_eq!(meta["dispatches"].as_u64(), Some(total));
        assert_eq!(meta["records_lost"].as_u64(), Some(0));
        assert_eq!(
            json["kernel_dispatches"].as_array().map(Vec::len),
            Some(total as usize)
        );
        assert_eq!(json["agents"][0]["name"].as_str(), Some("gfx90a"));
        json["run"]["pid"].as_u64().unwrap()
    };
    let mut ids_per_name: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
    for r in &rows {
        assert!(r.start <= r.end, "start after end: {r:?}");
        assert!(r.start > 0);
        assert_eq!(
            r.correlation_id >> 32,
            pid,
            "correlation id carries the pid: {r:?}"
        );
        assert_eq!(r.correlation_id & 0xffff_ffff, r.dispatch_id);
        assert_eq!(r.grid[0], grid_of(&r.kernel_name));
        assert_eq!(r.workgroup[0], 64);
        assert_eq!(r.agent_id, 0);
        ids_per_name
            .entry(&r.kernel_name)
            .or_default()
            .insert(r.kernel_id);
    }
    let all_ids: BTreeSet<u64> = ids_per_name.values().flatten().copied().collect();
    for ids in ids_per_name.values() {
        assert_eq!(
            ids.len(),
            1,
            "one kernel id per kernel name: {ids_per_name:?}"
        );
    }
    assert_eq!(
        all_ids.len(),
        ids_per_name.len(),
        "distinct kernels have distinct ids"
    );
    rows
}

#[test]
fn threads_with_their_own_queues() {
    let run = run_traced("threads", &["threads", "4", "150"], Load::ToolsLib, &[]);
    let rows = assert_complete_trace(&run);
    assert_eq!(rows.len(), 600);
    let queues: BTreeSet<u64> = rows.iter().map(|r| r.queue_id).collect();
    let threads: BTreeSet<u64> = rows.iter().map(|r| r.thread_id).collect();
    assert_eq!(queues.len(), 4, "one queue per thread");
    assert_eq!(threads.len(), 4, "four enqueuing threads");
    // Each thread used exactly one queue.
    let pairs: BTreeSet<(u64, u64)> = rows.iter().map(|r| (r.thread_id, r.queue_id)).collect();
    assert_eq!(pairs.len(), 4);
    // Kernels of one queue: dispatch ids in enqueue order, times in order
    // (the queue runs in order on the emulated GPU).
    for q in &queues {
        let mut on_q: Vec<&Row> = rows.iter().filter(|r| r.queue_id == *q).collect();
        on_q.sort_by_key(|r| r.dispatch_id);
        for w in on_q.windows(2) {
            assert!(
                w[0].start <= w[1].start,
                "queue {q} out of order: {:?} then {:?}",
                w[0],
                w[1]
            );
        }
    }
    let checked = check_pftrace(&run.output(".pftrace")).report;
    assert!(checked.contains("0 errors"), "{checked}");
}

#[test]
fn threads_sharing_one_queue() {
    let run = run_traced("shared", &["shared", "3", "120"], Load::ToolsLib, &[]);
    let rows = assert_complete_trace(&run);
    assert_eq!(rows.len(), 360);
    let queues: BTreeSet<u64> = rows.iter().map(|r| r.queue_id).collect();
    let threads: BTreeSet<u64> = rows.iter().map(|r| r.thread_id).collect();
    assert_eq!(queues.len(), 1);
    assert_eq!(threads.len(), 3);
    check_pftrace(&run.output(".pftrace"));
}

/// Creating a queue while the session still starts does not wait for it:
/// the queue's interceptor waits at its first packets instead, and the
/// trace still holds every dispatch. (HIP creates its first queue right
/// after `hsa_init` and launches 0.1 s or more later; the wait at creation
/// was 0.5-1.4 ms of every traced HIP app's start-up.)
#[test]
fn creating_a_queue_does_not_wait_for_the_sessions_start() {
    let run = run_traced(
        "slow-start",
        &["queue_first", "2", "60"],
        Load::ToolsLib,
        &[("RPROF_START_DELAY_MS", "3000")],
    );
    let rows = assert_complete_trace(&run);
    assert_eq!(rows.len(), 120);
    let create_us = number_after(&run.stdout, "QUEUE_CREATE_US ")
        .unwrap_or_else(|| panic!("no QUEUE_CREATE_US in\n{}", run.stdout));
    assert!(
        create_us < 1_500_000,
        "creating two queues took {create_us} µs: it waited for the 3 s start"
    );
    assert!(
        run.elapsed >= Duration::from_secs(3),
        "the start was not delayed: {:?}",
        run.elapsed
    );
}

#[test]
fn a_tiny_signal_pool_applies_back_pressure_without_losing_dispatches() {
    let run = run_traced(
        "tiny-pool",
        &["threads", "3", "100"],
        Load::ToolsLib,
        &[("RPROF_SIGNAL_POOL_SIZE", "2")],
    );
    let rows = assert_complete_trace(&run);
    assert_eq!(rows.len(), 300);
}

#[test]
fn exit_without_shutdown_records_every_dispatch() {
    let run = run_traced("exit", &["exit", "400"], Load::ToolsLib, &[]);
    let rows = assert_complete_trace(&run);
    assert_eq!(rows.len(), 400);
    check_pftrace(&run.output(".pftrace"));
}

#[test]
fn quick_exit_without_shutdown_records_every_dispatch() {
    let run = run_traced("quick-exit", &["exit", "300", "quick"], Load::ToolsLib, &[]);
    let rows = assert_complete_trace(&run);
    assert_eq!(rows.len(), 300);
}

#[test]
fn exit_with_far_more_dispatches_than_the_ring_holds() {
    // 3000 dispatches into a 256-packet queue without waiting: the runtime's
    // hidden ring must never overflow twice (ROCr 5.2.3 aborts), and every
    // dispatch is still recorded at exit.
    let run = run_traced("exit-many", &["exit", "3000"], Load::ToolsLib, &[]);
    let rows = assert_complete_trace(&run);
    assert_eq!(rows.len(), 3000);
}

#[test]
fn ld_preload_alone_loads_the_tool() {
    let run = run_traced("preload", &["threads", "2", "30"], Load::Preload, &[]);
    let rows = assert_complete_trace(&run);
    assert_eq!(rows.len(), 60);
}

#[test]
fn ld_preload_and_hsa_tools_lib_together_trace_once() {
    let a = build();
    let tool = a.tool.to_str().unwrap();
    let run = run_traced(
        "preload-and-tools-lib",
        &["threads", "2", "30"],
        Load::Preload,
        &[("HSA_TOOLS_LIB", tool)],
    );
    let rows = assert_complete_trace(&run);
    assert_eq!(rows.len(), 60);
}

#[test]
fn include_and_exclude_filters_apply_to_the_trace() {
    let run = run_traced(
        "filters",
        &["threads", "2", "60"],
        Load::ToolsLib,
        &[
            ("RPROF_KERNEL_INCLUDE_REGEX", "a"),
            ("RPROF_KERNEL_EXCLUDE_REGEX", "^gamma"),
        ],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let (launched, _) = run.launched();
    let rows = read_csv(&run.output("_kernel_trace.csv"));
    let names: BTreeSet<&str> = rows.iter().map(|r| r.kernel_name.as_str()).collect();
    assert_eq!(names, BTreeSet::from(["alpha", "beta_kernel"]));
    assert_eq!(
        rows.len() as u64,
        launched["alpha"] + launched["beta_kernel"]
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.output("_results.json")).unwrap()).unwrap();
    assert_eq!(
        json["metadata"]["filtered_out"].as_u64(),
        Some(launched["gamma_with_a_longer_name"])
    );
}

#[test]
fn bad_configuration_runs_the_app_untraced() {
    let run = run_traced(
        "bad-config",
        &["threads", "2", "30"],
        Load::ToolsLib,
        &[("RPROF_KERNEL_INCLUDE_REGEX", "(unclosed")],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.launched().1, 60);
    assert!(
        run.stderr.contains("RPROF_KERNEL_INCLUDE_REGEX"),
        "stderr: {}",
        run.stderr
    );
    assert_eq!(
        run.stderr.matches("rprof:").count(),
        1,
        "one clear message: {}",
        run.stderr
    );
    assert!(!run.output("_kernel_trace.csv").exists());
}

#[test]
fn tracing_off_leaves_the_app_alone() {
    let run = run_traced(
        "off",
        &["threads", "2", "30"],
        Load::ToolsLib,
        &[("RPROF_KERNEL_TRACE", "0")],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.launched().1, 60);
    assert!(!run.output("_kernel_trace.csv").exists());
    assert!(!run.stderr.contains("rprof"), "{}", run.stderr);
}

#[test]
fn the_tool_library_never_links_the_hsa_runtime() {
    let a = build();
    let out = Command::new("readelf")
        .arg("-d")
        .arg(&a.tool)
        .output()
        .expect("readelf");
    assert!(out.status.success());
    let dynamic = String::from_utf8_lossy(&out.stdout);
    let needed: Vec<&str> = dynamic.lines().filter(|l| l.contains("(NEEDED)")).collect();
    assert!(
        !needed.is_empty(),
        "readelf found no NEEDED entries:\n{dynamic}"
    );
    for l in &needed {
        assert!(
            !l.contains("libhsa-runtime64") && !l.contains("libhsakmt"),
            "unexpected dependency: {l}"
        );
    }
    let syms = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&a.tool)
        .output()
        .expect("nm");
    let syms = String::from_utf8_lossy(&syms.stdout);
    assert!(
        syms.lines().any(|l| l.ends_with(" T OnLoad")),
        "OnLoad not exported"
    );
    assert!(
        syms.lines().any(|l| l.ends_with(" T OnUnload")),
        "OnUnload not exported"
    );
}

/// Number of pairs of kernel intervals that overlap (strictly) on agent 0.
fn overlaps(rows: &[Row]) -> usize {
    let mut spans: Vec<(u64, u64)> = rows.iter().map(|r| (r.start, r.end)).collect();
    spans.sort_unstable();
    let mut n = 0;
    let mut latest_end = 0;
    for (s, e) in spans {
        if s < latest_end {
            n += 1;
        }
        latest_end = latest_end.max(e);
    }
    n
}

/// 100 µs kernels, so that unserialized kernels of several queues overlap.
const LONG_KERNELS: (&str, &str) = ("RPROF_EMU_KERNEL_NS", "100000");

/// `trace_app args` traced with `--serialize-kernels` (plus `env`): a
/// complete trace of exactly `dispatches` kernels, no two overlapping.
/// Returns the run.
fn assert_serialized(label: &str, args: &[&str], env: &[(&str, &str)], dispatches: usize) -> Run {
    let mut env = env.to_vec();
    env.push(("RPROF_SERIALIZE_KERNELS", "1"));
    let run = run_traced(label, args, Load::ToolsLib, &env);
    let rows = assert_complete_trace(&run);
    assert_eq!(rows.len(), dispatches, "{label}");
    assert_eq!(overlaps(&rows), 0, "{label}");
    run
}

#[test]
fn serialize_kernels_never_overlap_across_threads_and_queues() {
    let run = assert_serialized(
        "serialize-threads",
        &["threads", "4", "60"],
        &[LONG_KERNELS],
        240,
    );
    check_pftrace(&run.output(".pftrace"));
}

#[test]
fn without_serialization_kernels_run_concurrently() {
    let run = run_traced(
        "concurrent-threads",
        &["threads", "4", "60"],
        Load::ToolsLib,
        &[LONG_KERNELS],
    );
    let rows = assert_complete_trace(&run);
    assert!(
        overlaps(&rows) > 0,
        "expected overlapping kernels without --serialize-kernels"
    );
}

#[test]
fn serialize_kernels_shared_queue() {
    assert_serialized(
        "serialize-shared",
        &["shared", "3", "50"],
        &[LONG_KERNELS],
        150,
    );
}

#[test]
fn serialize_kernels_with_backwards_cross_queue_dependencies_does_not_deadlock() {
    // About deadlock: each round's two kernels depend on each other, so
    // they cannot overlap whatever the serializer does.
    assert_serialized("serialize-crossdep", &["crossdep", "40"], &[], 80);
}

#[test]
fn serialize_kernels_queue_destroyed_with_work_pending() {
    // Long kernels: on one queue only the ready barriers keep them apart
    // (the emulated CP runs a queue's dispatches together otherwise), so a
    // ready barrier without its barrier bit shows as overlaps here.
    assert_serialized(
        "serialize-destroy",
        &["destroy", "200"],
        &[LONG_KERNELS],
        200,
    );
}

#[test]
fn serialize_kernels_exit_mid_run() {
    assert_serialized("serialize-exit", &["exit", "500"], &[LONG_KERNELS], 500);
}

#[test]
fn host_forwarding_completes_app_signals() {
    for (label, args) in [
        ("host-forward-threads", &["threads", "3", "60"][..]),
        ("host-forward-latency", &["latency", "100"][..]),
        ("host-forward-pairs", &["pairs", "100"][..]),
    ] {
        let run = run_traced(
            label,
            args,
            Load::ToolsLib,
            &[("RPROF_FORWARD_APP_SIGNAL", "host")],
        );
        let rows = assert_complete_trace(&run);
        assert_eq!(rows.len() as u64, run.launched().1, "{label}");
    }
}

/// Every workload shape under every tool configuration of the matrix
/// (serialization off and on, app completion signals forwarded by barrier
/// packet and by the host): a complete trace with the exact count, a valid
/// Perfetto trace, and no overlap when serialized.
#[test]
fn every_trace_configuration_traces_every_workload_shape_completely() {
    for config in TRACE_CONFIGS {
        for (shape, args, dispatches) in [
            ("threads", &["threads", "3", "40"][..], 120),
            ("shared", &["shared", "2", "40"][..], 80),
            ("pairs", &["pairs", "50"][..], 100),
        ] {
            let label = format!("matrix-{}-{shape}", config.name);
            let mut env = config.env.to_vec();
            env.push(LONG_KERNELS);
            let run = run_traced(&label, args, Load::ToolsLib, &env);
            let rows = assert_complete_trace(&run);
            assert_eq!(rows.len(), dispatches, "{label}");
            if config.serialized {
                assert_eq!(overlaps(&rows), 0, "{label}: serialized kernels overlap");
            }
            let checked = check_pftrace(&run.output(".pftrace"));
            assert_eq!(checked.kernel_slice_total, dispatches as u64, "{label}");
        }
    }
}

/// Each output format alone writes exactly its one file, and that file holds
/// every dispatch.
#[test]
fn each_output_format_alone_writes_exactly_its_file_and_every_dispatch() {
    for (format, suffix) in FORMATS {
        let label = format!("format-{format}");
        let run = run_traced(
            &label,
            &["threads", "2", "30"],
            Load::ToolsLib,
            &[("RPROF_OUTPUT_FORMAT", format)],
        );
        assert_eq!(run.code, Some(0), "{label}: {}", run.stderr);
        assert_eq!(run.launched().1, 60, "{label}");
        assert_eq!(
            output_files(&run.dir),
            vec![format!("run{suffix}")],
            "{label}: {}",
            run.stderr
        );
        let path = run.output(suffix);
        let dispatches = match format {
            "csv" => read_csv(&path).len() as u64,
            "json" => {
                let json = read_json(&path);
                assert_eq!(
                    json["metadata"]["records_lost"].as_u64(),
                    Some(0),
                    "{label}"
                );
                let listed = json["kernel_dispatches"].as_array().map_or(0, Vec::len);
                assert_eq!(json["metadata"]["dispatches"].as_u64(), Some(listed as u64));
                listed as u64
            }
            "pftrace" => check_pftrace(&path).kernel_slice_total,
            "rocpd" => {
                let f = read_rocpd(&path);
                assert_eq!(f.dispatch_rows, f.kernels, "{label}");
                assert_eq!(f.top_kernels.values().sum::<u64>(), f.kernels, "{label}");
                f.kernels
            }
            other => panic!("no check for the format {other}"),
        };
        assert_eq!(dispatches, 60, "{label}");
    }
}

#[test]
fn barrier_forwarding_keeps_a_signalled_kernel_from_overlapping_the_next_packet() {
    let run = run_traced(
        "barrier-pairs",
        &["pairs", "100"],
        Load::ToolsLib,
        &[LONG_KERNELS],
    );
    let rows = assert_complete_trace(&run);
    assert_eq!(rows.len(), 200);
    // Pairs (signalled kernel, then another) never overlap each other; a pair's
    // second kernel may overlap the next pair's first.
    let mut by_id: Vec<&Row> = rows.iter().collect();
    by_id.sort_by_key(|r| r.dispatch_id);
    for pair in by_id.chunks(2) {
        assert!(
            pair[0].end <= pair[1].start,
            "signalled kernel overlapped the next one: {pair:?}"
        );
    }
}

#[test]
fn through_the_rprof_command() {
    let run = run_rprof("rprof-cli", &[], &["threads", "3", "40"]);
    let rows = assert_complete_trace(&run);
    assert_eq!(rows.len(), 120);
    check_pftrace(&run.output(".pftrace"));
    // The app's exit status comes back through rprof.
    let failing = run_rprof("rprof-cli-exit", &[], &["no-such-mode"]);
    assert_eq!(failing.code, Some(1), "{}", failing.stderr);
    let serialized = run_rprof(
        "rprof-cli-serialize",
        &["--serialize-kernels"],
        &["threads", "3", "40"],
    );
    let rows = assert_complete_trace(&serialized);
    assert_eq!(overlaps(&rows), 0);
}

/// Slices counted by name over the whole trace (trace_processor's `select
/// count(*) from slice where name = K`) are exactly K's dispatches, with and
/// without --truncate-kernels; rocpd's views agree with the CSV.
#[test]
fn counts_by_kernel_name_are_the_dispatches_in_every_output() {
    use harness::trace_app::run_rprof_raw;
    let formats = [
        "--kernel-trace",
        "--output-format",
        "csv,json,pftrace,rocpd",
    ];
    for (label, truncate) in [("names-plain", false), ("names-truncated", true)] {
        let mut extra = formats.to_vec();
        if truncate {
            extra.push("--truncate-kernels");
        }
        let run = run_rprof_raw(label, &extra, &["threads", "3", "25"]);
        let rows = assert_complete_trace(&run);
        assert_eq!(rows.len(), 75, "{label}");
        let mut per_name: BTreeMap<String, u64> = BTreeMap::new();
        for r in &rows {
            *per_name.entry(r.kernel_name.clone()).or_default() += 1;
        }
        assert_eq!(per_name.len(), 3, "{label}: {per_name:?}");
        let p = check_pftrace(&run.output(".pftrace"));
        for (name, n) in &per_name {
            assert_eq!(
                p.slices_by_name.get(name),
                Some(n),
                "{label}: slices named {name:?} on every track"
            );
        }
        assert_eq!(p.slices_by_name.get("kernel symbol"), Some(&3), "{label}");
        let json = read_json(&run.output("_results.json"));
        let mut json_names: BTreeMap<String, u64> = BTreeMap::new();
        for d in json["kernel_dispatches"].as_array().unwrap() {
            *json_names
                .entry(d["kernel_name"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
        assert_eq!(json_names, per_name, "{label}: JSON");
        check_rocpd_against_csv(&run.output("_results.db"), &rows);
    }
}

/// The CSV's register counts are what the compiler reports for each kernel
/// (clang's kernel-resource-usage remarks for trace_kernels.cl, compiled by
/// the runtime's own clang), and the JSON and the rocpd database carry the
/// same.
#[test]
fn register_counts_are_what_the_compiler_reports() {
    let run = harness::trace_app::run_rprof_raw(
        "registers",
        &["--kernel-trace", "--output-format", "csv,json,rocpd"],
        &["threads", "1", "9"],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let rows = read_csv(&run.output("_kernel_trace.csv"));
    assert_eq!(rows.len(), 9);
    let src = harness::artefacts::programs_dir().join("trace_kernels.cl");
    let compiler = compiler_resources(&src, "gfx90a");
    assert_eq!(
        compiler.keys().collect::<Vec<_>>(),
        ["alpha", "beta_kernel", "gamma_with_a_longer_name"]
    );
    let mut seen = BTreeSet::new();
    for r in &rows {
        let c = &compiler[&r.kernel_name];
        assert_eq!(
            (r.sgpr_count, r.vgpr_count, r.accum_vgpr_count),
            (c.sgprs, c.vgprs, c.agprs),
            "SGPR/VGPR/AGPR of {} (CSV vs clang)",
            r.kernel_name
        );
        assert_eq!(r.private_segment_size, c.scratch, "{}", r.kernel_name);
        seen.insert(r.kernel_name.clone());
    }
    assert_eq!(seen.len(), 3);
    // The kernels differ: the test would notice counts given to the wrong kernel.
    assert_ne!(compiler["alpha"], compiler["gamma_with_a_longer_name"]);
    let json = read_json(&run.output("_results.json"));
    for d in json["kernel_dispatches"].as_array().unwrap() {
        let c = &compiler[d["kernel_name"].as_str().unwrap()];
        assert_eq!(d["sgpr_count"].as_u64(), Some(c.sgprs), "{d}");
        assert_eq!(d["arch_vgpr_count"].as_u64(), Some(c.vgprs), "{d}");
        assert_eq!(d["accum_vgpr_count"].as_u64(), Some(c.agprs), "{d}");
        assert_eq!(d["stream_id"].as_u64(), Some(0), "{d}");
    }
    let db = check_rocpd_against_csv(&run.output("_results.db"), &rows);
    for (name, c) in &compiler {
        assert_eq!(
            db.registers[name],
            BTreeSet::from([(
                Some(c.sgprs as i64),
                Some(c.vgprs as i64),
                Some(c.agprs as i64)
            )]),
            "{name} in the database"
        );
    }
}

/// A run killed with SIGKILL leaves a database that opens and holds what
/// the sink committed (it commits once a second): at least one whole
/// kernel row, every row whole.
#[test]
fn a_killed_run_leaves_a_readable_database() {
    use harness::trace_app::trace_app_command;
    let (mut cmd, dir) = trace_app_command(
        "rocpd-killed",
        &["threads", "1", "100000000"],
        &[("RPROF_OUTPUT_FORMAT", "rocpd")],
    );
    let db = dir.join("run_results.db");
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start trace_app");
    let start = std::time::Instant::now();
    // Wait for a committed kernel row (read as another process would).
    let committed = loop {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(120),
            "no kernel committed within 120 s"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the workload ended before it was killed"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
        if !db.exists() {
            continue;
        }
        let Ok(c) =
            rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        else {
            continue;
        };
        let n: rusqlite::Result<i64> =
            c.query_row("select count(*) from rocpd_kernel_dispatch", [], |r| {
                r.get(0)
            });
        if let Ok(n) = n {
            if n > 0 {
                break n;
            }
        }
    };
    // Let the writer run on into its next open transaction, then kill.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    child.kill().expect("SIGKILL");
    let status = child.wait().unwrap();
    assert!(!status.success());
    let f = read_rocpd(&db);
    assert!(f.kernels > 0, "no kernels in the killed run's database");
    assert!(
        f.kernels as i64 >= committed,
        "{} kernels after the kill, {committed} were committed before",
        f.kernels
    );
    assert_eq!(f.dispatch_rows, f.kernels);
    assert_eq!(f.top_kernels.values().sum::<u64>(), f.kernels);
    for name in f.top_kernels.keys() {
        assert!(
            ["alpha", "beta_kernel", "gamma_with_a_longer_name"].contains(&name.as_str()),
            "{name}"
        );
    }
    // The run ended without a process end time (never finished).
    let c = rusqlite::Connection::open(&db).unwrap();
    let end: Option<i64> = c
        .query_row("select \"end\" from rocpd_info_process", [], |r| r.get(0))
        .unwrap();
    assert_eq!(end, None);
}

/// Options rprof does not know, before the application, are usage errors
/// naming them (rocprofv3's unimplemented ones said so); no trace option
/// says nothing is recorded; --sys-trace traces kernels.
#[test]
fn the_command_line_names_what_it_does_not_do() {
    use harness::trace_app::run_rprof_raw;
    let unknown = run_rprof_raw(
        "cli-unknown",
        &["--bogus-option", "--kernel-trace"],
        &["threads", "1", "2"],
    );
    assert_eq!(unknown.code, Some(2), "{}", unknown.stderr);
    assert!(
        unknown.stderr.contains("unknown option --bogus-option"),
        "{}",
        unknown.stderr
    );
    assert!(!unknown.stderr.contains("cannot run"), "{}", unknown.stderr);
    assert_eq!(output_files(&unknown.dir), Vec::<String>::new());
    // (Options rocprofv3 has that no rprof branch is adding: --memory-copy-trace
    // and --marker-trace are being implemented and would pass.)
    for opt in ["--hsa-trace", "--hip-trace", "--pmc"] {
        let r = run_rprof_raw(
            "cli-rocprofv3",
            &[opt, "--kernel-trace"],
            &["threads", "1", "2"],
        );
        assert_eq!(r.code, Some(2), "{opt}: {}", r.stderr);
        assert!(
            r.stderr.contains(&format!(
                "{opt} is a rocprofv3 option rprof does not implement"
            )),
            "{opt}: {}",
            r.stderr
        );
    }
    let untraced = run_rprof_raw("cli-untraced", &[], &["threads", "1", "2"]);
    assert_eq!(untraced.code, Some(0), "{}", untraced.stderr);
    assert!(
        untraced.stderr.contains("no trace option given")
            && untraced.stderr.contains("nothing is recorded"),
        "{}",
        untraced.stderr
    );
    assert_eq!(output_files(&untraced.dir), Vec::<String>::new());
    let sys = run_rprof_raw(
        "cli-sys-trace",
        &["--sys-trace", "--output-format", "csv,json,pftrace"],
        &["threads", "2", "7"],
    );
    assert_eq!(assert_complete_trace(&sys).len(), 14);
}

/// A second run under a name an earlier run took is refused (outputs are
/// never overwritten), the earlier run's files stay as they were, and the
/// command reports none of them as this run's: neither "wrote" nor
/// "incomplete" (it did both before).
#[test]
fn a_taken_output_name_leaves_the_earlier_files_alone_and_unreported() {
    let first = run_rprof("rprof-cli-taken", &[], &["threads", "2", "10"]);
    assert_eq!(assert_complete_trace(&first).len(), 20);
    let csv = first.output("_kernel_trace.csv");
    let before = std::fs::read(&csv).unwrap();
    let second = run_rprof_into("rprof-cli-taken", &[], &["threads", "3", "10"]);
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    assert!(
        second.stderr.contains("already exists"),
        "{}",
        second.stderr
    );
    for word in ["rprof: wrote", "is incomplete"] {
        assert!(
            !second.stderr.contains(word),
            "the earlier run's files reported as this run's:\n{}",
            second.stderr
        );
    }
    assert!(
        second.stderr.contains("belong to an earlier run"),
        "{}",
        second.stderr
    );
    assert_eq!(std::fs::read(&csv).unwrap(), before);
}

/// The JSON output parsed, with its dispatch count checked against the CSV
/// rows and the Perfetto trace validated: a whole trace, not a torn one.
/// The `rprof` command said `wrote` for each of the run's three outputs.
fn assert_all_reported_written(run: &Run) {
    let written = run.reported_written();
    for suffix in [".pftrace", "_kernel_trace.csv", "_results.json"] {
        let p = run.output(suffix).display().to_string();
        assert!(
            written.contains(&p),
            "{p} not reported written; stderr:\n{}",
            run.stderr
        );
    }
}

fn assert_whole_outputs(run: &Run) -> (Vec<Row>, serde_json::Value) {
    let rows = read_csv(&run.output("_kernel_trace.csv"));
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.output("_results.json")).unwrap())
            .unwrap_or_else(|e| {
                panic!(
                    "_results.json is not valid JSON ({e}); stderr:\n{}",
                    run.stderr
                )
            });
    assert_eq!(
        json["metadata"]["dispatches"].as_u64(),
        Some(rows.len() as u64)
    );
    assert_eq!(
        json["kernel_dispatches"].as_array().map(Vec::len),
        Some(rows.len())
    );
    let ids: HashSet<u64> = rows.iter().map(|r| r.correlation_id).collect();
    assert_eq!(ids.len(), rows.len(), "correlation ids must be unique");
    check_pftrace(&run.output(".pftrace"));
    (rows, json)
}

#[test]
fn exit_while_other_threads_keep_launching_flushes_a_whole_trace() {
    // Issue 12: main calls exit(0) while 3 threads keep launching kernels on
    // their own queues. It used to stall 10 s and abort in ROCr 5.2.3's
    // intercept queue (hidden ring overflow), leaving torn outputs that
    // rprof reported as written.
    let run = run_rprof("exit-busy", &[], &["exit_busy", "3", "200"]);
    assert_eq!(run.code, Some(0), "stderr:\n{}", run.stderr);
    assert!(
        run.elapsed < std::time::Duration::from_secs(5),
        "took {:?}; stderr:\n{}",
        run.elapsed,
        run.stderr
    );
    let launched: u64 = run
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("AT_EXIT_LAUNCHED "))
        .unwrap_or_else(|| panic!("no AT_EXIT_LAUNCHED in:\n{}", run.stdout))
        .trim()
        .parse()
        .unwrap();
    let (rows, json) = assert_whole_outputs(&run);
    // Everything written before the flush began is traced.
    assert!(
        rows.len() as u64 >= launched,
        "{} rows, {launched} launched before exit",
        rows.len()
    );
    assert_eq!(json["metadata"]["records_lost"].as_u64(), Some(0));
    assert_all_reported_written(&run);
    assert!(!run.stderr.contains("incomplete"), "{}", run.stderr);
}

#[test]
fn a_queue_gated_on_a_later_host_signal_costs_one_stall_not_one_per_launch() {
    // 100 kernels with app signals behind a barrier on a host signal that
    // the thread opens after launching them: 96 fit under the ring guard
    // (kernel + forwarding barrier each, 3/4 of 256 slots); the 97th waits
    // once (1 s without progress), the last 3 pass through untraced at once.
    let run = run_traced("gated", &["gated", "100"], Load::ToolsLib, &[]);
    assert_eq!(run.code, Some(0), "stderr:\n{}", run.stderr);
    let secs: f64 = run
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("GATED_SECONDS "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(secs < 3.0, "the gated launches took {secs} s");
    let (rows, json) = assert_whole_outputs(&run);
    let lost = json["metadata"]["records_lost"].as_u64().unwrap();
    assert_eq!(rows.len(), 96);
    assert_eq!(lost, 4);
}

#[test]
fn two_copies_of_the_tool_library_trace_once() {
    let a = build();
    let copy_dir = run_dir("second-tool-copy");
    std::fs::create_dir_all(&copy_dir).unwrap();
    let copy = copy_dir.join("librprof_tool.so");
    std::fs::copy(&a.tool, &copy).unwrap();
    let both = format!("{} {}", a.tool.display(), copy.display());
    let run = run_traced(
        "two-tool-copies",
        &["threads", "2", "30"],
        Load::ToolsLib,
        &[("HSA_TOOLS_LIB", &both)],
    );
    let rows = assert_complete_trace(&run);
    assert_eq!(rows.len(), 60);
    assert_whole_outputs(&run);
    assert_eq!(
        run.stderr.matches("already traces this process").count(),
        1,
        "stderr:\n{}",
        run.stderr
    );
}

#[test]
fn outputs_are_finished_and_reported_while_earlier_exit_handlers_run() {
    // rprof's exit handler leaves the writer finishing the outputs while
    // the handlers registered before it run (HIP's teardown); the writer
    // then reports them itself. Here such a handler takes 300 ms and ends
    // the process by `_exit`: no `OnUnload`, no destructor after it.
    let run = run_rprof("handler-exit", &[], &["exit", "200", "handler_exit"]);
    let rows = assert_complete_trace(&run);
    assert_eq!(rows.len(), 200);
    assert_whole_outputs(&run);
    assert_all_reported_written(&run);
    check_pftrace(&run.output(".pftrace"));
}

#[test]
fn files_the_process_could_not_finish_are_never_reported_as_written() {
    // `_exit` skips every flush: the files exist but are unfinished.
    let run = run_rprof("underscore-exit", &[], &["exit", "50", "_exit"]);
    assert_eq!(run.code, Some(0), "stderr:\n{}", run.stderr);
    assert!(run.reported_written().is_empty(), "stderr:\n{}", run.stderr);
    for suffix in [".pftrace", "_kernel_trace.csv", "_results.json"] {
        let p = run.output(suffix).display().to_string();
        assert!(
            run.stderr.contains(&format!("rprof: {p} is incomplete")),
            "{p} not reported incomplete; stderr:\n{}",
            run.stderr
        );
    }
}

#[test]
fn each_bad_configuration_gives_one_clear_message_and_the_app_runs_untraced() {
    // (variable, value, what the one message must name)
    let cases: [(&str, &str, &str); 7] = [
        ("RPROF_OUTPUT_FORMAT", "xml", "RPROF_OUTPUT_FORMAT"),
        (
            "RPROF_KERNEL_EXCLUDE_REGEX",
            "[z-a]",
            "RPROF_KERNEL_EXCLUDE_REGEX",
        ),
        (
            "RPROF_OUTPUT_DIR",
            "/proc/rprof-cannot-create-this",
            "cannot create the output files",
        ),
        ("RPROF_SIGNAL_POOL_SIZE", "lots", "RPROF_SIGNAL_POOL_SIZE"),
        ("RPROF_SIGNAL_POOL_SIZE", "0", "RPROF_SIGNAL_POOL_SIZE"),
        (
            "RPROF_COMPLETION_MAX_BACKOFF_US",
            "1ms",
            "RPROF_COMPLETION_MAX_BACKOFF_US",
        ),
        (
            "RPROF_FORWARD_APP_SIGNAL",
            "maybe",
            "RPROF_FORWARD_APP_SIGNAL",
        ),
    ];
    for (i, (var, value, names)) in cases.iter().enumerate() {
        let run = run_traced(
            &format!("bad-config-{i}"),
            &["threads", "2", "10"],
            Load::ToolsLib,
            &[(var, value)],
        );
        assert_eq!(run.code, Some(0), "{var}={value}: {}", run.stderr);
        assert_eq!(run.launched().1, 20, "{var}={value}");
        let messages: Vec<&str> = run
            .stderr
            .lines()
            .filter(|l| l.contains("rprof:"))
            .collect();
        assert_eq!(
            messages.len(),
            1,
            "{var}={value}: one clear message: {messages:?}"
        );
        assert!(
            messages[0].contains(names),
            "{var}={value}: {}",
            messages[0]
        );
        assert!(
            messages[0].contains("untraced"),
            "{var}={value}: {}",
            messages[0]
        );
        assert!(!run.output("_kernel_trace.csv").exists(), "{var}={value}");
        assert!(!run.output("_results.json").exists(), "{var}={value}");
    }
    // The app's own exit status is kept.
    let failing = run_traced(
        "bad-config-exit-code",
        &["no-such-mode"],
        Load::ToolsLib,
        &[("RPROF_SIGNAL_POOL_SIZE", "lots")],
    );
    assert_eq!(failing.code, Some(1), "{}", failing.stderr);
    assert!(failing.stderr.contains("RPROF_SIGNAL_POOL_SIZE"));
}

#[test]
fn a_full_disk_leaves_the_app_running_and_the_files_reported_incomplete() {
    // A 64 KiB tmpfs (mounting needs root, as in CI): the trace of 3 x 400
    // dispatches does not fit.
    let mnt = run_dir("full-disk-mnt");
    let _ = Command::new("umount").arg(&mnt).status();
    std::fs::create_dir_all(&mnt).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&mnt)
        .status()
        .expect("run mount");
    assert!(
        st.success(),
        "mounting a 64 KiB tmpfs at {} failed (needs root)",
        mnt.display()
    );
    let dir = mnt.to_str().unwrap().to_string();
    let run = run_traced(
        "full-disk",
        &["threads", "3", "400"],
        Load::ToolsLib,
        &[("RPROF_OUTPUT_DIR", &dir)],
    );
    let _ = Command::new("umount").arg(&mnt).status();
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.launched().1, 1200);
    // Every file that could not be finished is named, with the reason.
    let incomplete: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains(" is incomplete: "))
        .collect();
    assert!(!incomplete.is_empty(), "stderr:\n{}", run.stderr);
    for l in &incomplete {
        assert!(l.contains("No space left on device"), "{l}");
    }
}

#[test]
fn sigterm_and_sigint_flush_the_trace_then_end_the_app_by_the_signal() {
    for (sig, code) in [("TERM", 128 + 15), ("INT", 128 + 2)] {
        let run = run_rprof(&format!("signal-{sig}"), &[], &["signal", "90", sig, "0"]);
        // The app's usual end for that signal: killed by it (rprof passes
        // 128 + N through).
        assert_eq!(run.code, Some(code), "SIG{sig}: {}", run.stderr);
        assert_eq!(run.launched().1, 90);
        let (rows, json) = assert_whole_outputs(&run);
        assert_eq!(rows.len(), 90, "SIG{sig}");
        assert_eq!(json["metadata"]["records_lost"].as_u64(), Some(0));
        assert_all_reported_written(&run);
    }
}

#[test]
fn sigkill_leaves_a_readable_prefix_flushed_within_100_ms() {
    // All 90 kernels finish, then 400 ms pass before SIGKILL: with the
    // periodic flush (every 100 ms) every one of them is on disk.
    let run = run_rprof("signal-KILL", &[], &["signal", "90", "KILL", "400"]);
    assert_eq!(run.code, Some(128 + 9), "{}", run.stderr);
    assert_eq!(run.launched().1, 90);
    let rows = read_csv(&run.output("_kernel_trace.csv"));
    assert_eq!(rows.len(), 90);
    let trace = check_pftrace(&run.output(".pftrace"));
    assert_eq!(trace.kernel_slice_total, 90, "{}", trace.report);
    // Unfinished files are never reported as written.
    assert!(run.reported_written().is_empty(), "{}", run.stderr);
    for suffix in [".pftrace", "_kernel_trace.csv", "_results.json"] {
        let p = run.output(suffix).display().to_string();
        assert!(
            run.stderr.contains(&format!("rprof: {p} is incomplete")),
            "{p}: {}",
            run.stderr
        );
    }
}

/// The program's `QUEUE_ERROR` lines.
fn queue_errors(run: &Run) -> Vec<String> {
    run.stdout
        .lines()
        .filter(|l| l.starts_with("QUEUE_ERROR "))
        .map(str::to_string)
        .collect()
}

#[test]
fn bad_packets_reach_the_device_as_written_and_unknown_kernels_are_recorded() {
    // Issue 12: a vendor-specific packet, a packet of undefined type, a
    // dispatch of kernel object 0 and dispatches of a kernel object nothing
    // loaded. The emulated CP does what a real one does: the vendor packet
    // retires, the undefined type and kernel object 0 put their queue in
    // error (ROCr calls the queue's error callback). Traced, kernel object 0
    // reaches the device untouched: the same queue error, the same status.
    // The packet of undefined type never reaches rprof: ROCr's intercept
    // queue (5.2.3 and 6.x, `AqlPacket::IsValid`: type <= BARRIER_OR and
    // not INVALID) takes it for a slot not yet written and stops there, so
    // that queue stalls instead of faulting, as under any intercept-queue
    // tool (docs/reliability.md).
    const N: u64 = 10;
    let plain = harness::trace_app::run_untraced("bad-packets-untraced", &["bad_packets", "10"]);
    assert_eq!(plain.code, Some(0), "{}\n{}", plain.stdout, plain.stderr);
    let expected = queue_errors(&plain);
    assert_eq!(expected.len(), 2, "untraced: {}", plain.stdout);
    assert!(expected[0].starts_with("QUEUE_ERROR queue=2 status="));
    assert!(expected[1].starts_with("QUEUE_ERROR queue=3 status="));
    let run = run_rprof("bad-packets", &[], &["bad_packets", "10"]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(queue_errors(&run), expected[1..], "stderr:\n{}", run.stderr);
    assert!(
        run.elapsed < std::time::Duration::from_secs(8),
        "took {:?}",
        run.elapsed
    );
    let (rows, json) = assert_whole_outputs(&run);
    // N alpha + 1 beta + 1 gamma + N unknown; kernel object 0 never runs.
    let mut per_name: BTreeMap<String, u64> = BTreeMap::new();
    for r in &rows {
        *per_name.entry(r.kernel_name.clone()).or_default() += 1;
    }
    assert_eq!(rows.len() as u64, 2 * N + 2, "{per_name:?}");
    assert_eq!(per_name.get("alpha"), Some(&N));
    assert_eq!(per_name.get("beta_kernel"), Some(&1));
    assert_eq!(per_name.get("gamma_with_a_longer_name"), Some(&1));
    let unknown: Vec<&Row> = rows
        .iter()
        .filter(|r| {
            !["alpha", "beta_kernel", "gamma_with_a_longer_name"].contains(&r.kernel_name.as_str())
        })
        .collect();
    assert_eq!(unknown.len() as u64, N, "{per_name:?}");
    let name = &unknown[0].kernel_name;
    assert!(
        name.starts_with("unknown_kernel_0x"),
        "an unknown kernel is named by its object: {name:?}"
    );
    for r in &unknown {
        assert_eq!(&r.kernel_name, name);
        assert_eq!(r.kernel_id, unknown[0].kernel_id);
        assert!(r.start <= r.end);
    }
    // The dispatch of kernel object 0 is counted, not recorded.
    assert_eq!(json["metadata"]["records_lost"].as_u64(), Some(1));
}

#[test]
fn device_auto_falling_back_to_the_emulated_gpu_is_said_everywhere() {
    // Issue 12: where /dev/kfd is missing (this machine, a container started
    // without it) `--device auto`, the default, runs the app on the emulated
    // GPU. A warning says so first, a line says so last, and every output
    // that has room says device "emulated".
    assert!(
        !std::path::Path::new("/dev/kfd").exists(),
        "this test needs a machine without /dev/kfd"
    );
    let run = run_rprof(
        "emulated-device",
        &["--device", "auto", "--stats"],
        &["threads", "1", "30"],
    );
    assert_eq!(run.code, Some(0), "stderr:\n{}", run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert!(
        lines[0].starts_with("rprof: warning: no /dev/kfd on this machine")
            && lines[0].contains("EMULATED GPU"),
        "first line: {:?}",
        lines[0]
    );
    assert!(
        lines
            .last()
            .unwrap()
            .starts_with("rprof: device: EMULATED GPU"),
        "last line: {:?}",
        lines.last()
    );
    assert!(
        run.stderr.contains("\ndevice: EMULATED GPU"),
        "the printed statistics say so:\n{}",
        run.stderr
    );
    let (rows, json) = assert_whole_outputs(&run);
    assert_eq!(rows.len(), 30);
    assert_eq!(json["run"]["device"], "emulated");
    let pf = check_pftrace(&run.output(".pftrace"));
    let devices: Vec<&serde_json::Value> = pf.json["slices"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["args"].get("device"))
        .collect();
    assert_eq!(
        devices,
        [&serde_json::json!("emulated")],
        "the metadata instant's device"
    );
    // The library loaded by hand (no rprof command) says so too.
    let by_hand = run_traced(
        "emulated-device-by-hand",
        &["threads", "1", "3"],
        Load::ToolsLib,
        &[],
    );
    by_hand.assert_success();
    assert_eq!(
        read_json(&by_hand.output("_results.json"))["run"]["device"],
        "emulated"
    );
}

#[test]
#[ignore = "valgrind, host runtime only: scripts/test.sh runs it on ROCm 5.2 (cargo test --test kernel_trace -- --ignored valgrind)"]
fn teardown_races_under_valgrind_memcheck() {
    // Issue 12: teardown races under a memory checker. Each scenario runs the
    // traced app under `valgrind --error-exitcode=99` (memcheck; the tool
    // library, the engine's threads and the emulator all inside it):
    // `exit_busy`: exit(0) while two threads keep launching (completions and
    // interceptor calls after finalization began, OnUnload racing in-flight
    // work); `exit`: exit with 300 dispatches in flight and no hsa_shut_down;
    // `destroy`: hsa_queue_destroy with 100 dispatches pending.
    assert_eq!(
        harness::Runtime::selected().version(),
        "5.2",
        "valgrind is installed on the host only (ROCm 5.2)"
    );
    let supp = harness::repo().join("tests/tools/valgrind-rocr.supp");
    let (app, kernels) = harness::artefacts::trace_app();
    let (app, kernels) = (app.display().to_string(), kernels.display().to_string());
    for (label, args) in [
        ("vg-exit-busy", &["exit_busy", "2", "50"][..]),
        ("vg-exit", &["exit", "300"][..]),
        ("vg-destroy", &["destroy", "100"][..]),
    ] {
        let suppressions = format!("--suppressions={}", supp.display());
        // --fair-sched=yes: valgrind runs one thread at a time, and its
        // default lock hands the CPU back to a thread that yields, so the
        // emulated device's thread could wait 2 s for a turn while the app's
        // threads and rprof's spun. rprof's ring guard then saw a stuck
        // device and gave the queue up (3 runs in 28), and ROCr 5.2.3's
        // intercept queue aborted on the overflow that followed (2 in 28).
        // With the fair lock: 0 in 32.
        let mut command = vec![
            "valgrind",
            "--fair-sched=yes",
            "--error-exitcode=99",
            "--quiet",
            suppressions.as_str(),
            app.as_str(),
            kernels.as_str(),
        ];
        command.extend_from_slice(args);
        let run = rprof_traced(label, &["-o", "run"], &command, &[]);
        let reports: Vec<&str> = run
            .stderr
            .lines()
            .filter(|l| l.starts_with("==") && l[2..].split("==").count() > 1)
            .collect();
        assert!(
            run.code == Some(0) && reports.is_empty(),
            "{label}: exit {:?}, memcheck says:\n{}",
            run.code,
            harness::run::tail(&run.stderr, 8000)
        );
        // Under valgrind the writer may be too slow for the bounded flush:
        // then every file is reported incomplete, never as written.
        for suffix in [".pftrace", "_kernel_trace.csv", "_results.json"] {
            let p = run.output(suffix).display().to_string();
            assert!(
                run.stderr.contains(&format!("rprof: wrote {p}"))
                    || run.stderr.contains(&format!("rprof: {p} is incomplete")),
                "{label}: {p} neither written nor incomplete:\n{}",
                run.stderr
            );
        }
    }
}

#[test]
fn a_queue_destroyed_with_work_that_never_runs_costs_one_bounded_wait() {
    // Issue 12: hsa_queue_destroy of a queue whose 10 kernels wait behind a
    // barrier on a host signal nobody opens. The destroy hook waits for the
    // queue's traced dispatches at most 5 s (QUEUE_DRAIN_TIMEOUT), then the
    // completion thread drops them, counted lost; the app ends normally.
    let run = run_traced(
        "destroy-gated",
        &["destroy_gated", "10"],
        Load::ToolsLib,
        &[],
    );
    assert_eq!(run.code, Some(0), "stderr:\n{}", run.stderr);
    let secs: f64 = run
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("DESTROY_SECONDS "))
        .unwrap_or_else(|| panic!("no DESTROY_SECONDS in:\n{}", run.stdout))
        .trim()
        .parse()
        .unwrap();
    assert!(
        (4.9..7.0).contains(&secs),
        "hsa_queue_destroy took {secs} s"
    );
    let (rows, json) = assert_whole_outputs(&run);
    assert!(rows.is_empty(), "{} rows", rows.len());
    assert_eq!(json["metadata"]["records_lost"].as_u64(), Some(10));
}

#[test]
fn apps_started_through_a_shell_get_their_own_outputs() {
    // Issue 12: a wrapper (here `sh -c` running two GPU programs and a
    // command that uses no GPU) is what rprof starts. Each process that uses
    // the GPU writes its own files (named by its pid); the shell and `echo`
    // leave none; rprof's report names exactly the files written, whichever
    // process wrote them.
    wrapped_apps_get_their_own_outputs("wrapper-sh");
}

#[test]
fn apps_started_through_a_python_launcher_get_their_own_outputs() {
    wrapped_apps_get_their_own_outputs("wrapper-python");
}

/// Runs the launcher `which` (`wrapper-sh`: `sh -c`, `wrapper-python`:
/// `python3 -c 'import subprocess; ...'`) under rprof and checks the outputs.
fn wrapped_apps_get_their_own_outputs(which: &str) {
    let (app, kernels) = harness::artefacts::trace_app();
    let (app, kernels) = (app.display().to_string(), kernels.display().to_string());
    let shell = format!(
        "{app} {kernels} threads 1 10 >/dev/null && {app} {kernels} threads 1 20 >/dev/null && echo no-gpu"
    );
    let python = format!(
        "import subprocess; subprocess.run([{app:?}, {kernels:?}, 'threads', '1', '7'], check=True, \
         stdout=subprocess.DEVNULL)"
    );
    for (label, launcher, mut expected_rows) in [
        ("wrapper-sh", ["sh", "-c", shell.as_str()], vec![10, 20]),
        (
            "wrapper-python",
            ["python3", "-c", python.as_str()],
            vec![7],
        ),
    ] {
        if label != which {
            continue;
        }
        let run = rprof_traced(label, &[], &launcher, &[]);
        let dir = run.dir.clone();
        assert_eq!(run.code, Some(0), "{label}: {}\n{}", run.stdout, run.stderr);
        let files = harness::run::files_under(&dir);
        assert_eq!(
            run.reported_written(),
            files,
            "{label}: reported vs on disk; stderr:\n{}",
            run.stderr
        );
        assert_eq!(files.len(), 3 * expected_rows.len(), "{label}: {files:?}");
        let mut rows: Vec<usize> = files
            .iter()
            .filter(|f| f.ends_with("_kernel_trace.csv"))
            .map(|f| read_csv(std::path::Path::new(f)).len())
            .collect();
        rows.sort_unstable();
        expected_rows.sort_unstable();
        assert_eq!(rows, expected_rows, "{label}");
        for f in files.iter().filter(|f| f.ends_with("_results.json")) {
            let json = read_json(std::path::Path::new(f));
            let pid = json["run"]["pid"].as_u64().unwrap();
            assert!(
                f.contains(&format!("/{pid}_results.json")),
                "{f} named by its pid {pid}"
            );
        }
    }
}

/// `--pftrace-split-seconds`: the Perfetto trace as `run.pftrace`,
/// `run_part1.pftrace`, ... Each part is a whole trace on its own (the
/// checker reads it alone: its own process track, clock, interned names),
/// every dispatch is in exactly one part (kernel slices per name summed over
/// the parts are the CSV's and the program's counts), the parts are numbered
/// without a gap and the command names every one of them.
#[test]
fn a_split_trace_holds_every_dispatch_once_in_parts_valid_alone() {
    use harness::trace_app::run_rprof_raw_with_env;
    // 50 µs kernels: 1,800 of them on 3 queues keep the emulated GPU busy
    // for at least 30 ms, so 10 ms parts make several parts on any machine
    // (with near-zero kernels a fast run fitted in one 50 ms part).
    let run = run_rprof_raw_with_env(
        "split-trace",
        &["--kernel-trace", "--pftrace-split-seconds", "0.01"],
        &["threads", "3", "600"],
        &[("RPROF_EMU_KERNEL_NS", "50000")],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let (launched, total) = run.launched();
    assert_eq!(total, 1800);
    let rows = read_csv(&run.output("_kernel_trace.csv"));
    assert_eq!(rows.len(), 1800);
    let mut parts = vec![run.output(".pftrace")];
    while run
        .output(&format!("_part{}.pftrace", parts.len()))
        .exists()
    {
        parts.push(run.output(&format!("_part{}.pftrace", parts.len())));
    }
    let files = output_files(&run.dir);
    let pftraces: Vec<&String> = files.iter().filter(|f| f.ends_with(".pftrace")).collect();
    assert_eq!(
        pftraces.len(),
        parts.len(),
        "numbered without a gap: {files:?}"
    );
    assert!(
        parts.len() >= 2,
        "a run of {:?} in 10 ms parts made {} part(s)",
        run.elapsed,
        parts.len()
    );
    let written = run.reported_written();
    let mut per_name: BTreeMap<String, u64> = BTreeMap::new();
    let mut pid = None;
    for part in &parts {
        assert!(
            written.contains(&part.display().to_string()),
            "{} not reported: {written:?}",
            part.display()
        );
        let p = check_pftrace(part);
        assert_eq!(
            p.process_pids.len(),
            1,
            "{}: its own process track",
            part.display()
        );
        assert_eq!(pid.get_or_insert(p.process_pids.clone()), &p.process_pids);
        assert_eq!(p.bad_durations, 0);
        for (name, n) in &p.kernel_slices {
            *per_name.entry(name.clone()).or_default() += n;
        }
        // Its own kernel table: one `kernel symbol` per kernel it shows.
        assert_eq!(
            p.slices_by_name.get("kernel symbol").copied().unwrap_or(0),
            p.kernel_slices.len() as u64,
            "{}",
            part.display()
        );
        let counts = rprof_perfetto::count_slices(std::fs::File::open(part).unwrap()).unwrap();
        assert_eq!(
            counts.instants.get("rprof run"),
            Some(&1),
            "{}",
            part.display()
        );
    }
    let launched: BTreeMap<String, u64> = launched.into_iter().filter(|(_, n)| *n > 0).collect();
    assert_eq!(per_name, launched, "kernel slices over all parts");
}

/// Summary-only runs: `--summary --output-format none` prints the
/// per-kernel summary with exact calls and writes no file at all;
/// `--stats --output-format none` writes only NAME_kernel_stats.csv; `none`
/// without either is refused with one message, and the app runs untraced.
#[test]
fn the_summary_alone_writes_no_trace_file() {
    use harness::trace_app::run_rprof_raw;
    let calls_in_table = |stderr: &str, name: &str| -> Option<u64> {
        stderr.lines().find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(name)).then(|| w.next()?.parse().ok())?
        })
    };
    let run = run_rprof_raw(
        "summary-only",
        &["--summary", "--output-format", "none"],
        &["threads", "3", "25"],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let (launched, total) = run.launched();
    assert_eq!(total, 75);
    assert!(
        run.stderr.contains("rprof kernel statistics"),
        "{}",
        run.stderr
    );
    for (name, n) in launched.iter().filter(|(_, n)| **n > 0) {
        assert_eq!(
            calls_in_table(&run.stderr, name),
            Some(*n),
            "{name}: {}",
            run.stderr
        );
    }
    assert_eq!(output_files(&run.dir), Vec::<String>::new());
    for word in ["rprof: wrote", "no trace was written", "incomplete"] {
        assert!(!run.stderr.contains(word), "{word}: {}", run.stderr);
    }

    let run = run_rprof_raw(
        "stats-only",
        &["--stats", "--output-format", "none"],
        &["threads", "3", "25"],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(output_files(&run.dir), ["run_kernel_stats.csv"]);
    let stats = std::fs::read_to_string(run.output("_kernel_stats.csv")).unwrap();
    for (name, n) in launched.iter().filter(|(_, n)| **n > 0) {
        let row = stats
            .lines()
            .find(|l| l.starts_with(&format!("\"{name}\",")))
            .unwrap_or_else(|| panic!("{name} missing: {stats}"));
        assert_eq!(row.split(',').nth(1), Some(&*format!("{n}")), "{row}");
    }

    let run = run_rprof_raw(
        "none-alone",
        &["--kernel-trace", "--output-format", "none"],
        &["threads", "2", "10"],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.launched().1, 20);
    assert!(
        run.stderr.contains("RPROF_OUTPUT_FORMAT") && run.stderr.contains("--summary"),
        "{}",
        run.stderr
    );
    assert_eq!(output_files(&run.dir), Vec::<String>::new());
}

/// The interceptor's clock (the time-stamp counter along a fitted line where
/// the kernel keeps time by it, `rprof_abi::clock`) agrees with the device's:
/// no dispatch starts before its enqueue time, so none is clamped, and a run
/// long enough for the completion thread to fit lines reads by them.
#[test]
fn the_interceptor_clock_agrees_with_the_device_clock() {
    let run = run_traced(
        "clock",
        &["threads", "2", "1500"],
        Load::ToolsLib,
        &[("RPROF_VERBOSE", "1")],
    );
    let rows = assert_complete_trace(&run);
    assert_eq!(rows.len(), 3000);
    let json = read_json(&run.output("_results.json"));
    assert_eq!(json["metadata"]["start_clamped"], 0, "{}", run.stderr);
    assert_eq!(json["metadata"]["end_clamped"], 0, "{}", run.stderr);
    let dispatches = json["kernel_dispatches"].as_array().unwrap();
    assert_eq!(dispatches.len(), 3000);
    for d in dispatches {
        let time = |k: &str| d[k].as_u64().unwrap();
        assert!(
            time("enqueue_ns") <= time("start_ns") && time("start_ns") <= time("end_ns"),
            "{d}"
        );
    }
    let clock = run
        .stderr
        .lines()
        .find_map(|l| l.split("; interceptor clock: ").nth(1))
        .unwrap_or_else(|| panic!("no verbose line: {}", run.stderr));
    if rprof_abi::clock::tsc_keeps_time() {
        let lines: u64 = clock
            .strip_prefix("time-stamp counter, ")
            .and_then(|c| c.strip_suffix(" lines fitted"))
            .unwrap_or_else(|| panic!("{clock}"))
            .parse()
            .unwrap();
        assert!(lines >= 1, "{clock}");
    } else {
        assert_eq!(clock, "clock_gettime");
    }
}

/// rprof's threads keep the app's share of the CPU (its nice value) but, as
/// `SCHED_BATCH`, do not preempt the app when they wake: the completion
/// thread is on the app's latency path (copies, forwarded signals, ring
/// space), and a writer at nice 10 was starved where cores are scarce and
/// left its backlog to the app's exit (`docs/completion.md`).
#[test]
fn rprofs_threads_keep_the_apps_share_without_preempting_it() {
    const SCHED_OTHER: i32 = 0;
    const SCHED_BATCH: i32 = 3;
    let run = run_rprof("priorities", &[], &["priorities"]);
    run.assert_success();
    let priority = |name: &str| -> (i32, i32) {
        let prefix = format!("PRIORITY {name} ");
        let found: Vec<(i32, i32)> = run
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .map(|v| {
                let mut it = v.split(' ').map(|x| x.trim().parse().expect("a number"));
                (it.next().unwrap(), it.next().unwrap())
            })
            .collect();
        assert_eq!(found.len(), 1, "{name}: {}", run.stdout);
        found[0]
    };
    let (app_nice, app_policy) = priority("main");
    assert_eq!(app_policy, SCHED_OTHER, "{}", run.stdout);
    // Thread names are cut to 15 bytes by the kernel.
    assert_eq!(
        priority("rprof-completio"),
        (app_nice, SCHED_BATCH),
        "{}",
        run.stdout
    );
    assert_eq!(
        priority("rprof-writer"),
        (app_nice, SCHED_BATCH),
        "{}",
        run.stdout
    );
    assert_eq!(run.launched().1, 3);
    let (rows, _) = assert_whole_outputs(&run);
    assert_eq!(rows.len(), 3);
}
