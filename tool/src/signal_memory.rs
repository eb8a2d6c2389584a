//! Timestamp signals in rprof's own memory: `amd_signal_t` records carved
//! out of blocks of fine-grained system memory, for the kernel signal pool.
//!
//! A signal handle is, for the device, only the address of an
//! `amd_signal_t`: the packet processor decrements the value at offset 8
//! when the packet retires, writes the dispatch's raw start and end ticks
//! at offsets 32 and 40 when the queue profiles, and raises an interrupt
//! only through `event_mailbox_ptr` (null here, as in ROCr's GPU-only
//! signals). ROCr's own signals add a runtime object around that memory,
//! which costs the interceptor's thread ~140 ns to create (ROCr 6.4.3,
//! graph storm: 12,288 of them, 1.75 ms) and ~375 ns to destroy at exit
//! (4.5 ms, most of it holding up the app's teardown), and which ROCr >= 6
//! counts as leaked if rprof does not destroy it. rprof never passes these
//! handles to a runtime call: it reads their values and ticks itself and
//! converts the ticks with `hsa_amd_profiling_convert_tick_to_system_domain`
//! (what `hsa_amd_profiling_get_dispatch_time` does with a signal's ticks).
//! Memory copies keep ROCr's signals: the runtime's copy engines need its
//! signal object.
//!
//! Blocks are allocated from the CPU agent's fine-grained global memory
//! pool (the kind ROCr's own signal pool uses), made accessible to every GPU
//! agent, and freed only by [`SignalMemory::release_all`], once no packet
//! can reference them (the caller's contract).
//!
//! # Safety
//! Every runtime call goes through entries copied from the runtime's tables
//! at `OnLoad` and checked to be present; the blocks' addresses come from
//! the runtime's allocator, are written only here before their first use and
//! by the device and rprof's atomics after it.

use std::ffi::c_void;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;

use hsa_sys::{
    amd_signal_t, hsa_agent_t, hsa_amd_memory_pool_t, hsa_status_t, AMD_SIGNAL_KIND_USER,
    HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT,
    HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED,
    HSA_AMD_MEMORY_POOL_INFO_SEGMENT, HSA_AMD_SEGMENT_GLOBAL, HSA_STATUS_ERROR, HSA_STATUS_SUCCESS,
};

use crate::runtime::Runtime;

/// Signals per block (64 KiB).
const BLOCK_SIGNALS: usize = 1024;
/// Bytes of one signal record.
const SIGNAL_BYTES: usize = std::mem::size_of::<amd_signal_t>();
const _: () = assert!(SIGNAL_BYTES == 64);

/// Offsets the device uses in a signal record (ROCr's signals have the same).
const VALUE_OFFSET: usize = std::mem::offset_of!(amd_signal_t, __bindgen_anon_1);
const _: () = assert!(VALUE_OFFSET == 8);
const START_TS_OFFSET: usize = std::mem::offset_of!(amd_signal_t, start_ts);
const END_TS_OFFSET: usize = std::mem::offset_of!(amd_signal_t, end_ts);
const _: () = assert!(START_TS_OFFSET == 32 && END_TS_OFFSET == 40);

/// The memory the kernel signal pool's signals live in.
#[derive(Debug)]
pub struct SignalMemory {
    rt: Runtime,
    /// The CPU agent's fine-grained global pool.
    pool: hsa_amd_memory_pool_t,
    /// Every GPU agent: each block is made accessible to all of them.
    gpus: Vec<hsa_agent_t>,
    /// Blocks allocated so far and the next free record of the newest.
    blocks: Mutex<Blocks>,
}

#[derive(Debug, Default)]
struct Blocks {
    /// Base addresses, in allocation order.
    bases: Vec<usize>,
    /// Records handed out of the newest block (`BLOCK_SIGNALS` when full,
    /// or before the first block).
    used: usize,
}

