//! The `hip-tests/` programs traced end to end by the real `rprof` on the
//! emulated GPU: every output must account for exactly the kernels each
//! program says it launched (see `harness::outputs::check_outputs` for the
//! full list of assertions).
//!
//! Runs on the runtime `RPROF_TEST_ROCM` selects, through the one harness
//! (`tests/harness`, which builds what it needs); needs that runtime's
//! `hipcc` and the Python `perfetto` package.

mod harness;

use std::collections::BTreeMap;

use harness::artefacts::hip_program;
use harness::hip::run_traced;
use harness::outputs::{
    check_against_device, check_outputs, output_files, read_csv, single_report, summary,
    KernelLaunches, ProcessReport, TraceFacts,
};
use harness::run::{number_after, number_before};
use harness::Runtime;

/// Traces `program args` as `-o NAME` and runs every output check; the
/// program ends with its work done, so the runtime must find no signal
/// still alive when it unloads (ROCr >= 6 names every one: rprof gives its
/// timestamp signals back first).
fn trace_and_check(label: &str, program: &str, args: &[&str]) -> TraceFacts {
    trace_and_check_with(label, program, args, true)
}

/// [`trace_and_check`] for a program that exits with its work still on
/// the device: HIP's own signals are then alive at unload, untraced too
/// (ROCr 6.4.3 reports 77 for `exit_nosync`), so the unload is not checked.
fn trace_and_check_leaving_work(label: &str, program: &str, args: &[&str]) -> TraceFacts {
    trace_and_check_with(label, program, args, false)
}

fn trace_and_check_with(
    label: &str,
    program: &str,
    args: &[&str],
    quiet_unload: bool,
) -> TraceFacts {
    trace_and_check_env(label, program, args, quiet_unload, &[])
}

/// [`trace_and_check_with`] with extra environment variables for the run.
fn trace_and_check_env(
    label: &str,
    program: &str,
    args: &[&str],
    quiet_unload: bool,
    env: &[(&str, &str)],
) -> TraceFacts {
    let prog = hip_program(program);
    let run = run_traced(label, &["-o", label], &prog, args, env);
    run.assert_success();
    assert!(
        !quiet_unload || !run.stderr.contains("Resource leak detected"),
        "{label}: the runtime found signals still alive at unload:\n{}",
        run.stderr
    );
    let report = single_report(&run);
    let facts = check_outputs(&run.dir, label, &report);
    assert_eq!(
        output_files(&run.dir),
        [
            format!("{label}.pftrace"),
            format!("{label}_kernel_trace.csv"),
            format!("{label}_results.json"),
        ],
        "exactly the three requested outputs"
    );
    summary(label, &run, &facts);
    facts
}

/// Graph launches in dispatch-id order: launch i, node j is dispatch
/// number i*K + j of the program and runs `graph_node<j % 256>`. The nodes
/// were captured from one stream, so they form a chain: each starts after
/// the previous one ended (all on one queue).
fn check_graph_order(f: &TraceFacts, k: usize, launches: usize) {
    let rows = f.program_rows();
    assert_eq!(rows.len(), k * launches);
    for (n, r) in rows.iter().enumerate() {
        let expect = format!("void graph_node<{}>(int*, int)", (n % k) % 256);
        assert_eq!(
            r.kernel_name,
            expect,
            "dispatch {} is launch {}, node {}",
            r.dispatch_id,
            n / k,
            n % k
        );
    }
    for w in rows.windows(2) {
        assert_eq!(w[0].queue_id, w[1].queue_id, "one stream, one queue");
        assert!(
            w[1].start >= w[0].end,
            "graph node (dispatch {}) started at {} before its predecessor (dispatch {}) ended at {}",
            w[1].dispatch_id,
            w[1].start,
            w[0].dispatch_id,
            w[0].end
        );
    }
}

/// The hip-graph-bubbles case, small: 64 distinct kernels captured into a
/// graph, launched 20 times.
#[test]
fn graph_storm_64x20() {
    let f = trace_and_check("graph_storm_64x20", "graph_storm", &["64", "20"]);
    assert_eq!(f.program_dispatches(), 64 * 20);
    assert_eq!(f.program_kernel_names(), 64, "one name per graph node");
    check_graph_order(&f, 64, 20);
}

/// The same graph with the kernels' timestamp signals made by the runtime
/// (`RPROF_TIMESTAMP_SIGNALS=rocr`, rprof's signals until session 29 and its
/// fallback where the runtime has no fine-grained system pool): the same
/// trace, and on ROCr >= 6 every signal destroyed before the runtime counts
/// them.
#[test]
fn graph_storm_64x20_with_the_runtimes_timestamp_signals() {
    let f = trace_and_check_env(
        "graph_storm_64x20_rocr_signals",
        "graph_storm",
        &["64", "20"],
        true,
        &[("RPROF_TIMESTAMP_SIGNALS", "rocr")],
    );
    assert_eq!(f.program_dispatches(), 64 * 20);
    assert_eq!(f.program_kernel_names(), 64, "one name per graph node");
    check_graph_order(&f, 64, 20);
}

/// More nodes than distinct kernels: nodes j and j+256 share a name, so the
/// first 44 names run twice per launch.
#[test]
fn graph_storm_names_shared_by_nodes() {
    let f = trace_and_check("graph_storm_300x3", "graph_storm", &["300", "3"]);
    assert_eq!(f.program_dispatches(), 900);
    assert_eq!(f.per_name["void graph_node<0>(int*, int)"], 6);
    assert_eq!(f.per_name["void graph_node<43>(int*, int)"], 6);
    assert_eq!(f.per_name["void graph_node<44>(int*, int)"], 3);
    check_graph_order(&f, 300, 3);
}

