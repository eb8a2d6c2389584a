//! Stand-ins for the libdrm and libdrm_amdgpu functions ROCr (and rocprofiler-sdk) call on the render nodes.
//!
//! A device handle of ours is the address of one entry of `HANDLES`; anything else (a real device, a graphics
//! user in the same process) is forwarded to the next definition (the real library) found with
//! `dlsym(RTLD_NEXT)`. `amdgpu_device_initialize` dups the render fd as libdrm does, and
//! `amdgpu_device_get_fd` returns that dup (the thunk closes its own fd afterwards, pitfall P2).

use std::ffi::CStr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

use libc::{c_char, c_int, c_uint, c_ulong, c_void};

use crate::fds::{self, FdKind};
use crate::real::{self, next_fn};

/// One emulated amdgpu device (per topology node).
#[derive(Debug)]
pub struct DevHandle {
    fd: AtomicI32,
    refs: AtomicU32,
}

const MAX_NODES: usize = 64;
static HANDLES: [DevHandle; MAX_NODES] = [const {
    DevHandle {
        fd: AtomicI32::new(-1),
        refs: AtomicU32::new(0),
    }
}; MAX_NODES];

fn node_of_handle(h: *const c_void) -> Option<u32> {
    let base = HANDLES.as_ptr() as usize;
    let off = (h as usize).checked_sub(base)?;
    let size = std::mem::size_of::<DevHandle>();
    (off % size == 0 && off / size < MAX_NODES).then_some((off / size) as u32)
}

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
next_fn!(
    NEXT_DEV_GET_FD,
    next_dev_get_fd,
    c"amdgpu_device_get_fd",
    fn(h: *mut c_void) -> c_int,
    -libc::ENOSYS
);
next_fn!(
    NEXT_QUERY_GPU_INFO,
    next_query_gpu_info,
    c"amdgpu_query_gpu_info",
    fn(h: *mut c_void, info: *mut c_void) -> c_int,
    -libc::ENOSYS
);
next_fn!(
    NEXT_MARKETING_NAME,
    next_marketing_name,
    c"amdgpu_get_marketing_name",
    fn(h: *mut c_void) -> *const c_char,
    std::ptr::null()
);
next_fn!(
    NEXT_BO_IMPORT,
    next_bo_import,
    c"amdgpu_bo_import",
    fn(h: *mut c_void, ty: c_uint, shared: u32, out: *mut c_void) -> c_int,
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
        if handle.is_null() || node as usize >= MAX_NODES {
            return -libc::EINVAL;
        }
        let h = &HANDLES[node as usize];
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
            *handle = h as *const DevHandle as *mut c_void;
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
    guard(-libc::EINVAL, || match node_of_handle(h) {
        Some(node) => {
            let _ = HANDLES[node as usize].refs.fetch_update(
                Ordering::AcqRel,
                Ordering::Acquire,
                |r| r.checked_sub(1),
            );
            0
        }
        // SAFETY: forwarding.
        None => unsafe { next_dev_deinit(h) },
    })
}

/// `amdgpu_device_get_fd`: the dup made at initialisation.
///
/// # Safety
/// As libdrm_amdgpu's.
#[no_mangle]
pub unsafe extern "C" fn amdgpu_device_get_fd(h: *mut c_void) -> c_int {
    guard(-1, || match node_of_handle(h) {
        Some(node) => HANDLES[node as usize].fd.load(Ordering::Acquire),
        // SAFETY: forwarding.
        None => unsafe { next_dev_get_fd(h) },
    })
}

/// Size of libdrm's `struct amdgpu_gpu_info`.
pub const GPU_INFO_BYTES: usize = 416;

/// `amdgpu_query_gpu_info`: asic id, family, APU flag and the GPU counter frequency (kHz) of the emulated GPU.
///
/// # Safety
/// `info` must point to a writable `struct amdgpu_gpu_info`.
#[no_mangle]
pub unsafe extern "C" fn amdgpu_query_gpu_info(h: *mut c_void, info: *mut c_void) -> c_int {
    guard(-libc::EINVAL, || {
        let Some(node) = node_of_handle(h) else {
            // SAFETY: forwarding.
            return unsafe { next_query_gpu_info(h, info) };
        };
        let (Some(emu), false) = (crate::emu(), info.is_null()) else {
            return -libc::EINVAL;
        };
        let Some(n) = emu.topology.node(node) else {
            return -libc::EINVAL;
        };
        let Some(g) = n.gpu else {
            return -libc::EINVAL;
        };
        let bytes = gpu_info(g.model, n.cpu_cores > 0, g.cus);
        // SAFETY: the caller's struct has GPU_INFO_BYTES writable bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), info as *mut u8, GPU_INFO_BYTES) };
        0
    })
}

