//! rprof-emu-thunk: the emulated GPU's front-end for runtimes that load the thunk as a shared library
//! (ROCr 5.2.3 and 6.1.2), built as `libhsakmt.so` with SONAME `libhsakmt.so.1`. The device itself is
//! [`rprof_emu`]; this crate only translates: it must not hold device state of its own.
//!
//! The exported `hsaKmt*` functions, with `hsakmt.h`'s C signatures, all versioned `HSAKMT_1`: the 42 that ROCr
//! 5.2.3 imports, plus the 16 that ROCr 6.1.2 adds (it drops three of the 42, which stay for 5.2.3): the `_Ext`
//! waits with event ages, `hsaKmtAvailableMemory`, `hsaKmtGetRuntimeCapabilities`, `hsaKmtGetAMDGPUDeviceHandle`,
//! and the debugger, SMI, SPM, ASan and dma-buf entry points, which answer NOT_SUPPORTED as a kernel without those
//! features does. Node properties are written in the grown 6.x layout ([`hsa_sys::hsakmt_v6`]: `NumXcc`,
//! `KFDGpuID`, `FamilyID`, `Integrated` in what 5.2.3 calls reserved bytes).
//!
//! ROCr 6.1.2 also calls libdrm_amdgpu on the handle `hsaKmtGetAMDGPUDeviceHandle` returns; [`drm`] defines those
//! libdrm entry points for the emulator's handles and forwards every other handle to the real libdrm_amdgpu.
//!
//! # Safety
//! These are FFI entry points: pointers come from ROCr, which follows `hsakmt.h`. Each function checks pointers
//! for null before use, runs its body under `catch_unwind` and returns `HSAKMT_STATUS_ERROR` if it panicked.

#![deny(missing_docs)]

use std::panic::{catch_unwind, AssertUnwindSafe};

use hsa_sys::hsakmt::*;
use libc::c_void;

use rprof_emu::clock;
use rprof_emu::cp::QueueSpec;
use rprof_emu::events::EventError;
use rprof_emu::{emulator, Emulator};

pub mod drm;

use hsa_sys::hsakmt_v6 as v6;

fn guard(f: impl FnOnce() -> HSAKMT_STATUS) -> HSAKMT_STATUS {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(HSAKMT_STATUS_ERROR)
}

