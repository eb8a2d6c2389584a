//! Which front-end of the emulated GPU the installed ROCm runtime needs.
//!
//! ROCr up to 6.1 links a separate thunk, `libhsakmt.so.1`: the emulator
//! replaces it ([`FrontEnd::Thunk`], a directory on `LD_LIBRARY_PATH`).
//! From 6.2 the thunk is compiled into `libhsa-runtime64.so.1`, which talks
//! to `/dev/kfd` itself: the emulator answers those calls from a preloaded
//! library ([`FrontEnd::KfdPreload`], `librprof_emu_kfd.so` in
//! `LD_PRELOAD`). [`needed_by_runtime`] finds the runtime the application's
//! loader will find and reads its `DT_NEEDED` entries to tell which.
//! It only reads files: it must not load the runtime or start the emulator.

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};

use object::elf::{FileHeader64, DT_NEEDED, ELFCLASS64};
use object::read::elf::FileHeader;
use object::{Endianness, ReadCache};

/// The runtime library applications load.
pub const RUNTIME_LIBRARY: &str = "libhsa-runtime64.so.1";

/// The separate thunk library of ROCr before 6.2.
const THUNK_PREFIX: &str = "libhsakmt.so";

/// How the emulated GPU gets under the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrontEnd {
    /// The emulator's `libhsakmt.so.1`, found through `LD_LIBRARY_PATH`.
    Thunk,
    /// The emulator's `librprof_emu_kfd.so`, in `LD_PRELOAD`.
    KfdPreload,
}

/// What [`needed_by_runtime`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// The front-end to use.
    pub front_end: FrontEnd,
    /// The runtime library it was read from (`None`: none found, so the
    /// thunk front-end, which is what an application that loads ROCr later,
    /// from a path of its own, most likely needs on a Debian-packaged ROCm).
    pub runtime: Option<PathBuf>,
}

/// Where the dynamic loader looks for a library, in its order (`DT_RUNPATH`
/// of the application is not followed).
#[derive(Debug, Clone)]
pub struct SearchPath {
    /// Directories of `LD_LIBRARY_PATH`.
    pub ld_library_path: Vec<PathBuf>,
    /// The file system the loader's configuration and the system
    /// directories are read from (`/`; a runtime root in tests).
    pub sysroot: PathBuf,
    /// The loader's configuration (`/etc/ld.so.conf`), whose directories
    /// (and those of its `include`s) make the loader's cache.
    pub ld_so_conf: PathBuf,
    /// The trusted system directories, searched last.
    pub system_dirs: Vec<PathBuf>,
}

