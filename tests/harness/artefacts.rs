//! Everything the end-to-end tests run, built once per test binary in one
//! way: the Rust artefacts by a nested `cargo build`, the C, C++ and HIP test
//! programs inside the selected runtime's root.
//!
//! The Rust artefacts (`rprof`, `librprof_tool.so`, the thunk front-end
//! `libhsakmt.so` and the kfd front-end `librprof_emu_kfd.so`) come from
//! `cargo build -p rprof-tool -p rprof-emu-thunk -p rprof-emu-kfd` in the
//! test binary's own profile (`debug` -> `dev`, `release`, any custom one)
//! into `<target>/harness/cargo` (a target directory of its own, because the
//! outer `cargo test` holds the lock of the main one). Cargo rebuilds only
//! what changed, so the first binary pays for the build and the others find
//! it fresh; `cargo test` needs no prior build and never runs stale
//! libraries. `RPROF_TEST_EMU_LIB=<front-end library>` runs against a given
//! emulator build instead of the one built here.
//!
//! Programs build into `<target>/rocm-VERSION/<what>/` with the root's own
//! compilers; the scripts they use (`hip-tests/build.sh`,
//! `scripts/build-workloads.sh`) and [`build_cached`] rebuild only what
//! changed.

use std::collections::hash_map::DefaultHasher;
use std::ffi::OsString;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

use super::runtime::{self, Emulator, FrontEnd, Runtime};
use super::{profile_dir, repo, target_dir};

/// The Rust artefacts, built for this test binary.
#[derive(Debug)]
pub struct Build {
    /// The nested build's target directory (`<target>/harness/cargo`).
    pub target: PathBuf,
    /// Its profile directory's name (`debug`, `release`, ...), as
    /// `scripts/install.sh --profile` takes it.
    pub profile: String,
    /// `<target>/harness/cargo/<profile>`: where the artefacts are.
    pub dir: PathBuf,
    /// The `rprof` command.
    pub rprof: PathBuf,
    /// `librprof_tool.so`.
    pub tool: PathBuf,
    /// The emulator front-ends' directory, shaped like a cargo profile
    /// ([`Build::dir`], or one holding `RPROF_TEST_EMU_LIB`).
    pub emu_dir: PathBuf,
}

/// Runs `cmd` to its end; fails the test with its output unless it
/// succeeds, else returns that output.
pub fn run_checked(cmd: &mut Command, what: &str) -> Output {
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
    out
}

/// Builds the Rust artefacts once per test binary (see the module doc).
pub fn build() -> &'static Build {
    static BUILD: OnceLock<Build> = OnceLock::new();
    BUILD.get_or_init(|| {
        let profile = profile_dir()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .expect("a profile directory name");
        let cargo_profile = if profile == "debug" { "dev" } else { &profile };
        let target = target_dir().join("harness").join("cargo");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let emu_override = std::env::var_os("RPROF_TEST_EMU_LIB").map(PathBuf::from);
        let mut cmd = Command::new(cargo);
        cmd.current_dir(repo())
            .args(["build", "--profile", cargo_profile, "-p", "rprof-tool"])
            .env("CARGO_TARGET_DIR", &target);
        if emu_override.is_none() {
            for front_end in [FrontEnd::Thunk, FrontEnd::KfdPreload] {
                cmd.args(["-p", front_end.package()]);
            }
        }
        run_checked(
            &mut cmd,
            "cargo build of rprof, the tool library and the emulator",
        );
        let dir = target.join(&profile);
        let emu_dir = match &emu_override {
            Some(lib) => {
                // A directory shaped like a cargo profile around the given library; `rprof` looks for the
                // emulator next to itself, so it goes there too.
                let front_end = Runtime::selected().front_end();
                let shaped = target.join("emu-override");
                for d in [&shaped, &dir] {
                    runtime::link_soname(d, front_end.library_file(), lib)
                        .unwrap_or_else(|e| panic!("{e}"));
                }
                shaped
            }
            None => dir.clone(),
        };
        let b = Build {
            rprof: dir.join("rprof"),
            tool: dir.join("librprof_tool.so"),
            target,
            profile,
            dir,
            emu_dir,
        };
        for f in [&b.rprof, &b.tool] {
            assert!(f.is_file(), "the build left no {}", f.display());
        }
        b
    })
}

impl Build {
    /// The emulated GPU under the selected runtime, through the front-end it
    /// needs.
    pub fn emulator(&self) -> Emulator {
        self.emulator_with(Runtime::selected().front_end())
    }