fn with_emu(f: impl FnOnce(&'static Emulator) -> HSAKMT_STATUS) -> HSAKMT_STATUS {
    guard(|| match emulator() {
        Ok(e) => f(e),
        Err(_) => HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED,
    })
}

fn mem_flags_bits(f: HsaMemFlags) -> u32 {
    // SAFETY: both union members are plain 32-bit integers; every bit pattern is valid.
    unsafe { f.__bindgen_anon_1.Value }
}

fn mem_flags_decoded(bits: u32) -> _HsaMemFlags__bindgen_ty_1__bindgen_ty_1 {
    let u = _HsaMemFlags__bindgen_ty_1 { Value: bits };
    // SAFETY: as above: reading the bitfield view of a u32 is always valid.
    unsafe { u.ui32 }
}

fn event_status(r: Result<(), EventError>) -> HSAKMT_STATUS {
    match r {
        Ok(()) => HSAKMT_STATUS_SUCCESS,
        Err(EventError::Timeout) => HSAKMT_STATUS_WAIT_TIMEOUT,
        Err(EventError::UnknownEvent) => HSAKMT_STATUS_INVALID_HANDLE,
        Err(EventError::OutOfResources) => HSAKMT_STATUS_OUT_OF_RESOURCES,
    }
}

macro_rules! symver {
    ($($name:ident),* $(,)?) => {
        std::arch::global_asm!($(concat!(".symver ", stringify!($name), ", ", stringify!($name), "@@@HSAKMT_1")),*);
    };
}

symver!(
    hsaKmtOpenKFD,
    hsaKmtCloseKFD,
    hsaKmtGetVersion,
    hsaKmtRuntimeEnable,
    hsaKmtRuntimeDisable,
    hsaKmtAcquireSystemProperties,
    hsaKmtReleaseSystemProperties,
    hsaKmtGetNodeProperties,
    hsaKmtGetNodeMemoryProperties,
    hsaKmtGetNodeCacheProperties,
    hsaKmtGetNodeIoLinkProperties,
    hsaKmtGetXNACKMode,
    hsaKmtSetXNACKMode,
    hsaKmtGetClockCounters,
    hsaKmtGetTileConfig,
    hsaKmtCreateEvent,
    hsaKmtDestroyEvent,
    hsaKmtSetEvent,
    hsaKmtWaitOnEvent,
    hsaKmtWaitOnMultipleEvents,
    hsaKmtAllocMemory,
    hsaKmtFreeMemory,
    hsaKmtMapMemoryToGPU,
    hsaKmtMapMemoryToGPUNodes,
    hsaKmtUnmapMemoryToGPU,
    hsaKmtRegisterMemoryWithFlags,
    hsaKmtDeregisterMemory,
    hsaKmtQueryPointerInfo,
    hsaKmtSetMemoryUserData,
    hsaKmtSetMemoryPolicy,
    hsaKmtShareMemory,
    hsaKmtRegisterSharedHandle,
    hsaKmtRegisterSharedHandleToNodes,
    hsaKmtRegisterGraphicsHandleToNodes,
    hsaKmtSVMSetAttr,
    hsaKmtSVMGetAttr,
    hsaKmtSetTrapHandler,
    hsaKmtCreateQueue,
    hsaKmtDestroyQueue,
    hsaKmtUpdateQueue,
    hsaKmtSetQueueCUMask,
    hsaKmtAllocQueueGWS,
    hsaKmtWaitOnEvent_Ext,
    hsaKmtWaitOnMultipleEvents_Ext,
    hsaKmtAvailableMemory,
    hsaKmtGetRuntimeCapabilities,
    hsaKmtGetAMDGPUDeviceHandle,
    hsaKmtExportDMABufHandle,
    hsaKmtDbgEnable,
    hsaKmtDbgDisable,
    hsaKmtDbgGetDeviceData,
    hsaKmtDbgGetQueueData,
    hsaKmtOpenSMI,
    hsaKmtReplaceAsanHeaderPage,
    hsaKmtReturnAsanHeaderPage,
    hsaKmtSPMAcquire,
    hsaKmtSPMRelease,
    hsaKmtSPMSetDestBuffer,
);

/// Opens the emulated KFD (fails if the configuration is bad).
#[no_mangle]
pub extern "C" fn hsaKmtOpenKFD() -> HSAKMT_STATUS {
    with_emu(|_| HSAKMT_STATUS_SUCCESS)
}

/// Closes the emulated KFD (the machine stays alive for a later open).
#[no_mangle]
pub extern "C" fn hsaKmtCloseKFD() -> HSAKMT_STATUS {
    with_emu(|_| HSAKMT_STATUS_SUCCESS)
}

/// KFD interface version: `RPROF_EMU_KFD_VERSION`, 1.14 by default (event ages for ROCr >= 6.1).
///
/// # Safety
/// `v` must be null or point to a writable `HsaVersionInfo`.
#[no_mangle]
pub unsafe extern "C" fn hsaKmtGetVersion(v: *mut HsaVersionInfo) -> HSAKMT_STATUS {
    with_emu(|e| {
        if v.is_null() {
            return HSAKMT_STATUS_INVALID_PARAMETER;
        }
        let (major, minor) = e.config.kfd_version;
        // SAFETY: non-null, caller provides a writable HsaVersionInfo.
        unsafe {
            *v = HsaVersionInfo {
                KernelInterfaceMajorVersion: major,
                KernelInterfaceMinorVersion: minor,
            }
        };
        HSAKMT_STATUS_SUCCESS
    })
}

/// The exception-debugging runtime contract is not emulated: NOT_SUPPORTED, as on kernels without it.
#[no_mangle]
pub extern "C" fn hsaKmtRuntimeEnable(_r_debug: *mut c_void, _setup_ttmp: bool) -> HSAKMT_STATUS {
    guard(|| HSAKMT_STATUS_NOT_SUPPORTED)
}

/// See [`hsaKmtRuntimeEnable`].
#[no_mangle]
pub extern "C" fn hsaKmtRuntimeDisable() -> HSAKMT_STATUS {
    guard(|| HSAKMT_STATUS_NOT_SUPPORTED)
}

/// Number of nodes.
///
/// # Safety
/// `p` must be null or point to a writable `HsaSystemProperties`.
#[no_mangle]
pub unsafe extern "C" fn hsaKmtAcquireSystemProperties(
    p: *mut HsaSystemProperties,
) -> HSAKMT_STATUS {
    with_emu(|e| {
        if p.is_null() {
            return HSAKMT_STATUS_INVALID_PARAMETER;
        }
        let props = HsaSystemProperties {
            NumNodes: e.topology.nodes.len() as u32,
            PlatformOem: 0,
            PlatformId: 0,
            PlatformRev: 0,
        };
        // SAFETY: non-null, caller-provided struct.
        unsafe { *p = props };
        HSAKMT_STATUS_SUCCESS
    })
}

/// Nothing to release.
#[no_mangle]
pub extern "C" fn hsaKmtReleaseSystemProperties() -> HSAKMT_STATUS {
    with_emu(|_| HSAKMT_STATUS_SUCCESS)
}

/// Node properties in the 6.x layout (same size as 5.2.3's; the grown fields sit in 5.2.3's reserved bytes).
pub fn node_properties_v6(e: &Emulator, node: u32) -> Option<v6::HsaNodeProperties> {
    let props = e.topology.node_properties(node)?;
    // SAFETY: both types are bindgen layouts of the same C struct, 356 bytes (checked by `transmute` and by the
    // layout tests of hsa-sys against both headers), made only of integers, integer arrays and integer unions, so
    // every byte pattern of one is a valid value of the other; 6.x names fields that 5.2.3 keeps reserved.
    let mut p: v6::HsaNodeProperties = unsafe { std::mem::transmute(props) };
    let gpu = e.topology.node(node).and_then(|n| n.gpu).is_some();
    p.NumXcc = u32::from(gpu);
    p.KFDGpuID = e.topology.kfd_gpu_id(node);
    p.FamilyID = e.topology.family_id(node);
    p.Integrated = u8::from(gpu && p.NumCPUCores > 0);
    Some(p)
}

/// Node properties.
///
/// # Safety
/// `p` must be null or point to a writable `HsaNodeProperties`.
#[no_mangle]
pub unsafe extern "C" fn hsaKmtGetNodeProperties(
    node: u32,
    p: *mut v6::HsaNodeProperties,
) -> HSAKMT_STATUS {
    with_emu(|e| {
        if p.is_null() {
            return HSAKMT_STATUS_INVALID_PARAMETER;
        }
        let Some(props) = node_properties_v6(e, node) else {
            return HSAKMT_STATUS_INVALID_NODE_UNIT;
        };
        // SAFETY: non-null, caller-provided struct.
        unsafe { *p = props };
        HSAKMT_STATUS_SUCCESS
    })
}

fn write_array<T: Copy>(items: &[T], n: u32, out: *mut T) -> HSAKMT_STATUS {
    if out.is_null() && n > 0 {
        return HSAKMT_STATUS_INVALID_PARAMETER;
    }
    for (i, item) in items.iter().take(n as usize).enumerate() {
        // SAFETY: the caller provides room for `n` elements and `i < n`.
        unsafe { out.add(i).write(*item) };
    }
    HSAKMT_STATUS_SUCCESS
}

/// Memory banks of a node.
///
/// # Safety
/// `out` must have room for `n` elements.
#[no_mangle]
pub unsafe extern "C" fn hsaKmtGetNodeMemoryProperties(
    node: u32,
    n: u32,
    out: *mut HsaMemoryProperties,
) -> HSAKMT_STATUS {
    with_emu(|e| {
        if e.topology.node(node).is_none() {
            return HSAKMT_STATUS_INVALID_NODE_UNIT;
        }
        write_array(&e.topology.memory_banks(node), n, out)
    })
}

/// Caches of a node.
///
/// # Safety
/// `out` must have room for `n` elements.
#[no_mangle]
pub unsafe extern "C" fn hsaKmtGetNodeCacheProperties(
    node: u32,
    _processor_id: u32,
    n: u32,
    out: *mut HsaCacheProperties,
) -> HSAKMT_STATUS {
    with_emu(|e| {
        if e.topology.node(node).is_none() {
            return HSAKMT_STATUS_INVALID_NODE_UNIT;
        }
        write_array(&e.topology.caches(node), n, out)
    })
}

/// IO links of a node.
///
/// # Safety
/// `out` must have room for `n` elements.
#[no_mangle]
pub unsafe extern "C" fn hsaKmtGetNodeIoLinkProperties(
    node: u32,
    n: u32,
    out: *mut HsaIoLinkProperties,
) -> HSAKMT_STATUS {
    with_emu(|e| {
        if e.topology.node(node).is_none() {
            return HSAKMT_STATUS_INVALID_NODE_UNIT;
        }
        write_array(&e.topology.io_links(node), n, out)
    })
}

/// XNACK is off.
///
/// # Safety
/// `enable` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn hsaKmtGetXNACKMode(enable: *mut i32) -> HSAKMT_STATUS {
    with_emu(|_| {
        if enable.is_null() {
            return HSAKMT_STATUS_INVALID_PARAMETER;
        }
        // SAFETY: non-null, caller-provided.
        unsafe { *enable = 0 };
        HSAKMT_STATUS_SUCCESS
    })
}

