//! libdrm_amdgpu's answers for the emulated GPU, shared by both front-ends (`libhsakmt.so.1` for ROCr 6.1, whose
//! thunk hands ROCr a device handle, and the KFD preload library for ROCr >= 6.2, which opens render nodes itself).
//!
//! Owns the device handles (one token per node: its address is the handle, so a handle is recognised without a
//! lock, and it carries the render fd and reference count the KFD front-end's `amdgpu_device_initialize` keeps),
//! the `struct amdgpu_gpu_info` an emulated GPU reports, marketing names, and forwarding every foreign handle to
//! the next definition (the real libdrm_amdgpu, through `dlsym(RTLD_NEXT)`, relative to the front-end library
//! this code is linked into). It must not export symbols — each front-end's cdylib exports thin `extern "C"`
//! wrappers (under `catch_unwind`) that call [`query_gpu_info`], [`get_marketing_name`], [`device_get_fd`] and
//! [`bo_import`] — nor touch file descriptors (the KFD front-end's fd table owns those).

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicUsize, Ordering};
use std::sync::OnceLock;

use crate::{clock, config, topology};

/// Nodes that can have a device handle.
pub const MAX_NODES: usize = 64;

/// One node's device: its address is the handle ROCr holds.
#[derive(Debug)]
#[repr(C)]
pub struct DeviceHandle {
    node: u32,
    /// The render fd `amdgpu_device_initialize` dup'ed (KFD front-end), -1 if none.
    pub fd: AtomicI32,
    /// `amdgpu_device_initialize` calls not yet deinitialized.
    pub refs: AtomicU32,
}

static HANDLES: [DeviceHandle; MAX_NODES] = {
    #[allow(clippy::declare_interior_mutable_const)]
    const NONE: DeviceHandle = DeviceHandle {
        node: 0,
        fd: AtomicI32::new(-1),
        refs: AtomicU32::new(0),
    };
    let mut handles = [NONE; MAX_NODES];
    let mut i = 0;
    while i < MAX_NODES {
        handles[i].node = i as u32;
        i += 1;
    }
    handles
};

impl DeviceHandle {
    /// The node this handle stands for.
    pub fn node(&self) -> u32 {
        self.node
    }

    /// The handle as libdrm's `amdgpu_device_handle`.
    pub fn as_handle(&'static self) -> *mut c_void {
        self as *const DeviceHandle as *mut c_void
    }
}

/// The device of `node` (None beyond [`MAX_NODES`]).
pub fn device_of_node(node: u32) -> Option<&'static DeviceHandle> {
    HANDLES.get(node as usize)
}

/// The device behind one of our handles; `None` for any other pointer.
pub fn device(handle: *const c_void) -> Option<&'static DeviceHandle> {
    let base = HANDLES.as_ptr() as usize;
    let offset = (handle as usize).checked_sub(base)?;
    let size = std::mem::size_of::<DeviceHandle>();
    (offset % size == 0)
        .then(|| HANDLES.get(offset / size))
        .flatten()
}

/// The node of one of our handles; `None` for any other pointer.
pub fn node_of_handle(handle: *const c_void) -> Option<u32> {
    device(handle).map(DeviceHandle::node)
}

/// `struct amdgpu_gpu_info` of libdrm's `amdgpu.h` (416 bytes; unchanged since libdrm 2.4.7x).
#[derive(Debug, Clone, Copy)]
#[repr(C)]
#[allow(missing_docs)]
pub struct AmdgpuGpuInfo {
    pub asic_id: u32,
    pub chip_rev: u32,
    pub chip_external_rev: u32,
    pub family_id: u32,
    pub ids_flags: u64,
    pub max_engine_clk: u64,
    pub max_memory_clk: u64,
    pub num_shader_engines: u32,
    pub num_shader_arrays_per_engine: u32,
    pub avail_quad_shader_pipes: u32,
    pub max_quad_shader_pipes: u32,
    pub cache_entries_per_quad_pipe: u32,
    pub num_hw_gfx_contexts: u32,
    pub rb_pipes: u32,
    pub enabled_rb_pipes_mask: u32,
    /// GPU timestamp counter frequency, kHz.
    pub gpu_counter_freq: u32,
    pub backend_disable: [u32; 4],
    pub mc_arb_ramcfg: u32,
    pub gb_addr_cfg: u32,
    pub gb_tile_mode: [u32; 32],
    pub gb_macro_tile_mode: [u32; 16],
    pub pa_sc_raster_cfg: [u32; 4],
    pub pa_sc_raster_cfg1: [u32; 4],
    pub cu_active_number: u32,
    pub cu_ao_mask: u32,
    pub cu_bitmap: [[u32; 4]; 4],
    pub vram_type: u32,
    pub vram_bit_width: u32,
    pub ce_ram_size: u32,
    pub vce_harvest_config: u32,
    pub pci_rev_id: u32,
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<AmdgpuGpuInfo>() == 416);
    assert!(offset_of!(AmdgpuGpuInfo, family_id) == 12);
    assert!(offset_of!(AmdgpuGpuInfo, ids_flags) == 16);
    assert!(offset_of!(AmdgpuGpuInfo, num_shader_engines) == 40);
    assert!(offset_of!(AmdgpuGpuInfo, gpu_counter_freq) == 72);
    assert!(offset_of!(AmdgpuGpuInfo, gb_addr_cfg) == 96);
    assert!(offset_of!(AmdgpuGpuInfo, cu_active_number) == 324);
    assert!(offset_of!(AmdgpuGpuInfo, vram_type) == 396);
    assert!(offset_of!(AmdgpuGpuInfo, pci_rev_id) == 412);
};

