//! The libdrm_amdgpu entry points ROCr >= 6.1 calls on the device handle `hsaKmtGetAMDGPUDeviceHandle` returns.
//!
//! ROCr 6.1.2 calls `amdgpu_query_gpu_info(handle, &info)` right after it gets the handle (agent creation fails
//! if that returns < 0) and takes the agent's timestamp frequency from `info.gpu_counter_freq` (kHz). The real
//! libdrm_amdgpu would dereference the handle as its private `struct amdgpu_device`, so this library defines the
//! libdrm functions that take a device handle: for the emulator's handles it answers itself, for any other
//! handle it forwards to the next definition in the lookup order (`dlsym(RTLD_NEXT)`, the real libdrm_amdgpu),
//! so a graphics user in the same process keeps working.
//!
//! Binding: ROCr's references are unversioned; the version script exports these names under `HSAKMT_1`, the
//! library's only version, which an unversioned reference accepts. `libhsakmt.so.1` precedes `libdrm_amdgpu.so.1`
//! in ROCr's `DT_NEEDED` list, so in the breadth-first global scope these definitions come first unless the
//! program itself loaded libdrm_amdgpu earlier; [`check_binding`] reports that case on stderr. Only functions
//! whose first argument is a device handle are defined: the `amdgpu_bo_*` functions ROCr imports take buffer
//! handles, which only the real libdrm creates (ROCr reaches them only through the vmem and dma-buf IPC paths,
//! which a KFD version below 1.15 and `hsaKmtExportDMABufHandle` = NOT_SUPPORTED keep closed).
//!
//! Handles are the addresses of a static per-node token array, so they are stable, non-null and recognisable
//! without a lock.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Once, OnceLock};

use rprof_emu::{clock, emulator, topology};

/// Nodes that can have a device handle.
pub const MAX_NODES: usize = 64;

/// One handle's target: a node id. Its address is the handle.
#[derive(Debug)]
#[repr(C)]
pub struct DeviceToken {
    node: u32,
}

static DEVICES: [DeviceToken; MAX_NODES] = {
    const ZERO: DeviceToken = DeviceToken { node: 0 };
    let mut devices = [ZERO; MAX_NODES];
    let mut i = 0;
    while i < MAX_NODES {
        devices[i].node = i as u32;
        i += 1;
    }
    devices
};

/// The device handle of `node` (None beyond [`MAX_NODES`]).
pub fn handle_of_node(node: u32) -> Option<*mut c_void> {
    check_binding();
    DEVICES
        .get(node as usize)
        .map(|t| t as *const DeviceToken as *mut c_void)
}

/// The node of one of our handles; `None` for any other pointer.
pub fn node_of_handle(handle: *const c_void) -> Option<u32> {
    let base = DEVICES.as_ptr() as usize;
    let offset = (handle as usize).checked_sub(base)?;
    let size = std::mem::size_of::<DeviceToken>();
    (offset % size == 0 && offset / size < MAX_NODES).then(|| DEVICES[offset / size].node)
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
        family_id: t.family_id(node),
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

/// The next definition of `name` after this library (the real libdrm_amdgpu's), looked up once per name.
fn next_symbol(slot: &OnceLock<usize>, name: &CStr) -> usize {
    *slot.get_or_init(|| {
        // SAFETY: `name` is NUL-terminated; RTLD_NEXT lookups have no other precondition.
        unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) as usize }
    })
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
    guarded(-libc::EINVAL, || {
        let Some(node) = node_of_handle(dev) else {
            static NEXT: OnceLock<usize> = OnceLock::new();
            let next = next_symbol(&NEXT, c"amdgpu_query_gpu_info");
            if next == 0 {
                return -libc::ENOSYS;
            }
            // SAFETY: `next` is the real libdrm_amdgpu's definition of this same C function.
            let real: unsafe extern "C" fn(*mut c_void, *mut AmdgpuGpuInfo) -> c_int =
                unsafe { std::mem::transmute(next) };
            // SAFETY: forwarded unchanged; the caller's contract is the real function's.
            return unsafe { real(dev, info) };
        };
        if info.is_null() {
            return -libc::EINVAL;
        }
        let Some(answer) = emulator().ok().and_then(|e| gpu_info(&e.topology, node)) else {
            return -libc::ENODEV;
        };
        // SAFETY: non-null, caller-provided struct of this layout.
        unsafe { info.write(answer) };
        0
    })
}