/// The benchmark workload at its default size: 256 kernels x 200 launches
/// = 51,200 dispatches.
#[test]
fn graph_storm_default_51200() {
    let f = trace_and_check("graph_storm_default", "graph_storm", &[]);
    assert_eq!(f.program_dispatches(), 51_200);
    assert_eq!(f.program_kernel_names(), 256);
    check_graph_order(&f, 256, 200);
}

/// `graph_storm 256 2` traced as `-o LABEL` with 200 µs kernels (the app
/// waits ~100 ms for the device) and `RPROF_VERBOSE` (the flush's summary
/// on stderr), plus `env`; the run succeeded.
fn storm_256x2_verbose(label: &str, env: &[(&str, &str)]) -> harness::Run {
    let mut all = vec![("RPROF_VERBOSE", "1"), ("RPROF_EMU_KERNEL_NS", "200000")];
    all.extend_from_slice(env);
    let run = run_traced(
        label,
        &["-o", label],
        &hip_program("graph_storm"),
        &["256", "2"],
        &all,
    );
    run.assert_success();
    run
}

/// The signals rprof's pool gave up at exit and at the runtime's unload (the
/// verbose lines; `None` where a line is absent), and how many it created.
fn signals_given_up(label: &str, run: &harness::Run) -> (Option<u64>, Option<u64>, u64) {
    let created = number_before(&run.stderr, " created, high water")
        .unwrap_or_else(|| panic!("{label}: no pool size in:\n{}", run.stderr));
    // 512 dispatches on the device at once: the pool grew to at least that.
    assert!(created >= 512, "{label}: {created} signals created");
    (
        number_after(&run.stderr, "rprof: exit: "),
        number_after(&run.stderr, "rprof: unload: "),
        created,
    )
}

/// HIP synchronises by spinning in the runtime's wait: while it waits for
/// the device, the app's thread writes the records in the writer's place
/// (`tool/src/session/lending_wait.rs`), and every output still holds each
/// dispatch exactly once, in order. 200 µs kernels, 256 x 2: the app waits
/// about 100 ms for the device, longer than its launches take even in a
/// debug build on a loaded machine (a 20 µs version found the device done
/// by the time the app waited, once).
#[test]
fn the_apps_spinning_wait_writes_records_and_loses_none() {
    let label = "lending_wait_256x2";
    let run = storm_256x2_verbose(label, &[]);
    let lent = number_before(&run.stderr, " records written by waiting app threads")
        .unwrap_or_else(|| panic!("{label}: no lending count in:\n{}", run.stderr));
    assert!(
        lent > 0,
        "{label}: the app's waits wrote no record:\n{}",
        run.stderr
    );
    let report = single_report(&run);
    let f = check_outputs(&run.dir, label, &report);
    assert_eq!(f.program_dispatches(), 256 * 2);
    check_graph_order(&f, 256, 2);
    summary(label, &run, &f);
}

/// With the runtime's signals (`RPROF_TIMESTAMP_SIGNALS=rocr`), at exit
/// rprof destroys the idle timestamp signals (all but one batch of 256)
/// beside the app's teardown only where the runtime's unload closes the pool
/// afterwards (ROCr >= 6): on 5.2.3 the pool stays open to the end, and
/// destroying signals would only take time from the exit. Where HIP unloads
/// the runtime at exit (HIP 6.4.3), the unload destroys the batch kept, so
/// every signal the pool created is destroyed exactly once.
#[test]
fn the_exit_destroys_the_runtimes_idle_signals_only_where_the_unload_closes_the_pool() {
    let label = "exit_trim_256x2";
    let run = storm_256x2_verbose(label, &[("RPROF_TIMESTAMP_SIGNALS", "rocr")]);
    let (at_exit, at_unload, created) = signals_given_up(label, &run);
    let (want_exit, want_unload) = match Runtime::selected() {
        Runtime::Rocm52 => (None, None),
        Runtime::Rocm61 => (Some(created - 256), None),
        Runtime::Rocm64 | Runtime::Rocm70 => (Some(created - 256), Some(256)),
    };
    assert_eq!(
        (at_exit, at_unload),
        (want_exit, want_unload),
        "{label}: signals destroyed at exit and at unload, of {created}:\n{}",
        run.stderr
    );
    let report = single_report(&run);
    let f = check_outputs(&run.dir, label, &report);
    assert_eq!(f.program_dispatches(), 256 * 2);
}

/// rprof's own signals (the default) cost nothing to give up: the exit
/// destroys none of them one by one (ROCr >= 6; 5.2.3 has no such step),
/// and where HIP unloads the runtime at exit (HIP 6.4.3) the unload gives
/// every signal the pool created back at once, with its memory.
#[test]
fn the_exit_gives_up_none_of_rprofs_own_signals_one_by_one() {
    let label = "exit_memory_256x2";
    let run = storm_256x2_verbose(label, &[]);
    let (at_exit, at_unload, created) = signals_given_up(label, &run);
    let want = match Runtime::selected() {
        Runtime::Rocm52 => (None, None),
        Runtime::Rocm61 => (Some(0), None),
        Runtime::Rocm64 | Runtime::Rocm70 => (Some(0), Some(created)),
    };
    assert_eq!(
        (at_exit, at_unload),
        want,
        "{label}: signals given up at exit and at unload, of {created}:\n{}",
        run.stderr
    );
    let report = single_report(&run);
    let f = check_outputs(&run.dir, label, &report);
    assert_eq!(f.program_dispatches(), 256 * 2);
}

