//! Where `rprof` finds its own libraries, and why it may load them. It must not
//! find libraries anywhere else (no search path, no current directory).
//!
//! Two layouts:
//! - installed (`scripts/install.sh PREFIX`): `PREFIX/bin/rprof` with
//!   `PREFIX/lib/rprof/{librprof_tool.so, librprof_emu_kfd.so}` and the thunk
//!   front-end under its final name, `PREFIX/lib/rprof/emu/libhsakmt.so.1`,
//!   alone in its directory so that directory can go on `LD_LIBRARY_PATH`.
//!   Nothing is created at run time.
//! - a cargo build tree: everything next to `rprof` in `target/<profile>`,
//!   where the thunk is `libhsakmt.so` (cargo cannot name a cdylib
//!   `libhsakmt.so.1`). The loader finds libraries by file name, so rprof makes
//!   a fresh private directory ([`PrivateLibDir`], `mkdtemp`, mode 0700) with
//!   the one symlink `libhsakmt.so.1` in it, and removes it when the app ends.
//!   No fixed name, no existing path reused.
//!
//! Every library is checked before use ([`check_trusted`]): it and every
//! directory above it must belong to root, to the user running rprof or to
//! the owner of the `rprof` executable, and no directory may be writable by
//! others unless it is sticky (like `/tmp`). A library someone else could
//! replace is refused.

use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::cli::sibling_of_exe;

/// The tool library.
pub const TOOL_LIBRARY: &str = "librprof_tool.so";
/// The thunk front-end of the emulated GPU as cargo names it.
pub const THUNK_BUILT: &str = "libhsakmt.so";
/// Its SONAME: the name ROCr up to 6.1 asks the loader for.
pub const THUNK_SONAME: &str = "libhsakmt.so.1";
/// The kfd front-end of the emulated GPU (ROCr from 6.2).
pub const KFD_LIBRARY: &str = "librprof_emu_kfd.so";

/// `PREFIX/lib/rprof` when `exe` is `PREFIX/bin/rprof` of an installed
/// layout (the directory holds the tool library).
pub fn installed_dir(exe: &Path) -> Option<PathBuf> {
    let prefix = exe.parent()?.parent()?;
    let dir = prefix.join("lib").join("rprof");
    dir.join(TOOL_LIBRARY).is_file().then_some(dir)
}

/// A library of rprof's (`TOOL_LIBRARY` or `KFD_LIBRARY`): from the
/// installed layout, else next to `rprof` in a build tree; canonical and
/// checked by [`check_trusted`].
pub fn find(exe: &Path, name: &str) -> io::Result<PathBuf> {
    let found = match installed_dir(exe) {
        Some(dir) => Some(dir.join(name)).filter(|p| p.is_file()),
        None => sibling_of_exe(exe, name),
    };
    let path = found.ok_or_else(|| not_found(exe, name))?;
    let path = path.canonicalize()?;
    check_trusted(&path, exe)?;
    Ok(path)
}

fn not_found(exe: &Path, name: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!(
            "{name} is neither in {} nor next to {} (install with `scripts/install.sh PREFIX`, or build with \
             `cargo build --release`)",
            exe.parent()
                .and_then(Path::parent)
                .map(|p| p.join("lib/rprof").display().to_string())
                .unwrap_or_else(|| "PREFIX/lib/rprof".into()),
            exe.display()
        ),
    )
}

/// The directory to put first on `LD_LIBRARY_PATH` for the thunk
/// front-end: the installed `lib/rprof/emu`, or a [`PrivateLibDir`] for a
/// build tree.
pub enum ThunkDir {
    /// Installed, read-only, used as it is.
    Installed(PathBuf),
    /// Made for this run.
    Private(PrivateLibDir),
}

impl ThunkDir {
    /// The directory.
    pub fn path(&self) -> &Path {
        match self {
            ThunkDir::Installed(p) => p,
            ThunkDir::Private(d) => &d.dir,
        }
    }
}

/// Finds the thunk front-end for `exe` (see the module doc).
pub fn thunk_dir(exe: &Path) -> io::Result<ThunkDir> {
    if let Some(dir) = installed_dir(exe) {
        let emu = dir.join("emu");
        let lib = emu.join(THUNK_SONAME);
        if !lib.is_file() {
            return Err(not_found(exe, THUNK_SONAME));
        }
        // The directory goes on LD_LIBRARY_PATH as it is (the loader looks
        // for the name `libhsakmt.so.1` in it, which may be a packager's
        // symlink): both it and the library it names must be trusted.
        let emu = emu.canonicalize()?;
        check_trusted(&emu, exe)?;
        check_trusted(&lib.canonicalize()?, exe)?;
        return Ok(ThunkDir::Installed(emu));
    }
    let lib = sibling_of_exe(exe, THUNK_BUILT).ok_or_else(|| not_found(exe, THUNK_BUILT))?;
    let lib = lib.canonicalize()?;
    check_trusted(&lib, exe)?;
    let dir = PrivateLibDir::create(&std::env::temp_dir())?;
    dir.link(THUNK_SONAME, &lib)?;
    Ok(ThunkDir::Private(dir))
}