impl SignalMemory {
    /// The memory of a runtime that has, on one of `cpus`, a fine-grained
    /// global pool rprof may allocate from, every entry this needs, and at
    /// least one of `gpus` (each block is made accessible to all of them);
    /// `None` otherwise (the kernel pool then uses ROCr's signals).
    pub fn find(rt: Runtime, cpus: &[hsa_agent_t], gpus: &[hsa_agent_t]) -> Option<SignalMemory> {
        rt.amd.hsa_amd_memory_pool_allocate_fn?;
        rt.amd.hsa_amd_agents_allow_access_fn?;
        rt.amd.hsa_amd_profiling_convert_tick_to_system_domain_fn?;
        if gpus.is_empty() {
            return None;
        }
        let pool = cpus.iter().find_map(|&cpu| fine_grained_pool(&rt, cpu))?;
        Some(SignalMemory {
            rt,
            pool,
            gpus: gpus.to_vec(),
            blocks: Mutex::new(Blocks {
                bases: Vec::new(),
                used: BLOCK_SIGNALS,
            }),
        })
    }

    /// A new signal with value `initial`: the next record of the newest
    /// block (a new block when it is full). Returns the handle (the
    /// record's address) or the runtime's status.
    pub fn create(&self, initial: i64) -> Result<u64, hsa_status_t> {
        let mut blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        if blocks.used == BLOCK_SIGNALS {
            let base = self.allocate_block()?;
            blocks.bases.push(base);
            blocks.used = 0;
        }
        let Some(&base) = blocks.bases.last() else {
            return Err(HSA_STATUS_ERROR);
        };
        let address = base + blocks.used * SIGNAL_BYTES;
        blocks.used += 1;
        drop(blocks);
        // SAFETY: `address` is a 64-byte-aligned record of a block this
        // memory allocated, handed out once, not yet referenced by any
        // packet: zeroed (no mailbox, no event, no ticks), then the kind.
        unsafe {
            std::ptr::write_bytes(address as *mut u8, 0, SIGNAL_BYTES);
            std::ptr::write(address as *mut i64, i64::from(AMD_SIGNAL_KIND_USER));
        }
        // SAFETY: the record just written, handed out to no one yet.
        unsafe { store_value(address as u64, initial) };
        Ok(address as u64)
    }

    /// Frees every block. The caller guarantees that no packet still in a
    /// ring references any of their signals and that none is used again.
    pub fn release_all(&self) {
        let Some(free) = self.rt.amd.hsa_amd_memory_pool_free_fn else {
            return;
        };
        let mut blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        for base in blocks.bases.drain(..) {
            // SAFETY: a block `allocate_block` got from the runtime, freed
            // once (drained from the list).
            unsafe { free(base as *mut c_void) };
        }
        blocks.used = BLOCK_SIGNALS;
    }

    /// Allocates one block and makes it accessible to every GPU agent.
    fn allocate_block(&self) -> Result<usize, hsa_status_t> {
        let (Some(allocate), Some(allow)) = (
            self.rt.amd.hsa_amd_memory_pool_allocate_fn,
            self.rt.amd.hsa_amd_agents_allow_access_fn,
        ) else {
            return Err(HSA_STATUS_ERROR);
        };
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: a pool found by `find`; `ptr` is a valid out-pointer.
        let status = unsafe { allocate(self.pool, BLOCK_SIGNALS * SIGNAL_BYTES, 0, &mut ptr) };
        if status != HSA_STATUS_SUCCESS || ptr.is_null() || (ptr as usize) % SIGNAL_BYTES != 0 {
            return Err(if status == HSA_STATUS_SUCCESS {
                HSA_STATUS_ERROR
            } else {
                status
            });
        }
        // SAFETY: the agents from the runtime's enumeration and memory it
        // just allocated; no flags.
        let status = unsafe {
            allow(
                self.gpus.len() as u32,
                self.gpus.as_ptr(),
                std::ptr::null(),
                ptr,
            )
        };
        if status != HSA_STATUS_SUCCESS {
            if let Some(free) = self.rt.amd.hsa_amd_memory_pool_free_fn {
                // SAFETY: the block just allocated, never handed out.
                unsafe { free(ptr) };
            }
            return Err(status);
        }
        Ok(ptr as usize)
    }