/// Only "off" is supported.
#[no_mangle]
pub extern "C" fn hsaKmtSetXNACKMode(enable: i32) -> HSAKMT_STATUS {
    guard(|| {
        if enable == 0 {
            HSAKMT_STATUS_SUCCESS
        } else {
            HSAKMT_STATUS_NOT_SUPPORTED
        }
    })
}

/// GPU (100 MHz + offset), CPU (`CLOCK_MONOTONIC_RAW`) and system (`CLOCK_BOOTTIME`, 1 GHz) clocks.
///
/// # Safety
/// `c` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn hsaKmtGetClockCounters(
    node: u32,
    c: *mut HsaClockCounters,
) -> HSAKMT_STATUS {
    with_emu(|e| {
        if c.is_null() {
            return HSAKMT_STATUS_INVALID_PARAMETER;
        }
        if e.topology.node(node).is_none() {
            return HSAKMT_STATUS_INVALID_NODE_UNIT;
        }
        let sys = clock::now_ns();
        let counters = HsaClockCounters {
            GPUClockCounter: clock::gpu_ticks_at(sys),
            CPUClockCounter: clock::cpu_ns(),
            SystemClockCounter: sys,
            SystemClockFrequencyHz: clock::SYSTEM_CLOCK_HZ,
        };
        // SAFETY: non-null, caller-provided.
        unsafe { *c = counters };
        HSAKMT_STATUS_SUCCESS
    })
}

/// Tile configuration (zeroed tables, Vega10-like `GbAddrConfig`), as ROCr's image support needs.
///
/// # Safety
/// `config` must be null or a valid `HsaGpuTileConfig` whose arrays have the advertised capacity.
#[no_mangle]
pub unsafe extern "C" fn hsaKmtGetTileConfig(
    node: u32,
    config: *mut HsaGpuTileConfig,
) -> HSAKMT_STATUS {
    with_emu(|e| {
        if config.is_null() {
            return HSAKMT_STATUS_INVALID_PARAMETER;
        }
        if e.topology.node(node).and_then(|n| n.gpu).is_none() {
            return HSAKMT_STATUS_INVALID_NODE_UNIT;
        }
        // SAFETY: non-null; the caller owns the struct and the arrays it points to, sized by the Num* fields.
        unsafe {
            let c = &mut *config;
            if !c.TileConfig.is_null() {
                std::ptr::write_bytes(c.TileConfig, 0, c.NumTileConfigs as usize);
            }
            if !c.MacroTileConfig.is_null() {
                std::ptr::write_bytes(c.MacroTileConfig, 0, c.NumMacroTileConfigs as usize);
            }
            c.GbAddrConfig = rprof_emu::topology::GB_ADDR_CONFIG;
            c.NumBanks = 16;
            c.NumRanks = 1;
        }
        HSAKMT_STATUS_SUCCESS
    })
}

/// Creates an event (signal events get a mailbox slot; at most 4096 of them).
///
/// # Safety
/// `desc` must be null or valid; `event` must be a writable `HsaEvent*` slot.
#[no_mangle]
pub unsafe extern "C" fn hsaKmtCreateEvent(
    desc: *mut HsaEventDescriptor,
    manual_reset: bool,
    is_signaled: bool,
    event: *mut *mut HsaEvent,
) -> HSAKMT_STATUS {
    with_emu(|e| {
        if desc.is_null() || event.is_null() {
            return HSAKMT_STATUS_INVALID_PARAMETER;
        }
        // SAFETY: non-null descriptor from the caller.
        let ty = unsafe { (*desc).EventType };
        let signal = ty == HSA_EVENTTYPE_SIGNAL || ty == HSA_EVENTTYPE_DEBUG_EVENT;
        let (id, mailbox) = match e.events.create(signal, manual_reset, is_signaled) {
            Ok(v) => v,
            Err(err) => return event_status(Err(err)),
        };
        let mut ev = Box::<HsaEvent>::default();
        ev.EventId = id;
        ev.EventData.EventType = ty;
        ev.EventData.HWData1 = u64::from(id);
        ev.EventData.HWData2 = mailbox;
        ev.EventData.HWData3 = if signal { 8 } else { 0 };
        // SAFETY: non-null out pointer from the caller; ownership of the box passes to the caller until DestroyEvent.
        unsafe { *event = Box::into_raw(ev) };
        HSAKMT_STATUS_SUCCESS
    })
}

/// Destroys an event created by [`hsaKmtCreateEvent`].
///
/// # Safety
/// `event` must be null or a pointer returned by [`hsaKmtCreateEvent`] and not yet destroyed.
#[no_mangle]
pub unsafe extern "C" fn hsaKmtDestroyEvent(event: *mut HsaEvent) -> HSAKMT_STATUS {
    with_emu(|e| {
        if event.is_null() {
            return HSAKMT_STATUS_INVALID_HANDLE;
        }
        // SAFETY: per the contract the pointer came from Box::into_raw in hsaKmtCreateEvent.
        let ev = unsafe { Box::from_raw(event) };
        event_status(e.events.destroy(ev.EventId))
    })
}

/// Signals an event.
///
/// # Safety
/// `event` must be null or a live event.
#[no_mangle]
pub unsafe extern "C" fn hsaKmtSetEvent(event: *mut HsaEvent) -> HSAKMT_STATUS {
    with_emu(|e| {
        if event.is_null() {
            return HSAKMT_STATUS_INVALID_HANDLE;
        }
        // SAFETY: live event per the contract.
        event_status(e.events.fire(unsafe { (*event).EventId }))
    })
}

