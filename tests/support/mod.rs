//! Harness of the `kernel_trace*` integration tests: builds the tool library
//! and the emulated GPU (once per test binary), builds the raw-HSA programs
//! of `tests/programs/`, runs them with the tool loaded on the emulated GPU,
//! and reads the outputs back.
//!
//! The runtime is the one `RPROF_TEST_ROCM` selects (`rocm_runtime`): the
//! programs are compiled inside its root with its compilers (its clang for
//! the kernels' AMDGPU code object, its `g++` for the host code, linked with
//! `-lhsa-runtime64`) into `<target>/kernel-trace-tests/rocm-VERSION/`, and
//! run there over the emulator front-end that runtime needs.
//!
//! The libraries and `rprof` are built by a nested `cargo build -p rprof-tool
//! -p <front-end package>` into `<target>/kernel-trace-tests/cargo` (a target
//! directory of its own, because the outer `cargo test` holds the lock of the
//! main one), so `cargo test --workspace` needs no prior build and never runs
//! stale libraries.

#![allow(dead_code)] // each test binary uses a different part of the harness

#[path = "../rocm_runtime/mod.rs"]
pub mod rocm_runtime;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub use rocm_runtime::{Emulator, Runtime};

/// Longest a traced program may run before the test calls it a hang.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// Built artifacts shared by the tests of one binary.
#[derive(Debug)]
pub struct Artifacts {
    /// `librprof_tool.so`.
    pub tool: PathBuf,
    /// The `rprof` command (built next to the tool library).
    pub rprof: PathBuf,
    /// The runtime the programs run on.
    pub runtime: Runtime,
    /// The emulated GPU under that runtime.
    pub emulator: Emulator,
    /// The raw-HSA test program.
    pub trace_app: PathBuf,
    /// Its code object.
    pub kernels: PathBuf,
    /// Where runs write their outputs.
    pub runs: PathBuf,
}

fn run_checked(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds everything once per test binary.
pub fn artifacts() -> &'static Artifacts {
    static A: OnceLock<Artifacts> = OnceLock::new();
    A.get_or_init(|| {
        let runtime = Runtime::selected();
        let front_end = runtime.front_end();
        let root = rocm_runtime::target_dir().join("kernel-trace-tests");
        let cargo_target = root.join("cargo");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        // `RPROF_TEST_EMU_LIB=<path to the front-end library>` runs against a
        // given emulator build instead of building one.
        let emu_override = std::env::var_os("RPROF_TEST_EMU_LIB").map(PathBuf::from);
        let front_end_crate = rocm_runtime::repo().join(front_end.crate_dir());
        assert!(
            emu_override.is_some() || front_end_crate.join("Cargo.toml").is_file(),
            "{}={}: {} needs the emulator's {front_end:?} front-end (package {}, {}), which this checkout \
             does not have yet",
            rocm_runtime::SELECTOR,
            runtime.version(),
            runtime.describe(),
            front_end.package(),
            front_end.crate_dir()
        );
        let mut build = Command::new(cargo);
        build
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["build", "-p", "rprof-tool"])
            .env("CARGO_TARGET_DIR", &cargo_target);
        if emu_override.is_none() {
            build.args(["-p", front_end.package()]);
        }
        run_checked(
            &mut build,
            "cargo build of the tool library and the emulator",
        );
        let profile = cargo_target.join("debug");
        let tool = profile.join("librprof_tool.so");
        let rprof = profile.join("rprof");
        let emu_profile = match &emu_override {
            Some(lib) => {
                // A directory shaped like a cargo profile around the given library.
                let dir = root.join("emu-override");
                rocm_runtime::link_soname(&dir, front_end.library_file(), lib).unwrap();
                // `rprof` looks for the emulator next to itself.
                rocm_runtime::link_soname(&profile, front_end.library_file(), lib).unwrap();
                dir
            }
            None => profile.clone(),
        };
        let emulator = runtime.emulator(&emu_profile).unwrap_or_else(|e| panic!("{e}"));
        assert!(tool.exists(), "build left no {}", tool.display());

        let programs = rocm_runtime::repo().join("tests/programs");
        let bin = runtime.build_dir(&root, "programs");
        let kernels = bin.join("trace_kernels.co");
        let clang = runtime.kernel_clang();
        run_checked(
            runtime
                .tool(clang)
                .args([
                    "-x",
                    "cl",
                    "-cl-std=CL2.0",
                    "-target",
                    "amdgcn-amd-amdhsa",
                    "-mcpu=gfx90a",
                    "-nogpulib",
                    "-O2",
                ])
                .arg("-o")
                .arg(&kernels)
                .arg(programs.join("trace_kernels.cl")),
            &format!("{clang} of ROCm {} (kernel code object)", runtime.version()),
        );
        let trace_app = bin.join("trace_app");
        run_checked(
            runtime
                .tool("g++")
                .args(["-O1", "-std=c++17", "-o"])
                .arg(&trace_app)
                .arg(programs.join("trace_app.cpp"))
                .args(["-lhsa-runtime64", "-lpthread"]),
            &format!("g++ of ROCm {} (trace_app)", runtime.version()),
        );
        let runs = runtime.build_dir(&root, "runs");
        Artifacts {
            tool,
            rprof,
            runtime,
            emulator,
            trace_app,
            kernels,
            runs,
        }
    })
}