    /// The raw start and end ticks the device wrote into `signal`, in the
    /// system domain (`None` if either is missing or the runtime cannot
    /// convert them). The end is converted first, as ROCr 6 does, so that a
    /// clock refit between the two conversions lands on the start.
    ///
    /// # Safety
    /// `signal` must be a live signal of this memory whose packet the caller
    /// has seen complete (its value read with acquire ordering).
    pub unsafe fn dispatch_time(&self, agent: hsa_agent_t, signal: u64) -> Option<(u64, u64)> {
        let convert = self
            .rt
            .amd
            .hsa_amd_profiling_convert_tick_to_system_domain_fn?;
        // SAFETY: a live record (this function's contract).
        let (start_tick, end_tick) = unsafe {
            (
                load_u64(signal, START_TS_OFFSET),
                load_u64(signal, END_TS_OFFSET),
            )
        };
        if start_tick == 0 || end_tick == 0 {
            return None;
        }
        let (mut start, mut end) = (0u64, 0u64);
        // SAFETY: a GPU agent from the runtime's enumeration and valid
        // out-pointers.
        let ok = unsafe {
            convert(agent, end_tick, &mut end) == HSA_STATUS_SUCCESS
                && convert(agent, start_tick, &mut start) == HSA_STATUS_SUCCESS
        };
        ok.then_some((start, end))
    }
}

/// The value of the signal at `signal`, read as the device leaves it
/// (acquire: the dispatch's ticks, written before the decrement, are then
/// visible). Serves ROCr's signals too: their handle is the address of the
/// same record.
///
/// # Safety
/// `signal` must be the 8-byte-aligned address of a live `amd_signal_t`.
pub unsafe fn load_value(signal: u64) -> i64 {
    // SAFETY: the caller's contract; the value is an aligned i64 the device
    // updates atomically.
    unsafe { value_cell(signal) }.load(Ordering::Acquire)
}

/// Stores `value` into the signal at `signal` (release: the device sees the
/// record's other fields first).
///
/// # Safety
/// As [`load_value`].
pub unsafe fn store_value(signal: u64, value: i64) {
    // SAFETY: the caller's contract.
    unsafe { value_cell(signal) }.store(value, Ordering::Release);
}

/// The value word of the record at `signal`.
///
/// # Safety
/// As [`load_value`].
unsafe fn value_cell<'a>(signal: u64) -> &'a AtomicI64 {
    // SAFETY: the caller's contract: an aligned, live i64.
    unsafe { &*((signal as usize + VALUE_OFFSET) as *const AtomicI64) }
}

/// Copies the device timestamps (`start_ts`, `end_ts`) of the record at
/// `from` into the record at `to`, as the packet processor writes them into
/// a completion signal: the app whose signal rprof forwards from the host
/// then reads its kernel's times there (`hsa_amd_profiling_get_dispatch_time`,
/// which HIP's `hipExtLaunchKernel` events use). Plain stores: the caller
/// publishes them with the release decrement that follows.
///
/// # Safety
/// `from` and `to` must be the 8-byte-aligned addresses of live
/// `amd_signal_t` records, `from`'s ticks already written by the device.
pub unsafe fn copy_times(from: u64, to: u64) {
    for offset in [START_TS_OFFSET, END_TS_OFFSET] {
        // SAFETY: the caller's contract: aligned u64 fields of live records.
        unsafe { u64_cell(to, offset).store(load_u64(from, offset), Ordering::Relaxed) };
    }
}

/// A 64-bit field of the record at `signal` (acquire).
///
/// # Safety
/// As [`load_value`]; `offset` is that of an aligned 64-bit field.
unsafe fn load_u64(signal: u64, offset: usize) -> u64 {
    // SAFETY: the caller's contract; the tick fields are aligned u64 the
    // device writes before it decrements the value.
    unsafe { u64_cell(signal, offset) }.load(Ordering::Acquire)
}

/// The 64-bit field at `offset` of the record at `signal`.
///
/// # Safety
/// As [`load_u64`].
unsafe fn u64_cell<'a>(signal: u64, offset: usize) -> &'a std::sync::atomic::AtomicU64 {
    // SAFETY: the caller's contract: an aligned u64 of a live record.
    unsafe { &*((signal as usize + offset) as *const std::sync::atomic::AtomicU64) }
}