/// `AMDGPU_IDS_FLAGS_FUSION`: the GPU is integrated (an APU).
pub const AMDGPU_IDS_FLAGS_FUSION: u64 = 0x1;
/// `AMDGPU_VRAM_TYPE_HBM`.
pub const AMDGPU_VRAM_TYPE_HBM: u32 = 6;

/// libdrm's `family_id` of a gfx major version: AMDGPU_FAMILY_AI (141) for gfx9, NV (143) for gfx10,
/// GC_11_0_0 (145) for gfx11.
pub fn family_id(gfx_major: u32) -> u32 {
    match gfx_major {
        10 => 143,
        11 => 145,
        _ => 141,
    }
}

/// What `amdgpu_query_gpu_info` reports for an emulated GPU node (`None` if the node has no GPU).
pub fn gpu_info(t: &topology::Topology, node: u32) -> Option<AmdgpuGpuInfo> {
    let n = t.node(node)?;
    let g = n.gpu?;
    let cus = g.cus;
    let engines = 4;
    let mut cu_bitmap = [[0u32; 4]; 4];
    // Spread the CUs over 4 shader engines, 1 array each, as bitmaps of active CUs.
    for (se, row) in cu_bitmap.iter_mut().enumerate() {
        let here = cus / engines + u32::from((se as u32) < cus % engines);
        row[0] = if here >= 32 {
            u32::MAX
        } else {
            (1u32 << here) - 1
        };
    }
    Some(AmdgpuGpuInfo {
        asic_id: u32::from(g.model.device_id),
        chip_rev: 0,
        chip_external_rev: 0,
        family_id: family_id(g.model.gfx_version.0),
        ids_flags: if n.cpu_cores > 0 {
            AMDGPU_IDS_FLAGS_FUSION
        } else {
            0
        },
        max_engine_clk: 1_700_000,
        max_memory_clk: 1_600_000,
        num_shader_engines: engines,
        num_shader_arrays_per_engine: 1,
        avail_quad_shader_pipes: 0,
        max_quad_shader_pipes: 0,
        cache_entries_per_quad_pipe: 0,
        num_hw_gfx_contexts: 8,
        rb_pipes: 0,
        enabled_rb_pipes_mask: 0,
        gpu_counter_freq: (clock::GPU_CLOCK_HZ / 1000) as u32,
        backend_disable: [0; 4],
        mc_arb_ramcfg: 0,
        gb_addr_cfg: topology::GB_ADDR_CONFIG,
        gb_tile_mode: [0; 32],
        gb_macro_tile_mode: [0; 16],
        pa_sc_raster_cfg: [0; 4],
        pa_sc_raster_cfg1: [0; 4],
        cu_active_number: cus,
        cu_ao_mask: 0,
        cu_bitmap,
        vram_type: AMDGPU_VRAM_TYPE_HBM,
        vram_bit_width: 4096,
        ce_ram_size: 0,
        vce_harvest_config: 0,
        pci_rev_id: 0,
    })
}

