//! Stand-ins for the libdrm and libdrm_amdgpu functions ROCr (and rocprofiler-sdk) call on the render nodes.
//!
//! Device handles, `amdgpu_gpu_info`, marketing names and the forwarding of foreign handles (a real device, a
//! graphics user in the same process) to the real library are the device core's ([`rprof_emu::drm`], shared with
//! the thunk front-end); this module holds what only this front-end needs (render fds: `drmOpenRender`,
//! `drmClose`, `drmCommandWriteRead`, `amdgpu_device_initialize` / `deinitialize`) and the thin exported
//! wrappers, each under `catch_unwind`. `amdgpu_device_initialize` dups the render fd as libdrm does and records
//! it in the core's handle, and `amdgpu_device_get_fd` returns that dup (the thunk closes its own fd afterwards,
//! pitfall P2).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;

use libc::{c_char, c_int, c_uint, c_ulong, c_void};
use rprof_emu::drm::{self as core, AmdgpuGpuInfo};
use rprof_emu::topology::Topology;

use crate::fds::{self, FdKind};
use crate::real::{self, next_fn};

/// The node whose render minor is `minor`.
pub fn node_of_minor(minor: i64) -> Option<u32> {
    let emu = crate::emu()?;
    emu.topology
        .gpu_nodes()
        .find(|(id, _)| {
            emu.topology
                .node_properties(*id)
                .is_some_and(|p| i64::from(p.DrmRenderMinor) == minor)
        })
        .map(|(id, _)| id)
}

/// Opens a render fd of ours for `node`: a memfd, recorded in the fd table.
pub fn open_render(node: u32) -> c_int {
    let Some(fd) = real::memfd(c"rprof-emu-render", 0) else {
        return real::fail(libc::EMFILE);
    };
    if !fds::insert(fd, FdKind::Render(node)) {
        real::close(fd);
        return real::fail(libc::EMFILE);
    }
    fd
}

fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

next_fn!(
    NEXT_DRM_OPEN_RENDER,
    next_drm_open_render,
    c"drmOpenRender",
    fn(minor: c_int) -> c_int,
    -libc::ENOSYS
);
next_fn!(
    NEXT_DRM_CLOSE,
    next_drm_close,
    c"drmClose",
    fn(fd: c_int) -> c_int,
    -libc::ENOSYS
);
next_fn!(
    NEXT_DRM_CMD_WR,
    next_drm_cmd_wr,
    c"drmCommandWriteRead",
    fn(fd: c_int, index: c_ulong, data: *mut c_void, size: c_ulong) -> c_int,
    -libc::ENOSYS
);
next_fn!(
    NEXT_DEV_INIT,
    next_dev_init,
    c"amdgpu_device_initialize",
    fn(fd: c_int, major: *mut u32, minor: *mut u32, handle: *mut *mut c_void) -> c_int,
    -libc::ENOSYS
);
next_fn!(
    NEXT_DEV_DEINIT,
    next_dev_deinit,
    c"amdgpu_device_deinitialize",
    fn(h: *mut c_void) -> c_int,
    -libc::ENOSYS
);

/// `drmOpenRender`: ours for an emulated GPU's minor.
#[no_mangle]
pub extern "C" fn drmOpenRender(minor: c_int) -> c_int {
    guard(-1, || match node_of_minor(i64::from(minor)) {
        Some(node) => open_render(node),
        // SAFETY: forwarding the caller's arguments to the real function.
        None => unsafe { next_drm_open_render(minor) },
    })
}

/// `drmClose`.
#[no_mangle]
pub extern "C" fn drmClose(fd: c_int) -> c_int {
    guard(-1, || {
        if fds::remove(fd).is_some() {
            real::close(fd)
        } else {
            // SAFETY: forwarding.
            unsafe { next_drm_close(fd) }
        }
    })
}

/// `drmCommandWriteRead`: no DRM commands on our fds (only IPC/vmem paths use it).
///
/// # Safety
/// As libdrm's.
#[no_mangle]
pub unsafe extern "C" fn drmCommandWriteRead(
    fd: c_int,
    index: c_ulong,
    data: *mut c_void,
    size: c_ulong,
) -> c_int {
    guard(-libc::EINVAL, || {
        if fds::kind(fd).is_some() {
            -libc::EINVAL
        } else {
            // SAFETY: forwarding.
            unsafe { next_drm_cmd_wr(fd, index, data, size) }
        }
    })
}