/// The first fine-grained global pool of `cpu` that the runtime allocates
/// from, preferring one that is not the kernel-argument pool.
fn fine_grained_pool(rt: &Runtime, cpu: hsa_agent_t) -> Option<hsa_amd_memory_pool_t> {
    unsafe extern "C" fn collect(pool: hsa_amd_memory_pool_t, data: *mut c_void) -> hsa_status_t {
        // SAFETY: `data` is the `Vec` passed below, alive for the iteration.
        let v = unsafe { &mut *data.cast::<Vec<hsa_amd_memory_pool_t>>() };
        v.push(pool);
        HSA_STATUS_SUCCESS
    }
    let iterate = rt.amd.hsa_amd_agent_iterate_memory_pools_fn?;
    let get = rt.amd.hsa_amd_memory_pool_get_info_fn?;
    let mut pools: Vec<hsa_amd_memory_pool_t> = Vec::new();
    // SAFETY: the callback only pushes into `pools`, which outlives the call.
    unsafe {
        iterate(
            cpu,
            Some(collect),
            (&mut pools as *mut Vec<hsa_amd_memory_pool_t>).cast(),
        )
    };
    let info = |pool: hsa_amd_memory_pool_t, attribute| -> Option<u32> {
        let mut v = 0u32;
        // SAFETY: the three attributes read here are 32-bit (the segment
        // enum, the flags, and a bool widened into a zeroed u32).
        let status = unsafe { get(pool, attribute, (&mut v as *mut u32).cast()) };
        (status == HSA_STATUS_SUCCESS).then_some(v)
    };
    let usable: Vec<(hsa_amd_memory_pool_t, u32)> = pools
        .into_iter()
        .filter_map(|p| {
            let segment = info(p, HSA_AMD_MEMORY_POOL_INFO_SEGMENT)?;
            let flags = info(p, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS)?;
            let allowed = info(p, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED)? & 0xff != 0;
            (segment == HSA_AMD_SEGMENT_GLOBAL
                && flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED != 0
                && allowed)
                .then_some((p, flags))
        })
        .collect();
    usable
        .iter()
        .find(|(_, flags)| flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT == 0)
        .or(usable.first())
        .map(|&(p, _)| p)
}

#[cfg(test)]
mod tests {
    //! A fake runtime (the CPU agent has a coarse, a kernel-argument and a
    //! plain fine-grained pool; one GPU agent) whose entries keep their
    //! counts per test thread.
    use super::*;
    use hsa_sys::{hsa_amd_memory_pool_info_t, AmdExtTable, CoreApiTable};
    use std::alloc::Layout;
    use std::cell::Cell;

    const CPU: u64 = 1;
    const GPU: u64 = 2;
    const COARSE: u64 = 10;
    const KERNARG: u64 = 11;
    const FINE: u64 = 12;

    thread_local! {
        /// The CPU agent has only its coarse-grained pool.
        static COARSE_ONLY: Cell<bool> = const { Cell::new(false) };
        static ALLOCATED: Cell<usize> = const { Cell::new(0) };
        static ALLOWED: Cell<usize> = const { Cell::new(0) };
        static FREED: Cell<usize> = const { Cell::new(0) };
    }

    fn block_layout() -> Layout {
        Layout::from_size_align(BLOCK_SIGNALS * SIGNAL_BYTES, 4096).unwrap()
    }

    type PoolCallback = unsafe extern "C" fn(hsa_amd_memory_pool_t, *mut c_void) -> hsa_status_t;

    unsafe extern "C" fn iterate_pools(
        agent: hsa_agent_t,
        cb: Option<PoolCallback>,
        data: *mut c_void,
    ) -> hsa_status_t {
        let cb = cb.unwrap();
        let pools: &[u64] = match (agent.handle, COARSE_ONLY.get()) {
            (CPU, false) => &[COARSE, KERNARG, FINE],
            (CPU, true) => &[COARSE],
            _ => &[],
        };
        for &handle in pools {
            // SAFETY: the caller's callback and data.
            unsafe { cb(hsa_amd_memory_pool_t { handle }, data) };
        }
        HSA_STATUS_SUCCESS
    }

