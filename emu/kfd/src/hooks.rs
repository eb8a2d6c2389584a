//! The interposed libc functions. Each one is an unversioned definition, so it also satisfies the runtime's
//! versioned references (`open@GLIBC_2.2.5`, ...), and runs its body under `catch_unwind`.
//!
//! Order of checks: the fd table (lock-free) for fd-taking calls; for path-taking calls, `/dev/kfd`, an emulated
//! `/dev/dri/renderD<minor>`, then the sysfs prefixes of [`crate::sysfs`]; everything else goes straight to the
//! real function. Nothing on the pass-through path allocates or locks.

use std::ffi::CStr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use libc::{c_char, c_int, c_uint, c_ulong, c_void, off_t, size_t, DIR, FILE};

use crate::fds::{self, FdKind};
use crate::real::{self, next_fn};
use crate::{device, drm, sysfs};

fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

static ANNOUNCED: AtomicBool = AtomicBool::new(false);

fn open_kfd() -> c_int {
    let Some(emu) = crate::emu() else {
        return real::fail(libc::ENOENT);
    };
    let Some(fd) = real::memfd(c"rprof-emu-kfd", 0) else {
        return real::fail(libc::EMFILE);
    };
    if !fds::insert(fd, FdKind::Kfd) {
        real::close(fd);
        return real::fail(libc::EMFILE);
    }
    if emu.config.log && !ANNOUNCED.swap(true, Ordering::Relaxed) {
        eprintln!(
            "rprof-emu-kfd: /dev/kfd is the emulated GPU ({} GPU node(s))",
            emu.topology.gpu_nodes().count()
        );
    }
    fd
}

/// What an `open` of `path` should do if the path is ours: `Some(fd or -1)`; None to pass through.
fn open_ours(path: &CStr) -> Option<c_int> {
    let b = path.to_bytes();
    if b == b"/dev/kfd" {
        return Some(open_kfd());
    }
    let minor = b.strip_prefix(b"/dev/dri/renderD")?;
    let minor: i64 = std::str::from_utf8(minor).ok()?.parse().ok()?;
    drm::node_of_minor(minor).map(drm::open_render)
}

fn open_common(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    if path.is_null() {
        // SAFETY: forwarding the caller's arguments unchanged.
        return unsafe { real::openat(dirfd, path, flags, mode) };
    }
    // SAFETY: a non-null path from the caller is a NUL-terminated string.
    let p = unsafe { CStr::from_ptr(path) };
    if p.to_bytes().first() == Some(&b'/') {
        if let Some(fd) = open_ours(p) {
            return fd;
        }
        let mut buf = [0u8; 4096];
        if let Some(redirected) = sysfs::redirect(p, &mut buf) {
            // SAFETY: a NUL-terminated path in our buffer.
            return unsafe { real::openat(libc::AT_FDCWD, redirected.as_ptr(), flags, mode) };
        }
    }
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { real::openat(dirfd, path, flags, mode) }
}

fn mode_of(flags: c_int, mode: c_uint) -> c_uint {
    if flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE {
        mode
    } else {
        0
    }
}

/// `open` (the variadic mode is read only with `O_CREAT`/`O_TMPFILE`; fixed arity is ABI-compatible on x86-64).
///
/// # Safety
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    guard(-1, || {
        open_common(libc::AT_FDCWD, path, flags, mode_of(flags, mode))
    })
}

/// `open64`.
///
/// # Safety
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    guard(-1, || {
        open_common(libc::AT_FDCWD, path, flags, mode_of(flags, mode))
    })
}

/// `__open_2` (fortified `open` without a mode).
///
/// # Safety
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    guard(-1, || open_common(libc::AT_FDCWD, path, flags, 0))
}

/// `__open64_2`.
///
/// # Safety
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    guard(-1, || open_common(libc::AT_FDCWD, path, flags, 0))
}

/// `openat`.
///
/// # Safety
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    guard(-1, || open_common(dirfd, path, flags, mode_of(flags, mode)))
}

/// `openat64`.
///
/// # Safety
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    guard(-1, || open_common(dirfd, path, flags, mode_of(flags, mode)))
}

/// `close`: forgets our fds, then closes.
#[no_mangle]
pub extern "C" fn close(fd: c_int) -> c_int {
    guard(-1, || {
        fds::remove(fd);
        real::close(fd)
    })
}

