//! Which ROCm runtime the end-to-end tests run on, and how to build and run
//! programs for it: the one place that choice is made.
//!
//! `RPROF_TEST_ROCM` selects the runtime:
//!
//! | value | runtime | root | emulator front-end |
//! |---|---|---|---|
//! | `5.2` (default) | ROCr 5.2.3 + HIP 5.2.3 | this machine | `libhsakmt.so.1` on `LD_LIBRARY_PATH` |
//! | `6.1` | ROCr 6.1.2 + HIP 5.7.1 | Debian trixie root | `libhsakmt.so.1` on `LD_LIBRARY_PATH` |
//! | `6.4` | ROCr 6.4.3 + HIP 6.4.3 | Debian sid root | `librprof_emu_kfd.so` in `LD_PRELOAD` |
//! | `7.0` | ROCr 7.0 + HIP 6.4.3 | the sid root, `/opt/rocr7` (by hand, not CI) | `librprof_emu_kfd.so` in `LD_PRELOAD` |
//!
//! C, C++ and HIP programs are compiled inside the runtime's root with its
//! own compilers, and run there, through `scripts/rocm-env.sh VERSION -- ...`
//! (which builds the root on first use and passes the environment through).
//! Builds for each runtime go to `<target>/rocm-VERSION/`, so their caches
//! never mix. Rust binaries (`rprof`, the tool and emulator libraries,
//! [`super::artefacts`]) are built once on the host and run inside every root.
//!
//! Nothing here skips: a runtime whose root cannot be built, or whose
//! emulator front-end is missing, fails the test with the reason.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use super::{repo, target_dir};

/// The selecting environment variable.
pub const SELECTOR: &str = "RPROF_TEST_ROCM";

/// A runtime the end-to-end tests can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// ROCr 5.2.3 + HIP 5.2.3, the host (Debian 12).
    Rocm52,
    /// ROCr 6.1.2 + HIP 5.7.1, a Debian trixie root.
    Rocm61,
    /// ROCr 6.4.3 + HIP 6.4.3, a Debian sid root.
    Rocm64,
    /// ROCr 7.0 built from source into the sid root's `/opt/rocr7` (first on
    /// `LD_LIBRARY_PATH`), under HIP 6.4.3. Not in CI: building it needs the
    /// ROCm sources (`scripts/rocm-env.sh` says how when it is missing).
    Rocm70,
}

/// How the emulated GPU gets under the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrontEnd {
    /// A replacement `libhsakmt.so.1` (package `rprof-emu-thunk`, cdylib
    /// `libhsakmt.so`), found by ROCr through `LD_LIBRARY_PATH`.
    Thunk,
    /// `librprof_emu_kfd.so` (package `rprof-emu-kfd`) in `LD_PRELOAD`,
    /// answering the `/dev/kfd` ioctls of a ROCr with the thunk built in.
    KfdPreload,
}

impl FrontEnd {
    /// The cargo package that builds it.
    pub fn package(self) -> &'static str {
        match self {
            FrontEnd::Thunk => "rprof-emu-thunk",
            FrontEnd::KfdPreload => "rprof-emu-kfd",
        }
    }

    /// The library file cargo leaves in `<target>/<profile>/`.
    pub fn library_file(self) -> &'static str {
        match self {
            FrontEnd::Thunk => "libhsakmt.so",
            FrontEnd::KfdPreload => "librprof_emu_kfd.so",
        }
    }
}

impl Runtime {
    /// The runtime `RPROF_TEST_ROCM` names (`5.2` when unset); panics on
    /// any other value, so a typo never runs the wrong runtime.
    pub fn selected() -> Runtime {
        static SELECTED: OnceLock<Runtime> = OnceLock::new();
        *SELECTED.get_or_init(|| match std::env::var(SELECTOR) {
            Err(std::env::VarError::NotPresent) => Runtime::Rocm52,
            Ok(v) => Runtime::parse(&v)
                .unwrap_or_else(|| panic!("{SELECTOR}={v:?}: expected 5.2, 6.1, 6.4 or 7.0")),
            Err(e) => panic!("{SELECTOR}: {e}"),
        })
    }

    /// `5.2`, `6.1`, `6.4` or `7.0` (empty: 5.2).
    pub fn parse(v: &str) -> Option<Runtime> {
        match v.trim() {
            "" | "5.2" => Some(Runtime::Rocm52),
            "6.1" => Some(Runtime::Rocm61),
            "6.4" => Some(Runtime::Rocm64),
            "7.0" => Some(Runtime::Rocm70),
            _ => None,
        }
    }

