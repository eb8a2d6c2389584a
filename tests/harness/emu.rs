//! The emulator's own programs (`tests/programs/emu/`: the raw-HSA
//! `hsa_raw.cpp`, the HIP `hip_app.cpp`, the OpenCL `kernels.cl`) built
//! against its C API (`emu/include/rprof_emu.h`, linked with the selected
//! runtime's front-end) and run untraced over the emulated GPU; they print
//! `key=value` lines ([`EmuRun`]).

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::artefacts::{build, code_object as compile_kernels, program};
use super::repo;
use super::run::run_with_timeout;
use super::runtime::Runtime;

/// `tests/programs/emu`.
pub fn programs_dir() -> PathBuf {
    repo().join("tests/programs/emu")
}

/// `emu/include/rprof_emu.h`, the emulator's C API.
pub fn header() -> PathBuf {
    repo().join("emu/include/rprof_emu.h")
}

/// The OpenCL test kernels (`kernels.cl`), compiled for `mcpu`.
pub fn code_object(mcpu: &str) -> PathBuf {
    compile_kernels(&programs_dir().join("kernels.cl"), mcpu)
}

/// An emulator program built from `tests/programs/emu/<src>` by `compiler`
/// with `flags`, the C API's include directory and the front-end's link
/// arguments, then `libs`.
pub fn emu_program(compiler: &str, src: &str, flags: &[&str], libs: &[&str]) -> PathBuf {
    let header = header();
    let mut args: Vec<OsString> = flags.iter().map(OsString::from).collect();
    args.push(format!("-I{}", header.parent().unwrap().display()).into());
    let mut link: Vec<OsString> = build().emulator().link_args;
    link.extend(libs.iter().map(OsString::from));
    program(
        compiler,
        &programs_dir().join(src),
        &[&header],
        &args,
        &link,
    )
}

/// The raw-HSA C++ program.
pub fn hsa_raw() -> PathBuf {
    emu_program(
        "g++",
        "hsa_raw.cpp",
        &["-O1", "-g", "-std=c++17"],
        &["-lhsa-runtime64", "-lpthread"],
    )
}

/// The HIP program.
pub fn hip_app() -> PathBuf {
    emu_program(
        "hipcc",
        "hip_app.cpp",
        &["--offload-arch=gfx90a", "-O1"],
        &[],
    )
}

/// `<program>` on the selected runtime over the emulator, without the
/// test's `RPROF_EMU_*` variables (add arguments and environment).
pub fn run_command(program: &Path) -> Command {
    let emu = build().emulator();
    let mut c = Runtime::selected().command(program, &emu.loader_env);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("RPROF_EMU_") {
            c.env_remove(k);
        }
    }
    c
}

/// Output of a program run over the emulator.
#[derive(Debug)]
pub struct EmuRun {
    /// `key=value` lines of stdout.
    pub values: HashMap<String, String>,
    /// Whole stdout.
    pub stdout: String,
    /// Whole stderr.
    pub stderr: String,
    /// Exit code.
    pub code: Option<i32>,
}

impl EmuRun {
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

/// Runs `program args` over the emulator with extra environment variables;
/// a hang after [`super::run::RUN_TIMEOUT`] fails the test; asserts exit 0.
pub fn run(program: &Path, args: &[&str], env: &[(&str, &str)]) -> EmuRun {
    let mut c = run_command(program);
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = run_with_timeout(c, PathBuf::new());
    let values = out
        .stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let run = EmuRun {
        values,
        stdout: out.stdout,
        stderr: out.stderr,
        code: out.code,
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