/// Fork/join across 4 streams with hipStreamWaitEvent, 50 rounds. All
/// launches come from one thread, so dispatch ids follow program order:
/// produce, 3 x consume, reduce per round. The event dependencies must show
/// in the GPU times: every consume starts after its round's produce ended,
/// and reduce starts after all three consumes ended.
#[test]
fn multi_stream_events() {
    let f = trace_and_check("multi_stream", "multi_stream", &["4", "50"]);
    assert_eq!(f.program_dispatches(), 50 * (1 + 3 + 1));
    let rows = f.program_rows();
    for (round, chunk) in rows.chunks(5).enumerate() {
        let names: Vec<&str> = chunk
            .iter()
            .map(|r| r.kernel_name.split('(').next().unwrap_or(""))
            .collect();
        assert_eq!(
            names,
            ["produce", "consume", "consume", "consume", "reduce"],
            "round {round} in dispatch-id order"
        );
        let (produce, consumes, reduce) = (chunk[0], &chunk[1..4], chunk[4]);
        for c in consumes {
            assert!(
                c.start >= produce.end,
                "round {round}: consume (queue {}) started at {} before produce (queue {}) ended at {}",
                c.queue_id,
                c.start,
                produce.queue_id,
                produce.end
            );
            assert!(
                reduce.start >= c.end,
                "round {round}: reduce started at {} before a consume ended at {}",
                reduce.start,
                c.end
            );
        }
        let queues: std::collections::BTreeSet<u64> = consumes.iter().map(|c| c.queue_id).collect();
        assert!(
            queues.len() >= 2,
            "round {round}: 3 streams but consume queues {queues:?}"
        );
    }
}

/// hipMemcpy (pageable and pinned, H2D, D2H, D2D) interleaved with kernels.
/// HIP copies device->device with its blit kernel `__amd_rocclr_copyBuffer`,
/// which a kernel trace shows too, on add_one's stream after add_one ended.
/// HIP 5.2.3 and 5.7.1 copy host<->device with DMA: per round, in dispatch
/// order, scale, add_one, the D2D copy. HIP 6.4.3 (on ROCr 6.4.3 and 7.0) also copies the pageable
/// buffers with the blit kernel (through its staging buffer): per round
/// copy (H2D), scale, copy (D2H), add_one, the D2D copy (docs/rocr6.md).
#[test]
fn memcpy_mix() {
    let f = trace_and_check("memcpy_mix", "memcpy_mix", &["40"]);
    assert_eq!(f.program_dispatches(), 80);
    const COPY: &str = "__amd_rocclr_copyBuffer";
    let round: &[&str] = match Runtime::selected() {
        Runtime::Rocm52 | Runtime::Rocm61 => &["scale(int*, int, int)", "add_one(int*, int)", COPY],
        Runtime::Rocm64 | Runtime::Rocm70 => &[
            COPY,
            "scale(int*, int, int)",
            COPY,
            "add_one(int*, int)",
            COPY,
        ],
    };
    let copies_per_round = round.iter().filter(|n| **n == COPY).count() as u64;
    assert_eq!(
        f.per_name.get(COPY),
        Some(&(40 * copies_per_round)),
        "{copies_per_round} blit kernel(s) per round; runtime kernels: {:?}",
        f.per_name
    );
    let mut rows: Vec<_> = f.rows.iter().collect();
    rows.sort_by_key(|r| r.dispatch_id);
    for (i, chunk) in rows.chunks(round.len()).enumerate() {
        let names: Vec<&str> = chunk.iter().map(|r| r.kernel_name.as_str()).collect();
        assert_eq!(names, round, "round {i}");
        let (add, copy) = (chunk[round.len() - 2], chunk[round.len() - 1]);
        assert_eq!(
            add.queue_id, copy.queue_id,
            "round {i}: D2D copy on add_one's stream"
        );
        assert!(
            copy.start >= add.end,
            "round {i}: D2D copy started before add_one ended"
        );
    }
}

/// A traced `threads 4 250` run: per app thread (tid) its index and launch
/// count, the program's rows, and the queue of each thread's stream.
struct ThreadsRun {
    threads: BTreeMap<u64, (u64, u64)>,
    traced_by_tid: BTreeMap<u64, u64>,
    queue_of_index: BTreeMap<u64, u64>,
}

fn run_threads(label: &str, env: &[(&str, &str)]) -> ThreadsRun {
    let prog = hip_program("threads");
    let run = run_traced(label, &["-o", label], &prog, &["4", "250"], env);
    run.assert_success();
    let report = single_report(&run);
    let f = check_outputs(&run.dir, label, &report);
    summary(label, &run, &f);
    assert_eq!(report.total, 4 * 250 + 4 * 62);

    // tid -> (index, launches), from `THREAD tid=.. index=.. stream_kernels=..`.
    let mut threads = BTreeMap::new();
    for line in run.stdout.lines().filter(|l| l.starts_with("THREAD ")) {
        let field = |k: &str| -> u64 {
            line.split_whitespace()
                .find_map(|f| f.strip_prefix(k))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {k} in {line:?}"))
        };
        threads.insert(field("tid="), (field("index="), field("stream_kernels=")));
    }
    assert_eq!(threads.len(), 4, "THREAD lines:\n{}", run.stdout);

    let program_rows = f.program_rows();
    // Queue of each thread's stream (thread_work<index> runs only there).
    let mut queue_of_index = BTreeMap::new();
    for r in program_rows
        .iter()
        .filter(|r| r.kernel_name.contains("thread_work<"))
    {
        let index: u64 = r.kernel_name["void thread_work<".len()..]
            .split('>')
            .next()
            .and_then(|v| v.parse().ok())
            .expect("thread_work index");
        let q = queue_of_index.entry(index).or_insert(r.queue_id);
        assert_eq!(
            *q, r.queue_id,
            "{} (one stream) ran on two queues",
            r.kernel_name
        );
    }
    assert_eq!(queue_of_index.len(), 4);

    let mut traced_by_tid: BTreeMap<u64, u64> = BTreeMap::new();
    for r in &program_rows {
        assert!(
            threads.contains_key(&r.thread_id),
            "dispatch {} ({}) attributed to thread {}, which launched nothing",
            r.dispatch_id,
            r.kernel_name,
            r.thread_id
        );
        *traced_by_tid.entry(r.thread_id).or_default() += 1;
    }
    ThreadsRun {
        threads,
        traced_by_tid,
        queue_of_index,
    }
}