/// Waits for one event (timeout in ms; `0xFFFFFFFF` = forever).
///
/// # Safety
/// `event` must be null or a live event.
#[no_mangle]
pub unsafe extern "C" fn hsaKmtWaitOnEvent(event: *mut HsaEvent, ms: u32) -> HSAKMT_STATUS {
    let mut one = [event];
    // SAFETY: a one-element array of the caller's event pointer.
    unsafe { hsaKmtWaitOnMultipleEvents(one.as_mut_ptr(), 1, true, ms) }
}

/// Waits for any (or all) of `n` events.
///
/// # Safety
/// `events` must point to `n` live event pointers.
#[no_mangle]
pub unsafe extern "C" fn hsaKmtWaitOnMultipleEvents(
    events: *mut *mut HsaEvent,
    n: u32,
    all: bool,
    ms: u32,
) -> HSAKMT_STATUS {
    // SAFETY: forwarded contract; no ages.
    unsafe { hsaKmtWaitOnMultipleEvents_Ext(events, n, all, ms, std::ptr::null_mut()) }
}

/// [`hsaKmtWaitOnEvent`] with the event's age (KFD >= 1.14): `*age` is the age the caller saw last (1 at first,
/// 0 = not tracked); a different current age returns at once, and the current age is written back.
///
/// # Safety
/// `event` must be null or a live event; `age` null or writable.
#[no_mangle]
pub unsafe extern "C" fn hsaKmtWaitOnEvent_Ext(
    event: *mut HsaEvent,
    ms: u32,
    age: *mut u64,
) -> HSAKMT_STATUS {
    let mut one = [event];
    // SAFETY: a one-element array of the caller's event pointer; `age` covers one event.
    unsafe { hsaKmtWaitOnMultipleEvents_Ext(one.as_mut_ptr(), 1, true, ms, age) }
}

/// [`hsaKmtWaitOnMultipleEvents`] with ages: `ages` is null or holds one age per event, used (and written back)
/// for signal events only, as the thunk does.
///
/// # Safety
/// `events` must point to `n` live event pointers; `ages` must be null or hold `n` writable ages.
#[no_mangle]
pub unsafe extern "C" fn hsaKmtWaitOnMultipleEvents_Ext(
    events: *mut *mut HsaEvent,
    n: u32,
    all: bool,
    ms: u32,
    ages: *mut u64,
) -> HSAKMT_STATUS {
    with_emu(|e| {
        if events.is_null() || n == 0 {
            return HSAKMT_STATUS_INVALID_PARAMETER;
        }
        let mut ids = Vec::with_capacity(n as usize);
        let mut last = Vec::with_capacity(n as usize);
        for i in 0..n as usize {
            // SAFETY: `events` holds `n` pointers (contract).
            let ev = unsafe { *events.add(i) };
            if ev.is_null() {
                return HSAKMT_STATUS_INVALID_HANDLE;
            }
            // SAFETY: live event (contract).
            let (id, ty) = unsafe { ((*ev).EventId, (*ev).EventData.EventType) };
            ids.push(id);
            let aged = !ages.is_null() && ty == HSA_EVENTTYPE_SIGNAL;
            // SAFETY: `ages` holds `n` entries when non-null (contract).
            last.push(if aged { unsafe { *ages.add(i) } } else { 0 });
        }
        let r = e.events.wait_aged(&ids, &mut last, all, ms);
        if !ages.is_null() {
            for (i, age) in last.iter().enumerate() {
                if *age != 0 {
                    // SAFETY: as above; only signal events' entries (the non-zero ones) are written.
                    unsafe { *ages.add(i) = *age };
                }
            }
        }
        event_status(r)
    })
}

/// Allocates host-backed memory for any node (`MAP_NORESERVE`; executable when `ExecuteAccess`).
///
/// # Safety
/// `addr` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn hsaKmtAllocMemory(
    node: u32,
    size: u64,
    flags: HsaMemFlags,
    addr: *mut *mut c_void,
) -> HSAKMT_STATUS {
    with_emu(|e| {
        if addr.is_null() || size == 0 {
            return HSAKMT_STATUS_INVALID_PARAMETER;
        }
        if e.topology.node(node).is_none() {
            return HSAKMT_STATUS_INVALID_NODE_UNIT;
        }
        let bits = mem_flags_bits(flags);
        let exec = mem_flags_decoded(bits).ExecuteAccess() != 0;
        match e.memory.allocate(node, size as usize, bits, exec) {
            Some(p) => {
                // SAFETY: non-null out pointer.
                unsafe { *addr = p as *mut c_void };
                HSAKMT_STATUS_SUCCESS
            }
            None => HSAKMT_STATUS_NO_MEMORY,
        }
    })
}

/// Frees memory from [`hsaKmtAllocMemory`].
#[no_mangle]
pub extern "C" fn hsaKmtFreeMemory(addr: *mut c_void, _size: u64) -> HSAKMT_STATUS {
    with_emu(|e| {
        if e.memory.free(addr as usize) {
            HSAKMT_STATUS_SUCCESS
        } else {
            HSAKMT_STATUS_INVALID_PARAMETER
        }
    })
}

/// Maps to the GPU: the GPU address is the host address.
///
/// # Safety
/// `alt` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn hsaKmtMapMemoryToGPU(
    addr: *mut c_void,
    _size: u64,
    alt: *mut u64,
) -> HSAKMT_STATUS {
    with_emu(|e| {
        let gpus: Vec<u32> = e.topology.gpu_nodes().map(|(id, _)| id).collect();
        if !e.memory.map_to_nodes(addr as usize, &gpus) {
            return HSAKMT_STATUS_INVALID_PARAMETER;
        }
        if !alt.is_null() {
            // SAFETY: non-null out pointer.
            unsafe { *alt = addr as u64 };
        }
        HSAKMT_STATUS_SUCCESS
    })
}

