//! The ROCTx entry points (`--marker-trace`): this library exports
//! `roctxMarkA`, `roctxRangePushA`, `roctxRangePop`, `roctxRangeStartA`,
//! `roctxRangeStop`, `roctxGetThreadId` and `roctxNameOsThread`, so that when
//! it is `LD_PRELOAD`ed (the `rprof` command does so for `--marker-trace`)
//! the application's calls to its ROCTx library (Debian's `libroctx64.so.4`,
//! or rocprofiler-sdk's `librocprofiler-sdk-roctx.so`) come here first, as
//! rocprofv3 does with its own preload.
//!
//! Every call is passed on to the next definition (`dlsym(RTLD_NEXT)`, the
//! application's real ROCTx library) and returns what it returned, so the
//! app sees the same nesting levels and range ids with or without rprof and
//! whether or not tracing is on; with no real library behind, the values are
//! the documented defaults (levels from 0, range ids from 1, -1 for a pop
//! without a push). When the marker trace is on (`RPROF_MARKER_TRACE`), the
//! call is also recorded through [`rprof_core::marker`]: no lock, and no
//! allocation once a thread has seen a message.
//!
//! Loaded through `HSA_TOOLS_LIB` alone, ROCr `dlopen`s this library with
//! `RTLD_LOCAL` after the app's symbols were bound: nothing reaches these
//! functions. `capture_problem` detects that, and the session says so.
//!
//! Owns the ROCTx ABI and the call-through; must not hold marker logic that
//! tests cannot drive without FFI (that is `rprof_core::marker`).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};

use rprof_core::engine::{boottime_ns, current_thread_id};
use rprof_core::marker::{self, MarkerKind, MarkerRecord};
use rprof_core::record::Record;

/// What the environment asks for: 0 = not read yet; else [`READ`] with
/// [`MARKERS`] and [`RENAME`] bits.
static WANTED: AtomicU8 = AtomicU8::new(0);
const READ: u8 = 1;
const MARKERS: u8 = 2;
const RENAME: u8 = 4;
/// Range ids handed out when no real ROCTx library is behind this one.
static NEXT_RANGE_ID: AtomicU64 = AtomicU64::new(1);

/// The bits of [`WANTED`], read from `RPROF_MARKER_TRACE` (or
/// `RPROF_SYS_TRACE`, which includes it) and `RPROF_KERNEL_RENAME` at the
/// first call.
fn wanted() -> u8 {
    let w = WANTED.load(Ordering::Relaxed);
    if w != 0 {
        return w;
    }
    let on = rprof_core::config::process_switch;
    let w =
        READ | if on("RPROF_MARKER_TRACE") || on("RPROF_SYS_TRACE") {
            MARKERS
        } else {
            0
        } | if on("RPROF_KERNEL_RENAME") { RENAME } else { 0 };
    WANTED.store(w, Ordering::Relaxed);
    w
}

/// Whether markers are recorded.
fn enabled() -> bool {
    wanted() & MARKERS != 0
}

/// A lazily resolved `dlsym(RTLD_NEXT, name)`: 0 = not looked up, 1 = none.
struct Next {
    name: &'static CStr,
    addr: AtomicUsize,
}

impl Next {
    const fn new(name: &'static CStr) -> Self {
        Next {
            name,
            addr: AtomicUsize::new(0),
        }
    }

    fn get(&self) -> Option<usize> {
        let a = self.addr.load(Ordering::Acquire);
        if a == 0 {
            // SAFETY: RTLD_NEXT with a NUL-terminated name: a lookup only.
            let p = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) } as usize;
            let v = if p == 0 { 1 } else { p };
            self.addr.store(v, Ordering::Release);
            return (p != 0).then_some(p);
        }
        (a != 1).then_some(a)
    }
}

static NEXT_MARK: Next = Next::new(c"roctxMarkA");
static NEXT_PUSH: Next = Next::new(c"roctxRangePushA");
static NEXT_POP: Next = Next::new(c"roctxRangePop");
static NEXT_START: Next = Next::new(c"roctxRangeStartA");
static NEXT_STOP: Next = Next::new(c"roctxRangeStop");
static NEXT_THREAD_ID: Next = Next::new(c"roctxGetThreadId");
static NEXT_NAME_THREAD: Next = Next::new(c"roctxNameOsThread");

type StrFn = unsafe extern "C" fn(*const c_char);
type StrIntFn = unsafe extern "C" fn(*const c_char) -> c_int;
type IntFn = unsafe extern "C" fn() -> c_int;
type StrIdFn = unsafe extern "C" fn(*const c_char) -> u64;
type IdFn = unsafe extern "C" fn(u64);
type TidFn = unsafe extern "C" fn(*mut u64) -> c_int;

