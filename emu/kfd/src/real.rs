//! The real functions behind the hooks.
//!
//! Anything this library does itself (Rust std, the allocator, the CP thread) calls `open`, `mmap`, `ioctl` and
//! `close` through the process's global scope, which is where our own hooks are. So the pass-through path never calls
//! those names: the fd-level calls are raw system calls, and path-taking libc functions (`fopen`, `opendir`, `stat`,
//! ...) are the next definitions after ours, found once with `dlsym(RTLD_NEXT)` and cached in an atomic.

use std::ffi::CStr;

use libc::{c_char, c_int, c_long, c_void, off_t, size_t};

/// `open`/`openat` as a system call (`AT_FDCWD`-relative when `dirfd` is `AT_FDCWD`).
///
/// # Safety
/// `path` must be null or a NUL-terminated string (the kernel reads it).
pub unsafe fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: libc::mode_t) -> c_int {
    // SAFETY: the kernel validates every argument; the path is only read.
    unsafe {
        libc::syscall(
            libc::SYS_openat,
            dirfd as c_long,
            path,
            flags as c_long,
            mode as c_long,
        ) as c_int
    }
}

/// `close` as a system call.
pub fn close(fd: c_int) -> c_int {
    // SAFETY: closing a descriptor touches no memory.
    unsafe { libc::syscall(libc::SYS_close, fd as c_long) as c_int }
}

/// `ioctl` as a system call.
///
/// # Safety
/// `arg` must be what the request expects (the kernel reads and writes through it).
pub unsafe fn ioctl(fd: c_int, request: libc::c_ulong, arg: *mut c_void) -> c_int {
    // SAFETY: per the contract.
    unsafe { libc::syscall(libc::SYS_ioctl, fd as c_long, request, arg) as c_int }
}

/// `mmap` as a system call (glibc's wrapper adds nothing on x86-64).
///
/// # Safety
/// As `mmap(2)`: a `MAP_FIXED` mapping replaces whatever was at `addr`.
pub unsafe fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: per the contract.
    unsafe {
        libc::syscall(
            libc::SYS_mmap,
            addr,
            len,
            prot as c_long,
            flags as c_long,
            fd as c_long,
            off,
        ) as *mut c_void
    }
}

/// `munmap` as a system call.
///
/// # Safety
/// As `munmap(2)`.
pub unsafe fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    // SAFETY: per the contract.
    unsafe { libc::syscall(libc::SYS_munmap, addr, len) as c_int }
}

/// `dup` with close-on-exec, as a system call.
pub fn dup_cloexec(fd: c_int) -> c_int {
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) touches no memory.
    unsafe {
        libc::syscall(
            libc::SYS_fcntl,
            fd as c_long,
            libc::F_DUPFD_CLOEXEC as c_long,
            3 as c_long,
        ) as c_int
    }
}

/// A memfd (close-on-exec) with `size` bytes, as system calls.
pub fn memfd(name: &CStr, size: u64) -> Option<c_int> {
    // SAFETY: memfd_create reads the NUL-terminated name only.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_memfd_create,
            name.as_ptr(),
            libc::MFD_CLOEXEC as c_long,
        )
    } as c_int;
    if fd < 0 {
        return None;
    }
    // SAFETY: ftruncate on our own fresh memfd.
    if size > 0 && unsafe { libc::syscall(libc::SYS_ftruncate, fd as c_long, size as c_long) } != 0
    {
        close(fd);
        return None;
    }
    Some(fd)
}

/// Sets `errno` and returns -1.
pub fn fail(errno: c_int) -> c_int {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = errno };
    -1
}

/// A lazily resolved `dlsym(RTLD_NEXT, name)` pointer (the device core's, shared with its libdrm forwarders).
pub use rprof_emu::drm::Next;

/// Declares a `Next` static and a typed caller for it.
macro_rules! next_fn {
    ($static:ident, $fname:ident, $name:literal, fn($($arg:ident : $ty:ty),*) -> $ret:ty, $missing:expr) => {
        static $static: $crate::real::Next = $crate::real::Next::new($name);
        /// Calls the next definition of this function (the real one), or fails if there is none.
        ///
        /// # Safety
        /// The arguments follow the C contract of the function.
        pub(crate) unsafe fn $fname($($arg: $ty),*) -> $ret {
            let p = $static.get();
            if p == 0 {
                return $missing;
            }
            // SAFETY: `p` is the next definition of this C function, which has this signature.
            let f: unsafe extern "C" fn($($ty),*) -> $ret = unsafe { std::mem::transmute(p) };
            // SAFETY: the caller passes arguments that follow the C contract.
            unsafe { f($($arg),*) }
        }
    };
}
pub(crate) use next_fn;