/// 4 host threads, each with its own stream, 250 launches each plus ticks,
/// with HIP's default pool of hardware queues. rprof records the thread that
/// ran the interceptor; when streams share a hardware queue, ROCr's intercept
/// queue hands every pending packet of that queue to whichever thread rings
/// the doorbell first, so a dispatch can be attributed to another thread *of
/// the same queue* (docs/architecture.md, "Which thread"). Hence: each
/// stream's kernels stay on one queue; every dispatch is attributed to one of
/// the launching threads; per queue, its threads' dispatches add up exactly;
/// a thread alone on its queue gets exactly its own count.
#[test]
fn threads_shared_queues() {
    let t = run_threads("threads", &[]);
    let mut per_queue: BTreeMap<u64, (u64, u64, Vec<u64>)> = BTreeMap::new();
    for (tid, (index, launched)) in &t.threads {
        let e = per_queue.entry(t.queue_of_index[index]).or_default();
        e.0 += launched;
        e.1 += t.traced_by_tid.get(tid).copied().unwrap_or(0);
        e.2.push(*tid);
    }
    for (queue, (launched, got, tids)) in &per_queue {
        assert_eq!(
            got, launched,
            "queue {queue}: dispatches attributed to its threads {tids:?}"
        );
        if let [tid] = tids[..] {
            assert_eq!(
                t.traced_by_tid.get(&tid).copied().unwrap_or(0),
                t.threads[&tid].1,
                "thread {tid} is alone on queue {queue}: its dispatches are exactly its own"
            );
        }
    }
}

/// The same with GPU_MAX_HW_QUEUES=8: every stream gets its own hardware
/// queue, so every thread's dispatch count in the trace is exactly its own.
#[test]
fn threads_own_queues() {
    let t = run_threads("threads_own_queues", &[("GPU_MAX_HW_QUEUES", "8")]);
    let queues: std::collections::BTreeSet<_> = t.queue_of_index.values().collect();
    assert_eq!(
        queues.len(),
        4,
        "one queue per stream: {:?}",
        t.queue_of_index
    );
    let expect: BTreeMap<u64, u64> = t.threads.iter().map(|(tid, (_, n))| (*tid, *n)).collect();
    assert_eq!(t.traced_by_tid, expect, "dispatches per launching thread");
}

/// exit(0) right after enqueuing 2000 kernels: every one is in the trace.
#[test]
fn exit_without_sync_exit() {
    let f = trace_and_check_leaving_work("exit_nosync_exit", "exit_nosync", &["2000", "exit"]);
    assert_eq!(f.per_name["last_kernel(int*)"], 1);
}

/// Returning from main without synchronising.
#[test]
fn exit_without_sync_return() {
    let f = trace_and_check_leaving_work("exit_nosync_return", "exit_nosync", &["500", "return"]);
    assert_eq!(f.per_name["last_kernel(int*)"], 1);
}

/// quick_exit(0) right after enqueuing runs no atexit handlers and no static
/// destructors (the runtime never unloads the tool), yet every dispatch must
/// be recorded: the tool flushes from an at_quick_exit handler.
#[test]
fn exit_without_sync_quick_exit() {
    let f = trace_and_check_leaving_work("exit_nosync_quick", "exit_nosync", &["2000", "quick"]);
    assert_eq!(f.per_name["last_kernel(int*)"], 1);
    assert_eq!(f.per_name["nosync_work(int*, int)"], 2000);
}

/// `--serialize-kernels` with HIP: a graph launched repeatedly, and four
/// streams joined by events (cross-queue waits), finish without deadlock,
/// every dispatch is recorded, and no two kernel intervals on the GPU
/// overlap.
#[test]
fn serialized_graphs_and_streams_never_overlap() {
    for (label, program, args) in [
        ("serial_graph", "graph_storm", &["64", "10"][..]),
        ("serial_streams", "multi_stream", &["4", "20"][..]),
    ] {
        let prog = hip_program(program);
        let run = run_traced(
            label,
            &["-o", label, "--serialize-kernels"],
            &prog,
            args,
            &[],
        );
        run.assert_success();
        let report = single_report(&run);
        let facts = check_outputs(&run.dir, label, &report);
        let mut rows: Vec<_> = facts.rows.iter().collect();
        rows.sort_by_key(|r| (r.start, r.end));
        for w in rows.windows(2) {
            assert!(
                w[1].start >= w[0].end,
                "{label}: dispatch {} [{}, {}] overlaps dispatch {} [{}, {}]",
                w[1].dispatch_id,
                w[1].start,
                w[1].end,
                w[0].dispatch_id,
                w[0].start,
                w[0].end
            );
        }
        summary(label, &run, &facts);
    }
}