/// `tests/programs/chain_tool.cpp` (a second HSA tool rewriting packets in
/// front of rprof), built once per test binary inside the selected
/// runtime's root with its `g++` and HSA headers, which pick the chain
/// tool's mode (intercept markers and two writer calls per kernel on
/// ROCr >= 6, one writer call on 5.2.3). Needs no tool build: the HIP
/// harness uses it too.
pub fn chain_tool() -> &'static Path {
    static CHAIN: OnceLock<PathBuf> = OnceLock::new();
    CHAIN.get_or_init(|| {
        let runtime = Runtime::selected();
        let bin = runtime.build_dir(
            &rocm_runtime::target_dir().join("kernel-trace-tests"),
            "programs",
        );
        let lib = bin.join("chain_tool.so");
        run_checked(
            runtime
                .tool("g++")
                .args([
                    "-std=c++17",
                    "-O1",
                    "-shared",
                    "-fPIC",
                    "-DAMD_INTERNAL_BUILD",
                    "-I/usr/include/hsa",
                    "-o",
                ])
                .arg(&lib)
                .arg(rocm_runtime::repo().join("tests/programs/chain_tool.cpp"))
                .arg("-ldl"),
            &format!("g++ of ROCm {} (chain_tool)", runtime.version()),
        );
        lib
    })
}

/// How the tool gets into the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Load {
    /// `HSA_TOOLS_LIB=<tool>`.
    ToolsLib,
    /// `LD_PRELOAD=<tool>` only.
    Preload,
}

/// One finished run.
#[derive(Debug)]
pub struct Run {
    /// Exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// Output directory of the run.
    pub dir: PathBuf,
    /// Wall time.
    pub elapsed: Duration,
}

impl Run {
    /// `DIR/run<suffix>`.
    pub fn output(&self, suffix: &str) -> PathBuf {
        self.dir.join(format!("run{suffix}"))
    }

    /// `kernel -> count` from the program's `LAUNCHED` lines, and its `TOTAL`.
    pub fn launched(&self) -> (BTreeMap<String, u64>, u64) {
        let mut map = BTreeMap::new();
        let mut total = None;
        for line in self.stdout.lines() {
            if let Some(rest) = line.strip_prefix("LAUNCHED ") {
                let mut name = None;
                let mut count = None;
                for kv in rest.split(' ') {
                    if let Some(v) = kv.strip_prefix("kernel=") {
                        name = Some(v.to_string());
                    }
                    if let Some(v) = kv.strip_prefix("count=") {
                        count = Some(v.parse::<u64>().unwrap());
                    }
                }
                map.insert(name.unwrap(), count.unwrap());
            }
            if let Some(v) = line.strip_prefix("TOTAL ") {
                total = Some(v.trim().parse::<u64>().unwrap());
            }
        }
        (
            map,
            total.unwrap_or_else(|| panic!("no TOTAL line in:\n{}", self.stdout)),
        )
    }
}

/// Runs `trace_app <code object> <args>` with the tool, kernel tracing on,
/// outputs `csv,json,pftrace` into a fresh directory named after `label`,
/// plus `extra_env`.
pub fn run_traced(label: &str, args: &[&str], load: Load, extra_env: &[(&str, &str)]) -> Run {
    let a = artifacts();
    let dir = a.runs.join(label);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let loader_env = match load {
        Load::ToolsLib => a.emulator.loader_env.clone(),
        Load::Preload => a.emulator.loader_env_preloading(&a.tool),
    };
    let mut cmd = a.runtime.command(&a.trace_app, &loader_env);
    cmd.arg(&a.kernels)
        .args(args)
        .env_remove("HSA_TOOLS_LIB")
        .env("RPROF_KERNEL_TRACE", "1")
        .env("RPROF_OUTPUT_DIR", &dir)
        .env("RPROF_OUTPUT_NAME", "run")
        .env("RPROF_OUTPUT_FORMAT", "csv,json,pftrace")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if load == Load::ToolsLib {
        cmd.env("HSA_TOOLS_LIB", &a.tool);
    }
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    run_with_timeout(cmd, dir)
}

