//! Shared helpers of the emulator's integration tests: build test programs (cached in the target dir) and run
//! them over the emulated GPU.
#![allow(dead_code)]

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
    let dir = rprof_emu::test_support::profile_dir()
        .expect("libhsakmt.so next to the test binary")
        .join("emu-programs");
    std::fs::create_dir_all(&dir).unwrap();
    dir
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

/// Directory to put on `LD_LIBRARY_PATH`.
pub fn lib_dir() -> PathBuf {
    let _guard = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    rprof_emu::test_support::library_dir().expect("emulator library dir")
}

/// The OpenCL test kernels, compiled for `mcpu`.
pub fn code_object(mcpu: &str) -> PathBuf {
    let src = programs_dir().join("kernels.cl");
    build_cached(&format!("kernels-{mcpu}.co"), &[&src], |out| {
        let mut c = Command::new("clang-15");
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
    let lib = lib_dir();
    build_cached("hsa_raw", &[&src, &header], |out| {
        let mut c = Command::new("g++");
        c.args(["-O1", "-g", "-std=c++17"])
            .arg(format!("-I{}", header.parent().unwrap().display()))
            .arg(&src)
            .arg(format!("-L{}", lib.display()))
            .args(["-l:libhsakmt.so.1", "-lhsa-runtime64", "-lpthread", "-o"])
            .arg(out);
        c
    })
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
    let mut c = Command::new("timeout");
    c.arg("120").arg(program).args(args);
    c.env("LD_LIBRARY_PATH", lib_dir());
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