/// Maps to the given nodes: the GPU address is the host address.
///
/// # Safety
/// `alt` must be null or writable; `nodes` must hold `n` node ids.
#[no_mangle]
pub unsafe extern "C" fn hsaKmtMapMemoryToGPUNodes(
    addr: *mut c_void,
    _size: u64,
    alt: *mut u64,
    _flags: HsaMemMapFlags,
    n: u64,
    nodes: *mut u32,
) -> HSAKMT_STATUS {
    with_emu(|e| {
        let list: Vec<u32> = if nodes.is_null() {
            Vec::new()
        } else {
            // SAFETY: the caller passes `n` node ids.
            unsafe { std::slice::from_raw_parts(nodes, n as usize) }.to_vec()
        };
        if !e.memory.map_to_nodes(addr as usize, &list) {
            return HSAKMT_STATUS_INVALID_PARAMETER;
        }
        if !alt.is_null() {
            // SAFETY: non-null out pointer.
            unsafe { *alt = addr as u64 };
        }
        HSAKMT_STATUS_SUCCESS
    })
}

/// Unmaps from the GPU (records it).
#[no_mangle]
pub extern "C" fn hsaKmtUnmapMemoryToGPU(addr: *mut c_void) -> HSAKMT_STATUS {
    with_emu(|e| {
        e.memory.unmap(addr as usize);
        HSAKMT_STATUS_SUCCESS
    })
}

/// Registers user memory (`hsa_amd_memory_lock`).
#[no_mangle]
pub extern "C" fn hsaKmtRegisterMemoryWithFlags(
    addr: *mut c_void,
    size: u64,
    flags: HsaMemFlags,
) -> HSAKMT_STATUS {
    with_emu(|e| {
        if e.memory
            .register(addr as usize, size as usize, mem_flags_bits(flags))
        {
            HSAKMT_STATUS_SUCCESS
        } else {
            HSAKMT_STATUS_INVALID_PARAMETER
        }
    })
}

/// Deregisters user memory.
#[no_mangle]
pub extern "C" fn hsaKmtDeregisterMemory(addr: *mut c_void) -> HSAKMT_STATUS {
    with_emu(|e| {
        if e.memory.deregister(addr as usize) {
            HSAKMT_STATUS_SUCCESS
        } else {
            HSAKMT_STATUS_MEMORY_NOT_REGISTERED
        }
    })
}

/// Describes the tracked range containing `ptr`.
///
/// # Safety
/// `info` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn hsaKmtQueryPointerInfo(
    ptr: *const c_void,
    info: *mut HsaPointerInfo,
) -> HSAKMT_STATUS {
    with_emu(|e| {
        if info.is_null() {
            return HSAKMT_STATUS_INVALID_PARAMETER;
        }
        let view = e.memory.view();
        let mut out = HsaPointerInfo::default();
        let status = match view.find(ptr as usize) {
            None => {
                out.Type = HSA_POINTER_UNKNOWN;
                HSAKMT_STATUS_ERROR
            }
            Some(r) => {
                out.Type = match r.kind {
                    rprof_emu::memory::RangeKind::Allocated => HSA_POINTER_ALLOCATED,
                    rprof_emu::memory::RangeKind::RegisteredUser => HSA_POINTER_REGISTERED_USER,
                };
                out.Node = r.node;
                out.MemFlags.__bindgen_anon_1.Value = r.flags;
                out.CPUAddress = r.base as *mut c_void;
                out.GPUAddress = r.base as u64;
                out.SizeInBytes = r.size as u64;
                out.NMappedNodes = r.mapped_nodes.len() as u32;
                out.MappedNodes = r.mapped_nodes.as_ptr();
                out.NRegisteredNodes = out.NMappedNodes;
                out.RegisteredNodes = r.mapped_nodes.as_ptr();
                out.UserData = r.user_data as *mut c_void;
                HSAKMT_STATUS_SUCCESS
            }
        };
        // SAFETY: non-null out pointer.
        unsafe { *info = out };
        status
    })
}

/// Attaches user data to a tracked range.
#[no_mangle]
pub extern "C" fn hsaKmtSetMemoryUserData(ptr: *const c_void, data: *mut c_void) -> HSAKMT_STATUS {
    with_emu(|e| {
        if e.memory.set_user_data(ptr as usize, data as usize) {
            HSAKMT_STATUS_SUCCESS
        } else {
            HSAKMT_STATUS_INVALID_PARAMETER
        }
    })
}

/// Only used for Kaveri; accepted and ignored.
#[no_mangle]
pub extern "C" fn hsaKmtSetMemoryPolicy(
    _node: u32,
    _default: u32,
    _alt: u32,
    _addr: *mut c_void,
    _size: u64,
) -> HSAKMT_STATUS {
    guard(|| HSAKMT_STATUS_SUCCESS)
}

/// IPC is not emulated.
#[no_mangle]
pub extern "C" fn hsaKmtShareMemory(
    _addr: *mut c_void,
    _size: u64,
    _handle: *mut HsaSharedMemoryHandle,
) -> HSAKMT_STATUS {
    guard(|| HSAKMT_STATUS_NOT_SUPPORTED)
}

/// IPC is not emulated.
#[no_mangle]
pub extern "C" fn hsaKmtRegisterSharedHandle(
    _handle: *const HsaSharedMemoryHandle,
    _addr: *mut *mut c_void,
    _size: *mut u64,
) -> HSAKMT_STATUS {
    guard(|| HSAKMT_STATUS_NOT_SUPPORTED)
}

/// IPC is not emulated.
#[no_mangle]
pub extern "C" fn hsaKmtRegisterSharedHandleToNodes(
    _handle: *const HsaSharedMemoryHandle,
    _addr: *mut *mut c_void,
    _size: *mut u64,
    _n: u64,
    _nodes: *mut u32,
) -> HSAKMT_STATUS {
    guard(|| HSAKMT_STATUS_NOT_SUPPORTED)
}

/// Graphics interop is not emulated.
#[no_mangle]
pub extern "C" fn hsaKmtRegisterGraphicsHandleToNodes(
    _handle: u64,
    _info: *mut HsaGraphicsResourceInfo,
    _n: u64,
    _nodes: *mut u32,
) -> HSAKMT_STATUS {
    guard(|| HSAKMT_STATUS_NOT_SUPPORTED)
}

/// SVM is not emulated.
#[no_mangle]
pub extern "C" fn hsaKmtSVMSetAttr(
    _start: *mut c_void,
    _size: u64,
    _n: u32,
    _attrs: *mut HSA_SVM_ATTRIBUTE,
) -> HSAKMT_STATUS {
    guard(|| HSAKMT_STATUS_NOT_SUPPORTED)
}