    unsafe extern "C" fn pool_info(
        pool: hsa_amd_memory_pool_t,
        attribute: hsa_amd_memory_pool_info_t,
        value: *mut c_void,
    ) -> hsa_status_t {
        let flags = match pool.handle {
            COARSE => 4,
            KERNARG => 3,
            _ => 2,
        };
        // SAFETY: 32-bit attributes, and a one-byte bool as the runtime
        // writes it.
        unsafe {
            match attribute {
                HSA_AMD_MEMORY_POOL_INFO_SEGMENT => *value.cast::<u32>() = HSA_AMD_SEGMENT_GLOBAL,
                HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS => *value.cast::<u32>() = flags,
                HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED => *value.cast::<u8>() = 1,
                _ => return HSA_STATUS_ERROR,
            }
        }
        HSA_STATUS_SUCCESS
    }

    unsafe extern "C" fn allocate(
        pool: hsa_amd_memory_pool_t,
        size: usize,
        _flags: u32,
        ptr: *mut *mut c_void,
    ) -> hsa_status_t {
        // Only the plain fine-grained pool, in blocks (a panic cannot
        // leave an `extern "C"` function: a refusal fails the test).
        if pool.handle != FINE || size != block_layout().size() {
            return HSA_STATUS_ERROR;
        }
        // SAFETY: a non-zero size; filled with garbage, as reused memory is.
        unsafe {
            let p = std::alloc::alloc(block_layout());
            std::ptr::write_bytes(p, 0xab, size);
            *ptr = p.cast();
        }
        ALLOCATED.set(ALLOCATED.get() + 1);
        HSA_STATUS_SUCCESS
    }

    unsafe extern "C" fn free(ptr: *mut c_void) -> hsa_status_t {
        // SAFETY: a block `allocate` made with this layout.
        unsafe { std::alloc::dealloc(ptr.cast(), block_layout()) };
        FREED.set(FREED.get() + 1);
        HSA_STATUS_SUCCESS
    }

    unsafe extern "C" fn allow(
        n: u32,
        agents: *const hsa_agent_t,
        _flags: *const u32,
        _ptr: *const c_void,
    ) -> hsa_status_t {
        // SAFETY: `n` agents.
        let agents = unsafe { std::slice::from_raw_parts(agents, n as usize) };
        if agents.iter().map(|a| a.handle).ne([GPU]) {
            return HSA_STATUS_ERROR;
        }
        ALLOWED.set(ALLOWED.get() + 1);
        HSA_STATUS_SUCCESS
    }

    /// Ticks to the system domain: `10 * tick + 7`.
    unsafe extern "C" fn convert(_agent: hsa_agent_t, tick: u64, out: *mut u64) -> hsa_status_t {
        // SAFETY: a valid out-pointer.
        unsafe { *out = tick.wrapping_mul(10).wrapping_add(7) };
        HSA_STATUS_SUCCESS
    }

    fn fake_runtime() -> Runtime {
        let core = CoreApiTable::default();
        let amd = AmdExtTable {
            hsa_amd_agent_iterate_memory_pools_fn: Some(iterate_pools),
            hsa_amd_memory_pool_get_info_fn: Some(pool_info),
            hsa_amd_memory_pool_allocate_fn: Some(allocate),
            hsa_amd_memory_pool_free_fn: Some(free),
            hsa_amd_agents_allow_access_fn: Some(allow),
            hsa_amd_profiling_convert_tick_to_system_domain_fn: Some(convert),
            ..AmdExtTable::default()
        };
        Runtime {
            core,
            amd,
            async_copy_on_engine: None,
        }
    }

    /// The fake runtime's signal memory, if it finds one.
    fn find(rt: Runtime) -> Option<SignalMemory> {
        SignalMemory::find(
            rt,
            &[hsa_agent_t { handle: CPU }],
            &[hsa_agent_t { handle: GPU }],
        )
    }