impl SearchPath {
    /// The search path of a child started with `ld_library_path` on this
    /// machine.
    pub fn for_child(ld_library_path: Option<&OsStr>) -> SearchPath {
        let ld_library_path = ld_library_path
            .map(|v| {
                std::env::split_paths(v)
                    .filter(|p| !p.as_os_str().is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let triple = format!("{}-linux-gnu", std::env::consts::ARCH);
        let system_dirs = [
            format!("/lib/{triple}"),
            format!("/usr/lib/{triple}"),
            "/lib64".into(),
            "/usr/lib64".into(),
            "/lib".into(),
            "/usr/lib".into(),
        ]
        .into_iter()
        .map(PathBuf::from)
        .collect();
        SearchPath {
            ld_library_path,
            sysroot: PathBuf::from("/"),
            ld_so_conf: PathBuf::from("/etc/ld.so.conf"),
            system_dirs,
        }
    }

    /// Every directory, in search order (duplicates kept; harmless).
    fn dirs(&self) -> Vec<PathBuf> {
        let mut dirs = self.ld_library_path.clone();
        let mut seen_conf = Vec::new();
        conf_dirs(&self.sysroot, &self.ld_so_conf, &mut dirs, &mut seen_conf);
        dirs.extend(self.system_dirs.iter().map(|d| rerooted(&self.sysroot, d)));
        dirs
    }

    /// The first `name` in the search path that is a 64-bit ELF file of
    /// this machine's byte order, as the loader would pick it.
    pub fn find(&self, name: &str) -> Option<PathBuf> {
        self.dirs()
            .into_iter()
            .map(|d| d.join(name))
            .find(|p| needed_libraries(p).is_ok())
    }
}

/// `path` (absolute, as the loader sees it) inside `sysroot`.
fn rerooted(sysroot: &Path, path: &Path) -> PathBuf {
    sysroot.join(path.strip_prefix("/").unwrap_or(path))
}

/// Appends the directories named by the loader configuration `conf` (lines
/// of paths; `include GLOB` of further files, `*` in the file name only),
/// all read inside `sysroot`.
fn conf_dirs(sysroot: &Path, conf: &Path, dirs: &mut Vec<PathBuf>, seen: &mut Vec<PathBuf>) {
    if seen.iter().any(|s| s == conf) || seen.len() > 64 {
        return;
    }
    seen.push(conf.to_path_buf());
    let Ok(text) = std::fs::read_to_string(rerooted(sysroot, conf)) else {
        return;
    };
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if let Some(pattern) = line.strip_prefix("include") {
            for pattern in pattern.split_whitespace() {
                let pattern = match Path::new(pattern) {
                    p if p.is_absolute() => p.to_path_buf(),
                    p => conf.parent().unwrap_or(Path::new("/")).join(p),
                };
                let mut files = glob_file_names(&rerooted(sysroot, &pattern));
                files.sort();
                for f in files {
                    // Back to the loader's view of the path.
                    let f = Path::new("/").join(f.strip_prefix(sysroot).unwrap_or(&f));
                    conf_dirs(sysroot, &f, dirs, seen);
                }
            }
        } else if line.starts_with('/') {
            dirs.push(rerooted(sysroot, Path::new(line)));
        }
    }
}

/// Files matching `pattern`, whose last component may hold `*`s.
fn glob_file_names(pattern: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (pattern.parent(), pattern.file_name()) else {
        return Vec::new();
    };
    let name = name.to_string_lossy();
    if !name.contains('*') {
        return if pattern.is_file() {
            vec![pattern.to_path_buf()]
        } else {
            Vec::new()
        };
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| wildcard_match(&name, &e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .collect()
}

/// `*` matches any run of characters; everything else matches itself.
fn wildcard_match(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// The `DT_NEEDED` names of the 64-bit ELF shared object at `path` (of this
/// machine's byte order). Reads only the headers and the dynamic section.
pub fn needed_libraries(path: &Path) -> Result<Vec<String>, String> {
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let file = File::open(path).map_err(|e| err(&e))?;
    let cache = ReadCache::new(file);
    let data = &cache;
    let header = FileHeader64::<Endianness>::parse(data).map_err(|e| err(&e))?;
    if header.e_ident().class != ELFCLASS64 {
        return Err(err(&"not a 64-bit ELF file"));
    }
    let endian = header.endian().map_err(|e| err(&e))?;
    if endian != Endianness::default() {
        return Err(err(&"ELF file of the other byte order"));
    }
    let sections = header.sections(endian, data).map_err(|e| err(&e))?;
    let table = sections.dynamic_table(endian, data).map_err(|e| err(&e))?;
    let mut needed = Vec::new();
    for d in table.iter().filter(|d| d.tag == DT_NEEDED) {
        let name = table.string(d).map_err(|e| err(&e))?;
        needed.push(String::from_utf8_lossy(name).into_owned());
    }
    Ok(needed)
}

/// The front-end the runtime at `runtime` needs: the thunk front-end if it
/// links a separate thunk, else the kfd front-end.
pub fn needed_by(runtime: &Path) -> Result<FrontEnd, String> {
    let needed = needed_libraries(runtime)?;
    Ok(if needed.iter().any(|n| n.starts_with(THUNK_PREFIX)) {
        FrontEnd::Thunk
    } else {
        FrontEnd::KfdPreload
    })
}

/// The front-end the runtime found along `search` needs (see [`Choice`]).
pub fn needed_by_runtime(search: &SearchPath) -> Result<Choice, String> {
    match search.find(RUNTIME_LIBRARY) {
        Some(runtime) => Ok(Choice {
            front_end: needed_by(&runtime)?,
            runtime: Some(runtime),
        }),
        None => Ok(Choice {
            front_end: FrontEnd::Thunk,
            runtime: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// The runtime root of ROCm `version` (`scripts/rocm-env.sh VERSION`,
    /// which builds it on first use); panics with the script's reason.
    fn root(version: &str) -> PathBuf {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/rocm-env.sh");
        let out = Command::new("bash")
            .arg(&script)
            .arg(version)
            .output()
            .expect("bash runs scripts/rocm-env.sh");
        assert!(
            out.status.success(),
            "scripts/rocm-env.sh {version} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    }

    fn runtime_in(root: &Path) -> PathBuf {
        let triple = format!("{}-linux-gnu", std::env::consts::ARCH);
        let p = root.join("usr/lib").join(triple).join(RUNTIME_LIBRARY);
        assert!(p.exists(), "{} missing", p.display());
        p
    }

    /// The search path of a process inside `root` (its own loader
    /// configuration and system directories), with no `LD_LIBRARY_PATH`.
    fn search_in(root: &Path) -> SearchPath {
        SearchPath {
            sysroot: root.to_path_buf(),
            ..SearchPath::for_child(None)
        }
    }

    #[test]
    fn rocr_5_2_links_the_thunk() {
        let lib = runtime_in(Path::new("/"));
        let needed = needed_libraries(&lib).unwrap();
        assert!(needed.iter().any(|n| n == "libhsakmt.so.1"), "{needed:?}");
        assert_eq!(needed_by(&lib), Ok(FrontEnd::Thunk));
    }

    #[test]
    fn rocr_6_1_links_the_thunk() {
        let lib = runtime_in(&root("6.1"));
        assert_eq!(needed_by(&lib), Ok(FrontEnd::Thunk));
    }

    #[test]
    fn rocr_6_4_has_the_thunk_built_in() {
        let lib = runtime_in(&root("6.4"));
        let needed = needed_libraries(&lib).unwrap();
        assert!(
            needed.iter().any(|n| n.starts_with("libc.so")),
            "{needed:?}"
        );
        assert!(!needed.iter().any(|n| n.contains("hsakmt")), "{needed:?}");
        assert_eq!(needed_by(&lib), Ok(FrontEnd::KfdPreload));
    }

    #[test]
    fn each_root_finds_its_own_runtime_through_its_loader_configuration() {
        for (version, want) in [("6.1", FrontEnd::Thunk), ("6.4", FrontEnd::KfdPreload)] {
            let root = root(version);
            let choice = needed_by_runtime(&search_in(&root)).unwrap();
            assert_eq!(choice.front_end, want, "{version}");
            assert!(
                choice.runtime.as_ref().unwrap().starts_with(&root),
                "{version}: {:?}",
                choice.runtime
            );
        }
        let host = needed_by_runtime(&SearchPath::for_child(None)).unwrap();
        assert_eq!(host.front_end, FrontEnd::Thunk);
    }

    #[test]
    fn ld_library_path_comes_first() {
        let dir = std::env::temp_dir().join(format!("rprof-front-end-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let link = dir.join(RUNTIME_LIBRARY);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(runtime_in(&root("6.4")), &link).unwrap();
        // An empty entry and a missing directory are passed over.
        let value = format!("::/nonexistent-rprof-dir:{}", dir.display());
        let choice = needed_by_runtime(&SearchPath::for_child(Some(OsStr::new(&value)))).unwrap();
        assert_eq!(choice.front_end, FrontEnd::KfdPreload);
        assert_eq!(choice.runtime.as_deref(), Some(link.as_path()));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_that_is_not_a_64_bit_elf_is_passed_over() {
        let dir = std::env::temp_dir().join(format!("rprof-front-end-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(RUNTIME_LIBRARY), b"not an ELF file").unwrap();
        let search = SearchPath::for_child(Some(dir.as_os_str()));
        assert!(needed_libraries(&dir.join(RUNTIME_LIBRARY)).is_err());
        let found = search.find(RUNTIME_LIBRARY).unwrap();
        assert_ne!(found, dir.join(RUNTIME_LIBRARY));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn no_runtime_anywhere_keeps_the_thunk_front_end() {
        let search = SearchPath {
            ld_library_path: vec![],
            sysroot: PathBuf::from("/"),
            ld_so_conf: PathBuf::from("/nonexistent-rprof-ld.so.conf"),
            system_dirs: vec![PathBuf::from("/nonexistent-rprof-dir")],
        };
        assert_eq!(
            needed_by_runtime(&search),
            Ok(Choice {
                front_end: FrontEnd::Thunk,
                runtime: None
            })
        );
    }

    #[test]
    fn loader_configuration_includes_are_followed_in_order() {
        let dir = std::env::temp_dir().join(format!("rprof-ld-conf-{}", std::process::id()));
        let d = dir.join("ld.so.conf.d");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            dir.join("ld.so.conf"),
            "# comment\ninclude ld.so.conf.d/*.conf\n/opt/last\n",
        )
        .unwrap();
        std::fs::write(d.join("b.conf"), "/opt/b # trailing\n").unwrap();
        std::fs::write(d.join("a.conf"), "/opt/a\n\n").unwrap();
        std::fs::write(d.join("skip.txt"), "/opt/not-a-conf\n").unwrap();
        let mut dirs = Vec::new();
        conf_dirs(
            Path::new("/"),
            &dir.join("ld.so.conf"),
            &mut dirs,
            &mut Vec::new(),
        );
        assert_eq!(
            dirs,
            ["/opt/a", "/opt/b", "/opt/last"]
                .map(PathBuf::from)
                .to_vec()
        );
        // The same tree seen as a root: absolute names are read inside it.
        std::fs::write(
            dir.join("ld.so.conf"),
            "include /ld.so.conf.d/*.conf\n/opt/last\n",
        )
        .unwrap();
        let mut dirs = Vec::new();
        conf_dirs(&dir, Path::new("/ld.so.conf"), &mut dirs, &mut Vec::new());
        assert_eq!(
            dirs,
            ["opt/a", "opt/b", "opt/last"].map(|d| dir.join(d)).to_vec()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn wildcards() {
        assert!(wildcard_match("*.conf", "x86_64-linux-gnu.conf"));
        assert!(wildcard_match("*.conf", ".conf"));
        assert!(!wildcard_match("*.conf", "a.conf.bak"));
        assert!(wildcard_match("a*b*c", "aXbYc"));
        assert!(!wildcard_match("a*b*c", "aXcYb"));
        assert!(wildcard_match("exact", "exact"));
        assert!(!wildcard_match("exact", "exactly"));
    }
}