/// SVM is not emulated.
#[no_mangle]
pub extern "C" fn hsaKmtSVMGetAttr(
    _start: *mut c_void,
    _size: u64,
    _n: u32,
    _attrs: *mut HSA_SVM_ATTRIBUTE,
) -> HSAKMT_STATUS {
    guard(|| HSAKMT_STATUS_NOT_SUPPORTED)
}

/// Recorded only: the emulator runs no shader code.
#[no_mangle]
pub extern "C" fn hsaKmtSetTrapHandler(
    node: u32,
    _tba: *mut c_void,
    _tba_size: u64,
    _tma: *mut c_void,
    _tma_size: u64,
) -> HSAKMT_STATUS {
    with_emu(|e| {
        if e.topology.node(node).is_some() {
            HSAKMT_STATUS_SUCCESS
        } else {
            HSAKMT_STATUS_INVALID_NODE_UNIT
        }
    })
}

/// Creates an AQL compute queue served by the command processor. SDMA queues are refused, so ROCr falls back
/// to blit kernels (which the CP recognises and executes).
///
/// # Safety
/// `res` must be null or a valid `HsaQueueResource` whose `Queue_read_ptr_aql` points into ROCr's `amd_queue_t`.
#[no_mangle]
pub unsafe extern "C" fn hsaKmtCreateQueue(
    node: u32,
    ty: HSA_QUEUE_TYPE,
    _percentage: u32,
    _priority: HSA_QUEUE_PRIORITY,
    ring: *mut c_void,
    ring_bytes: u64,
    _event: *mut HsaEvent,
    res: *mut HsaQueueResource,
) -> HSAKMT_STATUS {
    with_emu(|e| {
        if res.is_null() || ring.is_null() {
            return HSAKMT_STATUS_INVALID_PARAMETER;
        }
        if e.topology.node(node).and_then(|n| n.gpu).is_none() {
            return HSAKMT_STATUS_INVALID_NODE_UNIT;
        }
        if ty == HSA_QUEUE_SDMA && e.config.sdma {
            let Some((id, doorbell, rptr, wptr)) =
                e.cp.create_sdma_queue(e, node, ring as usize, ring_bytes as usize)
            else {
                return HSAKMT_STATUS_OUT_OF_RESOURCES;
            };
            // SAFETY: non-null resource struct from ROCr; KFD fills these outputs for SDMA queues.
            unsafe {
                (*res).QueueId = id;
                (*res).__bindgen_anon_1.Queue_DoorBell_aql = doorbell as *mut u64;
                (*res).__bindgen_anon_3.Queue_read_ptr_aql = rptr as *mut u64;
                (*res).__bindgen_anon_2.Queue_write_ptr_aql = wptr as *mut u64;
            }
            return HSAKMT_STATUS_SUCCESS;
        }
        if ty != HSA_QUEUE_COMPUTE_AQL {
            return HSAKMT_STATUS_NOT_SUPPORTED;
        }
        // SAFETY: non-null resource struct from ROCr; reading a pointer-sized union member.
        let read_ptr = unsafe { (*res).__bindgen_anon_3.Queue_read_ptr_aql } as usize;
        let spec = QueueSpec {
            node,
            ring: ring as usize,
            ring_bytes: ring_bytes as usize,
            read_ptr,
        };
        let Some((id, doorbell)) = e.cp.create_queue(e, spec) else {
            return HSAKMT_STATUS_OUT_OF_RESOURCES;
        };
        // SAFETY: non-null resource struct from ROCr.
        unsafe {
            (*res).QueueId = id;
            (*res).__bindgen_anon_1.Queue_DoorBell_aql = doorbell as *mut u64;
        }
        HSAKMT_STATUS_SUCCESS
    })
}

/// Destroys a queue; the CP no longer touches its ring when this returns.
#[no_mangle]
pub extern "C" fn hsaKmtDestroyQueue(id: HSA_QUEUEID) -> HSAKMT_STATUS {
    with_emu(|e| {
        if e.cp.destroy_queue(id) {
            HSAKMT_STATUS_SUCCESS
        } else {
            HSAKMT_STATUS_INVALID_PARAMETER
        }
    })
}

/// Suspends (percentage 0) or resumes a queue.
#[no_mangle]
pub extern "C" fn hsaKmtUpdateQueue(
    id: HSA_QUEUEID,
    percentage: u32,
    _priority: HSA_QUEUE_PRIORITY,
    _ring: *mut c_void,
    _size: u64,
    _event: *mut HsaEvent,
) -> HSAKMT_STATUS {
    with_emu(|e| {
        if e.cp.update_queue(id, percentage) {
            HSAKMT_STATUS_SUCCESS
        } else {
            HSAKMT_STATUS_INVALID_PARAMETER
        }
    })
}

/// CU masks are accepted and not modelled.
#[no_mangle]
pub extern "C" fn hsaKmtSetQueueCUMask(
    _id: HSA_QUEUEID,
    _count: u32,
    _mask: *mut u32,
) -> HSAKMT_STATUS {
    guard(|| HSAKMT_STATUS_SUCCESS)
}

/// No GWS (`NumGws = 0`).
#[no_mangle]
pub extern "C" fn hsaKmtAllocQueueGWS(
    _id: HSA_QUEUEID,
    _n: u32,
    _first: *mut u32,
) -> HSAKMT_STATUS {
    guard(|| HSAKMT_STATUS_NOT_SUPPORTED)
}

/// Free frame-buffer bytes of a GPU node: its VRAM minus the live allocations made for it (ROCr 6.1.2 asserts
/// this succeeds when it reserves scratch at the first queue, and reports it as `HSA_AMD_AGENT_INFO_MEMORY_AVAIL`).
///
/// # Safety
/// `bytes` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn hsaKmtAvailableMemory(node: u32, bytes: *mut u64) -> HSAKMT_STATUS {
    with_emu(|e| {
        if bytes.is_null() {
            return HSAKMT_STATUS_INVALID_PARAMETER;
        }
        if e.topology.node(node).and_then(|n| n.gpu).is_none() {
            return HSAKMT_STATUS_INVALID_NODE_UNIT;
        }
        let used = e.memory.allocated_bytes_on(node) as u64;
        // SAFETY: non-null out pointer.
        unsafe { *bytes = e.topology.vram_bytes.saturating_sub(used) };
        HSAKMT_STATUS_SUCCESS
    })
}

