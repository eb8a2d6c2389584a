//! Shared helpers of the emulator's integration tests: build test programs (cached in the target dir) and run
//! them over the emulated GPU, on the runtime `RPROF_TEST_ROCM` selects (the repository's shared
//! `tests/rocm_runtime`): programs are compiled inside that runtime's root with its compilers, linked with the
//! front-end library it needs (for the `rprof_emu.h` C API), cached per runtime, and run there.
#![allow(dead_code)]

#[path = "../../../tests/rocm_runtime/mod.rs"]
pub mod rocm_runtime;

pub use rocm_runtime::{Emulator, Runtime};

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

static BUILD_LOCK: Mutex<()> = Mutex::new(());

/// `emu/tests/programs`.
pub fn programs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs")
}

fn cache_dir() -> PathBuf {
    Runtime::selected().build_dir(&rocm_runtime::target_dir(), "emu-programs")
}

/// Runs `cmd` (a compiler invocation whose last argument is the output path) unless an output built from the same
/// inputs exists. Returns the output path.
pub fn build_cached(name: &str, inputs: &[&Path], make: impl Fn(&Path) -> Command) -> PathBuf {
    let _guard = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for i in inputs {
        std::fs::read(i)
            .unwrap_or_else(|e| panic!("{}: {e}", i.display()))
            .hash(&mut h);
    }
    format!("{:?}", make(Path::new("out"))).hash(&mut h);
    let out = cache_dir().join(format!("{name}-{:016x}", h.finish()));
    if out.exists() {
        return out;
    }
    let tmp = out.with_extension(format!("tmp{}", std::process::id()));
    let output = make(&tmp).output().expect("compiler runs");
    assert!(
        output.status.success(),
        "building {name} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::rename(&tmp, &out).unwrap();
    out
}

/// The emulated GPU under the selected runtime (the front-end library `cargo build --workspace` left next to
/// the test binary's profile directory); fails the test with the reason when it is missing.
pub fn emulator() -> Emulator {
    let _guard = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    Runtime::selected()
        .emulator(&rocm_runtime::profile_dir())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A compiler of the selected runtime's root.
pub fn compiler(program: &str) -> Command {
    Runtime::selected().tool(program)
}

/// The OpenCL test kernels, compiled for `mcpu`.
pub fn code_object(mcpu: &str) -> PathBuf {
    let src = programs_dir().join("kernels.cl");
    let clang = Runtime::selected().kernel_clang();
    build_cached(&format!("kernels-{mcpu}.co"), &[&src], |out| {
        let mut c = compiler(clang);
        c.args([
            "-x",
            "cl",
            "-cl-std=CL2.0",
            "-target",
            "amdgcn-amd-amdhsa",
            "-nogpulib",
            "-O2",
        ])
        .arg(format!("-mcpu={mcpu}"))
        .arg(&src)
        .arg("-o")
        .arg(out);
        c
    })
}

/// The raw-HSA C++ program.
pub fn hsa_raw() -> PathBuf {
    let src = programs_dir().join("hsa_raw.cpp");
    let header = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/rprof_emu.h");
    let emu = emulator();
    build_cached("hsa_raw", &[&src, &header], |out| {
        let mut c = compiler("g++");
        c.args(["-O1", "-g", "-std=c++17"])
            .arg(format!("-I{}", header.parent().unwrap().display()))
            .arg(&src)
            .args(&emu.link_args)
            .args(["-lhsa-runtime64", "-lpthread", "-o"])
            .arg(out);
        c
    })
}

/// `timeout 120 <program>` on the selected runtime over the emulator (add arguments and environment).
pub fn run_command(program: &Path) -> Command {
    let emu = emulator();
    let mut c = Command::new("timeout");
    c.arg("120")
        .args(Runtime::selected().argv(program, &emu.loader_env))
        .env_remove("LD_PRELOAD")
        .env_remove("LD_LIBRARY_PATH");
    if Runtime::selected() == Runtime::Rocm52 {
        c.envs(emu.loader_env.iter().map(|(k, v)| (k, v)));
    }
    c
}

/// Output of a program run over the emulator.
#[derive(Debug)]
pub struct Run {
    /// `key=value` lines of stdout.
    pub values: HashMap<String, String>,
    /// Whole stdout.
    pub stdout: String,
    /// Whole stderr.
    pub stderr: String,
    /// Exit code.
    pub code: Option<i32>,
}

impl Run {
    /// The value of `key` (panics with the whole output if missing).
    pub fn get(&self, key: &str) -> &str {
        self.values.get(key).unwrap_or_else(|| {
            panic!(
                "no '{key}' in output:\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }

    /// The value of `key` as an integer.
    pub fn int(&self, key: &str) -> i64 {
        let v = self.get(key);
        if let Some(hex) = v.strip_prefix("0x") {
            i64::from_str_radix(hex, 16).unwrap()
        } else {
            v.parse()
                .unwrap_or_else(|_| panic!("{key}={v} is not an integer"))
        }
    }
}

/// Runs `program args` over the emulator with extra environment variables, with a timeout; asserts exit 0.
pub fn run(program: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut c = run_command(program);
    c.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("RPROF_EMU_") {
            c.env_remove(k);
        }
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("program runs");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let values = stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let run = Run {
        values,
        stdout,
        stderr,
        code: out.status.code(),
    };
    assert_eq!(
        run.code,
        Some(0),
        "{} {args:?} failed:\n{}\nstderr:\n{}",
        program.display(),
        run.stdout,
        run.stderr
    );
    run
}