/// With `--truncate-kernels`, `thread_work<0..3>` (four kernels, four
/// kernel ids) all show as `thread_work`: counting by that name in every
/// output gives exactly their dispatches together — CSV rows, JSON records,
/// Perfetto slices on every track (the `kernels` track's instants are
/// named `kernel symbol`, one per kernel id), rocpd's `kernels` and
/// `top_kernels`.
#[test]
fn truncated_names_count_exactly_in_every_output() {
    use harness::outputs::{check_pftrace, check_rocpd_against_csv, read_csv, read_json};
    let prog = hip_program("threads");
    let run = harness::hip::run_traced_formats(
        "threads_truncated",
        "pftrace,csv,json,rocpd",
        &["-o", "t", "-T"],
        &prog,
        &["4", "25"],
        &[],
    );
    run.assert_success();
    let report = single_report(&run);
    let templated: u64 = report
        .kernels
        .iter()
        .filter(|(name, _)| name.contains("thread_work<"))
        .map(|(_, k)| k.count)
        .sum();
    assert_eq!(templated, 100, "program report: {:?}", report.kernels);
    let rows = read_csv(&run.dir.join("t_kernel_trace.csv"));
    let mut per_name: BTreeMap<String, u64> = BTreeMap::new();
    let mut ids_of_work = std::collections::BTreeSet::new();
    for r in &rows {
        *per_name.entry(r.kernel_name.clone()).or_default() += 1;
        if r.kernel_name == "thread_work" {
            ids_of_work.insert(r.kernel_id);
        }
    }
    assert_eq!(
        per_name.get("thread_work"),
        Some(&templated),
        "{per_name:?}"
    );
    assert_eq!(
        ids_of_work.len(),
        4,
        "four kernels behind one truncated name"
    );
    let json = read_json(&run.dir.join("t_results.json"));
    let in_json = json["kernel_dispatches"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["kernel_name"] == "thread_work")
        .count() as u64;
    assert_eq!(in_json, templated, "JSON records named thread_work");
    let p = check_pftrace(&run.dir.join("t.pftrace"));
    for (name, n) in &per_name {
        assert_eq!(p.slices_by_name.get(name), Some(n), "slices named {name:?}");
    }
    assert_eq!(
        p.slices_by_name.get("kernel symbol").copied(),
        Some(
            rows.iter()
                .map(|r| r.kernel_id)
                .collect::<std::collections::BTreeSet<_>>()
                .len() as u64
        ),
        "one kernel symbol instant per kernel id"
    );
    check_rocpd_against_csv(&run.dir.join("t_results.db"), &rows);
}

/// The scale benchmark's second shape at CI size (`rprof-bench --only scale`
/// runs it with ten million dispatches): 8 host threads, each with its own
/// stream, over HIP's default 4 hardware queues, 500 launches each plus
/// ticks. Every output has exactly the program's dispatches per kernel
/// (check_outputs, the Perfetto checker included), on exactly 4 queues.
#[test]
fn eight_threads_on_four_queues() {
    let label = "threads_8x4";
    let prog = hip_program("threads");
    let run = run_traced(label, &["-o", label], &prog, &["8", "500"], &[]);
    run.assert_success();
    let report = single_report(&run);
    let f = check_outputs(&run.dir, label, &report);
    summary(label, &run, &f);
    assert_eq!(report.total, 8 * (500 + 125));
    assert_eq!(f.program_dispatches(), 5000);
    let queues: std::collections::BTreeSet<u64> =
        f.program_rows().iter().map(|r| r.queue_id).collect();
    assert_eq!(queues.len(), 4, "queues {queues:?}");
}

/// The driver-event waits of one run (`RPROF_EMU_EVENT_REPORT`): all, and
/// those that returned without sleeping.
fn event_waits(report: &std::path::Path) -> (u64, u64) {
    let text = std::fs::read_to_string(report)
        .unwrap_or_else(|e| panic!("no event report {}: {e}", report.display()));
    let value = |key: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{key} missing in {text:?}"))
    };
    (value("event_waits"), value("event_waits_at_once"))
}

/// ROCr's async-events thread (6.4.3, 7.0) mis-tracks the driver-event ages
/// of handlers listed after a hardware queue's two handlers, and every
/// intercept queue adds one for its doorbell: a doorbell whose pooled event
/// had fired before made that thread return from every wait at once for the
/// whole run, even while the app leaves the GPU idle (docs/performance-history.md).
/// rprof hands each doorbell an event that never fired. The program idles
/// 300 ms with its queues alive before it exits: a thread that sleeps makes
/// no wait there, a spinning one tens of thousands. Untraced the program
/// makes a few dozen waits; the bound leaves room for HIP's own short-lived
/// handlers, which the runtime mis-tracks the same way with or without rprof.
#[test]
fn the_runtime_event_thread_sleeps_under_rprof_queues() {
    let prog = hip_program("graph_storm");
    let args = ["64", "20", "300"];
    let untraced_dir = harness::run::fresh_dir("event_waits_untraced");
    let untraced_report = untraced_dir.join("events.txt");
    let mut cmd = Runtime::selected().command(harness::artefacts::rprof(), &[]);
    cmd.args(["--device", "emulated", "--"])
        .arg(&prog)
        .args(args);
    harness::run::clear_rprof_env(&mut cmd);
    cmd.env("RPROF_EMU_EVENT_REPORT", &untraced_report);
    let untraced = harness::run::run_with_timeout(cmd, untraced_dir);
    untraced.assert_success();
    let traced_report = harness::run::fresh_dir("event_waits_report").join("events.txt");
    let report = traced_report.to_str().unwrap();
    let run = run_traced(
        "event_waits",
        &["-o", "run"],
        &prog,
        &args,
        &[("RPROF_EMU_EVENT_REPORT", report)],
    );
    run.assert_success();
    let facts = check_outputs(&run.dir, "run", &single_report(&run));
    assert_eq!(facts.program_dispatches(), 64 * 20);
    let (_, untraced_at_once) = event_waits(&untraced_report);
    let (waits, at_once) = event_waits(&traced_report);
    eprintln!(
        "driver-event waits returning at once: untraced {untraced_at_once}, traced {at_once} of {waits}"
    );
    assert!(
        at_once <= untraced_at_once + 1_000,
        "the runtime's event thread spun: {at_once} of {waits} waits returned at once \
         (untraced: {untraced_at_once})"
    );
}