/// libdrm's `amdgpu_device_get_fd`: the emulator's devices have no DRM file (-1, errno ENODEV); others forward.
///
/// # Safety
/// A foreign `dev` must be valid for the real libdrm_amdgpu.
#[no_mangle]
pub unsafe extern "C" fn amdgpu_device_get_fd(dev: *mut c_void) -> c_int {
    guarded(-1, || {
        if node_of_handle(dev).is_some() {
            // SAFETY: errno is thread-local and always writable.
            unsafe { *libc::__errno_location() = libc::ENODEV };
            return -1;
        }
        static NEXT: OnceLock<usize> = OnceLock::new();
        let next = next_symbol(&NEXT, c"amdgpu_device_get_fd");
        if next == 0 {
            return -1;
        }
        // SAFETY: the real libdrm_amdgpu's definition of this same C function.
        let real: unsafe extern "C" fn(*mut c_void) -> c_int = unsafe { std::mem::transmute(next) };
        // SAFETY: forwarded unchanged.
        unsafe { real(dev) }
    })
}

/// libdrm's `amdgpu_get_marketing_name`: the model's marketing name for the emulator's handles; others forward.
///
/// # Safety
/// A foreign `dev` must be valid for the real libdrm_amdgpu.
#[no_mangle]
pub unsafe extern "C" fn amdgpu_get_marketing_name(dev: *mut c_void) -> *const c_char {
    guarded(std::ptr::null(), || {
        if let Some(node) = node_of_handle(dev) {
            static NAMES: OnceLock<Vec<CString>> = OnceLock::new();
            let names = NAMES.get_or_init(|| {
                rprof_emu::config::GPU_MODELS
                    .iter()
                    .map(|m| CString::new(m.marketing_name).unwrap_or_default())
                    .collect()
            });
            let Some(model) = emulator()
                .ok()
                .and_then(|e| e.topology.node(node))
                .and_then(|n| n.gpu)
                .map(|g| g.model)
            else {
                return std::ptr::null();
            };
            return rprof_emu::config::GPU_MODELS
                .iter()
                .position(|m| m.name == model.name)
                .map_or(std::ptr::null(), |i| names[i].as_ptr());
        }
        static NEXT: OnceLock<usize> = OnceLock::new();
        let next = next_symbol(&NEXT, c"amdgpu_get_marketing_name");
        if next == 0 {
            return std::ptr::null();
        }
        // SAFETY: the real libdrm_amdgpu's definition of this same C function.
        let real: unsafe extern "C" fn(*mut c_void) -> *const c_char =
            unsafe { std::mem::transmute(next) };
        // SAFETY: forwarded unchanged.
        unsafe { real(dev) }
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
    handle_type: c_int,
    shared_handle: u32,
    output: *mut c_void,
) -> c_int {
    guarded(-libc::EINVAL, || {
        if node_of_handle(dev).is_some() {
            return -libc::EINVAL;
        }
        static NEXT: OnceLock<usize> = OnceLock::new();
        let next = next_symbol(&NEXT, c"amdgpu_bo_import");
        if next == 0 {
            return -libc::ENOSYS;
        }
        // SAFETY: the real libdrm_amdgpu's definition of this same C function.
        let real: unsafe extern "C" fn(*mut c_void, c_int, u32, *mut c_void) -> c_int =
            unsafe { std::mem::transmute(next) };
        // SAFETY: forwarded unchanged.
        unsafe { real(dev, handle_type, shared_handle, output) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_foreign_pointers_are_not_ours() {
        let h = handle_of_node(3).unwrap();
        assert!(!h.is_null());
        assert_eq!(node_of_handle(h), Some(3));
        assert_eq!(node_of_handle(handle_of_node(0).unwrap()), Some(0));
        assert!(handle_of_node(MAX_NODES as u32).is_none());
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
        let t = topology::Topology::new(&rprof_emu::config::Config::default());
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
}