    /// The version `scripts/rocm-env.sh` takes.
    pub fn version(self) -> &'static str {
        match self {
            Runtime::Rocm52 => "5.2",
            Runtime::Rocm61 => "6.1",
            Runtime::Rocm64 => "6.4",
            Runtime::Rocm70 => "7.0",
        }
    }

    /// Human name, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Runtime::Rocm52 => "ROCr 5.2.3 + HIP 5.2.3 (host)",
            Runtime::Rocm61 => "ROCr 6.1.2 + HIP 5.7.1 (trixie root)",
            Runtime::Rocm64 => "ROCr 6.4.3 + HIP 6.4.3 (sid root)",
            Runtime::Rocm70 => "ROCr 7.0 + HIP 6.4.3 (sid root, /opt/rocr7)",
        }
    }

    /// The emulator front-end this runtime needs: ROCr 6.4 has the thunk
    /// compiled in, so only the kfd front-end reaches it.
    pub fn front_end(self) -> FrontEnd {
        match self {
            Runtime::Rocm52 | Runtime::Rocm61 => FrontEnd::Thunk,
            Runtime::Rocm64 | Runtime::Rocm70 => FrontEnd::KfdPreload,
        }
    }

    /// The root's clang with the AMDGPU target, for OpenCL kernels: the
    /// host's clang-15, trixie's clang-17 and sid's clang-21 (each the one
    /// its hipcc depends on).
    pub fn kernel_clang(self) -> &'static str {
        match self {
            Runtime::Rocm52 => "clang-15",
            Runtime::Rocm61 => "clang-17",
            Runtime::Rocm64 | Runtime::Rocm70 => "clang-21",
        }
    }

    /// `scripts/rocm-env.sh`.
    pub fn script() -> PathBuf {
        repo().join("scripts/rocm-env.sh")
    }

    /// The root's path (`/` for 5.2). The first call builds the root if it
    /// is not cached yet; panics with `rocm-env.sh`'s reason if that fails
    /// (not root, no network, ...).
    pub fn root(self) -> &'static Path {
        static ROOTS: [OnceLock<Result<PathBuf, String>>; 4] = [
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
        ];
        let slot = &ROOTS[self as usize];
        let r = slot.get_or_init(|| {
            let out = Command::new("bash")
                .arg(Self::script())
                .arg(self.version())
                .output()
                .map_err(|e| format!("cannot run bash {}: {e}", Self::script().display()))?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() {
                return Err(format!(
                    "scripts/rocm-env.sh {} failed ({}): {}{}",
                    self.version(),
                    out.status,
                    stdout,
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            Ok(PathBuf::from(stdout.trim()))
        });
        match r {
            Ok(p) => p,
            Err(e) => panic!(
                "{SELECTOR}={}: the {} runtime is not available: {e}",
                self.version(),
                self.describe()
            ),
        }
    }

    /// The argument vector that runs `program` on this runtime with the
    /// loader variables `loader_env` (`LD_PRELOAD`, `LD_LIBRARY_PATH`, ...)
    /// set for the program only: on 5.2 the program itself (the caller sets
    /// `loader_env` on the command); inside a root `bash rocm-env.sh V --
    /// env K=V... program`, so that the host's `unshare`/`chroot` never load
    /// the emulator or the tool. The rest of the environment passes through.
    pub fn argv(
        self,
        program: impl AsRef<OsStr>,
        loader_env: &[(String, OsString)],
    ) -> Vec<OsString> {
        let mut v = Vec::new();
        if self != Runtime::Rocm52 {
            self.check_visible();
            let _ = self.root();
            v.push("bash".into());
            v.push(Self::script().into_os_string());
            v.push(self.version().into());
            v.push("--".into());
            if !loader_env.is_empty() {
                v.push("env".into());
                for (k, val) in loader_env {
                    let mut kv = OsString::from(k);
                    kv.push("=");
                    kv.push(val);
                    v.push(kv);
                }
            }
        }
        v.push(program.as_ref().to_os_string());
        v
    }

    /// A command running `program` on this runtime (see [`Runtime::argv`])
    /// whose `LD_PRELOAD` and `LD_LIBRARY_PATH` are exactly `loader_env`'s
    /// (inherited values are dropped); add the program's arguments and the
    /// rest of the environment to it.
    pub fn command(self, program: impl AsRef<OsStr>, loader_env: &[(String, OsString)]) -> Command {
        let argv = self.argv(program, loader_env);
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..])
            .env_remove("LD_PRELOAD")
            .env_remove("LD_LIBRARY_PATH");
        if self == Runtime::Rocm52 {
            for (k, val) in loader_env {
                c.env(k, val);
            }
        }
        c
    }

    /// A compiler (or any build tool) of this runtime's root.
    pub fn tool(self, program: &str) -> Command {
        self.command(program, &[])
    }

    /// `<target>/rocm-VERSION/<what>`: where builds for this runtime go.
    pub fn build_dir(self, target: &Path, what: &str) -> PathBuf {
        let d = target.join(format!("rocm-{}", self.version())).join(what);
        std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("create {}: {e}", d.display()));
        d
    }

    /// Puts the emulated GPU under this runtime, with the front-end library
    /// cargo built in `profile` (`<target>/<profile>`). Fails with the
    /// reason when it is not there.
    pub fn emulator(self, profile: &Path) -> Result<Emulator, String> {
        self.emulator_with(profile, self.front_end())
    }

    /// [`Runtime::emulator`] through a given front-end: the kfd front-end
    /// also works over the real `libhsakmt.so.1` of 5.2 and 6.1 (it answers
    /// that library's `/dev/kfd` calls), which programs that check for the
    /// kernel driver themselves (`rocminfo`) need there.
    pub fn emulator_with(self, profile: &Path, front_end: FrontEnd) -> Result<Emulator, String> {
        let library = profile.join(front_end.library_file());
        if !library.is_file() {
            return Err(format!(
                "{SELECTOR}={}: {} needs the emulator's {:?} front-end {} (package {}), which the harness's build \
                 did not leave there",
                self.version(),
                self.describe(),
                front_end,
                library.display(),
                front_end.package()
            ));
        }
        let (loader_env, link_args) = match front_end {
            FrontEnd::Thunk => {
                let dir = profile.join("emu-lib");
                link_soname(&dir, "libhsakmt.so.1", &library)?;
                let mut l = OsString::from("-L");
                l.push(&dir);
                (
                    vec![("LD_LIBRARY_PATH".to_string(), dir.into_os_string())],
                    vec![l, "-l:libhsakmt.so.1".into()],
                )
            }
            FrontEnd::KfdPreload => (
                vec![("LD_PRELOAD".to_string(), library.clone().into_os_string())],
                // By path, so no search path is needed at link time: the program's DT_NEEDED is the library's
                // SONAME (or this path, for a build without one), which the object LD_PRELOAD loads satisfies.
                // Through `-Wl,` so that hipcc hands it to the linker, not to the compiler.
                vec![{
                    let mut a = OsString::from("-Wl,");
                    a.push(&library);
                    a
                }],
            ),
        };
        Ok(Emulator {
            front_end,
            library,
            loader_env,
            link_args,
        })
    }

    /// Paths a root sees are the repository, `/tmp` and `$HOME` (bind
    /// mounts); a target directory elsewhere would be invisible there.
    fn check_visible(self) {
        let target = target_dir();
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let visible = target.starts_with(repo())
            || target.starts_with("/tmp")
            || home.as_deref().is_some_and(|h| target.starts_with(h));
        assert!(
            visible,
            "{SELECTOR}={}: the target directory {} is not under the repository, /tmp or $HOME, so the \
             runtime's root cannot see the programs built there; set CARGO_TARGET_DIR inside one of them",
            self.version(),
            target.display()
        );
    }
}