/// The marketing name of `node`'s GPU model, NUL-terminated for C (`None` without a GPU).
pub fn marketing_name(t: &topology::Topology, node: u32) -> Option<&'static CStr> {
    static NAMES: OnceLock<Vec<CString>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        config::GPU_MODELS
            .iter()
            .map(|m| CString::new(m.marketing_name).unwrap_or_default())
            .collect()
    });
    let model = t.node(node)?.gpu?.model;
    config::GPU_MODELS
        .iter()
        .position(|m| m.name == model.name)
        .map(|i| names[i].as_c_str())
}

/// A lazily resolved `dlsym(RTLD_NEXT, name)` pointer: the next definition of a C function after the shared
/// object this code is linked into.
#[derive(Debug)]
pub struct Next {
    name: &'static CStr,
    ptr: AtomicUsize,
}

impl Next {
    /// Unresolved.
    pub const fn new(name: &'static CStr) -> Next {
        Next {
            name,
            ptr: AtomicUsize::new(0),
        }
    }

    /// The address of the next definition, or 0 if there is none.
    pub fn get(&self) -> usize {
        let p = self.ptr.load(Ordering::Acquire);
        if p != 0 {
            return p;
        }
        // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT searches the objects loaded after this one.
        let p = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) } as usize;
        self.ptr.store(p, Ordering::Release);
        p
    }
}

