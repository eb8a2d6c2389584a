//! Kernel names: after `hsa_executable_freeze`, every kernel symbol of the
//! executable (kernel object and name) and the metadata note of each of its
//! loaded code objects ([`crate::code_objects`]) are copied out of the runtime
//! and handed to the writer thread ([`rprof_core::engine::Engine::push_loaded_kernels`]),
//! which parses, demangles and files them in the kernel table. The app's
//! thread only copies.
//!
//! Owns iterating an executable's symbols and reading a kernel's name and
//! object; must not demangle, filter or number kernels (that is
//! `rprof_core::kernels`) nor parse code objects (`rprof_core::code_object`).

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

use rprof_core::kernels::LoadedKernels;

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
    /// The kernel symbols found so far.
    symbols: Vec<(u64, String)>,
}

/// Set once the runtime was found without a loader extension (said once per run).
static SAID_NO_LOADER: AtomicBool = AtomicBool::new(false);

/// The metadata notes of every code object loaded into `executable`, and
/// why the first unreadable one could not be read (its kernels get no
/// resources; the writer says so once per run).
fn notes_of(s: &Session, executable: hsa_executable_t, kernels: &mut LoadedKernels) {
    let Some(loader) = Loader::query(&s.rt) else {
        if !SAID_NO_LOADER.swap(true, Ordering::Relaxed) {
            eprintln!("rprof: warning: the HSA runtime has no loader extension; kernel register counts are not recorded");
        }
        return;
    };
    let (notes, unreadable) = loader.metadata_notes(executable);
    kernels.notes = notes;
    kernels.unreadable = unreadable.into_iter().next().map(|why| why.0);
}

/// Hands the kernels of a frozen executable to the writer's kernel table.
pub(super) fn record(s: &'static Session, executable: hsa_executable_t) {
    let mut kernels = LoadedKernels::default();
    notes_of(s, executable, &mut kernels);
    if let Some(iterate) = s.rt.core.hsa_executable_iterate_symbols_fn {
        let mut v = Visit {
            session: s,
            symbols: Vec::new(),
        };
        // SAFETY: a frozen executable; the callback only reads symbols and
        // `v`, which outlives the call and is not otherwise borrowed.
        unsafe { iterate(executable, Some(visit), (&mut v as *mut Visit).cast()) };
        kernels.symbols = v.symbols;
    }
    s.engine.push_loaded_kernels(kernels);
}

/// The symbol iteration's callback: records `symbol` if it is a kernel.
unsafe extern "C" fn visit(
    _exec: hsa_executable_t,
    symbol: hsa_executable_symbol_t,
    data: *mut c_void,
) -> hsa_status_t {
    // SAFETY: `data` is the `Visit` passed by `record`, alive for the call
    // and not otherwise borrowed during it.
    let v = unsafe { &mut *data.cast::<Visit>() };
    let s = v.session;
    guarded(
        "kernel symbol lookup",
        || (),
        || {
            let Some(get) = s.rt.core.hsa_executable_symbol_get_info_fn else {
                return;
            };
            if let Some(found) = kernel(get, symbol) {
                v.symbols.push(found);
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
