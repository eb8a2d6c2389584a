//! Loading through `LD_PRELOAD` alone: a constructor that makes ROCr load
//! this library as a tool.
//!
//! ROCr 5.2.3 reads `HSA_TOOLS_LIB` (space-separated library names) with
//! `getenv` inside `hsa_init`, then `dlopen`s each name and calls its
//! `OnLoad`. When this library is preloaded, the constructor below appends
//! its own path (found with `dladdr`) to `HSA_TOOLS_LIB` unless the variable
//! already names it; `dlopen` of an already loaded library returns the same
//! object, so `OnLoad` runs in the preloaded copy.
//!
//! Owns that constructor and finding this library's own path; must not
//! trace or read the configuration (`OnLoad` does).
//!
//! # Safety
//! `dladdr` is given the address of a function in this library, and the
//! constructor runs before `main`, while the process is single-threaded, so
//! changing the environment cannot race with another thread reading it.

use std::ffi::{c_void, CStr, OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

/// Path of the shared object this code lives in, if it is a shared library
/// (not when the crate is linked into an executable).
pub(crate) fn own_library_path() -> Option<PathBuf> {
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    let addr = own_library_path as *const c_void;
    // SAFETY: `addr` is an address inside this object; `info` is writable.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr returned a NUL-terminated path owned by the loader.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    let path = PathBuf::from(OsStr::from_bytes(name.to_bytes()));
    let is_library = path
        .file_name()
        .map(|f| f.as_bytes().windows(3).any(|w| w == b".so"))
        .unwrap_or(false);
    if !is_library {
        return None;
    }
    Some(std::fs::canonicalize(&path).unwrap_or(path))
}

/// The new value of `HSA_TOOLS_LIB` that includes `me`, or `None` if the
/// current value already names it (by path or file name).
pub fn tools_lib_with(current: Option<&OsStr>, me: &std::path::Path) -> Option<OsString> {
    let me_bytes = me.as_os_str().as_bytes();
    let me_name = me.file_name().map(|f| f.as_bytes()).unwrap_or(me_bytes);
    let cur = current.map(|c| c.as_bytes()).unwrap_or(b"");
    let already = cur
        .split(|b| *b == b' ')
        .filter(|t| !t.is_empty())
        .any(|t| {
            t == me_bytes
                || std::path::Path::new(OsStr::from_bytes(t))
                    .file_name()
                    .map(|f| f.as_bytes())
                    == Some(me_name)
                || std::fs::canonicalize(OsStr::from_bytes(t)).ok().as_deref() == Some(me)
        });
    if already {
        return None;
    }
    let mut v = cur.to_vec();
    if !v.is_empty() {
        v.push(b' ');
    }
    v.extend_from_slice(me_bytes);
    Some(OsString::from_vec(v))
}

fn register_as_tool() {
    // Paths with spaces cannot be expressed unquoted in HSA_TOOLS_LIB; leave
    // them alone rather than break the variable.
    let Some(me) = own_library_path() else { return };
    if me.as_os_str().as_bytes().contains(&b' ') {
        return;
    }
    if let Some(v) = tools_lib_with(std::env::var_os("HSA_TOOLS_LIB").as_deref(), &me) {
        std::env::set_var("HSA_TOOLS_LIB", v);
    }
}

extern "C" fn constructor() {
    crate::session::guarded("the preload constructor", || (), register_as_tool);
}

#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = constructor;

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn appends_once() {
        let me = Path::new("/opt/rprof/librprof_tool.so");
        assert_eq!(
            tools_lib_with(None, me).unwrap(),
            OsString::from("/opt/rprof/librprof_tool.so")
        );
        assert_eq!(
            tools_lib_with(Some(OsStr::new("libother.so")), me).unwrap(),
            OsString::from("libother.so /opt/rprof/librprof_tool.so")
        );
        assert!(tools_lib_with(Some(OsStr::new("/opt/rprof/librprof_tool.so")), me).is_none());
        assert!(tools_lib_with(Some(OsStr::new("a.so librprof_tool.so")), me).is_none());
    }

    #[test]
    fn not_a_library_when_linked_into_a_test_executable() {
        assert!(own_library_path().is_none());
    }
}