/// Kernels loaded at run time and unloaded again, as JIT compilers do:
/// `module_reload` loads, launches 100 times and unloads a code object four
/// times over, alternating two of the same layout whose kernel differs only
/// in name (`kernel_alpha`, `kernel_gamma`). The runtime gives a round's
/// kernel the address an earlier round's had (the emulated GPU ran several
/// rounds at one kernel object), so a kernel object names different kernels
/// over the run.
/// Every dispatch carries the name of the round it was launched in, in
/// every output, however late its record reaches the writer: before the fix
/// whole rounds came out under the next round's name (300 / 100 in five of
/// five runs on 5.2).
#[test]
fn a_kernel_object_reused_by_each_module_load_names_each_rounds_dispatches() {
    let label = "module_reload";
    let device = harness::run::fresh_dir("module_reload_device").join("device.txt");
    let facts = trace_and_check_env(
        label,
        "module_reload",
        &["100", "4"],
        true,
        &[(
            "RPROF_EMU_EVENT_REPORT",
            device.to_str().expect("UTF-8 path"),
        )],
    );
    let rows = facts.program_rows();
    assert_eq!(rows.len(), 400);
    for (n, r) in rows.iter().enumerate() {
        let round = n / 100;
        let expect = if round % 2 == 0 {
            "kernel_alpha"
        } else {
            "kernel_gamma"
        };
        assert_eq!(
            r.kernel_name, expect,
            "dispatch {} is round {round}'s",
            r.dispatch_id
        );
    }
    // The precondition: the device ran the 400 launches at fewer kernel
    // objects than there were rounds, whole rounds each (one object on 5.2
    // and 6.1; on 6.4 the first round's kernel sits elsewhere, the other
    // three rounds' at one object).
    let report = std::fs::read_to_string(&device).expect("the emulated GPU's report");
    let launches: Vec<u64> = report
        .lines()
        .filter(|l| l.starts_with("kernel_object=") && !l.contains("symbol=__amd_rocclr"))
        .filter_map(|l| number_after(l, " launches="))
        .filter(|&n| n >= 100)
        .collect();
    assert_eq!(launches.iter().sum::<u64>(), 400, "{report}");
    assert!(
        launches.len() < 4 && launches.iter().all(|n| n % 100 == 0),
        "no kernel object ran two rounds: {launches:?}\n{report}"
    );
}

/// Two GPUs (the emulated GPU with `RPROF_EMU_GPUS=gfx90a,gfx90a`):
/// `multi_gpu` drives both from one thread, each with its own kernel
/// (`gpu_work<d>`, d+1 blocks) 100 times. Besides the shared checks, every
/// output puts each dispatch on its own GPU: the CSV's agent ids (one per
/// kernel, 0 and 1), the JSON's (dispatch by dispatch as the CSV's, and two
/// GPU agents), and the Perfetto trace's slices under each GPU's track (as
/// many as the CSV has rows on that agent, the runtime's own kernels
/// included).
#[test]
fn kernels_on_two_gpus_are_each_recorded_on_their_own_gpu() {
    let facts = trace_and_check_env(
        "multi_gpu",
        "multi_gpu",
        &["100"],
        true,
        &[("RPROF_EMU_GPUS", "gfx90a,gfx90a")],
    );
    let mut by_kernel: BTreeMap<(String, u64), u64> = BTreeMap::new();
    for r in facts.program_rows() {
        *by_kernel
            .entry((r.kernel_name.clone(), r.agent_id))
            .or_default() += 1;
    }
    assert_eq!(
        by_kernel.into_iter().collect::<Vec<_>>(),
        [
            (("void gpu_work<0>(int*)".to_string(), 0), 100),
            (("void gpu_work<1>(int*)".to_string(), 1), 100),
        ]
    );
    let agents = facts.json["agents"].as_array().expect("JSON agents");
    assert_eq!(
        agents
            .iter()
            .map(|a| (a["index"].as_u64(), a["type"].as_str()))
            .collect::<Vec<_>>(),
        [(Some(0), Some("GPU")), (Some(1), Some("GPU"))]
    );
    let csv_agents: BTreeMap<u64, u64> = facts
        .rows
        .iter()
        .map(|r| (r.dispatch_id, r.agent_id))
        .collect();
    let json_agents: BTreeMap<u64, u64> = facts.json["kernel_dispatches"]
        .as_array()
        .expect("kernel_dispatches")
        .iter()
        .map(|d| {
            (
                d["dispatch_id"].as_u64().expect("dispatch_id"),
                d["agent_id"].as_u64().expect("agent_id"),
            )
        })
        .collect();
    assert_eq!(json_agents, csv_agents, "JSON and CSV agents");
    let mut csv_per_gpu: BTreeMap<u64, u64> = BTreeMap::new();
    for agent in csv_agents.values() {
        *csv_per_gpu.entry(*agent).or_default() += 1;
    }
    // The checker's track lines: `[track] GPU 1 (gfx90a) / queue 3 / ...: N slices`.
    let mut trace_per_gpu: BTreeMap<u64, u64> = BTreeMap::new();
    for line in facts.pftrace.report.lines() {
        let Some(track) = line.trim_start().strip_prefix("[track] GPU ") else {
            continue;
        };
        let gpu = number_after(&format!(" {track}"), " ").expect("GPU index");
        let slices = number_after(line, ": ").expect("slice count");
        if !track.contains("copies") {
            *trace_per_gpu.entry(gpu).or_default() += slices;
        }
    }
    assert_eq!(
        trace_per_gpu, csv_per_gpu,
        "kernel slices per GPU track against CSV rows per agent\n{}",
        facts.pftrace.report
    );
}