/// The message bytes of a C string given to ROCTx (empty for NULL).
///
/// # Safety
/// `p` is NULL or a NUL-terminated string, as ROCTx's contract says.
unsafe fn message(p: *const c_char) -> &'static str {
    if p.is_null() {
        return "";
    }
    // SAFETY: the caller's contract.
    marker::intern(unsafe { CStr::from_ptr(p) }.to_bytes())
}

/// Runs an entry's body with panics caught (`fallback` then).
fn guarded<T>(what: &str, fallback: T, f: impl FnOnce() -> T) -> T {
    crate::session::guarded(what, || fallback, f)
}

/// `void roctxMarkA(const char* message)`.
///
/// # Safety
/// Called by the application with a NUL-terminated string (or NULL).
#[no_mangle]
pub unsafe extern "C" fn roctxMarkA(msg: *const c_char) {
    if let Some(f) = NEXT_MARK.get() {
        // SAFETY: the next roctxMarkA, with ROCTx's signature; same argument.
        unsafe { std::mem::transmute::<usize, StrFn>(f)(msg) };
    }
    guarded("roctxMarkA", (), || {
        if wanted() & RENAME != 0 && !msg.is_null() {
            // SAFETY: the caller's contract.
            marker::rename_mark(Some(unsafe { message(msg) }));
        }
        if !enabled() {
            return;
        }
        let now = boottime_ns();
        let tid = current_thread_id();
        marker::emit(Record::Marker(MarkerRecord {
            kind: MarkerKind::Mark,
            correlation_id: marker::next_marker_id(),
            thread_id: tid,
            end_thread_id: tid,
            depth: marker::open_ranges() as u32,
            start_ns: now,
            end_ns: now,
            // SAFETY: the caller's contract.
            message: unsafe { message(msg) },
        }));
    })
}

/// `int roctxRangePushA(const char* message)`: the nesting level before the
/// push.
///
/// # Safety
/// As [`roctxMarkA`].
#[no_mangle]
pub unsafe extern "C" fn roctxRangePushA(msg: *const c_char) -> c_int {
    let start = boottime_ns();
    let real = NEXT_PUSH.get().map(|f| {
        // SAFETY: the next roctxRangePushA, with ROCTx's signature.
        unsafe { std::mem::transmute::<usize, StrIntFn>(f)(msg) }
    });
    let ours = guarded("roctxRangePushA", 0, || {
        // The stack is kept with tracing off too: it gives the level, and
        // --kernel-rename reads it.
        let text = if wanted() & (MARKERS | RENAME) != 0 {
            // SAFETY: the caller's contract.
            unsafe { message(msg) }
        } else {
            ""
        };
        if wanted() & RENAME != 0 {
            marker::rename_push((!msg.is_null()).then_some(text));
        }
        marker::range_push(text, marker::next_marker_id(), start) as c_int
    });
    real.unwrap_or(ours)
}

/// `int roctxRangePop(void)`: the nesting level after the pop, -1 if no
/// range was open.
#[no_mangle]
pub extern "C" fn roctxRangePop() -> c_int {
    let real = NEXT_POP.get().map(|f| {
        // SAFETY: the next roctxRangePop, with ROCTx's signature.
        unsafe { std::mem::transmute::<usize, IntFn>(f)() }
    });
    let ours = guarded("roctxRangePop", -1, || {
        match marker::range_pop(current_thread_id(), boottime_ns()) {
            Some((rec, level)) => {
                if wanted() & RENAME != 0 {
                    marker::rename_pop();
                }
                if enabled() {
                    marker::emit(Record::Marker(rec));
                }
                level as c_int
            }
            None => -1,
        }
    });
    real.unwrap_or(ours)
}

/// `roctx_range_id_t roctxRangeStartA(const char* message)`: a process-wide
/// range id (from 1).
///
/// # Safety
/// As [`roctxMarkA`].
#[no_mangle]
pub unsafe extern "C" fn roctxRangeStartA(msg: *const c_char) -> u64 {
    let start = boottime_ns();
    let id = match NEXT_START.get() {
        // SAFETY: the next roctxRangeStartA, with ROCTx's signature.
        Some(f) => unsafe { std::mem::transmute::<usize, StrIdFn>(f)(msg) },
        None => NEXT_RANGE_ID.fetch_add(1, Ordering::Relaxed),
    };
    guarded("roctxRangeStartA", (), || {
        if !enabled() {
            return;
        }
        marker::emit(Record::RangeStart(marker::RangeStartRecord {
            range_id: id,
            correlation_id: marker::next_marker_id(),
            thread_id: current_thread_id(),
            start_ns: start,
            // SAFETY: the caller's contract.
            message: unsafe { message(msg) },
        }));
    });
    id
}