    fn field(signal: u64, offset: usize) -> u64 {
        // SAFETY: the tests' live records, at their aligned fields.
        unsafe { load_u64(signal, offset) }
    }

    #[test]
    fn kernel_signals_are_zeroed_device_records_in_blocks_every_gpu_can_reach() {
        let memory = find(fake_runtime()).expect("a pool");
        let signals: Vec<u64> = (0..BLOCK_SIGNALS + 1)
            .map(|_| memory.create(1).expect("a signal in the fine-grained pool"))
            .collect();
        assert_eq!((ALLOCATED.get(), ALLOWED.get()), (2, 2), "two blocks");
        for pair in signals[..BLOCK_SIGNALS].windows(2) {
            assert_eq!(
                pair[1] - pair[0],
                SIGNAL_BYTES as u64,
                "records of one block"
            );
        }
        for &s in &signals {
            assert_eq!(s % SIGNAL_BYTES as u64, 0);
            assert_eq!(field(s, 0), AMD_SIGNAL_KIND_USER as u64, "kind");
            assert_eq!(field(s, VALUE_OFFSET), 1, "value");
            for offset in [16, 24, START_TS_OFFSET, END_TS_OFFSET, 48, 56] {
                assert_eq!(field(s, offset), 0, "field at {offset}");
            }
        }
        memory.release_all();
        assert_eq!(FREED.get(), 2);
    }

    #[test]
    fn a_completed_signal_gives_its_ticks_in_the_system_domain() {
        let memory = find(fake_runtime()).unwrap();
        let s = memory.create(1).unwrap();
        let gpu = hsa_agent_t { handle: GPU };
        // SAFETY: (all of them) `s` is a live record of `memory`.
        let time = |s| unsafe { memory.dispatch_time(gpu, s) };
        assert_eq!(time(s), None, "no ticks yet");
        // What the packet processor does: ticks, then the decrement.
        // SAFETY: the record's aligned tick fields.
        unsafe {
            *((s as usize + START_TS_OFFSET) as *mut u64) = 100;
            *((s as usize + END_TS_OFFSET) as *mut u64) = 250;
        }
        // SAFETY: `s` is a live record of `memory`.
        unsafe { store_value(s, 0) };
        assert_eq!(time(s), Some((1007, 2507)));
        // SAFETY: as above.
        unsafe { store_value(s, 1) };
        assert_eq!(field(s, VALUE_OFFSET), 1, "reset");
        memory.release_all();
    }

    /// Host forwarding gives the app's signal the kernel's ticks (what the
    /// packet processor would have written there), and only those fields.
    #[test]
    fn a_forwarded_signal_gets_the_kernels_ticks() {
        let memory = find(fake_runtime()).unwrap();
        let (kernel, app) = (memory.create(0).unwrap(), memory.create(1).unwrap());
        // SAFETY: the kernel record's aligned tick fields.
        unsafe {
            *((kernel as usize + START_TS_OFFSET) as *mut u64) = 100;
            *((kernel as usize + END_TS_OFFSET) as *mut u64) = 250;
        }
        // SAFETY: two live records of `memory`.
        unsafe { copy_times(kernel, app) };
        assert_eq!(
            (field(app, START_TS_OFFSET), field(app, END_TS_OFFSET)),
            (100, 250)
        );
        assert_eq!(field(app, VALUE_OFFSET), 1, "the value is the caller's");
        assert_eq!(field(app, 0), AMD_SIGNAL_KIND_USER as u64, "kind");
        memory.release_all();
    }

    #[test]
    fn without_a_fine_grained_pool_the_kernel_signals_stay_rocrs() {
        COARSE_ONLY.set(true);
        assert!(find(fake_runtime()).is_none());
        let mut rt = fake_runtime();
        COARSE_ONLY.set(false);
        rt.amd.hsa_amd_profiling_convert_tick_to_system_domain_fn = None;
        assert!(find(rt).is_none(), "no way to convert ticks");
        assert!(
            SignalMemory::find(fake_runtime(), &[hsa_agent_t { handle: CPU }], &[]).is_none(),
            "no GPU to make the memory reachable for"
        );
    }
}
