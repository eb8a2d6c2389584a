//! The emulated `/dev/kfd`: KFD ioctls and the mmaps of the kfd and render fds, over the device core.
//!
//! Buffer objects (BOs) are what `ALLOC_MEMORY_OF_GPU` creates. Their memory appears when the thunk maps them:
//! VRAM and GTT BOs through `mmap(render fd, mmap_offset)` at the VA the thunk chose (an anonymous read-write
//! `MAP_NORESERVE` mapping there, whatever protection was asked, so that the command processor can read
//! `PROT_NONE` device memory too), user-pointer BOs are the caller's pages already. Either way the range is then
//! tracked in the core's memory table, which is what lets the command processor touch it. A user-pointer BO
//! whose GPU VA differs from its CPU address (`hsa_amd_memory_lock`) becomes an alias in the core (GPU VA → host).
//!
//! On the kfd fd, mmap offsets carry a type in bits 63:62: doorbells (3) map the core's memfd-backed doorbell page,
//! so the runtime's 64-bit doorbell stores land where the command processor polls; events (2) map the event page
//! KFD allocates on an APU; MMIO (0) is a plain page nobody reads.
//!
//! Events: signal ids are the core's, 1..=4096, as many as KFD allows (its page has 4096 slots; KFD numbers them
//! from 0, the core from 1, so id 4096 takes slot 0: slot = id mod 4096); the 4097th is refused with ENOSPC as KFD
//! does. The first `CREATE_EVENT` of a dGPU process hands over the thunk's event
//! page (a GTT BO), which is filled with 0xFF; the command processor writes event ids into its slots, which are
//! in tracked memory.
//!
//! # Safety
//! The ioctl argument pointer comes from the caller and is read and written as the request's struct, whose size
//! is checked against `_IOC_SIZE`; nested pointers (event arrays, device-id arrays, tile arrays) are trusted to
//! have the advertised length, as KFD's `copy_from_user` would check.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use libc::{c_int, c_ulong, c_void, off_t, size_t};
use rprof_emu::cp::QueueSpec;
use rprof_emu::events::EventError;
use rprof_emu::{clock, Emulator};

use crate::fds::FdKind;
use crate::real;
use crate::sysfs::{gpu_id, node_of_gpu_id};

const MMAP_TYPE_SHIFT: u32 = 62;
const MMAP_TYPE_DOORBELL: u64 = 3;
const MMAP_TYPE_EVENTS: u64 = 2;
const MMAP_TYPE_MMIO: u64 = 0;
const MMAP_GPU_ID_SHIFT: u32 = 46;
const MMAP_GPU_ID_MASK: u64 = ((1 << 16) - 1) << MMAP_GPU_ID_SHIFT;

const FLAG_VRAM: u32 = 1 << 0;
const FLAG_GTT: u32 = 1 << 1;
const FLAG_USERPTR: u32 = 1 << 2;
const FLAG_DOORBELL: u32 = 1 << 3;
const FLAG_MMIO: u32 = 1 << 4;
const FLAG_EXECUTABLE: u32 = 1 << 30;

/// Signal-event slots of KFD's event page (32 KiB of 8-byte slots).
pub const EVENT_SLOTS: u32 = 4096;
const EVENT_PAGE_BYTES: usize = EVENT_SLOTS as usize * 8;

/// Lowest address of the GPU VM KFD reports (the thunk picks VAs above it).
const GPUVM_BASE: u64 = 0x100_0000;
/// 48-bit VM: the thunk then uses unreserved mmap apertures (GPU VA == CPU VA).
const GPUVM_LIMIT: u64 = 0x7FFF_FFFF_FFFF;
const LDS_BASE: u64 = 1 << 48;
const SCRATCH_BASE: u64 = 2 << 48;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BoKind {
    Vram,
    Gtt,
    Userptr,
    Doorbell,
    Mmio,
}

#[derive(Debug, Clone, Copy)]
struct Bo {
    node: u32,
    kind: BoKind,
    va: u64,
    size: u64,
    mmap_offset: u64,
    /// Base of the range registered in the core's memory table.
    tracked: Option<usize>,
    alias: bool,
}

#[derive(Debug)]
struct State {
    bos: BTreeMap<u64, Bo>,
    by_offset: BTreeMap<u64, u64>,
    next_index: u32,
    vram_used: BTreeMap<u32, u64>,
    /// The event page as the runtime sees it (base, bytes).
    event_page: Option<(usize, usize)>,
    /// The APU event page's memfd.
    event_memfd: c_int,
    /// Render fds the runtime acquired a VM with, per node.
    acquired: BTreeMap<u32, c_int>,
}

static STATE: Mutex<State> = Mutex::new(State {
    bos: BTreeMap::new(),
    by_offset: BTreeMap::new(),
    next_index: 1,
    vram_used: BTreeMap::new(),
    event_page: None,
    event_memfd: -1,
    acquired: BTreeMap::new(),
});

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reads the request's struct from `arg`.
///
/// # Safety
/// `arg` must point to at least `size_of::<T>()` readable bytes (checked by the caller against `_IOC_SIZE`).
unsafe fn get<T: Copy>(arg: *mut c_void) -> T {
    // SAFETY: per the contract.
    unsafe { std::ptr::read_unaligned(arg as *const T) }
}