/// A directory made with `mkdtemp` (mode 0700, a name nobody can guess in
/// advance) holding symlinks this process made; removed on drop.
pub struct PrivateLibDir {
    dir: PathBuf,
}

impl PrivateLibDir {
    /// A fresh `rprof-emu-XXXXXX` under `base`.
    pub fn create(base: &Path) -> io::Result<PrivateLibDir> {
        let mut template = base.join("rprof-emu-XXXXXX").into_os_string().into_vec();
        template.push(0);
        // SAFETY: mkdtemp rewrites the trailing XXXXXX of our NUL-terminated
        // buffer in place and creates the directory with mode 0700; the
        // buffer outlives the call.
        let p = unsafe { libc::mkdtemp(template.as_mut_ptr().cast()) };
        if p.is_null() {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "cannot create a private directory in {}: {e}",
                    base.display()
                ),
            ));
        }
        template.pop();
        let dir = PathBuf::from(OsString::from_vec(template));
        // Absolute, whatever TMPDIR says, for LD_LIBRARY_PATH.
        let dir = std::path::absolute(&dir).unwrap_or(dir);
        Ok(PrivateLibDir { dir })
    }

    /// Makes `name` in the directory a symlink to `target`.
    pub fn link(&self, name: &str, target: &Path) -> io::Result<()> {
        std::os::unix::fs::symlink(target, self.dir.join(name))
    }
}

impl Drop for PrivateLibDir {
    fn drop(&mut self) {
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Refuses `path` (canonical) when someone other than root, the user
/// running rprof or the owner of `exe` could replace it: the file and each
/// directory above it must be owned by one of them, and no directory may be
/// writable by others unless sticky.
pub fn check_trusted(path: &Path, exe: &Path) -> io::Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let exe_owner = std::fs::metadata(exe).map(|m| m.uid()).unwrap_or(me);
    let trusted = |uid: u32| uid == 0 || uid == me || uid == exe_owner;
    let refuse = |p: &Path, why: &str| {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "refusing {}: {} {why}, so another user could replace what the application loads",
                path.display(),
                p.display()
            ),
        ))
    };
    let meta = std::fs::metadata(path)?;
    if !trusted(meta.uid()) {
        return refuse(path, &format!("belongs to uid {}", meta.uid()));
    }
    if meta.mode() & 0o002 != 0 {
        return refuse(path, "is writable by everyone");
    }
    let mut dir = path.parent();
    while let Some(d) = dir {
        let m = std::fs::metadata(d)?;
        if !trusted(m.uid()) {
            return refuse(d, &format!("belongs to uid {}", m.uid()));
        }
        if m.mode() & 0o002 != 0 && m.mode() & libc::S_ISVTX == 0 {
            return refuse(d, "is writable by everyone and not sticky");
        }
        dir = d.parent();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_dir_is_fresh_0700_and_removed() {
        let base = std::env::temp_dir();
        let a = PrivateLibDir::create(&base).unwrap();
        let b = PrivateLibDir::create(&base).unwrap();
        assert_ne!(a.dir, b.dir);
        let m = std::fs::symlink_metadata(&a.dir).unwrap();
        assert!(m.is_dir());
        assert_eq!(m.mode() & 0o777, 0o700);
        a.link(THUNK_SONAME, Path::new("/nonexistent-target"))
            .unwrap();
        // A second link of the same name is never made over the first.
        assert!(a.link(THUNK_SONAME, Path::new("/other")).is_err());
        let dir = a.dir.clone();
        drop(a);
        assert!(!dir.exists());
        drop(b);
    }

    #[test]
    fn a_library_in_a_world_writable_directory_is_refused() {
        let base = PrivateLibDir::create(&std::env::temp_dir()).unwrap();
        let lib = base.dir.join(TOOL_LIBRARY);
        std::fs::write(&lib, b"x").unwrap();
        let exe = std::env::current_exe().unwrap();
        check_trusted(&lib, &exe).unwrap();
        std::fs::set_permissions(
            &base.dir,
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        let e = check_trusted(&lib, &exe).unwrap_err().to_string();
        assert!(e.contains("writable by everyone and not sticky"), "{e}");
        assert!(e.contains(&base.dir.display().to_string()), "{e}");
        std::fs::set_permissions(
            &base.dir,
            std::os::unix::fs::PermissionsExt::from_mode(0o1777),
        )
        .unwrap();
        check_trusted(&lib, &exe).unwrap();
        std::fs::set_permissions(&lib, std::os::unix::fs::PermissionsExt::from_mode(0o666))
            .unwrap();
        let e = check_trusted(&lib, &exe).unwrap_err().to_string();
        assert!(e.contains("is writable by everyone"), "{e}");
    }
}
