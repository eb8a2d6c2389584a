//! `--marker-trace` and `--kernel-rename` end to end on the selected runtime
//! (`RPROF_TEST_ROCM=5.2|6.1|6.4`): `tests/programs/roctx/marker_app.cpp`
//! (HIP) linked to a ROCTx library with libroctx64's symbol version
//! (`tests/programs/roctx/roctx_test_lib.c`, ours, built in the root), run
//! under `rprof`, which preloads the tool library so its ROCTx functions
//! come first. Exact counts of each marker and each (renamed) kernel in the
//! CSV, JSON and Perfetto outputs; the app's ROCTx return values and every
//! call reaching its own library; and the `HSA_TOOLS_LIB`-only load saying
//! that capture is impossible. `--sys-trace` on `marker_app copies` (copies,
//! markers and kernels in one HIP program): exact counts of each in the CSV,
//! JSON, Perfetto and rocpd outputs, and rocpd's views answering with the
//! CSV's numbers. On 6.1 and 6.4, the app linked to the ROCTx library the
//! runtime's Debian ships (roctracer's `libroctx64.so.4`, in the root via
//! `scripts/rocm-env.sh`) is captured the same way, with the library's own
//! return values.

mod harness;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use harness::artefacts::{build, build_cached, program, programs_dir};
use harness::outputs::{check_pftrace, check_rocpd_against_csv, read_csv, read_json};
use harness::run::{clear_rprof_env, fresh_dir, number_after, run_with, HIP_RUN_TIMEOUT};
use harness::Runtime;

/// What marker_app prints about its ROCTx return values (the documented
/// defaults: levels from 0, -1 for a pop with nothing open, range ids from 1).
const LEVELS: &str =
    "LEVELS push_outer=0 push_inner=1 pop_inner=1 pop_outer=0 pop_empty=-1 range_id=1";
/// ROCTx calls the app makes (7 marks, 3 pushes, 4 pops, 1 start, 1 stop,
/// 2 thread names): all must reach its own ROCTx library.
const ROCTX_CALLS: &str = "ROCTX_CALLS 18";

