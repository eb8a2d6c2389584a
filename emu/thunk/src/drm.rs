//! The libdrm_amdgpu entry points ROCr >= 6.1 calls on the device handle `hsaKmtGetAMDGPUDeviceHandle` returns.
//!
//! ROCr 6.1.2 calls `amdgpu_query_gpu_info(handle, &info)` right after it gets the handle (agent creation fails
//! if that returns < 0) and takes the agent's timestamp frequency from `info.gpu_counter_freq` (kHz). The real
//! libdrm_amdgpu would dereference the handle as its private `struct amdgpu_device`, so this library defines the
//! libdrm functions that take a device handle: for the emulator's handles it answers itself, for any other
//! handle it forwards to the next definition in the lookup order (`dlsym(RTLD_NEXT)`, the real libdrm_amdgpu),
//! so a graphics user in the same process keeps working. The answers, the handles and the forwarding are the
//! device core's ([`rprof_emu::drm`], shared with the KFD front-end); this module holds only the exported
//! wrappers, each under `catch_unwind`.
//!
//! Binding: ROCr's references are unversioned; the version script exports these names under `HSAKMT_1`, the
//! library's only version, which an unversioned reference accepts. `libhsakmt.so.1` precedes `libdrm_amdgpu.so.1`
//! in ROCr's `DT_NEEDED` list, so in the breadth-first global scope these definitions come first unless the
//! program itself loaded libdrm_amdgpu earlier; [`check_binding`] reports that case on stderr. Only functions
//! whose first argument is a device handle are defined: the `amdgpu_bo_*` functions ROCr imports take buffer
//! handles, which only the real libdrm creates (ROCr reaches them only through the vmem and dma-buf IPC paths,
//! which a KFD version below 1.15 and `hsaKmtExportDMABufHandle` = NOT_SUPPORTED keep closed).

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

use rprof_emu::drm as core;
pub use rprof_emu::drm::AmdgpuGpuInfo;
use rprof_emu::{emulator, topology::Topology};

/// The device handle of `node` (None beyond [`core::MAX_NODES`]).
pub fn handle_of_node(node: u32) -> Option<*mut c_void> {
    check_binding();
    core::device_of_node(node).map(core::DeviceHandle::as_handle)
}

/// Reports on stderr, once, if the process resolves `amdgpu_query_gpu_info` to another definition than ours
/// (something loaded libdrm_amdgpu ahead of libhsakmt.so.1): ROCr would then hand our handles to the real
/// libdrm. The fix is to put this library in `LD_PRELOAD` too.
pub fn check_binding() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: a NUL-terminated name; RTLD_DEFAULT lookups have no other precondition.
        let found =
            unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"amdgpu_query_gpu_info".as_ptr()) } as usize;
        let ours = amdgpu_query_gpu_info as unsafe extern "C" fn(*mut c_void, *mut AmdgpuGpuInfo) -> c_int
            as usize;
        if found != 0 && found != ours {
            eprintln!(
                "rprof-emu: amdgpu_query_gpu_info resolves to another library than the emulator's \
                 libhsakmt.so.1 (libdrm_amdgpu was loaded first); ROCr will fail to create the GPU agent. \
                 Add libhsakmt.so.1 to LD_PRELOAD."
            );
        }
    });
}

fn guarded<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

fn topology() -> Option<&'static Topology> {
    emulator().ok().map(|e| &e.topology)
}

/// libdrm's `amdgpu_query_gpu_info`: answers for the emulator's handles, forwards others.
///
/// # Safety
/// `info` must be null or point to a writable `struct amdgpu_gpu_info`; a foreign `dev` must be valid for the
/// real libdrm_amdgpu.
#[no_mangle]
pub unsafe extern "C" fn amdgpu_query_gpu_info(
    dev: *mut c_void,
    info: *mut AmdgpuGpuInfo,
) -> c_int {
    // SAFETY: the caller's contract, passed on.
    guarded(-libc::EINVAL, || unsafe {
        core::query_gpu_info(topology(), dev, info)
    })
}

/// libdrm's `amdgpu_device_get_fd`: the emulator's devices have no DRM file (-1, errno ENODEV); others forward.
///
/// # Safety
/// A foreign `dev` must be valid for the real libdrm_amdgpu.
#[no_mangle]
pub unsafe extern "C" fn amdgpu_device_get_fd(dev: *mut c_void) -> c_int {
    // SAFETY: the caller's contract, passed on.
    guarded(-1, || unsafe { core::device_get_fd(dev) })
}

/// libdrm's `amdgpu_get_marketing_name`: the model's marketing name for the emulator's handles; others forward.
///
/// # Safety
/// A foreign `dev` must be valid for the real libdrm_amdgpu.
#[no_mangle]
pub unsafe extern "C" fn amdgpu_get_marketing_name(dev: *mut c_void) -> *const c_char {
    // SAFETY: the caller's contract, passed on.
    guarded(std::ptr::null(), || unsafe {
        core::get_marketing_name(topology(), dev)
    })
}

/// libdrm's `amdgpu_bo_import`: importing buffers into an emulated device is not supported (-EINVAL, as ROCr's
/// dma-buf paths expect on failure); others forward.
///
/// # Safety
/// A foreign `dev` must be valid for the real libdrm_amdgpu, with its arguments.
#[no_mangle]
pub unsafe extern "C" fn amdgpu_bo_import(
    dev: *mut c_void,
    handle_type: c_uint,
    shared_handle: u32,
    output: *mut c_void,
) -> c_int {
    // SAFETY: the caller's contract, passed on.
    guarded(-libc::EINVAL, || unsafe {
        core::bo_import(dev, handle_type, shared_handle, output)
    })
}