/// `amdgpu_device_initialize`: one reference-counted handle per emulated GPU, holding a dup of the render fd.
///
/// # Safety
/// As libdrm_amdgpu's: the out pointers are writable.
#[no_mangle]
pub unsafe extern "C" fn amdgpu_device_initialize(
    fd: c_int,
    major: *mut u32,
    minor: *mut u32,
    handle: *mut *mut c_void,
) -> c_int {
    guard(-libc::EINVAL, || {
        let Some(FdKind::Render(node)) = fds::kind(fd) else {
            // SAFETY: forwarding.
            return unsafe { next_dev_init(fd, major, minor, handle) };
        };
        let Some(h) = core::device_of_node(node).filter(|_| !handle.is_null()) else {
            return -libc::EINVAL;
        };
        if h.refs.fetch_add(1, Ordering::AcqRel) == 0 || h.fd.load(Ordering::Acquire) < 0 {
            let dup = real::dup_cloexec(fd);
            if dup < 0 || !fds::insert(dup, FdKind::Render(node)) {
                h.refs.fetch_sub(1, Ordering::AcqRel);
                return -libc::EMFILE;
            }
            h.fd.store(dup, Ordering::Release);
        }
        // SAFETY: caller-provided out pointers (null-checked where optional).
        unsafe {
            if !major.is_null() {
                *major = 3;
            }
            if !minor.is_null() {
                *minor = 57;
            }
            *handle = h.as_handle();
        }
        0
    })
}

/// `amdgpu_device_deinitialize`: drops a reference (the device fd lives on; the process keeps using it).
///
/// # Safety
/// As libdrm_amdgpu's.
#[no_mangle]
pub unsafe extern "C" fn amdgpu_device_deinitialize(h: *mut c_void) -> c_int {
    guard(-libc::EINVAL, || match core::device(h) {
        Some(d) => {
            let _ = d
                .refs
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| r.checked_sub(1));
            0
        }
        // SAFETY: forwarding.
        None => unsafe { next_dev_deinit(h) },
    })
}

fn topology() -> Option<&'static Topology> {
    crate::emu().map(|e| &e.topology)
}

/// `amdgpu_device_get_fd`: the dup made at initialisation.
///
/// # Safety
/// As libdrm_amdgpu's.
#[no_mangle]
pub unsafe extern "C" fn amdgpu_device_get_fd(h: *mut c_void) -> c_int {
    // SAFETY: the caller's contract, passed on.
    guard(-1, || unsafe { core::device_get_fd(h) })
}

/// `amdgpu_query_gpu_info`: asic id, family, APU flag and the GPU counter frequency (kHz) of the emulated GPU.
///
/// # Safety
/// `info` must point to a writable `struct amdgpu_gpu_info`.
#[no_mangle]
pub unsafe extern "C" fn amdgpu_query_gpu_info(h: *mut c_void, info: *mut AmdgpuGpuInfo) -> c_int {
    // SAFETY: the caller's contract, passed on.
    guard(-libc::EINVAL, || unsafe {
        core::query_gpu_info(topology(), h, info)
    })
}

/// `amdgpu_get_marketing_name`.
///
/// # Safety
/// As libdrm_amdgpu's.
#[no_mangle]
pub unsafe extern "C" fn amdgpu_get_marketing_name(h: *mut c_void) -> *const c_char {
    // SAFETY: the caller's contract, passed on.
    guard(std::ptr::null(), || unsafe {
        core::get_marketing_name(topology(), h)
    })
}

/// `amdgpu_bo_import`: no dma-buf import into an emulated device (IPC/vmem only).
///
/// # Safety
/// As libdrm_amdgpu's.
#[no_mangle]
pub unsafe extern "C" fn amdgpu_bo_import(
    h: *mut c_void,
    ty: c_uint,
    shared: u32,
    out: *mut c_void,
) -> c_int {
    // SAFETY: the caller's contract, passed on.
    guard(-libc::EINVAL, || unsafe {
        core::bo_import(h, ty, shared, out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_answer_for_the_core_handles() {
        let d = core::device_of_node(7).unwrap();
        let h = d.as_handle();
        // SAFETY: our own handle: nothing is forwarded.
        unsafe {
            assert_eq!(
                amdgpu_bo_import(h, 0, 0, std::ptr::null_mut()),
                -libc::EINVAL
            );
            assert_eq!(amdgpu_device_get_fd(h), -1, "not initialized");
            assert_eq!(
                amdgpu_query_gpu_info(h, std::ptr::null_mut()),
                -libc::EINVAL
            );
            assert_eq!(amdgpu_device_deinitialize(h), 0);
        }
        assert_eq!(d.refs.load(Ordering::Acquire), 0, "never below zero");
    }
}