/// `ioctl` (fixed arity: the third argument is always a pointer-sized integer for the requests that matter).
///
/// # Safety
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    match fds::kind(fd) {
        // SAFETY: forwarding the caller's arguments unchanged.
        None => unsafe { real::ioctl(fd, request, arg) },
        Some(kind) => guard(-1, || match crate::emu() {
            Some(emu) => {
                // SAFETY: `arg` is the request's struct (the caller's contract).
                let r = unsafe { device::ioctl(emu, kind, request, arg) };
                if r < 0 && emu.config.log {
                    eprintln!(
                        "rprof-emu-kfd: ioctl {request:#x} failed: {}",
                        std::io::Error::last_os_error()
                    );
                }
                r
            }
            None => real::fail(libc::ENODEV),
        }),
    }
}

/// `mmap`.
///
/// # Safety
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    match fds::kind(fd) {
        // SAFETY: forwarding.
        None => unsafe { real::mmap(addr, len, prot, flags, fd, off) },
        Some(kind) => guard(libc::MAP_FAILED, || match crate::emu() {
            // SAFETY: the caller owns the range it maps over (mmap's contract).
            Some(emu) => unsafe { device::mmap(emu, kind, addr, len, prot, flags, off) },
            None => {
                real::fail(libc::ENODEV);
                libc::MAP_FAILED
            }
        }),
    }
}

/// `mmap64`.
///
/// # Safety
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: same contract.
    unsafe { mmap(addr, len, prot, flags, fd, off) }
}

/// `munmap` (always the real one: a BO's range was forgotten when it was freed).
///
/// # Safety
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    // SAFETY: forwarding.
    unsafe { real::munmap(addr, len) }
}

next_fn!(
    NEXT_FOPEN,
    next_fopen,
    c"fopen",
    fn(path: *const c_char, mode: *const c_char) -> *mut FILE,
    std::ptr::null_mut()
);
next_fn!(
    NEXT_FOPEN64,
    next_fopen64,
    c"fopen64",
    fn(path: *const c_char, mode: *const c_char) -> *mut FILE,
    std::ptr::null_mut()
);
next_fn!(
    NEXT_OPENDIR,
    next_opendir,
    c"opendir",
    fn(path: *const c_char) -> *mut DIR,
    std::ptr::null_mut()
);
next_fn!(
    NEXT_STAT,
    next_stat,
    c"stat",
    fn(path: *const c_char, buf: *mut libc::stat) -> c_int,
    -1
);
next_fn!(
    NEXT_STAT64,
    next_stat64,
    c"stat64",
    fn(path: *const c_char, buf: *mut libc::stat64) -> c_int,
    -1
);
next_fn!(
    NEXT_LSTAT,
    next_lstat,
    c"lstat",
    fn(path: *const c_char, buf: *mut libc::stat) -> c_int,
    -1
);
next_fn!(
    NEXT_LSTAT64,
    next_lstat64,
    c"lstat64",
    fn(path: *const c_char, buf: *mut libc::stat64) -> c_int,
    -1
);
next_fn!(
    NEXT_ACCESS,
    next_access,
    c"access",
    fn(path: *const c_char, mode: c_int) -> c_int,
    -1
);

/// Runs `f` with the redirected path if `path` is under a served sysfs prefix, else with `path`.
fn with_path<T>(path: *const c_char, f: impl FnOnce(*const c_char) -> T) -> T {
    if !path.is_null() {
        // SAFETY: a non-null path from the caller is a NUL-terminated string.
        let p = unsafe { CStr::from_ptr(path) };
        let mut buf = [0u8; 4096];
        if let Some(r) = sysfs::redirect(p, &mut buf) {
            return f(r.as_ptr());
        }
    }
    f(path)
}

/// `fopen`.
///
/// # Safety
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut FILE {
    // SAFETY: forwarding (with a redirected path for ours).
    guard(std::ptr::null_mut(), || {
        with_path(path, |p| {
            // SAFETY: forwarding the caller's arguments (with a redirected path for ours).
            unsafe { next_fopen(p, mode) }
        })
    })
}

/// `fopen64`.
///
/// # Safety
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE {
    // SAFETY: forwarding.
    guard(std::ptr::null_mut(), || {
        with_path(path, |p| {
            // SAFETY: forwarding the caller's arguments (with a redirected path for ours).
            unsafe { next_fopen64(p, mode) }
        })
    })
}

/// `opendir`.
///
/// # Safety
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut DIR {
    // SAFETY: forwarding.
    guard(std::ptr::null_mut(), || {
        with_path(path, |p| {
            // SAFETY: forwarding the caller's arguments (with a redirected path for ours).
            unsafe { next_opendir(p) }
        })
    })
}

/// `stat`.
///
/// # Safety
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn stat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: forwarding.
    guard(-1, || with_path(path, |p| unsafe { next_stat(p, buf) }))
}