/// Runs `cmd` and kills it after [`RUN_TIMEOUT`] (a hang fails the test).
pub fn run_with_timeout(mut cmd: Command, dir: PathBuf) -> Run {
    let t0 = Instant::now();
    let mut child = cmd.spawn().expect("spawn the traced program");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > RUN_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("traced program hung (killed after {RUN_TIMEOUT:?})");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Run {
        code: status.code(),
        stdout: out_t.join().unwrap(),
        stderr: err_t.join().unwrap(),
        dir,
        elapsed: t0.elapsed(),
    }
}

/// One row of `NAME_kernel_trace.csv`.
#[derive(Debug, Clone)]
pub struct Row {
    /// Agent_Id.
    pub agent: u64,
    /// Queue_Id.
    pub queue: u64,
    /// Thread_Id.
    pub thread: u64,
    /// Dispatch_Id.
    pub dispatch_id: u64,
    /// Kernel_Id.
    pub kernel_id: u64,
    /// Kernel_Name.
    pub name: String,
    /// Correlation_Id.
    pub correlation_id: u64,
    /// Start_Timestamp.
    pub start: u64,
    /// End_Timestamp.
    pub end: u64,
    /// Grid_Size_X.
    pub grid_x: u64,
    /// Workgroup_Size_X.
    pub wg_x: u64,
}

/// Reads the kernel trace CSV.
pub fn read_csv(path: &Path) -> Vec<Row> {
    let mut r = csv::Reader::from_path(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let headers = r.headers().unwrap().clone();
    let col = |name: &str| {
        headers
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name}"))
    };
    let (agent, queue, thread, did, kid, name, cid, start, end, grid, wg) = (
        col("Agent_Id"),
        col("Queue_Id"),
        col("Thread_Id"),
        col("Dispatch_Id"),
        col("Kernel_Id"),
        col("Kernel_Name"),
        col("Correlation_Id"),
        col("Start_Timestamp"),
        col("End_Timestamp"),
        col("Grid_Size_X"),
        col("Workgroup_Size_X"),
    );
    r.records()
        .map(|rec| {
            let rec = rec.unwrap();
            let n = |i: usize| {
                rec[i]
                    .parse::<u64>()
                    .unwrap_or_else(|e| panic!("column {i} {:?}: {e}", &rec[i]))
            };
            Row {
                agent: n(agent),
                queue: n(queue),
                thread: n(thread),
                dispatch_id: n(did),
                kernel_id: n(kid),
                name: rec[name].to_string(),
                correlation_id: n(cid),
                start: n(start),
                end: n(end),
                grid_x: n(grid),
                wg_x: n(wg),
            }
        })
        .collect()
}

/// Runs the team's Perfetto checker on `trace`; returns its stdout. Fails
/// the test if the checker reports an error.
pub fn check_pftrace(trace: &Path) -> String {
    let checker = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools/pftrace_check.py");
    let out = Command::new("python3")
        .arg(&checker)
        .arg(trace)
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "pftrace_check failed on {}:\n{}\n{}",
        trace.display(),
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Runs `rprof --kernel-trace -d <dir> -o run --output-format csv,json,pftrace
/// [extra] -- trace_app <code object> <args>` on the selected runtime, without
/// loader variables (the command sets up the tool library and the emulated
/// GPU itself).
pub fn run_rprof(label: &str, extra: &[&str], args: &[&str]) -> Run {
    let dir = artifacts().runs.join(label);
    let _ = std::fs::remove_dir_all(&dir);
    run_rprof_into(label, extra, args)
}

/// As [`run_rprof`], into the run directory `label` as it is (an earlier
/// run's files stay).
pub fn run_rprof_into(label: &str, extra: &[&str], args: &[&str]) -> Run {
    let a = artifacts();
    let dir = a.runs.join(label);
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = a.runtime.command(&a.rprof, &[]);
    cmd.args([
        "--kernel-trace",
        "-o",
        "run",
        "--output-format",
        "csv,json,pftrace",
        "-d",
    ])
    .arg(&dir)
    .args(extra)
    .arg("--")
    .arg(&a.trace_app)
    .arg(&a.kernels)
    .args(args)
    .env_remove("HSA_TOOLS_LIB")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("RPROF_") {
            cmd.env_remove(k);
        }
    }
    run_with_timeout(cmd, dir)
}