/// `void roctxRangeStop(roctx_range_id_t id)`, on any thread.
#[no_mangle]
pub extern "C" fn roctxRangeStop(id: u64) {
    let end = boottime_ns();
    if let Some(f) = NEXT_STOP.get() {
        // SAFETY: the next roctxRangeStop, with ROCTx's signature.
        unsafe { std::mem::transmute::<usize, IdFn>(f)(id) };
    }
    guarded("roctxRangeStop", (), || {
        if enabled() {
            marker::emit(Record::RangeStop(marker::RangeStopRecord {
                range_id: id,
                thread_id: current_thread_id(),
                end_ns: end,
            }));
        }
    })
}

/// `int roctxGetThreadId(roctx_thread_id_t* tid)` (rocprofiler-sdk-roctx):
/// writes the OS thread id; not a marker.
///
/// # Safety
/// `tid` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn roctxGetThreadId(tid: *mut u64) -> c_int {
    if let Some(f) = NEXT_THREAD_ID.get() {
        // SAFETY: the next roctxGetThreadId, with its signature.
        return unsafe { std::mem::transmute::<usize, TidFn>(f)(tid) };
    }
    if !tid.is_null() {
        // SAFETY: the caller's contract: writable when not NULL.
        unsafe { *tid = u64::from(current_thread_id()) };
    }
    0
}

/// `int roctxNameOsThread(const char* name)` (rocprofiler-sdk-roctx): names
/// the calling thread in the trace.
///
/// # Safety
/// As [`roctxMarkA`].
#[no_mangle]
pub unsafe extern "C" fn roctxNameOsThread(name: *const c_char) -> c_int {
    let real = NEXT_NAME_THREAD.get().map(|f| {
        // SAFETY: the next roctxNameOsThread, with its signature.
        unsafe { std::mem::transmute::<usize, StrIntFn>(f)(name) }
    });
    guarded("roctxNameOsThread", (), || {
        if enabled() && !name.is_null() {
            marker::emit(Record::ThreadName(marker::ThreadNameRecord {
                thread_id: current_thread_id(),
                // SAFETY: the caller's contract.
                name: unsafe { message(name) },
            }));
        }
    });
    real.unwrap_or(0)
}

/// Whether ROCTx calls are recorded (`--marker-trace`).
pub(crate) fn recording() -> bool {
    enabled()
}

/// Why the application's ROCTx calls cannot reach this library, if they
/// cannot: the global `roctxMarkA` is not this one (the library was not
/// preloaded, only `dlopen`ed through `HSA_TOOLS_LIB`).
pub(crate) fn capture_problem() -> Option<String> {
    // SAFETY: a lookup of a NUL-terminated name in the global scope.
    let global = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"roctxMarkA".as_ptr()) };
    // Compared by the object that defines it: taking `roctxMarkA`'s address
    // here would itself go through the global lookup.
    if !global.is_null() && object_base(global) == object_base(capture_problem as *const c_void) {
        return None;
    }
    Some(
        "--marker-trace: ROCTx calls cannot be captured: the rprof tool library was loaded through \
         HSA_TOOLS_LIB only; run the application through `rprof`, or also put librprof_tool.so in LD_PRELOAD"
            .into(),
    )
}

/// Load address of the object holding `addr` (null if none).
fn object_base(addr: *const c_void) -> usize {
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: `info` is writable; dladdr only reads the loader's tables.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 {
        return 0;
    }
    info.dli_fbase as usize
}

/// Where the session sends marker records.
pub(crate) fn start(target: marker::Target, kernel_rename: bool) {
    marker::set_kernel_rename(kernel_rename);
    marker::drain_early(target);
    marker::set_target(target);
    let lost = marker::drain_early(target);
    if lost > 0 {
        eprintln!("rprof: {lost} ROCTx calls made before the runtime started were not recorded (early queue full)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No ROCTx library behind this one in a test binary: the documented
    /// defaults (levels from 0, -1 for an empty pop, range ids counting up).
    #[test]
    fn without_a_real_library_the_documented_values_come_back() {
        std::thread::spawn(|| {
            // SAFETY: NUL-terminated literals.
            unsafe {
                assert_eq!(roctxRangePushA(c"a".as_ptr()), 0);
                assert_eq!(roctxRangePushA(c"b".as_ptr()), 1);
                roctxMarkA(std::ptr::null());
            }
            assert_eq!(roctxRangePop(), 1);
            assert_eq!(roctxRangePop(), 0);
            assert_eq!(roctxRangePop(), -1);
            // SAFETY: as above.
            let (first, second) = unsafe {
                (
                    roctxRangeStartA(c"x".as_ptr()),
                    roctxRangeStartA(std::ptr::null()),
                )
            };
            assert_eq!(second, first + 1);
            roctxRangeStop(first);
            let mut tid = 0u64;
            // SAFETY: `tid` is writable.
            assert_eq!(unsafe { roctxGetThreadId(&mut tid) }, 0);
            assert_eq!(tid, u64::from(current_thread_id()));
        })
        .join()
        .unwrap();
    }
}