/// Kernel times the app reads from its own completion signal, as HIP's
/// launch events do (`hipExtLaunchKernelGGL` with a start and a stop event,
/// then `hipEventElapsedTime`): every one of `event_timing`'s five 1 ms
/// kernels (the emulated GPU's `RPROF_EMU_KERNEL_NS`) reads 1 ms, as
/// untraced, whichever way rprof completes the app's signal. With the
/// default forwarding barrier rprof answers the app's query
/// (`hsa_amd_profiling_get_dispatch_time`) with the kernel's times; with
/// host forwarding (`RPROF_FORWARD_APP_SIGNAL=host`) it gives the app's signal
/// the kernel's ticks before completing it. HIP 6.4 read 0 µs without either.
/// Host forwarding is checked where HIP takes these times from the kernel's
/// own signal (HIP 6.4, the 6.4 and 7.0 roots): HIP 5.2 and 5.7 time them
/// with markers that wait for the app's signal, so there the events also
/// measure how late the completion thread forwards it (up to 4.6 ms with
/// other tests running beside it), the latency host forwarding is known to
/// cost (docs/completion.md).
#[test]
fn an_app_timing_its_kernels_with_launch_events_reads_their_times() {
    let modes: &[&str] = match Runtime::selected().version() {
        "6.4" | "7.0" => &["barrier", "host"],
        _ => &["barrier"],
    };
    for &forwarding in modes {
        let label = format!("event_timing_{forwarding}");
        let run = run_traced(
            &label,
            &["-o", &label],
            &hip_program("event_timing"),
            &["5"],
            &[
                ("RPROF_FORWARD_APP_SIGNAL", forwarding),
                ("RPROF_EMU_KERNEL_NS", "1000000"),
            ],
        );
        run.assert_success();
        let report = single_report(&run);
        let facts = check_outputs(&run.dir, &label, &report);
        assert_eq!(facts.program_dispatches(), 5);
        let line = run
            .stdout
            .lines()
            .find(|l| l.starts_with("EVENT_TIMING "))
            .unwrap_or_else(|| panic!("no EVENT_TIMING line:\n{}", run.stdout));
        let (min, max) = (
            number_after(line, " min_us=").expect("min_us"),
            number_after(line, " max_us=").expect("max_us"),
        );
        assert!(
            (950..=1500).contains(&min) && (950..=1500).contains(&max),
            "{forwarding} forwarding: event times of 1 ms kernels: {line}"
        );
    }
}

/// A ROCm library's kernels, which nobody here wrote: `rocrand_gen` has
/// rocRAND generate 8 batches with each of four generators. rocRAND
/// launches one kernel per batch, plus one that seeds the engines of the
/// two generators that keep state (XORWOW, MRG32k3a): 34 dispatches under
/// six names, templates whose mangled names (on ROCm 6.4, `TnDa` for an
/// `auto` parameter) must come out demangled. The program cannot say which
/// names rocRAND uses, so the report `check_outputs` compares every output
/// with is made from those expectations and the CSV's names (each one of
/// the six generator kernels); it then checks the JSON, the Perfetto trace,
/// the ids and the flows as for every other program. The emulated GPU, with
/// its copy engine on (`RPROF_EMU_SDMA=1`, so ROCr copies the Sobol tables
/// without a blit kernel), ran as many kernels on 6.4 and 7.0, and two more
/// on 5.2 and 6.1 that the runtime dispatches on its own internal queues,
/// which no tool that works through the API tables sees.
#[test]
fn a_rocm_librarys_kernels_are_each_traced_once_under_demangled_names() {
    let lib = LibraryRun::new("rocrand_gen", "8", " calls=8 generators=4 numbers=2097152");
    let kernels = lib.csv_kernels(true);
    let names: Vec<&String> = kernels.keys().collect();
    assert!(
        names.iter().all(|n| !n.starts_with("_Z")),
        "a name left mangled: {names:#?}"
    );
    // Which generator each kernel belongs to, from its demangled name.
    let family = |n: &str| {
        ["philox", "xorwow", "mrg32k3a", "sobol"]
            .into_iter()
            .find(|f| n.contains(f))
            .unwrap_or_else(|| panic!("a kernel of no generator: {n}"))
    };
    let mut per_family: BTreeMap<(&str, bool), u64> = BTreeMap::new();
    for (n, k) in &kernels {
        let seeds = n.contains("init_");
        assert!(
            per_family.insert((family(n), seeds), k.count).is_none(),
            "two names for one kernel: {names:#?}"
        );
    }
    assert_eq!(
        per_family.into_iter().collect::<Vec<_>>(),
        [
            (("mrg32k3a", false), 8),
            (("mrg32k3a", true), 1),
            (("philox", false), 8),
            (("sobol", false), 8),
            (("xorwow", false), 8),
            (("xorwow", true), 1),
        ]
    );
    let facts = lib.check(kernels, 34);
    assert_eq!(facts.program_dispatches(), 34);
}

