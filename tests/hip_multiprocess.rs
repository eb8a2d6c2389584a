//! Several processes: per-rank output names from MPI/Slurm variables, the
//! `multiproc` program's per-process traces, and merging them into one trace
//! with `rprof merge`. (Plain concatenation is not supported: track uuids
//! are short per-file numbers to keep every event small, and `rprof merge`
//! renumbers them and the packet sequences.)

mod harness;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use harness::artefacts::{hip_program, rprof, run_checked};
use harness::hip::run_traced;
use harness::outputs::{
    check_outputs, check_pftrace, check_rocpd_against_csv, output_files, parse_launched, read_csv,
    single_report, ProcessReport,
};

fn outputs(stem: &str) -> Vec<String> {
    vec![
        format!("{stem}.pftrace"),
        format!("{stem}_kernel_trace.csv"),
        format!("{stem}_results.json"),
    ]
}

/// `-o rank%rank%` with a rank variable set names the files after the rank.
fn rank_run(label: &str, env: &[(&str, &str)], expect_stem: &str) {
    let prog = hip_program("graph_storm");
    let run = run_traced(label, &["-o", "rank%rank%"], &prog, &["8", "2"], env);
    run.assert_success();
    assert_eq!(
        output_files(&run.dir),
        outputs(expect_stem),
        "files for {env:?}"
    );
    let report = single_report(&run);
    let f = check_outputs(&run.dir, expect_stem, &report);
    assert_eq!(f.program_dispatches(), 16);
}

#[test]
fn rank_from_slurm_procid() {
    rank_run("rank_slurm", &[("SLURM_PROCID", "3")], "rank3");
}

#[test]
fn rank_from_open_mpi_wins_over_slurm() {
    rank_run(
        "rank_ompi",
        &[("OMPI_COMM_WORLD_RANK", "1"), ("SLURM_PROCID", "3")],
        "rank1",
    );
}

#[test]
fn rank_defaults_to_zero() {
    rank_run("rank_none", &[], "rank0");
}

/// The traces of `multiproc 2 PER_PROC`: one set of outputs per child,
/// named `mp_rank<r>_<pid>`, each checked against that child's report.
struct MultiprocRun {
    dir: PathBuf,
    reports: BTreeMap<u32, ProcessReport>,
    traces: Vec<PathBuf>,
}

fn multiproc(label: &str, per_proc: u64) -> MultiprocRun {
    let prog = hip_program("multiproc");
    let per = per_proc.to_string();
    let run = run_traced(
        label,
        &["-o", "mp_rank%rank%_%pid%"],
        &prog,
        &["2", &per],
        &[],
    );
    run.assert_success();
    let reports = parse_launched(&run.stdout);
    assert_eq!(reports.len(), 2, "two children reported:\n{}", run.stdout);
    let total: u64 = reports.values().map(|r| r.total).sum();
    assert!(
        run.stdout
            .contains(&format!("MULTIPROC procs=2 total={total}")),
        "parent summary:\n{}",
        run.stdout
    );
    let mut expected_files = Vec::new();
    let mut traces = Vec::new();
    for r in reports.values() {
        let rank = r.rank.expect("children print rank=");
        assert_eq!(
            r.total,
            u64::from(rank + 1) * per_proc,
            "rank {rank} launches"
        );
        let stem = format!("mp_rank{rank}_{}", r.pid);
        let f = check_outputs(&run.dir, &stem, r);
        assert_eq!(f.program_dispatches(), r.total);
        expected_files.extend(outputs(&stem));
        traces.push(run.dir.join(format!("{stem}.pftrace")));
    }
    expected_files.sort();
    assert_eq!(
        output_files(&run.dir),
        expected_files,
        "one set of outputs per child, none for the parent (it never uses the GPU)"
    );
    let ranks: BTreeSet<u32> = reports.values().filter_map(|r| r.rank).collect();
    assert_eq!(ranks, BTreeSet::from([0, 1]));
    MultiprocRun {
        dir: run.dir,
        reports,
        traces,
    }
}

/// Checks a merged trace: the checker passes, it has both processes, every
/// kernel slice of both, and each process's kernel slices hang off its own
/// interceptor slices.
fn check_merged(merged: &Path, m: &MultiprocRun) {
    let s = check_pftrace(merged);
    let pids: BTreeSet<u64> = m.reports.keys().map(|&p| u64::from(p)).collect();
    assert_eq!(s.process_pids, pids, "process tracks of the merged trace");
    let mut expect_by_pid = BTreeMap::new();
    let mut total = 0;
    for t in &m.traces {
        let one = check_pftrace(t);
        total += one.kernel_slice_total;
        for (pid, n) in one.kernel_flows_by_pid {
            expect_by_pid.insert(pid, n);
        }
    }
    assert_eq!(
        s.kernel_slice_total, total,
        "kernel slices of the merged trace = sum of the inputs\n{}",
        s.report
    );
    assert_eq!(
        s.kernel_flows_by_pid, expect_by_pid,
        "kernel slices per process (by flow)"
    );
    assert_eq!(s.bad_durations, 0);
    assert_eq!(s.dangling_flows, 0);
}

#[test]
fn multiproc_traces_and_rprof_merge() {
    let m = multiproc("multiproc_merge", 150);
    let merged = m.dir.join("all.pftrace");
    run_checked(
        Command::new(rprof())
            .arg("merge")
            .args(&m.traces)
            .arg("-o")
            .arg(&merged),
        "rprof merge",
    );
    check_merged(&merged, &m);
}