/// Markers the app records, by message.
fn expected_markers() -> BTreeMap<String, u64> {
    [
        ("before-hip", 1),
        ("tick", 5),
        ("worker-mark", 1),
        ("outer", 1),
        ("inner", 1),
        ("worker-range", 1),
        ("cross-thread", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The test ROCTx library and the app linked to it.
fn marker_app() -> &'static PathBuf {
    static APP: OnceLock<PathBuf> = OnceLock::new();
    APP.get_or_init(|| {
        let src = programs_dir().join("roctx");
        let (c, map) = (src.join("roctx_test_lib.c"), src.join("exportmap"));
        let lib = build_cached("libroctx64.so.4", &[&c, &map], |out| {
            let mut cmd = Runtime::selected().tool("gcc");
            cmd.args(["-shared", "-fPIC", "-O1", "-Wl,-soname,libroctx64.so.4"])
                .arg(format!("-Wl,--version-script={}", map.display()))
                .arg(&c)
                .arg("-o")
                .arg(out);
            cmd
        });
        // The loader looks for the soname: one directory holding it.
        let mut dir = lib.clone().into_os_string();
        dir.push(".d");
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        let so = dir.join("libroctx64.so.4");
        if !so.exists() {
            // One copy per build hash, so a changed library gets a new directory.
            std::fs::copy(&lib, &so).unwrap();
        }
        program(
            "hipcc",
            &src.join("marker_app.cpp"),
            &[&c],
            &["--offload-arch=gfx90a".into(), "-O1".into()],
            &[
                format!("-L{}", dir.display()).into(),
                "-l:libroctx64.so.4".into(),
                format!("-Wl,-rpath,{}", dir.display()).into(),
            ],
        )
    })
}

/// Runs marker_app under `rprof --kernel-trace --marker-trace [extra]`.
fn run_rprof(label: &str, extra: &[&str]) -> harness::Run {
    run_rprof_with(label, &[&["--marker-trace"], extra].concat())
}

/// Runs marker_app under `rprof --kernel-trace [options]`; the app's ROCTx
/// values and calls must be unchanged.
fn run_rprof_with(label: &str, options: &[&str]) -> harness::Run {
    let app = marker_app();
    let b = build();
    b.emulator();
    let dir = fresh_dir(label);
    let mut cmd = Runtime::selected().command(&b.rprof, &[]);
    cmd.args([
        "--kernel-trace",
        "--output-format",
        "pftrace,csv,json",
        "-o",
        "run",
        "-d",
    ])
    .arg(&dir)
    .args(options)
    .arg("--")
    .arg(app);
    clear_rprof_env(&mut cmd);
    let run = run_with(cmd, dir, HIP_RUN_TIMEOUT);
    run.assert_success();
    assert!(
        run.stdout.contains(LEVELS),
        "ROCTx return values changed:\n{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(ROCTX_CALLS),
        "calls not passed on:\n{}",
        run.stdout
    );
    run
}

/// Count of each value of `column` in a CSV file.
fn csv_counts(path: &std::path::Path, column: &str) -> BTreeMap<String, u64> {
    let mut r = csv::Reader::from_path(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let idx = r
        .headers()
        .unwrap()
        .iter()
        .position(|h| h == column)
        .unwrap();
    let mut m = BTreeMap::new();
    for rec in r.records() {
        *m.entry(rec.unwrap()[idx].to_string()).or_insert(0) += 1;
    }
    m
}

/// Slices of the checked trace per name.
fn slices_by_name(json: &serde_json::Value) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for s in json["slices"].as_array().unwrap() {
        *m.entry(s["name"].as_str().unwrap().to_string())
            .or_insert(0) += 1;
    }
    m
}

/// Kernel names in the kernel trace, with the `(int*)` suffix HIP may add
/// removed.
fn kernel_names(path: &std::path::Path) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for (k, v) in csv_counts(path, "Kernel_Name") {
        *m.entry(k.split('(').next().unwrap().to_string())
            .or_insert(0) += v;
    }
    m
}

fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

#[test]
fn markers_in_every_output() {
    let run = run_rprof("markers", &[]);
    let csv = run.output("_marker_api_trace.csv");
    assert_eq!(csv_counts(&csv, "Function"), expected_markers());
    assert_eq!(
        csv_counts(&csv, "Domain"),
        counts(&[("MARKER_CORE_RANGE_API", 11)])
    );
    // Marks are instants; every range has a positive length; the cross-thread
    // range belongs to the thread that started it (the main thread).
    let mut r = csv::Reader::from_path(&csv).unwrap();
    let mut main_tid = None;
    for rec in r.records() {
        let rec = rec.unwrap();
        let (name, pid, tid, start, end) = (
            &rec[1],
            rec[2].parse::<u64>().unwrap(),
            rec[3].parse::<u64>().unwrap(),
            rec[5].parse::<u64>().unwrap(),
            rec[6].parse::<u64>().unwrap(),
        );
        let is_mark = matches!(name, "before-hip" | "tick" | "worker-mark");
        assert_eq!(start == end, is_mark, "{name}: {start}..{end}");
        if name == "cross-thread" || name == "outer" {
            assert_eq!(tid, pid, "{name} is on the main thread");
            main_tid = Some(tid);
        }
        if name == "worker-range" || name == "worker-mark" {
            assert_ne!(tid, pid, "{name} is on the worker thread");
        }
    }
    assert!(main_tid.is_some());
    // Kernels keep their names without --kernel-rename.
    assert_eq!(
        kernel_names(&run.output("_kernel_trace.csv")),
        counts(&[
            ("k_inner", 3),
            ("k_outer", 2),
            ("k_plain", 1),
            ("k_worker", 2)
        ])
    );

    let json = read_json(&run.output("_results.json"));
    let mut by_message = BTreeMap::new();
    let mut by_operation = BTreeMap::new();
    for m in json["marker_api"].as_array().unwrap() {
        *by_message
            .entry(m["message"].as_str().unwrap().to_string())
            .or_insert(0) += 1;
        *by_operation
            .entry(m["operation"].as_str().unwrap().to_string())
            .or_insert(0) += 1;
    }
    assert_eq!(by_message, expected_markers());
    assert_eq!(
        by_operation,
        counts(&[
            ("roctxMarkA", 7),
            ("roctxThreadRangeA", 3),
            ("roctxProcessRangeA", 1)
        ])
    );

    let trace = check_pftrace(&run.output(".pftrace"));
    let slices = slices_by_name(&trace.json);
    for (name, n) in expected_markers() {
        assert_eq!(
            slices.get(&name),
            Some(&n),
            "slices named {name}: {slices:?}"
        );
    }
    // Thread names from roctxNameOsThread; the start/stop range on its track.
    let tracks: Vec<String> = trace.json["tracks"]
        .as_object()
        .unwrap()
        .values()
        .map(|t| t["name"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(tracks.iter().any(|t| t == "main-thread"), "{tracks:?}");
    assert!(tracks.iter().any(|t| t == "worker"), "{tracks:?}");
    assert_eq!(
        tracks.iter().filter(|t| *t == "ROCTx ranges").count(),
        1,
        "{tracks:?}"
    );
}

#[test]
fn kernel_rename_names_kernels_after_their_innermost_range() {
    // rocprofv3's rename stack (facts §3.5, tool.cpp kernel_rename_callback):
    // push/pop ranges and marks; k_plain follows the mark "before-hip".
    let run = run_rprof("rename", &["--kernel-rename", "--stats"]);
    assert_eq!(
        kernel_names(&run.output("_kernel_trace.csv")),
        counts(&[
            ("inner", 3),
            ("outer", 2),
            ("before-hip", 1),
            ("worker-range", 2)
        ])
    );
    let json = read_json(&run.output("_results.json"));
    let mut names = BTreeMap::new();
    for d in json["kernel_dispatches"].as_array().unwrap() {
        let n = d["kernel_name"].as_str().unwrap();
        *names
            .entry(n.split('(').next().unwrap().to_string())
            .or_insert(0) += 1;
    }
    assert_eq!(
        names,
        counts(&[
            ("inner", 3),
            ("outer", 2),
            ("before-hip", 1),
            ("worker-range", 2)
        ])
    );
    // Perfetto: each range's slice plus its kernels; the kernel table keeps
    // the kernels' own names (one instant each).
    let trace = check_pftrace(&run.output(".pftrace"));
    let slices = slices_by_name(&trace.json);
    assert_eq!(slices.get("inner"), Some(&(1 + 3)), "{slices:?}");
    assert_eq!(slices.get("outer"), Some(&(1 + 2)), "{slices:?}");
    assert_eq!(slices.get("worker-range"), Some(&(1 + 2)), "{slices:?}");
    // k_plain, outside any range, is named after the mark made before it
    // ("before-hip", the app's first ROCTx call; its extra pop, with no
    // range open, does not drop it), as rocprofv3 names it.
    assert_eq!(slices.get("before-hip"), Some(&(1 + 1)), "{slices:?}");
    assert_eq!(slices.get("k_plain"), None, "{slices:?}");
    assert_eq!(trace.kernel_slice_total, 8);
    // --stats: kernels by their (renamed) names, markers by message.
    let calls = |path: &std::path::Path| -> BTreeMap<String, u64> {
        let mut r =
            csv::Reader::from_path(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        r.records()
            .map(|rec| {
                let rec = rec.unwrap();
                (
                    rec[0].split('(').next().unwrap().to_string(),
                    rec[1].parse().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(
        calls(&run.output("_kernel_stats.csv")),
        counts(&[
            ("inner", 3),
            ("outer", 2),
            ("before-hip", 1),
            ("worker-range", 2)
        ])
    );
    assert_eq!(
        calls(&run.output("_marker_api_stats.csv")),
        expected_markers()
    );
}

#[test]
fn hsa_tools_lib_alone_says_capture_is_impossible() {
    let app = marker_app();
    let b = build();
    let dir = fresh_dir("tools-lib-only");
    let emulator = b.emulator();
    let mut cmd = Runtime::selected().command(app, &emulator.loader_env);
    clear_rprof_env(&mut cmd);
    cmd.env("HSA_TOOLS_LIB", &b.tool)
        .env("RPROF_KERNEL_TRACE", "1")
        .env("RPROF_MARKER_TRACE", "1")
        .env("RPROF_OUTPUT_DIR", &dir)
        .env("RPROF_OUTPUT_NAME", "run")
        .env("RPROF_OUTPUT_FORMAT", "csv");
    let run = run_with(cmd, dir, HIP_RUN_TIMEOUT);
    run.assert_success();
    assert!(run.stdout.contains(LEVELS), "{}", run.stdout);
    assert!(run.stdout.contains(ROCTX_CALLS), "{}", run.stdout);
    let said = run
        .stderr
        .lines()
        .filter(|l| l.contains("ROCTx calls cannot be captured"))
        .count();
    assert_eq!(said, 1, "stderr:\n{}", run.stderr);
    assert!(!run.output("_marker_api_trace.csv").exists());
    assert_eq!(
        kernel_names(&run.output("_kernel_trace.csv"))
            .values()
            .sum::<u64>(),
        8
    );
}

#[test]
fn kernel_rename_alone_renames_without_recording_markers() {
    let run = run_rprof_with("rename-only", &["--kernel-rename"]);
    assert!(!run.output("_marker_api_trace.csv").exists());
    assert_eq!(
        kernel_names(&run.output("_kernel_trace.csv")),
        counts(&[
            ("inner", 3),
            ("outer", 2),
            ("before-hip", 1),
            ("worker-range", 2)
        ])
    );
    let json = read_json(&run.output("_results.json"));
    assert_eq!(json["marker_api"].as_array().unwrap().len(), 0);
}

/// Runs `rprof <trace_args> --output-format pftrace,csv,json,rocpd -o run`
/// on `marker_app <mode>` in the fresh run directory `label`; asserts it
/// succeeded.
fn run_marker_app_every_format(label: &str, trace_args: &[&str], mode: &str) -> harness::Run {
    run_marker_app_every_format_with(label, trace_args, mode, &[])
}

/// [`run_marker_app_every_format`] with `env` set for the run.
fn run_marker_app_every_format_with(
    label: &str,
    trace_args: &[&str],
    mode: &str,
    env: &[(&str, &str)],
) -> harness::Run {
    let app = marker_app();
    let b = build();
    b.emulator();
    let dir = fresh_dir(label);
    let mut cmd = Runtime::selected().command(&b.rprof, &[]);
    cmd.args(trace_args)
        .args([
            "--output-format",
            "pftrace,csv,json,rocpd",
            "-o",
            "run",
            "-d",
        ])
        .arg(&dir)
        .arg("--")
        .arg(app)
        .arg(mode);
    clear_rprof_env(&mut cmd);
    cmd.envs(env.iter().copied());
    let run = run_with(cmd, dir, HIP_RUN_TIMEOUT);
    run.assert_success();
    run
}

/// `marker_app unclosed`: ranges left open at exit (3 push/pop ranges, one
/// of them on a thread that ended, and 1 start/stop range) are not in any
/// output, as with rocprofv3 (a range is recorded when it ends), and the run
/// says so once with the exact counts; the mark made after them is there.
#[test]
fn ranges_open_at_exit_are_left_out_of_every_format_and_said() {
    let run = run_marker_app_every_format(
        "unclosed",
        &["--kernel-trace", "--marker-trace"],
        "unclosed",
    );
    assert!(run.stdout.contains(LEVELS), "{}", run.stdout);
    assert!(run.stdout.contains("ROCTX_CALLS 23"), "{}", run.stdout);
    let said: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("never popped"))
        .collect();
    assert_eq!(
        said,
        [
            "rprof: warning: 3 ROCTx push/pop ranges never popped and 1 start/stop range never \
          stopped by the end of the process are not in the outputs (a range is recorded when it \
          ends, as rocprofv3 does; marks and closed ranges are all there)"
        ],
        "stderr:\n{}",
        run.stderr
    );
    let mut expected = expected_markers();
    expected.insert("last-mark".into(), 1);
    let csv = run.output("_marker_api_trace.csv");
    assert_eq!(csv_counts(&csv, "Function"), expected);
    assert_eq!(json_marker_counts(&run), expected);
    let trace = check_pftrace(&run.output(".pftrace"));
    let slices = slices_by_name(&trace.json);
    for name in [
        "thread-left-open",
        "left-open-outer",
        "left-open-inner",
        "left-started",
    ] {
        assert_eq!(slices.get(name), None, "{name}: {slices:?}");
    }
    assert_eq!(slices.get("last-mark"), Some(&1), "{slices:?}");
    assert_eq!(rocpd_marker_counts(&run), expected);
}

/// Markers made before or while rprof's session starts beside the app (here
/// held back 3 s by the tests' knob `RPROF_START_DELAY_MS`) do not make the
/// app's thread wait for the start: they wait in the early queue, and every
/// output still holds every marker exactly once. (Before, `OnLoad` handing
/// over a mark made before `hipInit` waited for the whole start inside
/// `hipInit`, and a first marker right after HIP's start-up waited ~1 ms.)
#[test]
fn a_marker_made_while_the_session_starts_does_not_wait_for_it() {
    let run = run_marker_app_every_format_with(
        "marker-slow-start",
        &["--kernel-trace", "--marker-trace"],
        "timed-mark",
        &[("RPROF_START_DELAY_MS", "3000")],
    );
    assert!(run.stdout.contains(LEVELS), "{}", run.stdout);
    assert!(run.stdout.contains("ROCTX_CALLS 19"), "{}", run.stdout);
    // hipInit loads rprof, whose OnLoad hands the "before-hip" mark made
    // earlier to the session; then the app marks at once.
    for key in ["HIP_INIT_US ", "MARK_AFTER_INIT_US "] {
        let us =
            number_after(&run.stdout, key).unwrap_or_else(|| panic!("no {key}in\n{}", run.stdout));
        assert!(
            us < 1_500_000,
            "{key}{us}: the app's thread waited for the 3 s start"
        );
    }
    assert!(
        run.elapsed >= std::time::Duration::from_secs(3),
        "the start was not delayed: {:?}",
        run.elapsed
    );
    let mut expected = expected_markers();
    expected.insert("after-init".into(), 1);
    assert_eq!(
        csv_counts(&run.output("_marker_api_trace.csv"), "Function"),
        expected
    );
    assert_eq!(json_marker_counts(&run), expected);
    let trace = check_pftrace(&run.output(".pftrace"));
    let slices = slices_by_name(&trace.json);
    for (name, n) in &expected {
        assert_eq!(slices.get(name), Some(n), "{name}: {slices:?}");
    }
    assert_eq!(rocpd_marker_counts(&run), expected);
}

/// rocpd code objects of a real run: one row per loaded code object, with
/// what ROCr's loader says (URI, load base, size, delta, agent, storage);
/// every kernel symbol points at one (none at the row for unreadable code
/// objects); the app's five kernels share one, whose ELF size is the size
/// its URI names.
fn check_code_objects(db: &rusqlite::Connection) {
    let one = |sql: &str| -> i64 {
        db.query_row(sql, [], |r| r.get(0))
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    };
    let rows = one("SELECT count(*) FROM rocpd_info_code_object");
    assert!(rows >= 1, "code object rows: {rows}");
    assert_eq!(
        one("SELECT count(*) FROM code_objects"),
        rows,
        "rows the view drops"
    );
    assert_eq!(
        one("SELECT count(*) FROM rocpd_info_code_object WHERE id = 0"),
        0
    );
    assert_eq!(
        one(
            "SELECT count(*) FROM code_objects WHERE uri IS NULL OR load_base <= 0 \
             OR load_size <= 0 OR storage_type IS NULL OR json_extract(extdata, '$.size') <= 0"
        ),
        0
    );
    assert_eq!(
        one(
            "SELECT count(*) FROM kernel_symbols WHERE code_object_id NOT IN \
             (SELECT id FROM code_objects)"
        ),
        0
    );
    let app = "SELECT DISTINCT code_object_id FROM kernel_symbols WHERE kernel_name IN \
               ('k_inner', 'k_outer', 'k_plain', 'k_worker', 'k_copy')";
    assert_eq!(one(&format!("SELECT count(*) FROM ({app})")), 1);
    assert_eq!(
        one(&format!(
            "SELECT count(*) FROM kernel_symbols WHERE code_object_id IN ({app})
                      AND kernel_name IN ('k_inner', 'k_outer', 'k_plain', 'k_worker', 'k_copy')"
        )),
        5
    );
    let (uri, size, agent, storage): (String, i64, i64, String) = db
        .query_row(
            &format!(
                "SELECT uri, json_extract(extdata, '$.size'), agent_abs_index, storage_type \
                 FROM code_objects WHERE id IN ({app})"
            ),
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    eprintln!("app code object: {uri} size {size} agent {agent} {storage}");
    assert_eq!(agent, 0, "the GPU");
    let named: i64 = uri
        .rsplit("size=")
        .next()
        .and_then(|n| n.split('&').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no size in {uri}"));
    assert_eq!(size, named, "{uri}");
    assert!(matches!(storage.as_str(), "MEMORY" | "FILE"), "{storage}");
    // HIP names the executable it read the code object from (at an offset);
    // a code object it only had in memory is named after the process.
    let pid = one("SELECT pid FROM processes");
    let file = format!("file://{}#offset=", marker_app().display());
    let memory = format!("memory://{pid}#offset=");
    assert!(
        uri.starts_with(&file) || uri.starts_with(&memory),
        "{uri}: neither {file} nor {memory}"
    );
}

/// ROCTx calls of `marker_app copies`: 18, plus the "copies" push and pop and
/// three "copied" marks.
const ROCTX_CALLS_COPIES: &str = "ROCTX_CALLS 23";

/// Rows of a rocpd query `SELECT key, count(*) ... GROUP BY key`.
fn rocpd_counts(db: &rusqlite::Connection, sql: &str) -> BTreeMap<String, u64> {
    let mut st = db.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let rows = st
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
        .unwrap();
    rows.map(|r| {
        let (k, n) = r.unwrap();
        (k, n as u64)
    })
    .collect()
}

/// The JSON output's markers (`marker_api`), counted by message.
fn json_marker_counts(run: &harness::Run) -> BTreeMap<String, u64> {
    let json = read_json(&run.output("_results.json"));
    let mut by_message = BTreeMap::new();
    for m in json["marker_api"].as_array().unwrap() {
        *by_message
            .entry(m["message"].as_str().unwrap().to_string())
            .or_insert(0u64) += 1;
    }
    by_message
}

/// The rocpd database's markers (`regions_and_samples` of category
/// `MARKER_CORE_RANGE_API`), counted by message.
fn rocpd_marker_counts(run: &harness::Run) -> BTreeMap<String, u64> {
    let db = rusqlite::Connection::open(run.output("_results.db")).unwrap();
    rocpd_counts(
        &db,
        "SELECT json_extract(extdata, '$.message'), count(*) FROM regions_and_samples \
         WHERE category = 'MARKER_CORE_RANGE_API' GROUP BY 1",
    )
}

#[test]
fn sys_trace_counts_copies_markers_and_kernels_exactly_in_every_format() {
    let run = run_marker_app_every_format("sys-trace", &["--sys-trace"], "copies");
    assert!(run.stdout.contains(LEVELS), "{}", run.stdout);
    assert!(run.stdout.contains(ROCTX_CALLS_COPIES), "{}", run.stdout);

    // What each runtime does with the program's copies: the pinned
    // hipMemcpyAsync copies go through hsa_amd_memory_async_copy on every
    // runtime; HIP 5.2.3 and 5.7.1 stage the pageable hipMemcpy copies through
    // it too, HIP 6.4.3 copies them with its blit kernel (a dispatch).
    let rounds = 3;
    // HIP 6.4.3 (on ROCr 6.4.3 and 7.0) copies pageable memory with a blit kernel.
    let staged = !matches!(Runtime::selected(), Runtime::Rocm64 | Runtime::Rocm70);
    let mut copies = BTreeMap::from([
        (
            ("MEMORY_COPY_HOST_TO_DEVICE".to_string(), 1u64 << 20),
            rounds,
        ),
        (("MEMORY_COPY_DEVICE_TO_HOST".to_string(), 1 << 20), rounds),
    ]);
    let mut kernels = counts(&[
        ("k_inner", 3),
        ("k_outer", 2),
        ("k_plain", 1),
        ("k_worker", 2),
        ("k_copy", rounds),
    ]);
    if staged {
        copies.insert(("MEMORY_COPY_HOST_TO_DEVICE".into(), 16384), rounds);
        copies.insert(("MEMORY_COPY_DEVICE_TO_HOST".into(), 16384), rounds);
    } else {
        kernels.insert("__amd_rocclr_copyBuffer".into(), 2 * rounds);
    }
    let mut copies_by_direction: BTreeMap<String, u64> = BTreeMap::new();
    for ((d, _), n) in &copies {
        *copies_by_direction.entry(d.clone()).or_default() += n;
    }
    let mut markers = expected_markers();
    markers.insert("copies".into(), 1);
    markers.insert("copied".into(), rounds);

    // CSV.
    let rows = read_csv(&run.output("_kernel_trace.csv"));
    assert_eq!(
        kernel_names(&run.output("_kernel_trace.csv")),
        kernels,
        "CSV kernels"
    );
    let mut csv_kernels: BTreeMap<String, u64> = BTreeMap::new();
    for r in &rows {
        *csv_kernels.entry(r.kernel_name.clone()).or_default() += 1;
    }
    let copy_csv = run.output("_memory_copy_trace.csv");
    let mut r = csv::Reader::from_path(&copy_csv).unwrap();
    let mut csv_copies = BTreeMap::new();
    for rec in r.records() {
        let rec = rec.unwrap();
        *csv_copies
            .entry((rec[1].to_string(), rec[8].parse::<u64>().unwrap()))
            .or_insert(0u64) += 1;
    }
    assert_eq!(csv_copies, copies, "CSV copies");
    let marker_csv = run.output("_marker_api_trace.csv");
    assert_eq!(csv_counts(&marker_csv, "Function"), markers, "CSV markers");

    // JSON.
    let json = read_json(&run.output("_results.json"));
    let by = |list: &str, key: &str| -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for e in json[list].as_array().unwrap_or_else(|| panic!("{list}")) {
            *m.entry(e[key].as_str().unwrap().to_string()).or_insert(0) += 1;
        }
        m
    };
    assert_eq!(
        by("kernel_dispatches", "kernel_name"),
        csv_kernels,
        "JSON kernels"
    );
    let mut json_copies = BTreeMap::new();
    for c in json["memory_copies"].as_array().unwrap() {
        *json_copies
            .entry((
                c["operation"].as_str().unwrap().to_string(),
                c["bytes"].as_u64().unwrap(),
            ))
            .or_insert(0u64) += 1;
    }
    assert_eq!(json_copies, copies, "JSON copies");
    assert_eq!(by("marker_api", "message"), markers, "JSON markers");
    assert_eq!(json["metadata"]["records_lost"], 0);

    // Perfetto: slices by name, as trace_processor counts them.
    let trace = check_pftrace(&run.output(".pftrace"));
    assert_eq!(trace.kernel_slices, csv_kernels, "Perfetto kernel slices");
    let slices = &trace.slices_by_name;
    for (name, n) in csv_kernels
        .iter()
        .chain(&copies_by_direction)
        .chain(&markers)
    {
        assert_eq!(slices.get(name), Some(n), "Perfetto slices named {name}");
    }
    assert_eq!(trace.dangling_flows, 0);

    // rocpd: a user's first queries answer with the CSV's numbers.
    let path = run.output("_results.db");
    let facts = check_rocpd_against_csv(&path, &rows);
    assert_eq!(facts.kernels, rows.len() as u64);
    assert_eq!(facts.top_kernels, csv_kernels, "rocpd top_kernels");
    let db = rusqlite::Connection::open(&path).unwrap();
    check_code_objects(&db);
    let mut rocpd_copies = BTreeMap::new();
    let mut st = db
        .prepare("SELECT name, size, count(*) FROM memory_copies GROUP BY name, size")
        .unwrap();
    for row in st
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })
        .unwrap()
    {
        let (name, size, n) = row.unwrap();
        rocpd_copies.insert((name, size as u64), n as u64);
    }
    assert_eq!(rocpd_copies, copies, "rocpd memory_copies");
    // Ranges are regions named after their ROCTx operation; marks are
    // samples; each carries its message.
    assert_eq!(
        rocpd_counts(&db, "SELECT name, count(*) FROM regions GROUP BY name"),
        counts(&[("roctxThreadRangeA", 4), ("roctxProcessRangeA", 1)]),
        "rocpd regions"
    );
    let ranges: BTreeMap<String, u64> = markers
        .iter()
        .filter(|(m, _)| !matches!(m.as_str(), "before-hip" | "tick" | "worker-mark" | "copied"))
        .map(|(m, n)| (m.clone(), *n))
        .collect();
    assert_eq!(
        rocpd_counts(
            &db,
            "SELECT json_extract(extdata, '$.message'), count(*) FROM regions GROUP BY 1"
        ),
        ranges,
        "rocpd regions per message"
    );
    assert_eq!(
        rocpd_counts(
            &db,
            "SELECT json_extract(extdata, '$.message'), count(*) FROM regions_and_samples GROUP BY 1"
        ),
        markers,
        "rocpd regions_and_samples per message"
    );
}

/// marker_app built with `-DSHIPPED_ROCTX` and linked to the ROCTx library
/// the runtime's root ships (`libroctx64.so.4` of roctracer, Debian's
/// `libroctx-dev`), which has no `roctxNameOsThread`.
fn shipped_marker_app() -> PathBuf {
    let src = programs_dir().join("roctx");
    program(
        "hipcc",
        &src.join("marker_app.cpp"),
        &[],
        &[
            "--offload-arch=gfx90a".into(),
            "-O1".into(),
            "-DSHIPPED_ROCTX".into(),
        ],
        &["-lroctx64".into()],
    )
}

/// The `LEVELS` line of a run's stdout.
fn levels(run: &harness::Run) -> String {
    let l: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("LEVELS "))
        .collect();
    assert_eq!(l.len(), 1, "{}", run.stdout);
    l[0].to_string()
}

#[test]
fn markers_of_an_app_linked_to_the_runtimes_own_roctx_library() {
    if Runtime::selected() == Runtime::Rocm52 {
        eprintln!("Debian 12 (ROCm 5.2) ships no ROCTx library: the test ROCTx library covers it");
        return;
    }
    let app = shipped_marker_app();
    let b = build();
    let emulator = b.emulator();
    // The library's own return values, untraced.
    let mut cmd = Runtime::selected().command(&app, &emulator.loader_env);
    clear_rprof_env(&mut cmd);
    cmd.env_remove("HSA_TOOLS_LIB");
    let untraced = run_with(cmd, fresh_dir("shipped-untraced"), HIP_RUN_TIMEOUT);
    untraced.assert_success();
    let own = levels(&untraced);
    // Every call reached the shipped library (its tracer hook counts them):
    // 7 marks, 3 pushes, 4 pops, 1 start, 1 stop; no thread names.
    assert!(
        untraced.stdout.contains("ROCTX_CALLS 16"),
        "{}",
        untraced.stdout
    );

    let dir = fresh_dir("shipped");
    let mut cmd = Runtime::selected().command(&b.rprof, &[]);
    cmd.args([
        "--kernel-trace",
        "--marker-trace",
        "--output-format",
        "csv,json,pftrace,rocpd",
        "-o",
        "run",
        "-d",
    ])
    .arg(&dir)
    .arg("--")
    .arg(&app);
    clear_rprof_env(&mut cmd);
    let run = run_with(cmd, dir, HIP_RUN_TIMEOUT);
    run.assert_success();
    assert_eq!(levels(&run), own, "ROCTx return values changed");
    eprintln!("the shipped library's values: {own}");
    assert!(
        run.stdout.contains("ROCTX_CALLS 16"),
        "calls not passed on to the shipped library:\n{}",
        run.stdout
    );
    // The app really uses the shipped library, not ours.
    let ldd = Runtime::selected()
        .tool("ldd")
        .arg(&app)
        .output()
        .expect("ldd");
    let ldd = String::from_utf8_lossy(&ldd.stdout).into_owned();
    assert!(
        ldd.lines().any(|l| l.contains("libroctx64.so.4 => ")
            && l.contains("/x86_64-linux-gnu/libroctx64.so.4")),
        "{ldd}"
    );

    let csv = run.output("_marker_api_trace.csv");
    assert_eq!(csv_counts(&csv, "Function"), expected_markers(), "CSV");
    assert_eq!(
        kernel_names(&run.output("_kernel_trace.csv")),
        counts(&[
            ("k_inner", 3),
            ("k_outer", 2),
            ("k_plain", 1),
            ("k_worker", 2)
        ])
    );
    assert_eq!(json_marker_counts(&run), expected_markers(), "JSON");
    let trace = check_pftrace(&run.output(".pftrace"));
    for (name, n) in expected_markers() {
        assert_eq!(
            trace.slices_by_name.get(&name),
            Some(&n),
            "Perfetto slices named {name}"
        );
    }
    let db = rusqlite::Connection::open(run.output("_results.db")).unwrap();
    assert_eq!(
        rocpd_counts(
            &db,
            "SELECT json_extract(extdata, '$.message'), count(*) FROM regions_and_samples GROUP BY 1"
        ),
        expected_markers(),
        "rocpd regions_and_samples"
    );
}