/// Writes the request's struct back.
///
/// # Safety
/// As [`get`], writable.
unsafe fn put<T: Copy>(arg: *mut c_void, v: T) {
    // SAFETY: per the contract.
    unsafe { std::ptr::write_unaligned(arg as *mut T, v) }
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct GetVersion {
    major: u32,
    minor: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct CreateQueue {
    ring_base: u64,
    write_pointer: u64,
    read_pointer: u64,
    doorbell_offset: u64,
    ring_size: u32,
    gpu_id: u32,
    queue_type: u32,
    queue_percentage: u32,
    queue_priority: u32,
    queue_id: u32,
    eop_address: u64,
    eop_size: u64,
    ctx_save_restore_address: u64,
    ctx_save_restore_size: u32,
    ctl_stack_size: u32,
    sdma_engine_id: u32,
    pad: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct IdArgs {
    id: u32,
    pad: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct ClockCounters {
    gpu: u64,
    cpu: u64,
    system: u64,
    system_freq: u64,
    gpu_id: u32,
    pad: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct UpdateQueue {
    ring_base: u64,
    queue_id: u32,
    ring_size: u32,
    queue_percentage: u32,
    queue_priority: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct CreateEvent {
    event_page_offset: u64,
    event_trigger_data: u32,
    event_type: u32,
    auto_reset: u32,
    node_id: u32,
    event_id: u32,
    event_slot_index: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct WaitEvents {
    events_ptr: u64,
    num_events: u32,
    wait_for_all: u32,
    timeout: u32,
    wait_result: u32,
}

/// `kfd_event_data`: a 32-byte union (the signal member starts with `last_event_age`), an extension pointer, the
/// event id.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct EventData {
    payload: [u64; 4],
    ext: u64,
    event_id: u32,
    pad: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct TileConfig {
    tile_config_ptr: u64,
    macro_tile_config_ptr: u64,
    num_tile_configs: u32,
    num_macro_tile_configs: u32,
    gpu_id: u32,
    gb_addr_config: u32,
    num_banks: u32,
    num_ranks: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct AperturesNew {
    ptr: u64,
    num_of_nodes: u32,
    pad: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct Apertures {
    lds_base: u64,
    lds_limit: u64,
    scratch_base: u64,
    scratch_limit: u64,
    gpuvm_base: u64,
    gpuvm_limit: u64,
    gpu_id: u32,
    pad: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct AcquireVm {
    drm_fd: u32,
    gpu_id: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct AllocMemory {
    va_addr: u64,
    size: u64,
    handle: u64,
    mmap_offset: u64,
    gpu_id: u32,
    flags: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct MapMemory {
    handle: u64,
    device_ids_array_ptr: u64,
    n_devices: u32,
    n_success: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct AvailableMemory {
    available: u64,
    gpu_id: u32,
    pad: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct RuntimeEnable {
    r_debug: u64,
    mode_mask: u32,
    capabilities_mask: u32,
}

/// KFD ioctl numbers (`_IOC_NR`, type `'K'`).
mod nr {
    pub const GET_VERSION: u32 = 0x01;
    pub const CREATE_QUEUE: u32 = 0x02;
    pub const DESTROY_QUEUE: u32 = 0x03;
    pub const SET_MEMORY_POLICY: u32 = 0x04;
    pub const GET_CLOCK_COUNTERS: u32 = 0x05;
    pub const UPDATE_QUEUE: u32 = 0x07;
    pub const CREATE_EVENT: u32 = 0x08;
    pub const DESTROY_EVENT: u32 = 0x09;
    pub const SET_EVENT: u32 = 0x0A;
    pub const RESET_EVENT: u32 = 0x0B;
    pub const WAIT_EVENTS: u32 = 0x0C;
    pub const SET_SCRATCH_BACKING_VA: u32 = 0x11;
    pub const GET_TILE_CONFIG: u32 = 0x12;
    pub const SET_TRAP_HANDLER: u32 = 0x13;
    pub const GET_PROCESS_APERTURES_NEW: u32 = 0x14;
    pub const ACQUIRE_VM: u32 = 0x15;
    pub const ALLOC_MEMORY_OF_GPU: u32 = 0x16;
    pub const FREE_MEMORY_OF_GPU: u32 = 0x17;
    pub const MAP_MEMORY_TO_GPU: u32 = 0x18;
    pub const UNMAP_MEMORY_FROM_GPU: u32 = 0x19;
    pub const SET_CU_MASK: u32 = 0x1A;
    pub const ALLOC_QUEUE_GWS: u32 = 0x1E;
    pub const SET_XNACK_MODE: u32 = 0x21;
    pub const AVAILABLE_MEMORY: u32 = 0x23;
    pub const RUNTIME_ENABLE: u32 = 0x25;
}

fn log(emu: &Emulator, what: std::fmt::Arguments<'_>) {
    if emu.config.log {
        eprintln!("rprof-emu-kfd: {what}");
    }
}

/// An ioctl's outcome: its return value, or the errno it fails with.
type Reply = Result<c_int, c_int>;

/// One ioctl on the kfd fd: its number and its argument, read and written as the request's struct once its size
/// is checked against `_IOC_SIZE`.
struct Request {
    emu: &'static Emulator,
    /// The whole request word (for messages).
    request: c_ulong,
    arg: *mut c_void,
    /// `_IOC_SIZE` of the request: the bytes at `arg`.
    size: usize,
}

impl Request {
    /// The request's struct; EINVAL if the caller's is smaller.
    fn args<T: Copy>(&self) -> Result<T, c_int> {
        if self.size < std::mem::size_of::<T>() {
            return Err(libc::EINVAL);
        }
        // SAFETY: `arg` has `size` bytes ([`ioctl`]'s contract, under which every `Request` is made), at least
        // the struct's size (checked).
        Ok(unsafe { get::<T>(self.arg) })
    }

    /// Writes the request's struct back; the ioctl returns 0.
    fn reply<T: Copy>(&self, v: T) -> Reply {
        if self.size < std::mem::size_of::<T>() {
            return Err(libc::EINVAL);
        }
        // SAFETY: as in `args` (writable: the caller's contract with the kernel).
        unsafe { put(self.arg, v) };
        Ok(0)
    }
}

/// Answers an ioctl on one of our fds. Returns the ioctl result (-1 with errno set on failure).
///
/// # Safety
/// `arg` must be what the request's `_IOC_SIZE` says (the caller's contract with the kernel).
pub unsafe fn ioctl(
    emu: &'static Emulator,
    kind: FdKind,
    request: c_ulong,
    arg: *mut c_void,
) -> c_int {
    let req = request as u32;
    let ty = (req >> 8) & 0xff;
    let number = req & 0xff;
    let size = ((req >> 16) & 0x3fff) as usize;
    if kind != FdKind::Kfd || ty != u32::from(b'K') {
        log(
            emu,
            format_args!("unsupported ioctl {request:#x} on {kind:?}"),
        );
        return real::fail(libc::ENOTTY);
    }
    if arg.is_null() && size > 0 {
        return real::fail(libc::EFAULT);
    }
    let r = Request {
        emu,
        request,
        arg,
        size,
    };
    let handler: fn(&Request) -> Reply = match number {
        nr::GET_VERSION => get_version,
        nr::GET_PROCESS_APERTURES_NEW => get_process_apertures,
        nr::ACQUIRE_VM => acquire_vm,
        nr::SET_MEMORY_POLICY
        | nr::SET_SCRATCH_BACKING_VA
        | nr::SET_TRAP_HANDLER
        | nr::SET_CU_MASK => accept,
        nr::GET_CLOCK_COUNTERS => get_clock_counters,
        nr::GET_TILE_CONFIG => get_tile_config,
        nr::SET_XNACK_MODE => set_xnack_mode,
        nr::AVAILABLE_MEMORY => available_memory,
        nr::RUNTIME_ENABLE => runtime_enable,
        nr::ALLOC_MEMORY_OF_GPU => alloc_memory,
        nr::FREE_MEMORY_OF_GPU => free_memory,
        nr::MAP_MEMORY_TO_GPU | nr::UNMAP_MEMORY_FROM_GPU => map_memory,
        nr::CREATE_QUEUE => create_queue,
        nr::DESTROY_QUEUE => destroy_queue,
        nr::UPDATE_QUEUE => update_queue,
        nr::CREATE_EVENT => create_event,
        nr::DESTROY_EVENT => destroy_event,
        nr::SET_EVENT => set_event,
        nr::RESET_EVENT => reset_event,
        nr::WAIT_EVENTS => wait_events,
        nr::ALLOC_QUEUE_GWS => no_gws,
        _ => unsupported,
    };
    handler(&r).unwrap_or_else(real::fail)
}

/// Requests the emulator takes and ignores (memory policy, scratch backing, trap handler, CU mask).
fn accept(_: &Request) -> Reply {
    Ok(0)
}

/// No global wave sync: ROCr does without.
fn no_gws(_: &Request) -> Reply {
    Err(libc::ENODEV)
}

fn unsupported(r: &Request) -> Reply {
    log(
        r.emu,
        format_args!(
            "unsupported KFD ioctl nr {:#x} (request {:#x})",
            r.request & 0xff,
            r.request
        ),
    );
    Err(libc::EINVAL)
}

fn get_version(r: &Request) -> Reply {
    let _ = r.args::<GetVersion>()?;
    let (major, minor) = r.emu.config.kfd_version;
    r.reply(GetVersion { major, minor })
}

fn get_process_apertures(r: &Request) -> Reply {
    let mut a = r.args::<AperturesNew>()?;
    let gpus: Vec<u32> = r.emu.topology.gpu_nodes().map(|(n, _)| n).collect();
    if a.ptr == 0 || (a.num_of_nodes as usize) < gpus.len() {
        return Err(libc::EINVAL);
    }
    for (i, node) in gpus.iter().enumerate() {
        let ap = Apertures {
            lds_base: LDS_BASE,
            lds_limit: LDS_BASE | 0xFFFF_FFFF,
            scratch_base: SCRATCH_BASE,
            scratch_limit: SCRATCH_BASE | 0xFFFF_FFFF,
            gpuvm_base: GPUVM_BASE,
            gpuvm_limit: GPUVM_LIMIT,
            gpu_id: gpu_id(*node),
            pad: 0,
        };
        // SAFETY: the caller's array has `num_of_nodes` entries (checked >= the GPU count).
        unsafe { std::ptr::write_unaligned((a.ptr as *mut Apertures).add(i), ap) };
    }
    a.num_of_nodes = gpus.len() as u32;
    r.reply(a)
}

fn acquire_vm(r: &Request) -> Reply {
    let a = r.args::<AcquireVm>()?;
    let node = node_of_gpu_id(r.emu, a.gpu_id).ok_or(libc::EINVAL)?;
    if crate::fds::kind(a.drm_fd as c_int) != Some(FdKind::Render(node)) {
        log(
            r.emu,
            format_args!(
                "ACQUIRE_VM with fd {} that is not node {node}'s render fd",
                a.drm_fd
            ),
        );
        return Err(libc::EINVAL);
    }
    state().acquired.insert(node, a.drm_fd as c_int);
    Ok(0)
}

fn get_clock_counters(r: &Request) -> Reply {
    let mut c = r.args::<ClockCounters>()?;
    let sys = clock::now_ns();
    c.gpu = if node_of_gpu_id(r.emu, c.gpu_id).is_some() {
        clock::gpu_ticks_at(sys)
    } else {
        0
    };
    c.cpu = clock::cpu_ns();
    c.system = sys;
    c.system_freq = clock::SYSTEM_CLOCK_HZ;
    r.reply(c)
}

fn get_tile_config(r: &Request) -> Reply {
    let mut t = r.args::<TileConfig>()?;
    if node_of_gpu_id(r.emu, t.gpu_id).is_none() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's arrays hold the advertised number of u32 entries.
    unsafe {
        if t.tile_config_ptr != 0 {
            std::ptr::write_bytes(
                t.tile_config_ptr as *mut u32,
                0,
                t.num_tile_configs as usize,
            );
        }
        if t.macro_tile_config_ptr != 0 {
            std::ptr::write_bytes(
                t.macro_tile_config_ptr as *mut u32,
                0,
                t.num_macro_tile_configs as usize,
            );
        }
    }
    t.gb_addr_config = rprof_emu::topology::GB_ADDR_CONFIG;
    t.num_banks = 16;
    t.num_ranks = 1;
    r.reply(t)
}

/// XNACK off only: a query (negative) answers 0, turning it on is refused.
fn set_xnack_mode(r: &Request) -> Reply {
    match r.args::<i32>()? {
        v if v < 0 => r.reply(0i32),
        0 => Ok(0),
        _ => Err(libc::EPERM),
    }
}

fn available_memory(r: &Request) -> Reply {
    let mut a = r.args::<AvailableMemory>()?;
    let node = node_of_gpu_id(r.emu, a.gpu_id).ok_or(libc::EINVAL)?;
    let used = state().vram_used.get(&node).copied().unwrap_or(0);
    a.available = vram_bytes(r.emu, node).saturating_sub(used);
    r.reply(a)
}

fn runtime_enable(r: &Request) -> Reply {
    let mut e = r.args::<RuntimeEnable>()?;
    e.capabilities_mask = 0;
    r.reply(e)
}

fn alloc_memory(r: &Request) -> Reply {
    let mut a = r.args::<AllocMemory>()?;
    alloc(r.emu, &mut a)?;
    r.reply(a)
}

fn free_memory(r: &Request) -> Reply {
    let handle = r.args::<u64>()?;
    free(r.emu, handle)?;
    Ok(0)
}

/// Map and unmap: every device in the caller's list must be ours; nothing else to do (the BO's pages are
/// already where the command processor reads them).
fn map_memory(r: &Request) -> Reply {
    let mut m = r.args::<MapMemory>()?;
    if !state().bos.contains_key(&m.handle) {
        return Err(libc::EINVAL);
    }
    for i in m.n_success..m.n_devices {
        // SAFETY: the caller's device-id array has `n_devices` entries.
        let id = unsafe {
            std::ptr::read_unaligned((m.device_ids_array_ptr as *const u32).add(i as usize))
        };
        if node_of_gpu_id(r.emu, id).is_none() {
            return Err(libc::EINVAL);
        }
    }
    m.n_success = m.n_devices;
    r.reply(m)
}

fn create_queue(r: &Request) -> Reply {
    // ROCr 6.x sends 96 bytes; older thunks 88 (no `sdma_engine_id`), newer headers append fields we do not read.
    // Copy what the caller has, up to our struct.
    const OLDEST: usize = std::mem::offset_of!(CreateQueue, sdma_engine_id);
    if r.size < OLDEST {
        return Err(libc::EINVAL);
    }
    let n = r.size.min(std::mem::size_of::<CreateQueue>());
    let mut bytes = [0u8; std::mem::size_of::<CreateQueue>()];
    // SAFETY: `arg` has `size >= n` readable bytes (the caller's contract).
    unsafe { std::ptr::copy_nonoverlapping(r.arg as *const u8, bytes.as_mut_ptr(), n) };
    // SAFETY: CreateQueue is plain integers; every byte pattern is valid.
    let mut q: CreateQueue =
        unsafe { std::ptr::read_unaligned(bytes.as_ptr() as *const CreateQueue) };
    new_queue(r.emu, &mut q)?;
    // SAFETY: writes back the same `n <= size` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(&q as *const CreateQueue as *const u8, r.arg as *mut u8, n)
    };
    Ok(0)
}

fn destroy_queue(r: &Request) -> Reply {
    let a = r.args::<IdArgs>()?;
    match r.emu.cp.destroy_queue(u64::from(a.id)) {
        true => Ok(0),
        false => Err(libc::EINVAL),
    }
}

fn update_queue(r: &Request) -> Reply {
    let u = r.args::<UpdateQueue>()?;
    if u.queue_percentage > 100 {
        return Err(libc::EINVAL);
    }
    match r
        .emu
        .cp
        .update_queue(u64::from(u.queue_id), u.queue_percentage)
    {
        true => Ok(0),
        false => Err(libc::EINVAL),
    }
}

fn create_event(r: &Request) -> Reply {
    let mut c = r.args::<CreateEvent>()?;
    new_event(r.emu, &mut c)?;
    r.reply(c)
}

fn destroy_event(r: &Request) -> Reply {
    let a = r.args::<IdArgs>()?;
    event_result(r.emu.events.destroy(a.id))
}

fn set_event(r: &Request) -> Reply {
    let a = r.args::<IdArgs>()?;
    event_result(r.emu.events.fire(a.id))
}

fn reset_event(r: &Request) -> Reply {
    let a = r.args::<IdArgs>()?;
    event_result(r.emu.events.reset(a.id))
}

fn wait_events(r: &Request) -> Reply {
    let mut w = r.args::<WaitEvents>()?;
    let n = w.num_events as usize;
    let events = w.events_ptr as *mut EventData;
    let mut ids = Vec::with_capacity(n);
    let mut ages = Vec::with_capacity(n);
    let aged = r.emu.config.kfd_version.1 >= 14;
    for i in 0..n {
        // SAFETY: the caller's array has `num_events` entries.
        let d: EventData = unsafe { std::ptr::read_unaligned(events.add(i)) };
        ids.push(d.event_id);
        // Signal events carry `last_event_age` first in the union (KFD >= 1.14); others carry no age.
        ages.push(if aged && d.event_id <= EVENT_SLOTS {
            d.payload[0]
        } else {
            0
        });
    }
    let timeout = match w.timeout {
        u32::MAX => u32::MAX,
        t => t.min(0x7FFF_FFFF),
    };
    let result = r
        .emu
        .events
        .wait_aged(&ids, &mut ages, w.wait_for_all != 0, timeout);
    if result.is_ok() && aged {
        for (i, age) in ages.iter().enumerate() {
            if ids[i] <= EVENT_SLOTS && *age != 0 {
                // SAFETY: as above; the age is the first u64 of entry `i`.
                unsafe { std::ptr::write_unaligned(events.add(i) as *mut u64, *age) };
            }
        }
    }
    w.wait_result = match result {
        Ok(()) => 0,
        Err(EventError::Timeout) => 1,
        Err(_) => 2,
    };
    r.reply(w)?;
    match result {
        Err(EventError::UnknownEvent) => Err(libc::EINVAL),
        _ => Ok(0),
    }
}

fn event_result(r: Result<(), EventError>) -> Reply {
    match r {
        Ok(()) => Ok(0),
        Err(EventError::OutOfResources) => Err(libc::ENOSPC),
        Err(_) => Err(libc::EINVAL),
    }
}

fn vram_bytes(emu: &Emulator, node: u32) -> u64 {
    match emu.topology.node(node) {
        Some(n) if n.cpu_cores == 0 => emu.topology.vram_bytes,
        // An APU's "VRAM" is system memory.
        _ => rprof_emu::topology::SYSTEM_MEMORY_BYTES,
    }
}

fn alloc(emu: &Emulator, a: &mut AllocMemory) -> Result<(), c_int> {
    let node = node_of_gpu_id(emu, a.gpu_id).ok_or(libc::EINVAL)?;
    if a.size == 0 {
        return Err(libc::EINVAL);
    }
    let kind = match a.flags & 0x1f {
        FLAG_VRAM => BoKind::Vram,
        FLAG_GTT => BoKind::Gtt,
        FLAG_USERPTR => BoKind::Userptr,
        FLAG_DOORBELL => BoKind::Doorbell,
        FLAG_MMIO => BoKind::Mmio,
        _ => return Err(libc::EINVAL),
    };
    let mut st = state();
    if kind == BoKind::Vram {
        let used = st.vram_used.entry(node).or_insert(0);
        if *used + a.size > vram_bytes(emu, node) {
            return Err(libc::ENOMEM);
        }
        *used += a.size;
    }
    let index = st.next_index;
    st.next_index = st.next_index.checked_add(1).ok_or(libc::ENOMEM)?;
    let handle = (u64::from(a.gpu_id) << 32) | u64::from(index);
    let gpu = u64::from(a.gpu_id) << MMAP_GPU_ID_SHIFT;
    let mut bo = Bo {
        node,
        kind,
        va: a.va_addr,
        size: a.size,
        mmap_offset: 0,
        tracked: None,
        alias: false,
    };
    match kind {
        BoKind::Vram | BoKind::Gtt => {
            bo.mmap_offset = u64::from(index) << 16;
            st.by_offset.insert(bo.mmap_offset, handle);
            // Back the BO at its VA right away: older thunks (ROCr 5.2.3's) map only host-accessible BOs for the
            // CPU, but the command processor must reach device memory too. The VA is the thunk's reservation for
            // this BO, so replacing it is what the kernel driver's GPU mapping would do; a later render-fd mmap at
            // the same address keeps these pages.
            if a.va_addr != 0 {
                let exec = if a.flags & FLAG_EXECUTABLE != 0 {
                    libc::PROT_EXEC
                } else {
                    0
                };
                // SAFETY: the range is the thunk's reservation for this BO (KFD maps the BO there for the GPU).
                let p = unsafe {
                    real::mmap(
                        a.va_addr as *mut c_void,
                        a.size as usize,
                        libc::PROT_READ | libc::PROT_WRITE | exec,
                        libc::MAP_PRIVATE
                            | libc::MAP_ANONYMOUS
                            | libc::MAP_NORESERVE
                            | libc::MAP_FIXED,
                        -1,
                        0,
                    )
                };
                if p != libc::MAP_FAILED && emu.memory.register(p as usize, a.size as usize, 0) {
                    bo.tracked = Some(p as usize);
                }
            }
        }
        BoKind::Doorbell => bo.mmap_offset = (MMAP_TYPE_DOORBELL << MMAP_TYPE_SHIFT) | gpu,
        BoKind::Mmio => bo.mmap_offset = (MMAP_TYPE_MMIO << MMAP_TYPE_SHIFT) | gpu,
        BoKind::Userptr => {
            let host = a.mmap_offset;
            bo.mmap_offset = host;
            if emu.memory.register(host as usize, a.size as usize, 0) {
                bo.tracked = Some(host as usize);
            }
            if a.va_addr != 0 && a.va_addr != host {
                bo.alias = emu
                    .memory
                    .alias(a.va_addr as usize, a.size as usize, host as usize);
            }
        }
    }
    a.handle = handle;
    a.mmap_offset = bo.mmap_offset;
    st.bos.insert(handle, bo);
    Ok(())
}

fn free(emu: &Emulator, handle: u64) -> Result<(), c_int> {
    let mut st = state();
    let bo = st.bos.remove(&handle).ok_or(libc::EINVAL)?;
    if matches!(bo.kind, BoKind::Vram | BoKind::Gtt) {
        st.by_offset.remove(&bo.mmap_offset);
    }
    if bo.kind == BoKind::Vram {
        if let Some(used) = st.vram_used.get_mut(&bo.node) {
            *used = used.saturating_sub(bo.size);
        }
    }
    if let Some((base, _)) = st.event_page {
        if bo.tracked == Some(base) {
            st.event_page = None;
        }
    }
    drop(st);
    // The thunk frees before it unmaps (and then maps PROT_NONE over the range): forget the range, keep the pages.
    if let Some(base) = bo.tracked {
        emu.memory.deregister(base);
    }
    if bo.alias {
        emu.memory.unalias(bo.va as usize);
    }
    Ok(())
}

fn new_queue(emu: &'static Emulator, q: &mut CreateQueue) -> Result<(), c_int> {
    let node = node_of_gpu_id(emu, q.gpu_id).ok_or(libc::EINVAL)?;
    if q.queue_percentage > 100 || q.queue_priority > 15 {
        return Err(libc::EINVAL);
    }
    const COMPUTE_AQL: u32 = 2;
    const SDMA: u32 = 1;
    const SDMA_XGMI: u32 = 3;
    let (id, doorbell) = match q.queue_type {
        COMPUTE_AQL => {
            let spec = QueueSpec {
                node,
                ring: q.ring_base as usize,
                ring_bytes: q.ring_size as usize,
                read_ptr: q.read_pointer as usize,
            };
            emu.cp.create_queue(emu, spec).ok_or(libc::ENOMEM)?
        }
        // With RPROF_EMU_SDMA=1 the core's SDMA engine serves them (publishing the read index where the thunk
        // reads it); otherwise, as without free engines, ROCr falls back to blit kernels.
        SDMA | SDMA_XGMI if emu.config.sdma => {
            let rptr = q.read_pointer as usize;
            if rptr == 0 || rptr % 8 != 0 {
                return Err(libc::EINVAL);
            }
            let (id, doorbell, _, _) = emu
                .cp
                .create_sdma_queue_publishing(
                    emu,
                    node,
                    q.ring_base as usize,
                    q.ring_size as usize,
                    rptr,
                )
                .ok_or(libc::ENOMEM)?;
            (id, doorbell)
        }
        other => {
            log(
                emu,
                format_args!("refusing queue type {other} (SDMA only with RPROF_EMU_SDMA=1)"),
            );
            return Err(libc::ENOMEM);
        }
    };
    let Some(slot) = emu.cp.doorbell_slot(doorbell) else {
        emu.cp.destroy_queue(id);
        return Err(libc::ENOMEM);
    };
    q.queue_id = id as u32;
    q.doorbell_offset = (MMAP_TYPE_DOORBELL << MMAP_TYPE_SHIFT)
        | (u64::from(q.gpu_id) << MMAP_GPU_ID_SHIFT)
        | (slot as u64 * 8);
    Ok(())
}

fn new_event(emu: &Emulator, c: &mut CreateEvent) -> Result<(), c_int> {
    const SIGNAL: u32 = 0;
    const DEBUG: u32 = 5;
    let signal = c.event_type == SIGNAL || c.event_type == DEBUG;
    {
        let mut st = state();
        if c.event_page_offset != 0 && st.event_page.is_none() {
            // The thunk's event page (a GTT BO it allocated and mapped), by handle.
            let bo = st
                .bos
                .get(&c.event_page_offset)
                .copied()
                .ok_or(libc::EINVAL)?;
            let base = bo.tracked.ok_or(libc::EINVAL)?;
            let bytes = (bo.size as usize).min(EVENT_PAGE_BYTES);
            // SAFETY: the BO is mapped read-write by us at `base` for `bo.size` bytes and tracked.
            unsafe { std::ptr::write_bytes(base as *mut u8, 0xFF, bytes) };
            st.event_page = Some((base, bytes));
        }
    }
    let (id, _) = emu
        .events
        .create(signal, c.auto_reset == 0, false)
        .map_err(|_| libc::ENOSPC)?;
    if signal && id > EVENT_SLOTS {
        let _ = emu.events.destroy(id);
        return Err(libc::ENOSPC);
    }
    c.event_id = id;
    if signal {
        c.event_trigger_data = id;
        c.event_slot_index = id % EVENT_SLOTS;
        c.event_page_offset = MMAP_TYPE_EVENTS << MMAP_TYPE_SHIFT;
    } else {
        c.event_trigger_data = 0;
        c.event_slot_index = 0;
        c.event_page_offset = 0;
    }
    Ok(())
}

/// One `mmap` of one of our fds.
struct MapRequest {
    emu: &'static Emulator,
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    /// `MAP_FIXED` if asked, else 0.
    fixed: c_int,
    off: u64,
}

/// A mapping, or the errno of a refused one (a failed real `mmap` is `Ok(MAP_FAILED)`, errno already set).
type Mapped = Result<*mut c_void, c_int>;

/// Answers `mmap` on one of our fds.
///
/// # Safety
/// As `mmap(2)` with `MAP_FIXED`: the caller owns the range at `addr`.
pub unsafe fn mmap(
    emu: &'static Emulator,
    kind: FdKind,
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    offset: off_t,
) -> *mut c_void {
    let m = MapRequest {
        emu,
        addr,
        len,
        prot,
        fixed: flags & libc::MAP_FIXED,
        off: offset as u64,
    };
    // SAFETY: every arm passes on the caller's contract (it owns the range at `addr`).
    let mapped = unsafe {
        match kind {
            FdKind::Render(_) => map_bo(&m),
            FdKind::Kfd => match m.off >> MMAP_TYPE_SHIFT {
                MMAP_TYPE_DOORBELL => map_doorbells(&m),
                MMAP_TYPE_EVENTS => map_event_page(&m),
                MMAP_TYPE_MMIO if m.off & !MMAP_GPU_ID_MASK == 0 => Ok(map_anonymous(&m, false)),
                _ => {
                    log(emu, format_args!("mmap of unknown kfd offset {:#x}", m.off));
                    Err(libc::EINVAL)
                }
            },
        }
    };
    mapped.unwrap_or_else(|e| {
        real::fail(e);
        libc::MAP_FAILED
    })
}

/// Fresh read-write anonymous memory at the caller's address (or anywhere).
///
/// # Safety
/// As [`mmap`].
unsafe fn map_anonymous(m: &MapRequest, exec: bool) -> *mut c_void {
    let p = libc::PROT_READ | libc::PROT_WRITE | if exec { libc::PROT_EXEC } else { 0 };
    // SAFETY: an anonymous mapping at the caller's address (its range, per the contract) or a fresh one.
    unsafe {
        real::mmap(
            m.addr,
            m.len,
            p,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | m.fixed,
            -1,
            0,
        )
    }
}

/// A VRAM or GTT BO through the render fd, at the offset ALLOC gave it: the pages backed at ALLOC if the thunk
/// maps the same place, else fresh memory, tracked in the core either way.
///
/// # Safety
/// As [`mmap`].
unsafe fn map_bo(m: &MapRequest) -> Mapped {
    let mut st = state();
    let Some(&handle) = st.by_offset.get(&m.off) else {
        log(
            m.emu,
            format_args!("mmap of unknown render offset {:#x}", m.off),
        );
        return Err(libc::EINVAL);
    };
    let bo = st.bos.get(&handle).ok_or(libc::EINVAL)?;
    if m.fixed != 0 && bo.tracked == Some(m.addr as usize) && m.len as u64 <= bo.size {
        // Already backed at this address since ALLOC: keep the pages.
        return Ok(m.addr);
    }
    // SAFETY: the caller's contract.
    let p = unsafe { map_anonymous(m, m.prot & libc::PROT_EXEC != 0) };
    if p == libc::MAP_FAILED {
        return Ok(p);
    }
    let bo = st.bos.get_mut(&handle).ok_or(libc::EINVAL)?;
    if let Some(old) = bo.tracked.take() {
        m.emu.memory.deregister(old);
    }
    if m.emu.memory.register(p as usize, m.len, 0) {
        bo.tracked = Some(p as usize);
    }
    Ok(p)
}

/// The core's doorbell page (memfd-backed, shared), where the command processor polls.
///
/// # Safety
/// As [`mmap`].
unsafe fn map_doorbells(m: &MapRequest) -> Mapped {
    let (fd, size) = m.emu.cp.doorbell_memfd();
    if fd < 0 || m.len > size {
        return Err(libc::EINVAL);
    }
    // SAFETY: maps our doorbell memfd shared at the caller's address (its range, per the contract).
    Ok(unsafe {
        real::mmap(
            m.addr,
            m.len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | m.fixed,
            fd,
            0,
        )
    })
}

/// The APU event page KFD allocates: a memfd filled with 0xFF, tracked so the command processor can write
/// event ids into its slots.
///
/// # Safety
/// As [`mmap`].
unsafe fn map_event_page(m: &MapRequest) -> Mapped {
    let mut st = state();
    if st.event_memfd < 0 {
        st.event_memfd =
            real::memfd(c"rprof-emu-kfd-events", EVENT_PAGE_BYTES as u64).ok_or(libc::ENOMEM)?;
    }
    if m.len > EVENT_PAGE_BYTES {
        return Err(libc::EINVAL);
    }
    // SAFETY: maps our event memfd shared at the caller's (or a fresh) address.
    let p = unsafe {
        real::mmap(
            m.addr,
            m.len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | m.fixed,
            st.event_memfd,
            0,
        )
    };
    if p != libc::MAP_FAILED {
        // SAFETY: the fresh shared mapping has `len` writable bytes.
        unsafe { std::ptr::write_bytes(p as *mut u8, 0xFF, m.len) };
        m.emu.memory.register(p as usize, m.len, 0);
        st.event_page = Some((p as usize, m.len));
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_sizes_match_kfd_ioctl_h() {
        assert_eq!(std::mem::size_of::<CreateQueue>(), 96);
        assert_eq!(std::mem::offset_of!(CreateQueue, doorbell_offset), 24);
        assert_eq!(std::mem::offset_of!(CreateQueue, queue_id), 52);
        assert_eq!(std::mem::offset_of!(CreateQueue, eop_address), 56);
        assert_eq!(std::mem::offset_of!(CreateQueue, ctx_save_restore_size), 80);
        assert_eq!(std::mem::offset_of!(CreateQueue, sdma_engine_id), 88);
        assert_eq!(std::mem::size_of::<ClockCounters>(), 40);
        assert_eq!(std::mem::size_of::<UpdateQueue>(), 24);
        assert_eq!(std::mem::size_of::<CreateEvent>(), 32);
        assert_eq!(std::mem::size_of::<WaitEvents>(), 24);
        assert_eq!(std::mem::size_of::<EventData>(), 48);
        assert_eq!(std::mem::offset_of!(EventData, event_id), 40);
        assert_eq!(std::mem::size_of::<TileConfig>(), 40);
        assert_eq!(std::mem::size_of::<AperturesNew>(), 16);
        assert_eq!(std::mem::size_of::<Apertures>(), 56);
        assert_eq!(std::mem::size_of::<AllocMemory>(), 40);
        assert_eq!(std::mem::size_of::<MapMemory>(), 24);
        assert_eq!(std::mem::size_of::<AvailableMemory>(), 16);
        assert_eq!(std::mem::size_of::<RuntimeEnable>(), 16);
    }
}