/// No runtime capabilities (no core dump): always writes 0, because ROCr 6.1.2 reads the mask uninitialised
/// otherwise.
///
/// # Safety
/// `caps` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn hsaKmtGetRuntimeCapabilities(caps: *mut u32) -> HSAKMT_STATUS {
    guard(|| {
        if caps.is_null() {
            return HSAKMT_STATUS_INVALID_PARAMETER;
        }
        // SAFETY: non-null out pointer.
        unsafe { *caps = 0 };
        HSAKMT_STATUS_SUCCESS
    })
}

/// The libdrm_amdgpu device handle of a GPU node: an emulator-owned token that [`drm`]'s libdrm entry points
/// recognise.
///
/// # Safety
/// `handle` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn hsaKmtGetAMDGPUDeviceHandle(
    node: u32,
    handle: *mut v6::HsaAMDGPUDeviceHandle,
) -> HSAKMT_STATUS {
    with_emu(|e| {
        if handle.is_null() {
            return HSAKMT_STATUS_INVALID_PARAMETER;
        }
        if e.topology.node(node).and_then(|n| n.gpu).is_none() {
            return HSAKMT_STATUS_INVALID_NODE_UNIT;
        }
        let Some(h) = drm::handle_of_node(node) else {
            return HSAKMT_STATUS_NO_MEMORY;
        };
        // SAFETY: non-null out pointer.
        unsafe { *handle = h };
        HSAKMT_STATUS_SUCCESS
    })
}

/// dma-buf export (IPC, KFD >= 1.12) is not emulated.
#[no_mangle]
pub extern "C" fn hsaKmtExportDMABufHandle(
    _addr: *mut c_void,
    _size: u64,
    _fd: *mut i32,
    _offset: *mut u64,
) -> HSAKMT_STATUS {
    guard(|| HSAKMT_STATUS_NOT_SUPPORTED)
}

/// The debugger interface (core dumps) is not emulated.
#[no_mangle]
pub extern "C" fn hsaKmtDbgEnable(_info: *mut *mut c_void, _size: *mut u32) -> HSAKMT_STATUS {
    guard(|| HSAKMT_STATUS_NOT_SUPPORTED)
}

/// See [`hsaKmtDbgEnable`].
#[no_mangle]
pub extern "C" fn hsaKmtDbgDisable() -> HSAKMT_STATUS {
    guard(|| HSAKMT_STATUS_NOT_SUPPORTED)
}

/// See [`hsaKmtDbgEnable`].
#[no_mangle]
pub extern "C" fn hsaKmtDbgGetDeviceData(
    _data: *mut *mut c_void,
    _n: *mut u32,
    _entry_size: *mut u32,
) -> HSAKMT_STATUS {
    guard(|| HSAKMT_STATUS_NOT_SUPPORTED)
}

/// See [`hsaKmtDbgEnable`].
#[no_mangle]
pub extern "C" fn hsaKmtDbgGetQueueData(
    _data: *mut *mut c_void,
    _n: *mut u32,
    _entry_size: *mut u32,
    _suspend: bool,
) -> HSAKMT_STATUS {
    guard(|| HSAKMT_STATUS_NOT_SUPPORTED)
}

/// SMI events (`HSA_SVM_PROFILE`) are not emulated.
#[no_mangle]
pub extern "C" fn hsaKmtOpenSMI(_node: u32, _fd: *mut i32) -> HSAKMT_STATUS {
    guard(|| HSAKMT_STATUS_NOT_SUPPORTED)
}

/// ASan header pages are only for ASan builds of the runtime: NOT_SUPPORTED, as a non-ASan thunk answers.
#[no_mangle]
pub extern "C" fn hsaKmtReplaceAsanHeaderPage(_addr: *mut c_void) -> HSAKMT_STATUS {
    guard(|| HSAKMT_STATUS_NOT_SUPPORTED)
}

/// See [`hsaKmtReplaceAsanHeaderPage`].
#[no_mangle]
pub extern "C" fn hsaKmtReturnAsanHeaderPage(_addr: *mut c_void) -> HSAKMT_STATUS {
    guard(|| HSAKMT_STATUS_NOT_SUPPORTED)
}

/// Streaming performance monitors are not emulated.
#[no_mangle]
pub extern "C" fn hsaKmtSPMAcquire(_node: u32) -> HSAKMT_STATUS {
    guard(|| HSAKMT_STATUS_NOT_SUPPORTED)
}

/// See [`hsaKmtSPMAcquire`].
#[no_mangle]
pub extern "C" fn hsaKmtSPMRelease(_node: u32) -> HSAKMT_STATUS {
    guard(|| HSAKMT_STATUS_NOT_SUPPORTED)
}

/// See [`hsaKmtSPMAcquire`].
#[no_mangle]
pub extern "C" fn hsaKmtSPMSetDestBuffer(
    _node: u32,
    _size: u32,
    _timeout: *mut u32,
    _copied: *mut u32,
    _dest: *mut c_void,
    _data_loss: *mut bool,
) -> HSAKMT_STATUS {
    guard(|| HSAKMT_STATUS_NOT_SUPPORTED)
}

#[cfg(test)]
mod tests {
    //! The 6.1.2 entry points called in-process, as ROCr calls them (default configuration: a CPU node and one
    //! gfx90a).
    use super::*;

    fn descriptor(ty: HSA_EVENTTYPE) -> HsaEventDescriptor {
        HsaEventDescriptor {
            EventType: ty,
            NodeId: 0,
            SyncVar: HsaSyncVar::default(),
        }
    }

    fn create(ty: HSA_EVENTTYPE, manual: bool) -> *mut HsaEvent {
        let mut d = descriptor(ty);
        let mut ev = std::ptr::null_mut();
        // SAFETY: valid descriptor and out pointer.
        let s = unsafe { hsaKmtCreateEvent(&mut d, manual, false, &mut ev) };
        assert_eq!(s, HSAKMT_STATUS_SUCCESS);
        ev
    }