/// The bytes of `struct amdgpu_gpu_info` for a model (fields at the offsets of libdrm's `amdgpu.h`).
pub fn gpu_info(model: rprof_emu::config::GpuModel, apu: bool, cus: u32) -> [u8; GPU_INFO_BYTES] {
    let mut b = [0u8; GPU_INFO_BYTES];
    let mut put32 = |off: usize, v: u32| b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    put32(0, u32::from(model.device_id)); // asic_id
                                          // family_id: AI (gfx9) 141, NV (gfx10) 143, GC_11_0_0 145.
    put32(
        12,
        match model.gfx_version.0 {
            10 => 143,
            11 => 145,
            _ => 141,
        },
    );
    put32(72, (1_000_000 / rprof_emu::clock::NS_PER_GPU_TICK) as u32); // gpu_counter_freq, kHz
    let mut put64 = |off: usize, v: u64| b[off..off + 8].copy_from_slice(&v.to_ne_bytes());
    put64(16, u64::from(apu)); // ids_flags: AMDGPU_IDS_FLAGS_FUSION
    put64(24, 1_700_000); // max_engine_clk (kHz)
    put64(32, 1_600_000); // max_memory_clk (kHz)
    let mut put32 = |off: usize, v: u32| b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    put32(40, 4); // num_shader_engines
    put32(44, 1); // num_shader_arrays_per_engine
    put32(96, rprof_emu::topology::GB_ADDR_CONFIG); // gb_addr_cfg
    put32(324, cus); // cu_active_number
    b
}

/// `amdgpu_get_marketing_name`.
///
/// # Safety
/// As libdrm_amdgpu's.
#[no_mangle]
pub unsafe extern "C" fn amdgpu_get_marketing_name(h: *mut c_void) -> *const c_char {
    guard(std::ptr::null(), || {
        let Some(node) = node_of_handle(h) else {
            // SAFETY: forwarding.
            return unsafe { next_marketing_name(h) };
        };
        crate::emu()
            .and_then(|e| e.topology.node(node).and_then(|n| n.gpu))
            .map_or(std::ptr::null(), |g| {
                marketing_name(g.model.marketing_name).as_ptr()
            })
    })
}

fn marketing_name(name: &'static str) -> &'static CStr {
    use std::sync::Mutex;
    static NAMES: Mutex<Vec<(&'static str, &'static CStr)>> = Mutex::new(Vec::new());
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, c)) = names.iter().find(|(n, _)| *n == name) {
        return c;
    }
    let c: &'static CStr = Box::leak(
        std::ffi::CString::new(name)
            .unwrap_or_default()
            .into_boxed_c_str(),
    );
    names.push((name, c));
    c
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
    guard(-libc::EINVAL, || {
        if node_of_handle(h).is_some() {
            -libc::EINVAL
        } else {
            // SAFETY: forwarding.
            unsafe { next_bo_import(h, ty, shared, out) }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_info_fields_at_libdrm_offsets() {
        let m = rprof_emu::config::model_by_name("gfx1100").unwrap();
        let b = gpu_info(m, true, 8);
        let u32_at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap());
        assert_eq!(u32_at(0), 0x744c);
        assert_eq!(u32_at(12), 145);
        assert_eq!(u32_at(16), 1, "FUSION flag on an APU");
        assert_eq!(u32_at(72), 100_000, "100 MHz GPU clock in kHz");
        assert_eq!(u32_at(324), 8);
    }

    #[test]
    fn handles_are_recognised_by_address() {
        assert_eq!(
            node_of_handle(&HANDLES[3] as *const DevHandle as *const c_void),
            Some(3)
        );
        assert_eq!(node_of_handle(std::ptr::null()), None);
        let x = 5u64;
        assert_eq!(node_of_handle(&x as *const u64 as *const c_void), None);
    }
}
