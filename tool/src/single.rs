//! One tracer per process: when two copies of the rprof tool library are
//! loaded (an inherited `HSA_TOOLS_LIB` plus the `rprof` command's, or two
//! builds at different paths), both would write the same files. Each copy
//! exports [`rprof_tool_tracing`]; at `OnLoad` a copy looks through the
//! loaded objects for another one whose export says it traces, and stays
//! inactive if it finds one. ROCr calls the tools' `OnLoad`s one after the
//! other, so the first copy wins. It must not unload or modify the other copy.
//!
//! # Safety
//! `dl_iterate_phdr` gives each loaded object's name to a callback; the
//! objects are opened again with `RTLD_NOLOAD` (no new load, only a
//! reference, dropped at once) to look up the export, whose signature is
//! fixed by this module.

use std::ffi::{c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// This copy has claimed the process (it traces, or is setting up to).
static TRACING: AtomicBool = AtomicBool::new(false);

/// Whether this copy of the tool library traces the process (read by other
/// copies through `dlsym`).
#[no_mangle]
pub extern "C" fn rprof_tool_tracing() -> bool {
    TRACING.load(Ordering::Acquire)
}

/// Marks this copy as the process's tracer.
pub fn claim() {
    TRACING.store(true, Ordering::Release);
}

/// Paths of every loaded object with a name.
fn loaded_objects() -> Vec<CString> {
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` is the Vec below; `info` is valid for the call and
        // its name, when not null, a NUL-terminated string.
        unsafe {
            let v = &mut *data.cast::<Vec<CString>>();
            let name = (*info).dlpi_name;
            if !name.is_null() && *name != 0 {
                v.push(CStr::from_ptr(name).to_owned());
            }
        }
        0
    }
    let mut v: Vec<CString> = Vec::new();
    // SAFETY: the callback only pushes into `v`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&mut v as *mut Vec<CString>).cast()) };
    v
}

/// Another loaded copy of the tool library that traces this process, if
/// any (its path).
pub fn other_tracer() -> Option<PathBuf> {
    let me = crate::preload::own_library_path();
    let mine = rprof_tool_tracing as *const c_void;
    for name in loaded_objects() {
        // SAFETY: `name` is a loaded object's path; RTLD_NOLOAD never loads
        // anything new, it returns a handle to the loaded object or null.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
        if handle.is_null() {
            continue;
        }
        // SAFETY: a valid handle and a NUL-terminated symbol name.
        let sym = unsafe { libc::dlsym(handle, c"rprof_tool_tracing".as_ptr()) };
        let tracing = !sym.is_null() && sym.cast_const() != mine && {
            // SAFETY: the export defined above, same signature in every copy.
            let f = unsafe { std::mem::transmute::<*mut c_void, extern "C" fn() -> bool>(sym) };
            f()
        };
        // SAFETY: drops the reference taken by dlopen above.
        unsafe { libc::dlclose(handle) };
        if tracing {
            let path = PathBuf::from(name.to_string_lossy().into_owned());
            if me.as_deref() == Some(Path::new(&path)) {
                continue;
            }
            return Some(path);
        }
    }
    None
}