    #[test]
    fn ext_waits_track_ages_of_signal_events_only() {
        let sig = create(HSA_EVENTTYPE_SIGNAL, false);
        let mem = create(HSA_EVENTTYPE_MEMORY, true);
        // ROCr's first sleep passes age 1: nothing fired yet, so the wait times out and the age stays.
        let mut age = 1u64;
        // SAFETY: live events, writable age.
        let got = unsafe { hsaKmtWaitOnEvent_Ext(sig, 0, &mut age) };
        assert_eq!(got, HSAKMT_STATUS_WAIT_TIMEOUT);
        assert_eq!(age, 1);
        // SAFETY: live event.
        let got = unsafe { hsaKmtSetEvent(sig) };
        assert_eq!(got, HSAKMT_STATUS_SUCCESS);
        // SAFETY: as above.
        let got = unsafe { hsaKmtWaitOnEvent_Ext(sig, 0, &mut age) };
        assert_eq!(got, HSAKMT_STATUS_SUCCESS);
        assert_eq!(age, 2);
        // The fire was consumed; with the current age the next wait sleeps (times out).
        // SAFETY: as above.
        let got = unsafe { hsaKmtWaitOnEvent_Ext(sig, 1, &mut age) };
        assert_eq!(got, HSAKMT_STATUS_WAIT_TIMEOUT);
        // Wait-any on a memory event and the signal event with its current age: the memory event's entry is not
        // an age (ages are for signal events only), so its stale-looking 1 neither wakes nor is written.
        let mut ages = [1u64, 2];
        let mut events = [mem, sig];
        // SAFETY: two live events, two writable ages.
        let s = unsafe {
            hsaKmtWaitOnMultipleEvents_Ext(events.as_mut_ptr(), 2, false, 0, ages.as_mut_ptr())
        };
        assert_eq!(s, HSAKMT_STATUS_WAIT_TIMEOUT);
        assert_eq!(ages, [1, 2]);
        // A stale age wakes a waiter at once although nothing is signaled any more; the current age comes back.
        let mut ages = [1u64, 77];
        let mut events = [sig, mem];
        // SAFETY: as above.
        let s = unsafe {
            hsaKmtWaitOnMultipleEvents_Ext(events.as_mut_ptr(), 2, false, 0, ages.as_mut_ptr())
        };
        assert_eq!(s, HSAKMT_STATUS_SUCCESS);
        assert_eq!(ages, [2, 77]);
        // A null age array is the pre-1.14 wait.
        // SAFETY: as above.
        let s = unsafe {
            hsaKmtWaitOnMultipleEvents_Ext(events.as_mut_ptr(), 2, false, 0, std::ptr::null_mut())
        };
        assert_eq!(s, HSAKMT_STATUS_WAIT_TIMEOUT);
        for ev in [sig, mem] {
            // SAFETY: created above, destroyed once.
            let got = unsafe { hsaKmtDestroyEvent(ev) };
            assert_eq!(got, HSAKMT_STATUS_SUCCESS);
        }
    }

    #[test]
    fn version_capabilities_and_available_memory() {
        let mut v = HsaVersionInfo::default();
        // SAFETY: writable struct.
        let got = unsafe { hsaKmtGetVersion(&mut v) };
        assert_eq!(got, HSAKMT_STATUS_SUCCESS);
        assert_eq!(
            (v.KernelInterfaceMajorVersion, v.KernelInterfaceMinorVersion),
            (1, 14)
        );
        let mut caps = 0xdead_beef_u32;
        // SAFETY: writable mask.
        let got = unsafe { hsaKmtGetRuntimeCapabilities(&mut caps) };
        assert_eq!(got, HSAKMT_STATUS_SUCCESS);
        assert_eq!(caps, 0);
        let e = emulator().unwrap();
        let mut free = 0u64;
        // SAFETY: writable out value.
        let got = unsafe { hsaKmtAvailableMemory(1, &mut free) };
        assert_eq!(got, HSAKMT_STATUS_SUCCESS);
        assert_eq!(
            free,
            e.topology.vram_bytes - e.memory.allocated_bytes_on(1) as u64
        );
        assert!(
            free > (8 * 140) << 20,
            "ROCr 6.1.2 reserves scratch above this"
        );
        // SAFETY: as above.
        let got = unsafe { hsaKmtAvailableMemory(0, &mut free) };
        assert_eq!(got, HSAKMT_STATUS_INVALID_NODE_UNIT);
    }

    #[test]
    fn node_properties_have_the_6x_fields_and_a_device_handle() {
        let mut p = v6::HsaNodeProperties::default();
        // SAFETY: writable struct of the 6.x layout.
        let got = unsafe { hsaKmtGetNodeProperties(1, &mut p) };
        assert_eq!(got, HSAKMT_STATUS_SUCCESS);
        assert_eq!(p.NumXcc, 1);
        assert_eq!(p.KFDGpuID, 0x3f81);
        assert_eq!(p.FamilyID, 141);
        assert_eq!(p.Integrated, 0);
        assert_eq!(p.DeviceId, 0x740f);
        // SAFETY: as above.
        let got = unsafe { hsaKmtGetNodeProperties(0, &mut p) };
        assert_eq!(got, HSAKMT_STATUS_SUCCESS);
        assert_eq!((p.NumXcc, p.KFDGpuID), (0, 0));
        let mut h: v6::HsaAMDGPUDeviceHandle = std::ptr::null_mut();
        // SAFETY: writable handle.
        let got = unsafe { hsaKmtGetAMDGPUDeviceHandle(1, &mut h) };
        assert_eq!(got, HSAKMT_STATUS_SUCCESS);
        let mut info = std::mem::MaybeUninit::<drm::AmdgpuGpuInfo>::zeroed();
        // SAFETY: our handle and a writable info struct.
        let got = unsafe { drm::amdgpu_query_gpu_info(h, info.as_mut_ptr()) };
        assert_eq!(got, 0);
        // SAFETY: zero-initialised and then written by the call.
        let info = unsafe { info.assume_init() };
        assert_eq!(info.gpu_counter_freq, 100_000);
        // SAFETY: our handle.
        let name = unsafe { std::ffi::CStr::from_ptr(drm::amdgpu_get_marketing_name(h)) };
        assert_eq!(name.to_str().unwrap(), "Emulated AMD Instinct MI210");
        // SAFETY: our handle: no DRM file.
        let got = unsafe { drm::amdgpu_device_get_fd(h) };
        assert_eq!(got, -1);
        // SAFETY: writable handle.
        let got = unsafe { hsaKmtGetAMDGPUDeviceHandle(0, &mut h) };
        assert_eq!(got, HSAKMT_STATUS_INVALID_NODE_UNIT);
    }
}