/// The emulated GPU set up for one runtime.
#[derive(Debug, Clone)]
pub struct Emulator {
    /// Its front-end.
    pub front_end: FrontEnd,
    /// The front-end library.
    pub library: PathBuf,
    /// Loader variables that put it under the runtime.
    pub loader_env: Vec<(String, OsString)>,
    /// Linker arguments for programs that call its C API (`rprof_emu.h`).
    pub link_args: Vec<OsString>,
}

impl Emulator {
    /// [`Emulator::loader_env`] with `preload` added to `LD_PRELOAD` (after
    /// the kfd front-end, which must interpose first).
    pub fn loader_env_preloading(&self, preload: &Path) -> Vec<(String, OsString)> {
        let mut env = self.loader_env.clone();
        match env.iter_mut().find(|(k, _)| k == "LD_PRELOAD") {
            Some((_, v)) => {
                v.push(" ");
                v.push(preload);
            }
            None => env.push(("LD_PRELOAD".into(), preload.as_os_str().to_os_string())),
        }
        env
    }
}

/// Makes `dir/soname` a symlink to `library`, atomically (concurrent test
/// binaries share the directory).
pub fn link_soname(dir: &Path, soname: &str, library: &Path) -> Result<(), String> {
    let err = |e: std::io::Error| {
        format!(
            "link {}/{soname} -> {}: {e}",
            dir.display(),
            library.display()
        )
    };
    std::fs::create_dir_all(dir).map_err(err)?;
    let link = dir.join(soname);
    if std::fs::read_link(&link).ok().as_deref() == Some(library) {
        return Ok(());
    }
    // Unique per call: the tests of one binary run on several threads.
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".{soname}.tmp{}.{}",
        std::process::id(),
        CALLS.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(library, &tmp).map_err(err)?;
    std::fs::rename(&tmp, &link).map_err(err)
}