/// `stat64`.
///
/// # Safety
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn stat64(path: *const c_char, buf: *mut libc::stat64) -> c_int {
    // SAFETY: forwarding.
    guard(-1, || with_path(path, |p| unsafe { next_stat64(p, buf) }))
}

/// `lstat`.
///
/// # Safety
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn lstat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: forwarding.
    guard(-1, || with_path(path, |p| unsafe { next_lstat(p, buf) }))
}

/// `lstat64`.
///
/// # Safety
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn lstat64(path: *const c_char, buf: *mut libc::stat64) -> c_int {
    // SAFETY: forwarding.
    guard(-1, || with_path(path, |p| unsafe { next_lstat64(p, buf) }))
}

/// `access`.
///
/// # Safety
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: forwarding.
    guard(-1, || with_path(path, |p| unsafe { next_access(p, mode) }))
}

next_fn!(
    NEXT_STATX,
    next_statx,
    c"statx",
    fn(dirfd: c_int, path: *const c_char, flags: c_int, mask: c_uint, buf: *mut c_void) -> c_int,
    -1
);
next_fn!(
    NEXT_FSTATAT,
    next_fstatat,
    c"fstatat",
    fn(dirfd: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int) -> c_int,
    -1
);
next_fn!(
    NEXT_FSTATAT64,
    next_fstatat64,
    c"fstatat64",
    fn(dirfd: c_int, path: *const c_char, buf: *mut libc::stat64, flags: c_int) -> c_int,
    -1
);
next_fn!(
    NEXT_FACCESSAT,
    next_faccessat,
    c"faccessat",
    fn(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int,
    -1
);
next_fn!(
    NEXT_XSTAT,
    next_xstat,
    c"__xstat",
    fn(ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int,
    -1
);
next_fn!(
    NEXT_LXSTAT,
    next_lxstat,
    c"__lxstat",
    fn(ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int,
    -1
);

/// `statx` (what current coreutils and libstdc++ use to stat).
///
/// # Safety
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    buf: *mut c_void,
) -> c_int {
    guard(-1, || {
        with_path(path, |p| {
            // SAFETY: forwarding (with a redirected absolute path for ours).
            unsafe { next_statx(dirfd, p, flags, mask, buf) }
        })
    })
}

/// `fstatat`.
///
/// # Safety
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn fstatat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    guard(-1, || {
        with_path(path, |p| {
            // SAFETY: forwarding.
            unsafe { next_fstatat(dirfd, p, buf, flags) }
        })
    })
}

/// `fstatat64`.
///
/// # Safety
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn fstatat64(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat64,
    flags: c_int,
) -> c_int {
    guard(-1, || {
        with_path(path, |p| {
            // SAFETY: forwarding.
            unsafe { next_fstatat64(dirfd, p, buf, flags) }
        })
    })
}

/// `faccessat`.
///
/// # Safety
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    guard(-1, || {
        with_path(path, |p| {
            // SAFETY: forwarding.
            unsafe { next_faccessat(dirfd, p, mode, flags) }
        })
    })
}

/// `__xstat` (binaries built against glibc < 2.33).
///
/// # Safety
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn __xstat(ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int {
    guard(-1, || {
        with_path(path, |p| {
            // SAFETY: forwarding.
            unsafe { next_xstat(ver, p, buf) }
        })
    })
}

/// `__lxstat` (binaries built against glibc < 2.33).
///
/// # Safety
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn __lxstat(ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int {
    guard(-1, || {
        with_path(path, |p| {
            // SAFETY: forwarding.
            unsafe { next_lxstat(ver, p, buf) }
        })
    })
}

/// Checks once, at load, that our hooks are what the process resolves; prints a loud error otherwise.
extern "C" fn self_check() {
    let _ = catch_unwind(|| {
        let ours: [(&CStr, usize); 3] = [
            (c"ioctl", ioctl as *const () as usize),
            (c"mmap", mmap as *const () as usize),
            (
                c"amdgpu_query_gpu_info",
                drm::amdgpu_query_gpu_info as *const () as usize,
            ),
        ];
        for (name, addr) in ours {
            // SAFETY: dlsym with a NUL-terminated name.
            let found = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) } as usize;
            if found != 0 && found != addr {
                eprintln!(
                    "rprof-emu-kfd: ERROR: {} resolves to another definition than the emulator's: the emulated GPU \
                     will not work. Put librprof_emu_kfd.so first in LD_PRELOAD.",
                    name.to_string_lossy()
                );
            }
        }
    });
}

#[used]
#[link_section = ".init_array"]
static SELF_CHECK: extern "C" fn() = self_check;