    /// The emulated GPU under the selected runtime through `front_end`.
    pub fn emulator_with(&self, front_end: FrontEnd) -> Emulator {
        static LOCK: Mutex<()> = Mutex::new(());
        // Linking the thunk's SONAME is atomic, but one at a time keeps it simple.
        let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        Runtime::selected()
            .emulator_with(&self.emu_dir, front_end)
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

/// The `rprof` command ([`build`]).
pub fn rprof() -> &'static Path {
    &build().rprof
}

/// `tests/programs`.
pub fn programs_dir() -> PathBuf {
    repo().join("tests/programs")
}

/// `<target>/rocm-VERSION/programs`: the compiled test programs of the
/// selected runtime.
pub fn program_dir() -> PathBuf {
    Runtime::selected().build_dir(&target_dir(), "programs")
}

/// Runs `make(out)` (a compiler invocation writing `out`) unless an output
/// built from the same inputs and command exists in [`program_dir`]; returns
/// the output's path (`NAME-HASH`). Safe across the threads of a binary and
/// across binaries (the output appears by rename).
pub fn build_cached(name: &str, inputs: &[&Path], make: impl Fn(&Path) -> Command) -> PathBuf {
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut h = DefaultHasher::new();
    for i in inputs {
        std::fs::read(i)
            .unwrap_or_else(|e| panic!("{}: {e}", i.display()))
            .hash(&mut h);
    }
    format!("{:?}", make(Path::new("out"))).hash(&mut h);
    let out = program_dir().join(format!("{name}-{:016x}", h.finish()));
    if out.exists() {
        return out;
    }
    let tmp = out.with_extension(format!("tmp{}", std::process::id()));
    run_checked(
        &mut make(&tmp),
        &format!("building {name} on ROCm {}", Runtime::selected().version()),
    );
    std::fs::rename(&tmp, &out).unwrap();
    out
}

/// An OpenCL source compiled for `mcpu` by the selected runtime's clang.
pub fn code_object(src: &Path, mcpu: &str) -> PathBuf {
    let clang = Runtime::selected().kernel_clang();
    let name = src.file_stem().unwrap().to_string_lossy();
    build_cached(&format!("{name}-{mcpu}.co"), &[src], |out| {
        let mut c = Runtime::selected().tool(clang);
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
        .arg(src)
        .arg("-o")
        .arg(out);
        c
    })
}

/// A C++ (or HIP) program built by `compiler` of the selected runtime's root
/// from `src`, with `args` before the source and `libs` after it.
pub fn program(
    compiler: &str,
    src: &Path,
    inputs: &[&Path],
    args: &[OsString],
    libs: &[OsString],
) -> PathBuf {
    let name = src.file_stem().unwrap().to_string_lossy();
    let mut all = vec![src];
    all.extend_from_slice(inputs);
    build_cached(&name, &all, |out| {
        let mut c = Runtime::selected().tool(compiler);
        c.args(args).arg(src).args(libs).arg("-o").arg(out);
        c
    })
}

/// `tests/programs/trace_app.cpp`, the raw-HSA program of the kernel trace
/// tests, and its code object (`trace_kernels.cl` for gfx90a).
pub fn trace_app() -> &'static (PathBuf, PathBuf) {
    static APP: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    APP.get_or_init(|| {
        let src = programs_dir();
        let kernels = code_object(&src.join("trace_kernels.cl"), "gfx90a");
        let app = program(
            "g++",
            &src.join("trace_app.cpp"),
            &[&src.join("hsa_test_util.h")],
            &["-O1".into(), "-std=c++17".into()],
            &["-lhsa-runtime64".into(), "-lpthread".into()],
        );
        (app, kernels)
    })
}

/// `tests/programs/chain_tool.cpp` (a second HSA tool rewriting packets in
/// front of rprof), built with the selected runtime's `g++` and HSA
/// headers, which pick the chain tool's mode (intercept markers and two
/// writer calls per kernel on ROCr >= 6, one writer call on 5.2.3).
pub fn chain_tool() -> &'static Path {
    static CHAIN: OnceLock<PathBuf> = OnceLock::new();
    CHAIN.get_or_init(|| {
        let src = programs_dir().join("chain_tool.cpp");
        build_cached("chain_tool.so", &[&src], |out| {
            let mut c = Runtime::selected().tool("g++");
            c.args([
                "-std=c++17",
                "-O1",
                "-shared",
                "-fPIC",
                "-DAMD_INTERNAL_BUILD",
                "-I/usr/include/hsa",
                "-o",
            ])
            .arg(out)
            .arg(&src)
            .arg("-ldl");
            c
        })
    })
}

/// The HIP program `name` of `hip-tests/`: all of them are built once per
/// test binary by `hip-tests/build.sh` inside the selected runtime's root
/// (with its `hipcc`; the script rebuilds only what changed) into
/// `<target>/rocm-VERSION/hip-tests/`. Fails the test with the build's
/// output if that fails (no `hipcc` included).
pub fn hip_program(name: &str) -> PathBuf {
    // A missing rprof or emulator front-end fails before the long build.
    build().emulator();
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let out = Runtime::selected().build_dir(&target_dir(), "hip-tests");
        build_script("hip-tests/build.sh", &out, &[]);
        out
    });
    let p = dir.join(name);
    assert!(p.exists(), "{} was not built", p.display());
    p
}

/// The `rpc-doorbell` workload (`tests/programs/rpc_doorbell.cpp`), built
/// with its code object by `scripts/build-workloads.sh
/// <target>/rocm-VERSION/workloads` inside the selected runtime's root, with
/// its `g++` and clang (the script rebuilds only what changed), once per
/// test binary.
pub fn rpc_workload() -> &'static Path {
    static PROGRAM: OnceLock<PathBuf> = OnceLock::new();
    PROGRAM.get_or_init(|| {
        let runtime = Runtime::selected();
        let out = runtime.build_dir(&target_dir(), "workloads");
        build_script(
            "scripts/build-workloads.sh",
            &out,
            &[("CLANG", runtime.kernel_clang()), ("CXX", "g++")],
        );
        let program = out.join("rpc-doorbell");
        assert!(program.is_file() && out.join("rpc_kernels.hsaco").is_file());
        program
    })
}

/// Runs the repository's build script `script OUT` inside the selected
/// runtime's root with `env`; fails the test with its output if it fails.
fn build_script(script: &str, out: &Path, env: &[(&str, &str)]) {
    let runtime = Runtime::selected();
    run_checked(
        runtime
            .tool("bash")
            .arg(repo().join(script))
            .arg(out)
            .envs(env.iter().copied()),
        &format!("{script} on ROCm {}", runtime.version()),
    );
}