/// A traced run of a hip-tests program on a ROCm library (copy engine on,
/// so that no copy runs as a kernel), with the emulated GPU's exit report
/// in a file of its own: the truth for a library whose kernels no program
/// of ours lists.
struct LibraryRun {
    label: String,
    run: harness::run::Run,
    /// The pid the program printed after its banner word.
    pid: u32,
    device_report: std::path::PathBuf,
}

impl LibraryRun {
    /// Runs `prog ARG` and checks that it printed `done` (after its pid).
    fn new(prog: &str, arg: &str, done: &str) -> Self {
        let label = format!("{prog}_{arg}");
        let device_report = harness::run::fresh_dir(&format!("{label}_device")).join("device.txt");
        let run = run_traced(
            &label,
            &["-o", &label],
            &hip_program(prog),
            &[arg],
            &[
                ("RPROF_EMU_SDMA", "1"),
                (
                    "RPROF_EMU_EVENT_REPORT",
                    device_report.to_str().expect("UTF-8 path"),
                ),
            ],
        );
        run.assert_success();
        assert!(run.stdout.contains(done), "{}", run.stdout);
        let pid = number_after(&run.stdout, " pid=").expect("pid=");
        LibraryRun {
            label,
            pid: u32::try_from(pid).expect("a pid"),
            run,
            device_report,
        }
    }

    /// The CSV's kernel names with their dispatch counts (geometry: the
    /// first dispatch's, checked for every launch only if `fixed_geometry`).
    fn csv_kernels(&self, fixed_geometry: bool) -> BTreeMap<String, KernelLaunches> {
        let rows = read_csv(
            &self
                .run
                .dir
                .join(format!("{}_kernel_trace.csv", self.label)),
        );
        let mut kernels: BTreeMap<String, KernelLaunches> = BTreeMap::new();
        for r in &rows {
            kernels
                .entry(r.kernel_name.clone())
                .or_insert(KernelLaunches {
                    count: 0,
                    grid: r.grid,
                    workgroup: r.workgroup,
                    fixed_geometry,
                })
                .count += 1;
        }
        kernels
    }

    /// The shared output checks against `kernels` (`total` dispatches, none
    /// of the HIP runtime's own), then against the device, kernel object by
    /// kernel object: all it ran besides them is the runtime's blit kernel.
    fn check(&self, kernels: BTreeMap<String, KernelLaunches>, total: u64) -> TraceFacts {
        let expected = ProcessReport {
            pid: self.pid,
            rank: None,
            kernels,
            total,
        };
        let facts = check_outputs(&self.run.dir, &self.label, &expected);
        assert_eq!(facts.runtime_kernels, 0);
        let device =
            std::fs::read_to_string(&self.device_report).expect("the emulated GPU's report");
        let internal = check_against_device(&facts, &device);
        assert_eq!(internal, runtime_blit_launches(), "{device}");
        let ran = number_after(&device, "\nkernels=").expect("kernels= in the report");
        assert_eq!(ran, total + internal, "kernels the device ran:\n{device}");
        facts
    }
}

/// Launches of the runtime's own (unnamed) blit kernel on its internal
/// queue in each library program's run, with the copy engine on: two on
/// ROCr 5.2.3 and 6.1.2, none from 6.4 on. No API-table tool sees them.
fn runtime_blit_launches() -> u64 {
    match Runtime::selected().version() {
        "6.4" | "7.0" => 0,
        _ => 2,
    }
}

/// rocPRIM is header-only: its scan, reduction and radix-sort kernels are
/// compiled into `rocprim_ops` from templates nobody here wrote, and which
/// kernels it launches (and how many, with which geometry) differs between
/// its versions (5.3.3 on the host, 5.7.1 and 6.4.3 in the roots). The
/// truth is the emulated GPU's own record of what it ran: every kernel
/// object in the trace was launched exactly as often, under the same
/// symbol, and nothing else ran but the runtime's blit kernel. On top, the
/// usual cross-format checks, and: every name demangled into `rocprim::`,
/// the three algorithms present, each kernel launched a multiple of CALLS
/// times (every call launches the same kernels).
#[test]
fn a_header_only_rocm_librarys_kernels_are_each_traced_as_often_as_the_device_ran_them() {
    let calls = 3;
    let lib = LibraryRun::new("rocprim_ops", "3", " calls=3 algorithms=3 items=1048576");
    let kernels = lib.csv_kernels(false);
    for (name, k) in &kernels {
        assert!(
            name.starts_with("void rocprim::"),
            "a kernel not demangled into rocPRIM: {name}"
        );
        assert_eq!(k.count % calls, 0, "{name}: {} launches", k.count);
    }
    for algorithm in ["scan", "reduce", "sort"] {
        assert!(
            kernels.keys().any(|n| n.contains(algorithm)),
            "no {algorithm} kernel among {:#?}",
            kernels.keys().collect::<Vec<_>>()
        );
    }
    let total = kernels.values().map(|k| k.count).sum();
    let facts = lib.check(kernels, total);
    eprintln!(
        "rocPRIM: {total} dispatches under {} names",
        facts.per_name.len()
    );
}
