//! Kernel names: after `hsa_executable_freeze`, every kernel symbol of the
//! executable goes into the kernel table (kernel object → name), with the
//! kernel's register and static memory use read from the executable's loaded
//! code objects ([`crate::code_objects`]).
//!
//! Owns iterating an executable's symbols and reading a kernel's name and
//! object; must not demangle, filter or number kernels (that is
//! `rprof_core::kernels`) nor parse code objects (`rprof_core::code_object`).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

use rprof_core::sink::KernelResourceCounts;

use hsa_sys::{
    hsa_executable_symbol_t, hsa_executable_t, hsa_status_t,
    HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT, HSA_EXECUTABLE_SYMBOL_INFO_NAME,
    HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH, HSA_EXECUTABLE_SYMBOL_INFO_TYPE, HSA_STATUS_SUCCESS,
    HSA_SYMBOL_KIND_KERNEL,
};

use super::{guarded, Session};
use crate::code_objects::Loader;

type GetInfo = hsa_sys::hsa_executable_symbol_get_info_fn_t;

/// What the symbol iteration's callback needs.
struct Visit {
    session: &'static Session,
    /// Resources by kernel name (the metadata's `.name`, mangled).
    resources: HashMap<String, KernelResourceCounts>,
}

/// Set once a code object could not be read (said once per run).
static SAID_UNREADABLE: AtomicBool = AtomicBool::new(false);

/// The resources of every kernel loaded into `executable`, by kernel name.
/// Unreadable code objects are reported once per run; their kernels get no
/// resources (their register columns are 0).
fn resources_of(
    s: &Session,
    executable: hsa_executable_t,
) -> HashMap<String, KernelResourceCounts> {
    let Some(loader) = Loader::query(&s.rt) else {
        if !SAID_UNREADABLE.swap(true, Ordering::Relaxed) {
            eprintln!("rprof: warning: the HSA runtime has no loader extension; kernel register counts are not recorded");
        }
        return HashMap::new();
    };
    let (kernels, unreadable) = loader.kernel_resources(executable);
    if let Some(why) = unreadable.first() {
        if !SAID_UNREADABLE.swap(true, Ordering::Relaxed) {
            eprintln!(
                "rprof: warning: a code object's kernel metadata could not be read ({}); its kernels' register counts are 0",
                why.0
            );
        }
    }
    kernels
        .into_iter()
        .map(|(code_object_id, k)| {
            let counts = KernelResourceCounts {
                code_object_id,
                sgpr_count: k.sgpr_count,
                arch_vgpr_count: k.vgpr_count,
                accum_vgpr_count: k.agpr_count,
                group_segment_fixed_size: k.group_segment_fixed_size,
                private_segment_fixed_size: k.private_segment_fixed_size,
            };
            let name = k.symbol.strip_suffix(".kd").unwrap_or(&k.name).to_string();
            (name, counts)
        })
        .collect()
}

/// Records the kernels of a frozen executable in the session's kernel table.
pub(super) fn record(s: &'static Session, executable: hsa_executable_t) {
    if let Some(iterate) = s.rt.core.hsa_executable_iterate_symbols_fn {
        let mut v = Visit {
            session: s,
            resources: resources_of(s, executable),
        };
        // SAFETY: a frozen executable; the callback only reads symbols and
        // `v`, which outlives the call and is not otherwise borrowed.
        unsafe { iterate(executable, Some(visit), (&mut v as *mut Visit).cast()) };
    }
}

/// The symbol iteration's callback: records `symbol` if it is a kernel.
unsafe extern "C" fn visit(
    _exec: hsa_executable_t,
    symbol: hsa_executable_symbol_t,
    data: *mut c_void,
) -> hsa_status_t {
    // SAFETY: `data` is the `Visit` passed by `record`, alive for the call.
    let v = unsafe { &*data.cast::<Visit>() };
    let s = v.session;
    guarded(
        "kernel symbol lookup",
        || (),
        || {
            let Some(get) = s.rt.core.hsa_executable_symbol_get_info_fn else {
                return;
            };
            if let Some((object, name)) = kernel(get, symbol) {
                let name = name.trim_end_matches('\0');
                let bare = name.strip_suffix(".kd").unwrap_or(name);
                let resources = v.resources.get(bare).copied();
                s.kernels.insert_with_resources(object, name, resources);
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