/// The same program traced twice in one directory with `-o %pid%` keeps
/// both runs apart (no overwrite), and a merge of the two still adds up.
#[test]
fn two_runs_by_pid_merge() {
    let prog = hip_program("graph_storm");
    let a = run_traced("pid_a", &["-o", "%pid%"], &prog, &["16", "4"], &[]);
    let b = run_traced("pid_b", &["-o", "%pid%"], &prog, &["8", "3"], &[]);
    a.assert_success();
    b.assert_success();
    let (ra, rb) = (single_report(&a), single_report(&b));
    assert_ne!(ra.pid, rb.pid);
    let fa = check_outputs(&a.dir, &ra.pid.to_string(), &ra);
    let fb = check_outputs(&b.dir, &rb.pid.to_string(), &rb);
    assert_eq!((fa.program_dispatches(), fb.program_dispatches()), (64, 24));
    let (na, nb) = (fa.rows.len() as u64, fb.rows.len() as u64);
    let merged = a.dir.join("ab.pftrace");
    run_checked(
        Command::new(rprof())
            .arg("merge")
            .arg(a.dir.join(format!("{}.pftrace", ra.pid)))
            .arg(b.dir.join(format!("{}.pftrace", rb.pid)))
            .arg("-o")
            .arg(&merged),
        "rprof merge",
    );
    let s = check_pftrace(&merged);
    assert_eq!(s.kernel_slice_total, na + nb);
    assert_eq!(
        s.kernel_flows_by_pid,
        BTreeMap::from([(u64::from(ra.pid), na), (u64::from(rb.pid), nb)])
    );
}

/// `multiproc 2 N` with `--output-format csv,rocpd`: one database per
/// child, each answering with its CSV's numbers; the two ATTACHed into one
/// SQLite connection (docs/trace-format.md) answer per process; and
/// `rprof merge` of the databases gives one database whose views answer
/// with both CSVs' numbers, per pid.
#[test]
fn multiproc_databases_attach_and_merge() {
    let prog = hip_program("multiproc");
    let run = harness::hip::run_traced_formats(
        "multiproc_rocpd",
        "csv,rocpd",
        &["-o", "mp_rank%rank%_%pid%"],
        &prog,
        &["2", "40"],
        &[],
    );
    run.assert_success();
    let reports = parse_launched(&run.stdout);
    assert_eq!(reports.len(), 2, "{}", run.stdout);
    let mut expected_files = Vec::new();
    let mut dbs = Vec::new();
    let mut per_pid: BTreeMap<i64, i64> = BTreeMap::new();
    let mut per_name: BTreeMap<String, i64> = BTreeMap::new();
    for r in reports.values() {
        let stem = format!("mp_rank{}_{}", r.rank.unwrap(), r.pid);
        let rows = read_csv(&run.dir.join(format!("{stem}_kernel_trace.csv")));
        let program_rows = rows
            .iter()
            .filter(|x| !x.kernel_name.starts_with("__amd_rocclr_"))
            .count() as u64;
        assert_eq!(program_rows, r.total, "rank {:?}", r.rank);
        let db = run.dir.join(format!("{stem}_results.db"));
        check_rocpd_against_csv(&db, &rows);
        per_pid.insert(i64::from(r.pid), rows.len() as i64);
        for x in &rows {
            *per_name.entry(x.kernel_name.clone()).or_default() += 1;
        }
        expected_files.push(format!("{stem}_kernel_trace.csv"));
        expected_files.push(format!("{stem}_results.db"));
        dbs.push(db);
    }
    expected_files.sort();
    assert_eq!(
        output_files(&run.dir),
        expected_files,
        "one database per child"
    );

    // Queried together with ATTACH, as docs/trace-format.md shows.
    let c = rusqlite::Connection::open_in_memory().unwrap();
    c.execute("ATTACH DATABASE ?1 AS r0", [dbs[0].to_str().unwrap()])
        .unwrap();
    c.execute("ATTACH DATABASE ?1 AS r1", [dbs[1].to_str().unwrap()])
        .unwrap();
    let mut st = c
        .prepare(
            "SELECT pid, COUNT(*) FROM (SELECT pid FROM r0.kernels UNION ALL \
             SELECT pid FROM r1.kernels) GROUP BY pid ORDER BY pid",
        )
        .unwrap();
    let attached: BTreeMap<i64, i64> = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        attached, per_pid,
        "kernels per pid over the ATTACHed databases"
    );

    // rprof merge of the databases.
    let merged = run.dir.join("all.db");
    run_checked(
        Command::new(rprof())
            .arg("merge")
            .args(&dbs)
            .arg("-o")
            .arg(&merged),
        "rprof merge (databases)",
    );
    let m = rusqlite::Connection::open(&merged).unwrap();
    let mut st = m
        .prepare("SELECT pid, COUNT(*) FROM kernels GROUP BY pid ORDER BY pid")
        .unwrap();
    let merged_per_pid: BTreeMap<i64, i64> = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        merged_per_pid, per_pid,
        "kernels per pid in the merged database"
    );
    let mut st = m
        .prepare("SELECT name, total_calls FROM top_kernels")
        .unwrap();
    let top: BTreeMap<String, i64> = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        top, per_name,
        "top_kernels of the merged database vs both CSVs"
    );
    for (name, n) in &per_name {
        let k: i64 = m
            .query_row(
                "SELECT COUNT(*) FROM kernels WHERE name = ?1",
                [name],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(
            k, *n,
            "kernels where name = {name:?} in the merged database"
        );
    }
    // A database merged with a merge that already holds it is refused
    // (its tables would be there twice).
    let mix = Command::new(rprof())
        .arg("merge")
        .arg(&dbs[0])
        .arg(&merged)
        .arg("-o")
        .arg(run.dir.join("again.db"))
        .output()
        .unwrap();
    assert!(
        !mix.status.success(),
        "merging a database with its own merge"
    );
}
