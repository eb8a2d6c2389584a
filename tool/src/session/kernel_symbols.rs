//! Kernel names: after `hsa_executable_freeze`, every kernel symbol of the
//! executable goes into the kernel table (kernel object → name).
//!
//! Owns iterating an executable's symbols and reading a kernel's name and
//! object; must not demangle, filter or number kernels (that is
//! `rprof_core::kernels`).

use std::ffi::c_void;

use hsa_sys::{
    hsa_executable_symbol_t, hsa_executable_t, hsa_status_t,
    HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT, HSA_EXECUTABLE_SYMBOL_INFO_NAME,
    HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH, HSA_EXECUTABLE_SYMBOL_INFO_TYPE, HSA_STATUS_SUCCESS,
    HSA_SYMBOL_KIND_KERNEL,
};

use super::{guarded, Session};

type GetInfo = hsa_sys::hsa_executable_symbol_get_info_fn_t;

/// Records the kernels of a frozen executable in the session's kernel table.
pub(super) fn record(s: &'static Session, executable: hsa_executable_t) {
    if let Some(iterate) = s.rt.core.hsa_executable_iterate_symbols_fn {
        // SAFETY: a frozen executable; the callback only reads symbols and
        // uses the session, which lives for the rest of the process.
        unsafe {
            iterate(
                executable,
                Some(visit),
                (s as *const Session).cast_mut().cast(),
            )
        };
    }
}

/// The symbol iteration's callback: records `symbol` if it is a kernel.
unsafe extern "C" fn visit(
    _exec: hsa_executable_t,
    symbol: hsa_executable_symbol_t,
    data: *mut c_void,
) -> hsa_status_t {
    // SAFETY: `data` is the session passed by `record`.
    let s = unsafe { &*data.cast::<Session>() };
    guarded(
        "kernel symbol lookup",
        || (),
        || {
            let Some(get) = s.rt.core.hsa_executable_symbol_get_info_fn else {
                return;
            };
            if let Some((object, name)) = kernel(get, symbol) {
                s.kernels.insert(object, name.trim_end_matches('\0'));
            }
        },
    );
    HSA_STATUS_SUCCESS
}

/// A kernel symbol's kernel object and name (`None`: not a kernel, or the
/// runtime failed to answer).
fn kernel(get: GetInfo, symbol: hsa_executable_symbol_t) -> Option<(u64, String)> {
    // SAFETY: TYPE is a 32-bit hsa_symbol_kind_t.
    let kind = unsafe { info::<u32>(get, symbol, HSA_EXECUTABLE_SYMBOL_INFO_TYPE) };
    if kind != Some(HSA_SYMBOL_KIND_KERNEL) {
        return None;
    }
    // SAFETY: NAME_LENGTH is a u32.
    let len = unsafe { info::<u32>(get, symbol, HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH) }?;
    // NAME is written without a terminator; leave room anyway.
    let mut name = vec![0u8; len as usize + 1];
    // SAFETY: NAME writes `len` bytes into a buffer of `len + 1`.
    let status = unsafe {
        get(
            symbol,
            HSA_EXECUTABLE_SYMBOL_INFO_NAME,
            name.as_mut_ptr().cast(),
        )
    };
    if status != HSA_STATUS_SUCCESS {
        return None;
    }
    name.truncate(len as usize);
    // SAFETY: KERNEL_OBJECT is a u64.
    let object = unsafe { info::<u64>(get, symbol, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT) }?;
    Some((object, String::from_utf8_lossy(&name).into_owned()))
}

/// One fixed-size attribute of `symbol`, or `None` if the runtime fails.
///
/// # Safety
/// `T` must be the attribute's type (the runtime writes `size_of::<T>()`
/// bytes).
unsafe fn info<T: Default>(
    get: GetInfo,
    symbol: hsa_executable_symbol_t,
    attribute: u32,
) -> Option<T> {
    let mut value = T::default();
    // SAFETY: the caller guarantees `T` is the attribute's type, so the
    // runtime writes exactly into `value`.
    let status = unsafe { get(symbol, attribute, (&mut value as *mut T).cast()) };
    (status == HSA_STATUS_SUCCESS).then_some(value)
}
