//! The `rpc-doorbell` workload (LLVM libc's GPU RPC doorbell protocol, `tests/programs/rpc_doorbell.cpp`) on the
//! real ROCr over the emulated GPU, untraced: its own checks pass and its printed counts are exact.
//!
//! Runs on the runtime `RPROF_TEST_ROCM` selects, through the one harness (`tests/harness`): the workload is built
//! inside the runtime's root (`harness::artefacts::rpc_workload`), the emulator front-end by the harness's cargo
//! build.

mod harness;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use harness::artefacts::{build, rpc_workload};
use harness::run::run_with;
use harness::{run_dir, Runtime};

/// Longest a run may take before the test kills it and calls it a hang (a lost wake-up).
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// One finished run of the workload.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    /// `RPC` lines as `key=value`; keys of a line that starts with a word (`RPC kinds print=..`) are prefixed with
    /// it (`kinds.print`).
    values: HashMap<String, String>,
    elapsed: Duration,
}

impl Run {
    fn get(&self, key: &str) -> &str {
        self.values.get(key).unwrap_or_else(|| {
            panic!(
                "no '{key}' in the output:\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }

    fn int(&self, key: &str) -> u64 {
        let v = self.get(key);
        v.parse()
            .unwrap_or_else(|_| panic!("{key}={v} is not a count"))
    }

    fn assert_ok(&self) {
        assert_eq!(
            self.code,
            Some(0),
            "rpc-doorbell failed:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        assert_eq!(self.get("result"), "ok");
        assert!(!self.values.contains_key("check_failed"), "{}", self.stdout);
    }

    /// The counts every passing run must show for `kernels x lanes x calls`.
    fn assert_counts(&self, kernels: u64, lanes: u64, calls: u64) {
        self.assert_ok();
        let total = kernels * lanes * calls;
        assert_eq!(self.int("calls"), total, "{}", self.stdout);
        assert_eq!(self.int("served"), total, "{}", self.stdout);
        assert_eq!(self.int("kernels"), kernels);
        assert_eq!(self.int("shutdown_wakes"), 1);
        // Kinds go by request id modulo 3: print, alloc, slow.
        assert_eq!(self.int("kinds.print"), total.div_ceil(3));
        assert_eq!(self.int("kinds.alloc"), (total + 1) / 3);
        assert_eq!(self.int("kinds.slow"), total / 3);
        // Every 0 -> 1 ring is followed by its own wake; a wake without a ring is a wait that found the doorbell
        // already non-zero. A wake serves at least one call.
        let (rings, wakes) = (self.int("rings"), self.int("wakes"));
        assert!(
            rings >= 1 && rings <= wakes && wakes <= total,
            "rings={rings} wakes={wakes}"
        );
        assert!(self.int("batches.max") >= 1 && self.int("batches.max") <= total);
        assert_eq!(
            self.int("wake_latency_ns.samples"),
            rings,
            "one latency per ring"
        );
    }
}

fn parse(stdout: &str) -> HashMap<String, String> {
    let mut values = HashMap::new();
    for line in stdout.lines() {
        let Some(rest) = line.strip_prefix("RPC ") else {
            continue;
        };
        let mut words = rest.split_whitespace().peekable();
        let prefix = match words.peek() {
            Some(w) if !w.contains('=') => words.next().map(|w| format!("{w}.")),
            _ => None,
        };
        for kv in words {
            if let Some((k, v)) = kv.split_once('=') {
                values.insert(
                    format!("{}{k}", prefix.as_deref().unwrap_or("")),
                    v.to_string(),
                );
            }
        }
    }
    values
}

fn hex(v: &str) -> u64 {
    u64::from_str_radix(v.trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("{v} is not hex"))
}

/// Runs the workload over the emulator; kills it and fails the test after [`RUN_TIMEOUT`] (a lost wake-up?).
fn run(args: &[&str]) -> Run {
    let emulator = build().emulator();
    let mut cmd = Runtime::selected().command(rpc_workload(), &emulator.loader_env);
    cmd.args(args).env_remove("HSA_TOOLS_LIB");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("RPROF_EMU_") {
            cmd.env_remove(k);
        }
    }
    let r = run_with(cmd, PathBuf::new(), RUN_TIMEOUT);
    let values = parse(&r.stdout);
    Run {
        code: r.code,
        stdout: r.stdout,
        stderr: r.stderr,
        values,
        elapsed: r.elapsed,
    }
}

#[test]
fn small_default_run_answers_every_call_once() {
    let r = run(&[]);
    r.assert_counts(4, 8, 4);
    assert_eq!(r.get("config.kernels"), "4");
    assert_eq!(r.get("config.lanes"), "8");
    assert_eq!(r.get("config.calls"), "4");
    assert_eq!(
        r.int("doorbell_event"),
        1,
        "a fresh interrupt signal has an event mailbox"
    );
    assert!(hex(r.get("doorbell.handle")) != 0);
    assert!(hex(r.get("doorbell.mailbox")) != 0);
    assert!(r.int("doorbell.event_id") > 0);
    assert!(r.int("server.tid") > 0);
}

#[test]
fn thousands_of_calls_from_many_kernels_lose_no_wake_up() {
    // The server waits without a timeout: a lost wake-up would leave it asleep with calls pending, which the
    // program reports after 45 s and the harness kills after 60 s.
    let r = run(&[
        "--kernels",
        "32",
        "--lanes",
        "16",
        "--calls",
        "8",
        "--queues",
        "4",
        "--wait-timeout-ms",
        "0",
        "--deadline-s",
        "45",
    ]);
    r.assert_counts(32, 16, 8);
    assert_eq!(r.int("calls"), 4096);
    assert_eq!(
        r.int("timeouts"),
        0,
        "a wait without timeout cannot time out"
    );
    assert_eq!(r.get("config.queues"), "4");
    eprintln!("load: {:?}\n{}", r.elapsed, r.stdout);
}

#[test]
fn drained_launches_sleep_and_wake_once_per_kernel_at_least() {
    // Each kernel is launched (queues in turn) once the server has served every earlier call, so the doorbell is
    // back at 0 and each kernel's first call rings: at least one ring and one wake per kernel. The wake log has a
    // row per wake.
    let log = run_dir("scratch").join("drained-wakes.csv");
    let _ = std::fs::remove_file(&log);
    let r = run(&[
        "--kernels",
        "64",
        "--lanes",
        "8",
        "--calls",
        "4",
        "--queues",
        "4",
        "--drain-between",
        "--wait-timeout-ms",
        "0",
        "--deadline-s",
        "45",
        "--wake-log",
        log.to_str().unwrap(),
    ]);
    r.assert_counts(64, 8, 4);
    assert_eq!(r.int("timeouts"), 0);
    assert!(
        r.int("rings") >= 64,
        "a ring per drained kernel:\n{}",
        r.stdout
    );
    let csv = std::fs::read_to_string(&log).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("wake,sleep_begin_ns,wake_ns,serve_end_ns,value_at_wake,served,timeouts,ring_ns,ring_kernel")
    );
    let rows: Vec<Vec<i64>> = lines
        .map(|l| l.split(',').map(|f| f.parse::<i64>().unwrap()).collect())
        .collect();
    assert_eq!(rows.len() as u64, r.int("wakes"));
    assert_eq!(
        rows.iter().map(|r| r[5]).sum::<i64>(),
        64 * 8 * 4,
        "served per wake adds up to the calls"
    );
    assert_eq!(
        rows.iter().filter(|r| r[7] != 0).count() as u64,
        r.int("rings"),
        "a ring time per rung wake"
    );
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row.len(), 9);
        assert_eq!(row[0], i as i64);
        assert!(
            row[1] <= row[2] && row[2] <= row[3],
            "sleep <= wake <= serve end: {row:?}"
        );
        assert!(
            row[5] >= 1 && row[5] <= row[4],
            "serves at least one call and at most the value seen: {row:?}"
        );
        assert_eq!(row[6], 0, "no timeouts without a wait timeout");
        if row[7] != 0 {
            assert!(row[7] <= row[2], "ring before wake: {row:?}");
            assert!(
                (0..64).contains(&row[8]),
                "the ringing kernel is known: {row:?}"
            );
        } else {
            assert_eq!(row[8], -1, "no ring, no ringing kernel: {row:?}");
        }
        if i > 0 {
            assert!(rows[i - 1][3] <= row[1], "wakes do not overlap");
        }
    }
    let ringing: std::collections::BTreeSet<i64> =
        rows.iter().map(|r| r[8]).filter(|k| *k >= 0).collect();
    assert_eq!(
        ringing,
        (0..64).collect(),
        "every drained kernel's first call woke the server"
    );
}

#[test]
fn doorbell_without_event_still_works() {
    let r = run(&["--exhaust-events"]);
    r.assert_counts(4, 8, 4);
    assert_eq!(
        r.int("doorbell_event"),
        0,
        "the event budget was used up before the doorbell was created"
    );
    assert_eq!(r.int("exhausted"), 1);
    assert_eq!(hex(r.get("doorbell.mailbox")), 0);
    assert_eq!(r.int("doorbell.event_id"), 0);
    assert!(r.int("exhaust_signals") > 4000 && r.int("exhaust_signals") <= 4097);
    // Under load too, with the polling wait.
    let r = run(&[
        "--exhaust-events",
        "--kernels",
        "32",
        "--lanes",
        "16",
        "--calls",
        "8",
        "--queues",
        "4",
        "--deadline-s",
        "45",
    ]);
    r.assert_counts(32, 16, 8);
    assert_eq!(r.int("doorbell_event"), 0);
}

#[test]
fn help_and_bad_options() {
    let r = run(&["--help"]);
    assert_eq!(r.code, Some(0));
    assert!(
        r.stdout.contains("WITHOUT waiting for replies"),
        "{}",
        r.stdout
    );
    for opt in [
        "--kernels",
        "--lanes",
        "--calls",
        "--slow-us",
        "--queues",
        "--exhaust-events",
        "--code-object",
    ] {
        assert!(r.stdout.contains(opt), "--help lists {opt}");
    }
    let r = run(&["--lanes", "2000"]);
    assert_eq!(r.code, Some(2));
    assert!(
        r.stderr
            .contains("--lanes: '2000' is not a number in 1..1024"),
        "{}",
        r.stderr
    );
    let r = run(&["--bogus"]);
    assert_eq!(r.code, Some(2));
    let r = run(&["--code-object", "/nonexistent/rpc_kernels.hsaco"]);
    assert_eq!(r.code, Some(2));
    assert!(
        r.stderr
            .contains("cannot open code object /nonexistent/rpc_kernels.hsaco"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_call_served_twice_fails_the_run() {
    // The checks can fail: with request 5 served twice the program reports it and exits 1.
    let r = run(&["--fault-serve-twice", "5"]);
    assert_eq!(r.code, Some(1), "{}\n{}", r.stdout, r.stderr);
    assert_eq!(r.get("result"), "fail");
    assert!(
        r.stdout
            .contains("RPC check_failed=served_once not_once=1 duplicates=1"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("RPC check_failed=served server=128 per_request_sum=129"),
        "{}",
        r.stdout
    );
    assert_eq!(r.int("calls"), 128);
}