/// Declares a function calling the next definition of a libdrm function (or returning `$missing` if there is
/// none).
macro_rules! forward {
    ($fname:ident, $name:literal, fn($($arg:ident : $ty:ty),*) -> $ret:ty, $missing:expr) => {
        /// Calls the next definition of this function (the real libdrm_amdgpu's).
        ///
        /// # Safety
        /// The arguments follow the C contract of the function.
        unsafe fn $fname($($arg: $ty),*) -> $ret {
            static NEXT: Next = Next::new($name);
            let p = NEXT.get();
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

forward!(
    next_query_gpu_info,
    c"amdgpu_query_gpu_info",
    fn(dev: *mut c_void, info: *mut AmdgpuGpuInfo) -> c_int,
    -libc::ENOSYS
);
forward!(
    next_get_marketing_name,
    c"amdgpu_get_marketing_name",
    fn(dev: *mut c_void) -> *const c_char,
    std::ptr::null()
);
forward!(
    next_device_get_fd,
    c"amdgpu_device_get_fd",
    fn(dev: *mut c_void) -> c_int,
    -1
);
forward!(
    next_bo_import,
    c"amdgpu_bo_import",
    fn(dev: *mut c_void, ty: c_uint, shared: u32, out: *mut c_void) -> c_int,
    -libc::ENOSYS
);

/// `amdgpu_query_gpu_info`: [`gpu_info`] for our handles (`-ENODEV` without a GPU or emulator, `-EINVAL` for a
/// null `info`); foreign handles are forwarded.
///
/// # Safety
/// `info` must be null or point to a writable `struct amdgpu_gpu_info`; a foreign `dev` must be valid for the
/// real libdrm_amdgpu.
pub unsafe fn query_gpu_info(
    t: Option<&topology::Topology>,
    dev: *mut c_void,
    info: *mut AmdgpuGpuInfo,
) -> c_int {
    let Some(node) = node_of_handle(dev) else {
        // SAFETY: forwarded unchanged; the caller's contract is the real function's.
        return unsafe { next_query_gpu_info(dev, info) };
    };
    if info.is_null() {
        return -libc::EINVAL;
    }
    let Some(answer) = t.and_then(|t| gpu_info(t, node)) else {
        return -libc::ENODEV;
    };
    // SAFETY: non-null, caller-provided struct of this layout.
    unsafe { info.write_unaligned(answer) };
    0
}

/// `amdgpu_get_marketing_name`: the model's name for our handles (null without a GPU); others forwarded.
///
/// # Safety
/// A foreign `dev` must be valid for the real libdrm_amdgpu.
pub unsafe fn get_marketing_name(
    t: Option<&topology::Topology>,
    dev: *mut c_void,
) -> *const c_char {
    match node_of_handle(dev) {
        Some(node) => t
            .and_then(|t| marketing_name(t, node))
            .map_or(std::ptr::null(), CStr::as_ptr),
        // SAFETY: forwarded unchanged.
        None => unsafe { next_get_marketing_name(dev) },
    }
}

/// `amdgpu_device_get_fd`: for our handles the render fd `amdgpu_device_initialize` recorded, or -1 with errno
/// ENODEV if there is none (the thunk front-end's devices have no DRM file); others forwarded.
///
/// # Safety
/// A foreign `dev` must be valid for the real libdrm_amdgpu.
pub unsafe fn device_get_fd(dev: *mut c_void) -> c_int {
    let Some(d) = device(dev) else {
        // SAFETY: forwarded unchanged.
        return unsafe { next_device_get_fd(dev) };
    };
    let fd = d.fd.load(Ordering::Acquire);
    if fd < 0 {
        // SAFETY: errno is thread-local and always writable.
        unsafe { *libc::__errno_location() = libc::ENODEV };
    }
    fd
}

/// `amdgpu_bo_import`: importing buffers into an emulated device is not supported (`-EINVAL`, as ROCr's dma-buf
/// and IPC paths expect on failure); others forwarded.
///
/// # Safety
/// A foreign `dev` must be valid for the real libdrm_amdgpu, with its arguments.
pub unsafe fn bo_import(dev: *mut c_void, ty: c_uint, shared: u32, out: *mut c_void) -> c_int {
    if node_of_handle(dev).is_some() {
        return -libc::EINVAL;
    }
    // SAFETY: forwarded unchanged.
    unsafe { next_bo_import(dev, ty, shared, out) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_foreign_pointers_are_not_ours() {
        let h = device_of_node(3).unwrap().as_handle();
        assert!(!h.is_null());
        assert_eq!(node_of_handle(h), Some(3));
        assert_eq!(
            node_of_handle(device_of_node(0).unwrap().as_handle()),
            Some(0)
        );
        assert!(device_of_node(MAX_NODES as u32).is_none());
        let foreign = 0u64;
        assert_eq!(
            node_of_handle(&foreign as *const u64 as *const c_void),
            None
        );
        assert_eq!(node_of_handle(std::ptr::null()), None);
        // Inside the array but not at a token boundary.
        assert_eq!(node_of_handle((h as usize + 1) as *const c_void), None);
    }

    #[test]
    fn gpu_info_reports_the_emulated_clock_and_model() {
        let t = topology::Topology::new(&config::Config::default());
        let info = gpu_info(&t, 1).unwrap();
        // 100 MHz GPU clock, in kHz, as ROCr multiplies by 1000 for the timestamp frequency.
        assert_eq!(info.gpu_counter_freq, 100_000);
        assert_eq!(u64::from(info.gpu_counter_freq) * 1000, clock::GPU_CLOCK_HZ);
        assert_eq!(info.asic_id, 0x740f);
        assert_eq!(info.family_id, 141);
        assert_eq!(info.ids_flags, 0);
        assert_eq!(info.cu_active_number, 104);
        let bits: u32 = info.cu_bitmap.iter().map(|row| row[0].count_ones()).sum();
        assert_eq!(bits, 104);
        assert!(gpu_info(&t, 0).is_none());
    }

    /// The KFD front-end's case: a gfx1100 APU with 8 CUs, read at libdrm's byte offsets.
    #[test]
    fn gpu_info_fields_at_libdrm_offsets() {
        let t = topology::Topology::new(&config::Config {
            gpus: vec![config::model_by_name("gfx1100").unwrap()],
            apu: true,
            compute_units: Some(8),
            ..config::Config::default()
        });
        let node = t.gpu_nodes().next().unwrap().0;
        let info = gpu_info(&t, node).unwrap();
        // SAFETY: a plain-integer repr(C) struct viewed as its 416 bytes.
        let b: [u8; 416] = unsafe { std::mem::transmute(info) };
        let u32_at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap());
        assert_eq!(u32_at(0), 0x744c);
        assert_eq!(u32_at(12), 145);
        assert_eq!(u32_at(16), 1, "FUSION flag on an APU");
        assert_eq!(u32_at(72), 100_000, "100 MHz GPU clock in kHz");
        assert_eq!(u32_at(324), 8);
    }

    #[test]
    fn device_fd_is_what_initialize_recorded() {
        let d = device_of_node(5).unwrap();
        // SAFETY: our own handle; no forwarding.
        assert_eq!(unsafe { device_get_fd(d.as_handle()) }, -1);
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::ENODEV)
        );
        d.fd.store(42, Ordering::Release);
        // SAFETY: as above.
        assert_eq!(unsafe { device_get_fd(d.as_handle()) }, 42);
        d.fd.store(-1, Ordering::Release);
        // SAFETY: as above.
        let imported = unsafe { bo_import(d.as_handle(), 0, 0, std::ptr::null_mut()) };
        assert_eq!(imported, -libc::EINVAL);
    }
}
