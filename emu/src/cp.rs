//! The software command processor: one thread that serves every AQL queue of every emulated GPU.
//!
//! # Safety
//! The command processor reads and writes memory that ROCr shares with "hardware": ring buffers, doorbells,
//! `amd_queue_t` and `amd_signal_t`. It only touches a ring (and its `amd_queue_t`) while the queue is registered,
//! under the queue-list lock that `hsaKmtDestroyQueue` also takes, so it stops touching a ring before destroy
//! returns. Signals are accessed through the addresses in packets, as hardware does; kernel objects and kernargs
//! are only read when they lie in memory the emulator tracks.
//!
//! Scheduling, per pass over all queues:
//! 1. Retire kernels whose modelled end time has passed (deadline heap): write start/end ticks when the queue has
//!    profiling on, decrement the completion signal, write its event id to its mailbox and fire the event.
//! 2. For each queue, launch packets in order while the doorbell says they were submitted and their header is
//!    valid. Several dispatches of one queue may be in flight unless a packet's barrier bit forbids it. Barrier
//!    AND/OR packets retire when their dependencies are met (the queue stalls until then); so do AMD BARRIER_VALUE
//!    vendor packets (HIP >= 5.7 uses them for markers on gfx90a), which wait until `(signal & mask) cond value`
//!    holds (at once without a signal) and, like barriers, get timestamps when the queue profiles; other
//!    vendor-specific (PM4 IB) and agent-dispatch packets retire at once. Every consumed packet's header is reset to INVALID and the read
//!    index (`amd_queue_t.read_dispatch_id`) advanced. Invalid packets put the queue in error: ROCr's
//!    `queue_inactive_signal` gets the hardware error code and its event fires.
//! 3. Idle policy: while a running kernel ends within 20 µs the thread spins without yielding (`deadline_spin`, on
//!    by default: a GPU runs its kernels whatever the host does), at nice `cp_nice` (-10, best effort) so that
//!    woken host threads rarely preempt it; after the last progress it spins (with
//!    `sched_yield`) for `spin_us`; then it naps, starting
//!    at 10 µs and doubling up to `max_nap_us`, but never past the next kernel deadline. After one second without
//!    progress the ceiling becomes `deep_nap_us`. Creating or resuming a queue wakes it at once; with no queue at
//!    all the thread blocks until one is created.
//!
//! Packet layout (header fields, offsets inside a slot, AMD vendor formats) is `rprof-abi`'s `packet` module, the
//! same knowledge the tracer rewrites packets with; this module reads the generated `hsa-sys` structs for the
//! bodies and keeps no layout constants of its own.

use std::collections::{BinaryHeap, HashMap};
use std::mem::offset_of;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use hsa_sys::{
    amd_queue_t, amd_signal_t, hsa_amd_barrier_value_packet_t, hsa_barrier_and_packet_t,
    hsa_kernel_dispatch_packet_t, HSA_PACKET_TYPE_AGENT_DISPATCH, HSA_PACKET_TYPE_BARRIER_AND,
    HSA_PACKET_TYPE_BARRIER_OR, HSA_PACKET_TYPE_INVALID, HSA_PACKET_TYPE_KERNEL_DISPATCH,
    HSA_PACKET_TYPE_VENDOR_SPECIFIC,
};
use rprof_abi::packet::{
    header_barrier, header_packet_type, make_header, COMPLETION_SIGNAL_OFFSET, PACKET_BYTES,
    VENDOR_FORMAT_BARRIER_VALUE, VENDOR_FORMAT_OFFSET,
};

use crate::clock::{gpu_ticks_at, now_ns};
use crate::kernels::{kernel_symbol, recognise_blit, Blit, HostKernel, RocclrBlit};
use crate::Emulator;

const PROFILING_BIT: u32 = hsa_sys::AMD_QUEUE_PROPERTIES_ENABLE_PROFILING as u32;
/// The header a consumed slot is reset to (type INVALID, everything else 0).
const INVALID_HEADER: u16 = make_header(HSA_PACKET_TYPE_INVALID, false, 0, 0);
/// Number of doorbell slots (ROCr's `MAX_NUM_DOORBELLS`).
pub const DOORBELL_SLOTS: usize = 1024;

/// Hardware queue error codes as ROCr's `DynamicScratchHandler` decodes them.
pub mod error_code {
    /// Invalid dimensions / workgroup sizes.
    pub const INVALID_DIM: i64 = 2;
    /// Invalid (or NULL) code object.
    pub const INVALID_CODE: i64 = 8;
    /// Invalid packet format.
    pub const INVALID_PACKET: i64 = 32;
}

/// One page of 64-bit doorbells; `(addr >> 3) & 1023` is distinct for every slot, as ROCr's trap map needs.
#[repr(C, align(8192))]
#[derive(Debug)]
pub struct DoorbellPage {
    slots: [AtomicU64; DOORBELL_SLOTS],
}

impl DoorbellPage {
    /// The page, backed by a memfd (returned too) so that a front-end can map the same doorbells again at the
    /// address the runtime chooses (KFD's doorbell mmap); a heap page with no fd (-1) if memfd is unavailable.
    fn new() -> (&'static DoorbellPage, i32) {
        let size = std::mem::size_of::<DoorbellPage>();
        // SAFETY: memfd_create reads a NUL-terminated name.
        let fd = unsafe { libc::memfd_create(c"rprof-emu-doorbells".as_ptr(), libc::MFD_CLOEXEC) };
        // SAFETY: ftruncate on our fresh memfd.
        if fd >= 0 && unsafe { libc::ftruncate(fd, size as libc::off_t) } == 0 {
            let align = std::mem::align_of::<DoorbellPage>();
            // SAFETY: reserves fresh address space (nothing is replaced) to carve an aligned window from.
            let r = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    size + align,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if r != libc::MAP_FAILED {
                let at = (r as usize).next_multiple_of(align);
                // SAFETY: maps our memfd over the aligned window of our own reservation.
                let p = unsafe {
                    libc::mmap(
                        at as *mut libc::c_void,
                        size,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_SHARED | libc::MAP_FIXED,
                        fd,
                        0,
                    )
                };
                if p != libc::MAP_FAILED {
                    // SAFETY: the shared mapping is aligned for the type, zero-filled (valid AtomicU64s), sized for
                    // a DoorbellPage and never unmapped.
                    return (unsafe { &*(p as *const DoorbellPage) }, fd);
                }
            }
        }
        if fd >= 0 {
            // SAFETY: closing our own memfd.
            unsafe { libc::close(fd) };
        }
        let page = Box::new(DoorbellPage {
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
        });
        (Box::leak(page), -1)
    }
}

/// Counters exposed through `rprof_emu_get_stats`.
#[derive(Debug, Default)]
pub struct CpStats {
    /// Kernel dispatches retired.
    pub dispatches: AtomicU64,
    /// Barrier-AND/OR packets retired.
    pub barriers: AtomicU64,
    /// Vendor-specific and agent-dispatch packets retired.
    pub vendor_packets: AtomicU64,
    /// ROCr blit kernels executed on the host.
    pub blits: AtomicU64,
    /// Host kernels run.
    pub host_kernels: AtomicU64,
    /// Queue faults raised.
    pub faults: AtomicU64,
    /// Live queues.
    pub queues: AtomicU64,
    /// Blits skipped because they touched untracked memory.
    pub blits_skipped: AtomicU64,
    /// SDMA copies and fills executed.
    pub sdma_copies: AtomicU64,
    /// The device's timeline of kernel dispatches (for the exit report).
    pub timeline: Timeline,
    /// Every kernel object the command processor looked up, with its launches (for the exit report: what the
    /// device ran, per kernel, independently of any tool). Appended on a lookup-cache miss only; an object looked
    /// up again after its cache entry was dropped appears twice (the report adds them up).
    pub kernels: Mutex<Vec<std::sync::Arc<KernelLaunches>>>,
}

impl CpStats {
    /// Launches per kernel object, as `(object, symbol, launches)` in object order (entries of one object added
    /// up; objects looked up but never launched left out).
    pub fn kernel_launches(&self) -> Vec<(u64, Option<String>, u64)> {
        let kernels = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        let mut per_object: std::collections::BTreeMap<u64, (Option<String>, u64)> =
            Default::default();
        for k in kernels.iter() {
            let e = per_object.entry(k.object).or_insert((k.symbol.clone(), 0));
            e.1 += k.launches.load(Ordering::Relaxed);
        }
        per_object
            .into_iter()
            .filter(|(_, (_, n))| *n > 0)
            .map(|(object, (symbol, n))| (object, symbol, n))
            .collect()
    }
}

/// One kernel object's launches on the device.
#[derive(Debug)]
pub struct KernelLaunches {
    /// The kernel object (the dispatch packet's `kernel_object`).
    pub object: u64,
    /// Its symbol, from the code object in tracked memory that holds it (`None`: none does, as for the runtime's
    /// own blit kernels).
    pub symbol: Option<String>,
    /// Dispatches of it the command processor launched.
    pub launches: AtomicU64,
}

/// When the device ran kernels: written by the command processor alone (relaxed stores), read at exit for
/// `EVENT_REPORT`. Kernels may overlap; busy time is the union of their intervals `[start, modelled end]`.
#[derive(Debug, Default)]
pub struct Timeline {
    /// Start of the first kernel (`CLOCK_BOOTTIME` ns; 0 before any).
    pub first_start_ns: AtomicU64,
    /// Latest modelled end of any kernel launched so far.
    pub busy_until_ns: AtomicU64,
    /// Union of the kernels' intervals, ns.
    pub busy_ns: AtomicU64,
    /// Idle time between the first kernel's start and the last one's end, ns.
    pub idle_ns: AtomicU64,
    /// Idle gaps of more than 5 µs between kernels.
    pub idle_gaps: AtomicU64,
    /// Sum over retired kernels of how late the command processor retired each (actual minus modelled end), ns:
    /// time the host did not give the "hardware" a core when it needed one.
    pub late_retire_ns: AtomicU64,
    /// The latest any kernel was retired, ns.
    pub late_retire_max_ns: AtomicU64,
    /// Kernels launched so far (the index of the next one).
    pub launched: AtomicU64,
    /// The [`LARGEST_GAPS`] longest idle gaps, longest first: where a traced run's device waits for work.
    pub largest_gaps: std::sync::Mutex<Vec<IdleGap>>,
}

/// How many of the longest idle gaps [`Timeline`] keeps.
pub const LARGEST_GAPS: usize = 8;

/// One idle gap of the device: how long, when (after the first kernel's start) and before which kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleGap {
    /// Length, ns.
    pub ns: u64,
    /// Start of the gap after the first kernel's start, ns.
    pub at_ns: u64,
    /// Index of the kernel that ended it (0 = the first kernel).
    pub before_kernel: u64,
}

impl Timeline {
    /// A kernel launched at `start_ns` that runs until `end_ns` (starts come in time order: one thread launches).
    fn launch(&self, start_ns: u64, end_ns: u64) {
        let until = self.busy_until_ns.load(Ordering::Relaxed);
        let index = self.launched.fetch_add(1, Ordering::Relaxed);
        let first = self.first_start_ns.load(Ordering::Relaxed);
        if first == 0 {
            self.first_start_ns.store(start_ns, Ordering::Relaxed);
        } else if start_ns > until {
            let gap = start_ns - until;
            self.idle_ns.fetch_add(gap, Ordering::Relaxed);
            if gap > 5_000 {
                self.idle_gaps.fetch_add(1, Ordering::Relaxed);
                self.keep_if_largest(IdleGap {
                    ns: gap,
                    at_ns: until - first,
                    before_kernel: index,
                });
            }
        }
        let added = end_ns.saturating_sub(start_ns.max(until));
        self.busy_ns.fetch_add(added, Ordering::Relaxed);
        self.busy_until_ns
            .store(until.max(end_ns), Ordering::Relaxed);
    }

    /// Keeps `gap` among the [`LARGEST_GAPS`] longest (gaps over 5 µs only: a few dozen a run).
    fn keep_if_largest(&self, gap: IdleGap) {
        let mut gaps = self.largest_gaps.lock().unwrap_or_else(|e| e.into_inner());
        let at = gaps.partition_point(|g| g.ns >= gap.ns);
        if at < LARGEST_GAPS {
            gaps.insert(at, gap);
            gaps.truncate(LARGEST_GAPS);
        }
    }

    /// A kernel whose modelled end was `deadline_ns` retired at `now_ns`.
    fn retire(&self, deadline_ns: u64, now_ns: u64) {
        let late = now_ns.saturating_sub(deadline_ns);
        self.late_retire_ns.fetch_add(late, Ordering::Relaxed);
        self.late_retire_max_ns.fetch_max(late, Ordering::Relaxed);
    }
}

#[derive(Debug)]
struct HwQueue {
    id: u64,
    node: u32,
    ring: usize,
    mask: u64,
    doorbell_slot: usize,
    read_ptr: usize,
    amd_queue: usize,
    rd: u64,
    inflight: u32,
    suspended: bool,
    faulted: bool,
    /// Set for SDMA queues (the ring holds SDMA packets, not AQL).
    sdma: Option<crate::sdma::SdmaState>,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Pending {
    deadline: std::cmp::Reverse<u64>,
    seq: std::cmp::Reverse<u64>,
    queue: u64,
    node: u32,
    cus: u32,
    signal: u64,
    start_ns: u64,
    profiling: bool,
}

/// State shared between the API threads and the CP thread.
#[derive(Debug)]
pub struct CommandProcessor {
    queues: Mutex<Vec<HwQueue>>,
    doorbells: &'static DoorbellPage,
    doorbell_fd: i32,
    doorbell_used: Mutex<Vec<bool>>,
    next_queue_id: AtomicU64,
    kick: (Mutex<bool>, Condvar),
    started: AtomicBool,
    /// Counters.
    pub stats: CpStats,
}

/// Parameters of `hsaKmtCreateQueue` the CP needs.
#[derive(Debug, Clone, Copy)]
pub struct QueueSpec {
    /// GPU node.
    pub node: u32,
    /// Ring base.
    pub ring: usize,
    /// Ring bytes (power of two multiple of 64).
    pub ring_bytes: usize,
    /// Address of `amd_queue_t.read_dispatch_id`.
    pub read_ptr: usize,
}

impl Default for CommandProcessor {
    fn default() -> Self {
        Self::new()
    }
}

impl CommandProcessor {
    /// No queues, thread not started.
    pub fn new() -> Self {
        let (doorbells, doorbell_fd) = DoorbellPage::new();
        CommandProcessor {
            queues: Mutex::new(Vec::new()),
            doorbells,
            doorbell_fd,
            doorbell_used: Mutex::new(vec![false; DOORBELL_SLOTS]),
            next_queue_id: AtomicU64::new(1),
            kick: (Mutex::new(false), Condvar::new()),
            started: AtomicBool::new(false),
            stats: CpStats::default(),
        }
    }

    fn lock_queues(&self) -> MutexGuard<'_, Vec<HwQueue>> {
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The memfd behind the doorbell page (-1 if it is a heap page), and the page's size: a front-end maps it where
    /// the runtime wants its doorbells (slot `i` at byte `8 * i`).
    pub fn doorbell_memfd(&self) -> (i32, usize) {
        (self.doorbell_fd, std::mem::size_of::<DoorbellPage>())
    }

    /// The slot index of a doorbell address returned by [`CommandProcessor::create_queue`].
    pub fn doorbell_slot(&self, addr: usize) -> Option<usize> {
        let off = addr.checked_sub(self.doorbells as *const DoorbellPage as usize)?;
        (off % 8 == 0 && off / 8 < DOORBELL_SLOTS).then_some(off / 8)
    }

    /// Wakes the CP thread from a nap.
    pub fn kick(&self) {
        *self.kick.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.kick.1.notify_one();
    }

    /// Registers a queue; returns `(queue id, doorbell address)`.
    pub fn create_queue(
        &'static self,
        emu: &'static Emulator,
        spec: QueueSpec,
    ) -> Option<(u64, usize)> {
        let packets = spec.ring_bytes / PACKET_BYTES;
        if spec.ring == 0 || spec.read_ptr == 0 || packets == 0 || !packets.is_power_of_two() {
            return None;
        }
        let slot = self.claim_doorbell()?;
        // SAFETY: ROCr passes the address of `amd_queue_t.read_dispatch_id`, a live, aligned u64 in its queue
        // structure, which outlives the hardware queue.
        let rd = unsafe { &*(spec.read_ptr as *const AtomicU64) }.load(Ordering::Acquire);
        let id = self.next_queue_id.fetch_add(1, Ordering::Relaxed);
        self.lock_queues().push(HwQueue {
            id,
            node: spec.node,
            ring: spec.ring,
            mask: packets as u64 - 1,
            doorbell_slot: slot,
            read_ptr: spec.read_ptr,
            amd_queue: spec.read_ptr - offset_of!(amd_queue_t, read_dispatch_id),
            rd,
            inflight: 0,
            suspended: false,
            faulted: false,
            sdma: None,
        });
        self.stats.queues.fetch_add(1, Ordering::Relaxed);
        self.start(emu);
        self.kick();
        Some((id, &self.doorbells.slots[slot] as *const AtomicU64 as usize))
    }

    /// A free doorbell slot, reset to 0 and marked used.
    fn claim_doorbell(&self) -> Option<usize> {
        let slot = {
            let mut used = self.doorbell_used.lock().unwrap_or_else(|e| e.into_inner());
            let slot = used.iter().position(|u| !u)?;
            used[slot] = true;
            slot
        };
        self.doorbells.slots[slot].store(0, Ordering::Release);
        Some(slot)
    }

    /// Registers an SDMA queue; returns `(queue id, doorbell, read-index address, write-index address)`.
    pub fn create_sdma_queue(
        &'static self,
        emu: &'static Emulator,
        node: u32,
        ring: usize,
        ring_bytes: usize,
    ) -> Option<(u64, usize, usize, usize)> {
        self.create_sdma_queue_publishing(emu, node, ring, ring_bytes, 0)
    }

    /// [`CommandProcessor::create_sdma_queue`] that also publishes the read index at `external_read_ptr` (an
    /// aligned u64 in tracked memory that outlives the queue, or 0), as KFD does for the runtime's queue structure.
    pub fn create_sdma_queue_publishing(
        &'static self,
        emu: &'static Emulator,
        node: u32,
        ring: usize,
        ring_bytes: usize,
        external_read_ptr: usize,
    ) -> Option<(u64, usize, usize, usize)> {
        if ring == 0 || ring_bytes < 256 || !ring_bytes.is_power_of_two() {
            return None;
        }
        let slot = self.claim_doorbell()?;
        let mut state = crate::sdma::SdmaState::new(ring_bytes as u64);
        state.external_read_ptr = external_read_ptr;
        let rptr = &*state.read_index as *const AtomicU64 as usize;
        let wptr = &*state.write_index as *const AtomicU64 as usize;
        let id = self.next_queue_id.fetch_add(1, Ordering::Relaxed);
        self.lock_queues().push(HwQueue {
            id,
            node,
            ring,
            mask: 0,
            doorbell_slot: slot,
            read_ptr: rptr,
            amd_queue: 0,
            rd: 0,
            inflight: 0,
            suspended: false,
            faulted: false,
            sdma: Some(state),
        });
        self.stats.queues.fetch_add(1, Ordering::Relaxed);
        self.start(emu);
        self.kick();
        Some((
            id,
            &self.doorbells.slots[slot] as *const AtomicU64 as usize,
            rptr,
            wptr,
        ))
    }

    /// Unregisters a queue. When this returns the CP no longer touches its ring.
    pub fn destroy_queue(&self, id: u64) -> bool {
        let mut qs = self.lock_queues();
        let Some(pos) = qs.iter().position(|q| q.id == id) else {
            return false;
        };
        let q = qs.remove(pos);
        drop(qs);
        self.doorbell_used.lock().unwrap_or_else(|e| e.into_inner())[q.doorbell_slot] = false;
        self.stats.queues.fetch_sub(1, Ordering::Relaxed);
        true
    }

    /// Suspends (`percentage == 0`) or resumes a queue.
    pub fn update_queue(&self, id: u64, percentage: u32) -> bool {
        let mut qs = self.lock_queues();
        let Some(q) = qs.iter_mut().find(|q| q.id == id) else {
            return false;
        };
        q.suspended = percentage == 0;
        drop(qs);
        self.kick();
        true
    }

    fn start(&'static self, emu: &'static Emulator) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("rprof-emu-cp".into())
            .spawn(move || {
                // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer slack (1 ns: precise naps).
                unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0u64, 0u64, 0u64) };
                // SAFETY: gettid and setpriority on this thread only; a refusal (no privilege to go below 0)
                // leaves the default priority.
                let refused = unsafe {
                    libc::setpriority(
                        libc::PRIO_PROCESS,
                        libc::gettid() as libc::id_t,
                        emu.config.cp_nice,
                    ) != 0
                };
                if refused && emu.config.log {
                    eprintln!(
                        "rprof-emu: the command processor keeps the default priority (nice {} refused)",
                        emu.config.cp_nice
                    );
                }
                if emu.config.cp_realtime {
                    let param = libc::sched_param { sched_priority: 1 };
                    // SAFETY: sched_setscheduler on this thread (pid 0) with a parameter block we own; a refusal
                    // leaves the policy set above.
                    let refused = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0;
                    if refused {
                        eprintln!(
                            "rprof-emu: RPROF_EMU_CP_REALTIME=1 refused (needs root or CAP_SYS_NICE); the command \
                             processor keeps nice {}",
                            emu.config.cp_nice
                        );
                    }
                }
                CpThread::new(emu).run();
            });
        if spawned.is_err() {
            self.started.store(false, Ordering::Release);
        }
    }
}

/// Per-node facts the CP needs.
#[derive(Debug, Clone, Copy, Default)]
struct NodeInfo {
    cus: u32,
    fcompute_cores: u32,
    free_cus: u32,
}

#[derive(Debug, Clone)]
struct KernelInfo {
    /// Serial of the tracked range holding the kernel object (None: untracked memory).
    range_serial: Option<u64>,
    host: Option<HostKernel>,
    duration_override: Option<u64>,
    /// Its symbol and launch count, also listed in [`CpStats::kernels`].
    launches: std::sync::Arc<KernelLaunches>,
}

struct CpThread {
    emu: &'static Emulator,
    cp: &'static CommandProcessor,
    heap: BinaryHeap<Pending>,
    nodes: Vec<NodeInfo>,
    seq: u64,
    kernel_cache: HashMap<u64, std::sync::Arc<KernelInfo>>,
    cache_epochs: (u64, u64),
}

/// The signal's fields as atomics.
///
/// # Safety
/// `handle` must be the address of a live `amd_signal_t`.
unsafe fn signal_value<'a>(handle: u64) -> &'a AtomicI64 {
    // SAFETY: per the contract, `handle + offset` is the aligned i64 `value` field of a live signal.
    unsafe {
        &*((handle as usize + offset_of!(amd_signal_t, __bindgen_anon_1)) as *const AtomicI64)
    }
}

/// The event slot whose interrupt history records rings of a signal with this mailbox and event id: the slot of
/// our own mailbox array (thunk front-end), or the event id itself when the mailbox lives in an event page the
/// runtime mapped from tracked memory (KFD front-end, where the slot index is the event id). `None` for a
/// signal without a usable mailbox.
fn interrupt_slot(emu: &Emulator, mailbox: u64, event_id: u32) -> Option<u32> {
    if mailbox == 0 {
        return None;
    }
    emu.events.id_of_mailbox(mailbox).or_else(|| {
        (mailbox % 8 == 0 && emu.memory.view().contains(mailbox as usize, 8)).then_some(event_id)
    })
}

/// The event slot whose interrupt history records rings of a live signal (`None` without a usable mailbox).
///
/// # Safety
/// `handle` must be the address of a live `amd_signal_t`.
pub unsafe fn signal_interrupt_slot(emu: &Emulator, handle: u64) -> Option<u32> {
    // SAFETY: live signal (contract).
    unsafe { InterruptTarget::of(emu, handle) }.map(|t| t.slot)
}

/// Where a signal's interrupt goes: its event slot (see [`interrupt_slot`]), mailbox and event id. Read once
/// per device update of the signal: the ring is noted before the new value is stored, the interrupt raised
/// after.
struct InterruptTarget {
    slot: u32,
    mailbox: u64,
    event_id: u32,
}

impl InterruptTarget {
    /// The target of a live signal, `None` for one without a usable mailbox.
    ///
    /// # Safety
    /// `handle` must be the address of a live `amd_signal_t`.
    unsafe fn of(emu: &Emulator, handle: u64) -> Option<Self> {
        let base = handle as usize;
        // SAFETY: the signal is live (contract); its mailbox pointer and event id are plain aligned fields.
        let (mailbox, event_id) = unsafe {
            (
                (*((base + offset_of!(amd_signal_t, event_mailbox_ptr)) as *const AtomicU64))
                    .load(Ordering::Acquire),
                (*((base + offset_of!(amd_signal_t, event_id)) as *const AtomicU32))
                    .load(Ordering::Acquire),
            )
        };
        interrupt_slot(emu, mailbox, event_id).map(|slot| InterruptTarget {
            slot,
            mailbox,
            event_id,
        })
    }

    /// Notes that the device rings the signal now (`CLOCK_BOOTTIME`). Callers note the ring *before* they
    /// store the signal's new value: a waiter that saw that value (even while still spinning, or woken by the
    /// scheduler rather than the interrupt) then always finds the ring at or before its wake.
    fn note_ring(&self, emu: &Emulator) {
        emu.events.note_interrupt(self.slot, crate::clock::now_ns());
    }

    /// Does what CP firmware + KFD do once a signal with a mailbox changed: write the event id to the mailbox
    /// and fire the event.
    fn raise(&self, emu: &Emulator) {
        // SAFETY: the mailbox is either one of our event-page slots or inside tracked memory (checked by
        // `interrupt_slot`), 8-byte aligned.
        unsafe {
            (*(self.mailbox as *const AtomicU64)).store(u64::from(self.event_id), Ordering::Release)
        };
        if emu.events.fire(self.event_id).is_err() && self.slot != self.event_id {
            let _ = emu.events.fire(self.slot);
        }
    }
}

/// A device update of a signal: notes the ring, applies `update` to the value, then raises the interrupt (for
/// a signal with a mailbox; otherwise just the update).
///
/// # Safety
/// `handle` must be the address of a live `amd_signal_t`.
unsafe fn device_update(emu: &Emulator, handle: u64, update: impl FnOnce(&AtomicI64)) {
    // SAFETY: live signal (contract).
    let (value, target) = unsafe { (signal_value(handle), InterruptTarget::of(emu, handle)) };
    if let Some(target) = &target {
        target.note_ring(emu);
    }
    update(value);
    if let Some(target) = &target {
        target.raise(emu);
    }
}

/// Raises the interrupt of a signal whose value does not change (s_sendmsg on its own).
///
/// # Safety
/// `handle` must be the address of a live `amd_signal_t`.
pub unsafe fn signal_interrupt(emu: &Emulator, handle: u64) {
    // SAFETY: live signal (contract).
    unsafe { device_update(emu, handle, |_| {}) };
}

/// What a wave ringing an RPC doorbell does: adds `delta` to the signal's value and, if the value was 0 (the
/// server had consumed every earlier ring), raises the interrupt. The ring is noted before the add publishes
/// the new value. Returns the old value.
///
/// The device is the only writer that makes the value non-zero (the server only takes it back to 0), so a
/// value read as 0 stays 0 until this add. Should another device thread add in between (the compare-exchange
/// fails), the note already made names a slightly later ring time than that thread's; the next wake then
/// reads that time.
///
/// # Safety
/// `handle` must be the address of a live `amd_signal_t`.
pub unsafe fn signal_ring(emu: &Emulator, handle: u64, delta: i64) -> i64 {
    // SAFETY: live signal (contract).
    let (value, target) = unsafe { (signal_value(handle), InterruptTarget::of(emu, handle)) };
    let mut old = value.load(Ordering::Acquire);
    loop {
        if let (0, Some(target)) = (old, &target) {
            target.note_ring(emu);
        }
        match value.compare_exchange(
            old,
            old.wrapping_add(delta),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => break,
            Err(now) => old = now,
        }
    }
    if let (0, Some(target)) = (old, &target) {
        target.raise(emu);
    }
    old
}

/// Whether a BARRIER_VALUE packet's condition holds for the waited-on signal's current `value`:
/// `(value & mask) cond packet.value` (EQ, NE, LT, GTE; an unknown condition never holds).
fn barrier_value_met(value: i64, p: &hsa_amd_barrier_value_packet_t) -> bool {
    let v = value & p.mask;
    match p.cond {
        hsa_sys::HSA_SIGNAL_CONDITION_EQ => v == p.value,
        hsa_sys::HSA_SIGNAL_CONDITION_NE => v != p.value,
        hsa_sys::HSA_SIGNAL_CONDITION_LT => v < p.value,
        hsa_sys::HSA_SIGNAL_CONDITION_GTE => v >= p.value,
        _ => false,
    }
}

/// Completes a signal as the CP does at the end of a packet: optional timestamps, `value += delta`, interrupt.
///
/// # Safety
/// `handle` must be 0 or the address of a live `amd_signal_t`.
pub unsafe fn signal_complete(emu: &Emulator, handle: u64, delta: i64, ticks: Option<(u64, u64)>) {
    if handle == 0 {
        return;
    }
    let base = handle as usize;
    if let Some((start, end)) = ticks {
        // SAFETY: live signal (contract); start_ts/end_ts are aligned u64 fields nobody else writes meanwhile.
        unsafe {
            (*((base + offset_of!(amd_signal_t, start_ts)) as *const AtomicU64))
                .store(start, Ordering::Relaxed);
            (*((base + offset_of!(amd_signal_t, end_ts)) as *const AtomicU64))
                .store(end, Ordering::Relaxed);
        }
    }
    // SAFETY: live signal (contract).
    unsafe {
        device_update(emu, handle, |v| {
            v.fetch_add(delta, Ordering::AcqRel);
        })
    };
}

fn ring_packet(q: &HwQueue, index: u64) -> usize {
    q.ring + (index & q.mask) as usize * PACKET_BYTES
}

impl CpThread {
    fn new(emu: &'static Emulator) -> Self {
        let mut nodes = vec![NodeInfo::default(); emu.topology.nodes.len()];
        for (id, g) in emu.topology.gpu_nodes() {
            nodes[id as usize] = NodeInfo {
                cus: g.cus,
                fcompute_cores: g.cus * g.model.simds_per_cu,
                free_cus: g.cus,
            };
        }
        CpThread {
            emu,
            cp: &emu.cp,
            heap: BinaryHeap::new(),
            nodes,
            seq: 0,
            kernel_cache: HashMap::new(),
            cache_epochs: (u64::MAX, u64::MAX),
        }
    }

    fn run(&mut self) {
        let spin_ns = self.emu.config.spin_us * 1_000;
        let deadline_spin_ns = self.emu.config.deadline_spin_us * 1_000;
        let max_nap_ns = self.emu.config.max_nap_us * 1_000;
        let deep_nap_ns = self.emu.config.deep_nap_us.max(self.emu.config.max_nap_us) * 1_000;
        const MIN_NAP_NS: u64 = 10_000;
        const DEEP_IDLE_NS: u64 = 1_000_000_000;
        let mut last_activity = now_ns();
        let mut nap_ns = MIN_NAP_NS;
        loop {
            // A bug must not silently stop the GPU (every waiter would hang): report it and keep serving.
            let pass = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut progress = self.retire(now_ns());
                let mut qs = self.cp.lock_queues();
                for q in qs.iter_mut() {
                    progress |= self.process_queue(q);
                }
                progress
            }));
            let progress = pass.unwrap_or_else(|_| {
                eprintln!("rprof-emu: internal error in the command processor; continuing");
                true
            });
            let now = now_ns();
            if progress {
                last_activity = now;
                nap_ns = MIN_NAP_NS;
                continue;
            }
            let next_deadline = self.heap.peek().map(|p| p.deadline.0);
            if next_deadline.is_some_and(|d| d <= now) {
                continue;
            }
            let deadline_near = next_deadline.is_some_and(|d| d - now < deadline_spin_ns);
            // A kernel about to end: a GPU does not give its engine away. Yielding here
            // handed the core to whichever host thread was runnable (a profiler's writer,
            // the app) for up to a time slice, stretching the device's timeline.
            if deadline_near && self.emu.config.deadline_spin {
                std::hint::spin_loop();
                continue;
            }
            if now.saturating_sub(last_activity) < spin_ns || deadline_near {
                std::thread::yield_now();
                continue;
            }
            // After a second of silence the CP is "deeply idle" and naps longer (bounded CPU cost while idle,
            // at most `deep_nap_us` latency for the first packet after a long pause).
            let cap = if now.saturating_sub(last_activity) > DEEP_IDLE_NS {
                deep_nap_ns
            } else {
                max_nap_ns
            };
            let mut sleep = nap_ns.min(cap);
            nap_ns = (nap_ns * 2).min(cap.max(MIN_NAP_NS));
            if let Some(d) = next_deadline {
                sleep = sleep.min(d - now);
            }
            // With no queue and nothing in flight there is no doorbell to watch: sleep until a queue is created.
            let nothing_to_watch = self.heap.is_empty() && self.cp.lock_queues().is_empty();
            let (lock, cv) = &self.cp.kick;
            let mut kicked = lock.lock().unwrap_or_else(|e| e.into_inner());
            if !*kicked {
                kicked = if nothing_to_watch {
                    cv.wait(kicked).unwrap_or_else(|e| e.into_inner())
                } else {
                    cv.wait_timeout(kicked, Duration::from_nanos(sleep))
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                };
            }
            if *kicked {
                *kicked = false;
                last_activity = now_ns();
                nap_ns = MIN_NAP_NS;
            }
        }
    }

    /// Retires kernels whose deadline passed.
    fn retire(&mut self, now: u64) -> bool {
        let mut progress = false;
        while self.heap.peek().is_some_and(|p| p.deadline.0 <= now) {
            let Some(p) = self.heap.pop() else { break };
            progress = true;
            if let Some(n) = self.nodes.get_mut(p.node as usize) {
                n.free_cus += p.cus;
            }
            let mut qs = self.cp.lock_queues();
            let Some(q) = qs.iter_mut().find(|q| q.id == p.queue) else {
                continue;
            };
            q.inflight = q.inflight.saturating_sub(1);
            let ticks = p
                .profiling
                .then(|| (gpu_ticks_at(p.start_ns), gpu_ticks_at(p.deadline.0)));
            // SAFETY: the queue is still registered, so its packets' completion signals are live ROCr signals.
            unsafe { signal_complete(self.emu, p.signal, -1, ticks) };
            self.cp.stats.dispatches.fetch_add(1, Ordering::Relaxed);
            self.cp.stats.timeline.retire(p.deadline.0, now);
        }
        progress
    }

    fn header(q: &HwQueue, index: u64) -> &AtomicU16 {
        // SAFETY: the queue is registered (we hold the queue lock), so its ring is live; packets are 64-byte aligned.
        unsafe { &*(ring_packet(q, index) as *const AtomicU16) }
    }

    fn consume(q: &mut HwQueue) {
        Self::header(q, q.rd).store(INVALID_HEADER, Ordering::Release);
        q.rd += 1;
        // SAFETY: `read_ptr` is `amd_queue_t.read_dispatch_id` of a registered queue.
        unsafe { &*(q.read_ptr as *const AtomicU64) }.store(q.rd, Ordering::Release);
    }

    fn queue_profiling(q: &HwQueue) -> bool {
        // SAFETY: `amd_queue` is the live `amd_queue_t` of a registered queue.
        let props = unsafe {
            &*((q.amd_queue + offset_of!(amd_queue_t, queue_properties)) as *const AtomicU32)
        };
        props.load(Ordering::Relaxed) & PROFILING_BIT != 0
    }

    fn fault(&self, q: &mut HwQueue, code: i64) {
        q.faulted = true;
        self.cp.stats.faults.fetch_add(1, Ordering::Relaxed);
        if self.emu.config.log {
            eprintln!(
                "rprof-emu: queue {} packet {} fault code {code}",
                q.id, q.rd
            );
        }
        // SAFETY: live `amd_queue_t` of a registered queue.
        let sig = unsafe {
            (*((q.amd_queue + offset_of!(amd_queue_t, queue_inactive_signal)) as *const AtomicU64))
                .load(Ordering::Acquire)
        };
        if sig != 0 {
            // SAFETY: ROCr's queue_inactive_signal is a live signal for the queue's lifetime.
            unsafe { device_update(self.emu, sig, |v| v.store(code, Ordering::Release)) };
        }
    }

    /// Launches / retires packets of one queue; returns whether anything happened.
    fn process_queue(&mut self, q: &mut HwQueue) -> bool {
        let mut progress = false;
        if let Some(state) = q.sdma.as_mut() {
            if q.suspended {
                return false;
            }
            // SDMA rings stop at the doorbell's value (a byte offset); AQL queues below go by headers.
            let db = self.cp.doorbells.slots[q.doorbell_slot].load(Ordering::Acquire);
            // SAFETY: the queue is registered (queue lock held), so its ring is live for `ring_bytes`.
            return unsafe { crate::sdma::run_queue(self.emu, q.ring, state, db) };
        }
        loop {
            if q.suspended || q.faulted {
                return progress;
            }
            // AQL doorbells (DoorbellType 2) only say that packets are there; a valid header says which.
            // Producers sharing a queue ring in any order, so the value last stored can be below a packet
            // already published (packet i+1 rung, then packet i): stopping at the doorbell's value left such a
            // packet waiting for ever. A consumed slot has its header set back to INVALID, so the header at
            // `rd` is valid only for a packet published since.
            let header = Self::header(q, q.rd).load(Ordering::Acquire);
            let ty = header_packet_type(header);
            if ty == HSA_PACKET_TYPE_INVALID {
                return progress;
            }
            if header_barrier(header) && q.inflight > 0 {
                return progress;
            }
            let slot = ring_packet(q, q.rd);
            match ty {
                HSA_PACKET_TYPE_KERNEL_DISPATCH => {
                    // SAFETY: a valid header was acquire-loaded, so the producer's packet body is visible; the ring is live.
                    let p = unsafe {
                        std::ptr::read_volatile(slot as *const hsa_kernel_dispatch_packet_t)
                    };
                    match self.launch(q, &p) {
                        Launch::Started => {}
                        Launch::Stalled => return progress,
                        Launch::Fault(code) => {
                            self.fault(q, code);
                            return progress;
                        }
                    }
                    Self::consume(q);
                }
                HSA_PACKET_TYPE_BARRIER_AND | HSA_PACKET_TYPE_BARRIER_OR => {
                    // SAFETY: as above.
                    let p =
                        unsafe { std::ptr::read_volatile(slot as *const hsa_barrier_and_packet_t) };
                    let deps = p.dep_signal.iter().map(|s| s.handle).filter(|h| *h != 0);
                    // SAFETY: dependency handles in a submitted barrier packet are live signals.
                    let mut done = deps
                        .clone()
                        .map(|h| unsafe { signal_value(h) }.load(Ordering::Acquire) == 0);
                    let ready = if ty == HSA_PACKET_TYPE_BARRIER_AND {
                        done.all(|d| d)
                    } else {
                        deps.clone().next().is_none() || done.any(|d| d)
                    };
                    if !ready {
                        return progress;
                    }
                    let now = now_ns();
                    let ticks =
                        Self::queue_profiling(q).then(|| (gpu_ticks_at(now), gpu_ticks_at(now)));
                    Self::consume(q);
                    // SAFETY: the completion signal of a submitted packet is 0 or a live signal.
                    unsafe { signal_complete(self.emu, p.completion_signal.handle, -1, ticks) };
                    self.cp.stats.barriers.fetch_add(1, Ordering::Relaxed);
                }
                HSA_PACKET_TYPE_VENDOR_SPECIFIC
                    // SAFETY: a valid header was acquire-loaded; the format byte is inside the live packet.
                    if unsafe { std::ptr::read_volatile((slot + VENDOR_FORMAT_OFFSET) as *const u8) }
                        == VENDOR_FORMAT_BARRIER_VALUE =>
                {
                    // SAFETY: as above.
                    let p = unsafe {
                        std::ptr::read_volatile(slot as *const hsa_amd_barrier_value_packet_t)
                    };
                    // SAFETY: the waited-on signal of a submitted packet is 0 or a live signal.
                    if p.signal.handle != 0 && !barrier_value_met(unsafe { signal_value(p.signal.handle) }.load(Ordering::Acquire), &p) {
                        return progress;
                    }
                    let now = now_ns();
                    let ticks =
                        Self::queue_profiling(q).then(|| (gpu_ticks_at(now), gpu_ticks_at(now)));
                    Self::consume(q);
                    // SAFETY: the completion signal of a submitted packet is 0 or a live signal.
                    unsafe { signal_complete(self.emu, p.completion_signal.handle, -1, ticks) };
                    self.cp.stats.vendor_packets.fetch_add(1, Ordering::Relaxed);
                }
                HSA_PACKET_TYPE_VENDOR_SPECIFIC | HSA_PACKET_TYPE_AGENT_DISPATCH => {
                    // SAFETY: every packet format keeps its completion signal at byte 56; the ring is live.
                    let sig = unsafe {
                        std::ptr::read_volatile((slot + COMPLETION_SIGNAL_OFFSET) as *const u64)
                    };
                    Self::consume(q);
                    // SAFETY: 0 or a live signal, as above.
                    unsafe { signal_complete(self.emu, sig, -1, None) };
                    self.cp.stats.vendor_packets.fetch_add(1, Ordering::Relaxed);
                }
                _ => {
                    self.fault(q, error_code::INVALID_PACKET);
                    return progress;
                }
            }
            progress = true;
        }
    }

    fn kernel_info(&mut self, object: u64) -> std::sync::Arc<KernelInfo> {
        let epochs = (self.emu.memory.epoch(), self.emu.host_kernels.epoch());
        if epochs.1 != self.cache_epochs.1 {
            self.kernel_cache.clear();
        } else if epochs.0 != self.cache_epochs.0 {
            // Memory was freed: keep only entries whose tracked range is still there.
            let view = self.emu.memory.view();
            self.kernel_cache.retain(|object, k| {
                k.range_serial.is_some()
                    && view.find(*object as usize).map(|r| r.serial) == k.range_serial
            });
        }
        self.cache_epochs = epochs;
        if let Some(k) = self.kernel_cache.get(&object) {
            return k.clone();
        }
        let name = kernel_symbol(&self.emu.memory, object);
        let host = self.emu.host_kernels.lookup(object, name.as_deref());
        let duration_override = self.emu.config.kernel_override(object, name.as_deref());
        let launches = std::sync::Arc::new(KernelLaunches {
            object,
            symbol: name,
            launches: AtomicU64::new(0),
        });
        self.cp
            .stats
            .kernels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(launches.clone());
        let info = std::sync::Arc::new(KernelInfo {
            launches,
            host,
            duration_override,
            range_serial: self
                .emu
                .memory
                .view()
                .find(object as usize)
                .map(|r| r.serial),
        });
        if self.emu.config.log {
            eprintln!(
                "rprof-emu: kernel object {object:#x} = {:?} (host implementation: {})",
                info.launches.symbol,
                info.host.is_some()
            );
        }
        self.kernel_cache.insert(object, info.clone());
        info
    }

    fn launch(&mut self, q: &mut HwQueue, p: &hsa_kernel_dispatch_packet_t) -> Launch {
        if p.kernel_object == 0 {
            return Launch::Fault(error_code::INVALID_CODE);
        }
        let dims = p.setup & 3;
        let sizes = [
            (p.grid_size_x, p.workgroup_size_x),
            (p.grid_size_y, p.workgroup_size_y),
            (p.grid_size_z, p.workgroup_size_z),
        ];
        if dims == 0 || sizes.iter().any(|(g, w)| *g == 0 || *w == 0) {
            return Launch::Fault(error_code::INVALID_DIM);
        }
        let workgroups: u64 = sizes
            .iter()
            .map(|(g, w)| u64::from(*g).div_ceil(u64::from(*w)))
            .product();
        let node = self.nodes.get(q.node as usize).copied().unwrap_or_default();
        let need = workgroups.min(u64::from(node.cus.max(1))) as u32;
        if node.free_cus < need {
            return Launch::Stalled;
        }
        let info = self.kernel_info(p.kernel_object);
        info.launches.launches.fetch_add(1, Ordering::Relaxed);
        if let Some(h) = info.host {
            // SAFETY: the registrant promised a function with this signature; it gets a copy of the packet and the
            // packet's kernarg pointer, exactly what a real kernel would see.
            unsafe { (h.func)(p, p.kernarg_address, h.user_data as *mut libc::c_void) };
            self.cp.stats.host_kernels.fetch_add(1, Ordering::Relaxed);
        } else if let Some(name) = info.launches.symbol.as_deref() {
            if name.starts_with("__amd_rocclr_") {
                self.try_rocclr_blit(name, p);
            }
        } else {
            self.try_blit(p, node.fcompute_cores);
        }
        let duration = info
            .duration_override
            .unwrap_or_else(|| self.emu.config.model_duration_ns(workgroups, node.cus));
        let start_ns = now_ns();
        let end_ns = start_ns.saturating_add(duration);
        self.cp.stats.timeline.launch(start_ns, end_ns);
        self.seq += 1;
        self.heap.push(Pending {
            deadline: std::cmp::Reverse(end_ns),
            seq: std::cmp::Reverse(self.seq),
            queue: q.id,
            node: q.node,
            cus: need,
            signal: p.completion_signal.handle,
            start_ns,
            profiling: Self::queue_profiling(q),
        });
        if let Some(n) = self.nodes.get_mut(q.node as usize) {
            n.free_cus -= need;
        }
        q.inflight += 1;
        Launch::Started
    }

    fn try_rocclr_blit(&self, name: &str, p: &hsa_kernel_dispatch_packet_t) {
        let karg = p.kernarg_address as usize;
        let Some(args) = crate::kernels::read_untracked(karg, 64) else {
            return;
        };
        let Some(blit) = crate::kernels::rocclr_blit(name, &args) else {
            return;
        };
        let ok = match blit {
            RocclrBlit::Copy { dst, src, len } => {
                self.emu
                    .memory
                    .view()
                    .copy(dst as usize, src as usize, len as usize)
                    || crate::memory::copy_untrusted(dst as usize, src as usize, len as usize)
            }
            RocclrBlit::Fill {
                dst,
                pattern,
                pattern_len,
                repeats,
            } => match crate::kernels::read_untracked(
                // A GPU address of locked host memory (KFD's userptr alternate VA) reads through its host pages.
                self.emu
                    .memory
                    .view()
                    .translate(pattern as usize, pattern_len as usize),
                pattern_len as usize,
            ) {
                Some(pat) if !pat.is_empty() && repeats.saturating_mul(pattern_len) <= 1 << 40 => {
                    let total = (repeats * pattern_len) as usize;
                    let chunk: Vec<u8> = pat
                        .iter()
                        .copied()
                        .cycle()
                        .take(total.min(1 << 20).max(pat.len()))
                        .collect();
                    let step = chunk.len() - chunk.len() % pat.len();
                    let mut done = 0usize;
                    let mut ok = true;
                    while ok && done < total {
                        let n = (total - done).min(step);
                        ok = crate::memory::copy_untrusted(
                            dst as usize + done,
                            chunk.as_ptr() as usize,
                            n,
                        );
                        done += n;
                    }
                    ok
                }
                _ => false,
            },
        };
        let counter = if ok {
            &self.cp.stats.blits
        } else {
            &self.cp.stats.blits_skipped
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if !ok && self.emu.config.log {
            eprintln!("rprof-emu: {name} {blit:?} touches unmapped memory; skipped");
        }
    }

    fn try_blit(&self, p: &hsa_kernel_dispatch_packet_t, fcompute_cores: u32) {
        let view = self.emu.memory.view();
        let karg = p.kernarg_address as usize;
        let Some((base, bytes)) = view.range_bytes(karg) else {
            return;
        };
        let kernarg = &bytes[karg - base..];
        let Some(blit) = recognise_blit(p, &kernarg[..kernarg.len().min(96)], fcompute_cores)
        else {
            return;
        };
        let ok = match blit {
            Blit::Copy { dst, src, len } => {
                view.copy(dst as usize, src as usize, len as usize)
                    || crate::memory::copy_untrusted(dst as usize, src as usize, len as usize)
            }
            Blit::Fill { dst, value, count } => {
                view.fill_u32(dst as usize, value, count as usize)
                    || crate::memory::fill_untrusted(dst as usize, value, count as usize)
            }
        };
        if ok {
            self.cp.stats.blits.fetch_add(1, Ordering::Relaxed);
        } else {
            self.cp.stats.blits_skipped.fetch_add(1, Ordering::Relaxed);
            if self.emu.config.log {
                eprintln!("rprof-emu: blit {blit:?} touches unmapped memory; skipped");
            }
        }
    }
}

enum Launch {
    Started,
    Stalled,
    Fault(i64),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_adds_up_an_objects_entries_and_leaves_out_unlaunched_ones() {
        let stats = CpStats::default();
        let entry = |object, symbol: Option<&str>, n| {
            std::sync::Arc::new(KernelLaunches {
                object,
                symbol: symbol.map(str::to_owned),
                launches: AtomicU64::new(n),
            })
        };
        stats.kernels.lock().unwrap().extend([
            entry(0x2000, Some("_Z1bv"), 2),
            entry(0x1000, None, 1),
            entry(0x3000, Some("_Z1cv"), 0),
            // Looked up again after its cache entry was dropped.
            entry(0x2000, Some("_Z1bv"), 3),
        ]);
        assert_eq!(
            stats.kernel_launches(),
            [(0x1000, None, 1), (0x2000, Some("_Z1bv".to_owned()), 5)]
        );
    }

    #[test]
    fn the_timeline_counts_the_union_of_kernels_and_the_gaps_between() {
        let t = Timeline::default();
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        t.launch(1_000, 3_000); // busy 1000-3000
        t.launch(2_000, 4_000); // overlaps: +1000
        t.launch(3_500, 3_800); // inside: +0
        t.launch(6_000, 7_000); // 2000 idle (not over 5 µs), +1000
        t.launch(20_000, 21_000); // 13000 idle (over 5 µs), +1000
        assert_eq!(get(&t.first_start_ns), 1_000);
        assert_eq!(get(&t.busy_until_ns), 21_000);
        assert_eq!(get(&t.busy_ns), 2_000 + 1_000 + 1_000 + 1_000);
        assert_eq!(get(&t.idle_ns), 2_000 + 13_000);
        assert_eq!(get(&t.idle_gaps), 1);
        // The one gap over 5 µs: 13 µs, from 6 µs after the first start, before the fifth kernel.
        assert_eq!(
            *t.largest_gaps.lock().unwrap(),
            [IdleGap {
                ns: 13_000,
                at_ns: 6_000,
                before_kernel: 4
            }]
        );
        // Busy plus idle spans first start to last end.
        assert_eq!(get(&t.busy_ns) + get(&t.idle_ns), 21_000 - 1_000);
        t.retire(3_000, 3_000);
        t.retire(4_000, 4_700);
        t.retire(7_000, 6_900); // early (cannot happen, but must not wrap)
        assert_eq!(get(&t.late_retire_ns), 700);
        assert_eq!(get(&t.late_retire_max_ns), 700);
    }

    fn packet(value: i64, mask: i64, cond: u32) -> hsa_amd_barrier_value_packet_t {
        hsa_amd_barrier_value_packet_t {
            value,
            mask,
            cond,
            ..Default::default()
        }
    }

    #[test]
    fn barrier_value_conditions_compare_the_masked_signal() {
        // HIP's "wait until the dependency's value drops below 1" form.
        let lt_one = packet(1, i64::MAX, hsa_sys::HSA_SIGNAL_CONDITION_LT);
        assert!(!barrier_value_met(1, &lt_one));
        assert!(barrier_value_met(0, &lt_one));
        let eq = packet(4, 0xf, hsa_sys::HSA_SIGNAL_CONDITION_EQ);
        assert!(barrier_value_met(0x34, &eq));
        assert!(!barrier_value_met(0x35, &eq));
        let ne = packet(4, 0xf, hsa_sys::HSA_SIGNAL_CONDITION_NE);
        assert!(barrier_value_met(0x35, &ne));
        let gte = packet(3, -1, hsa_sys::HSA_SIGNAL_CONDITION_GTE);
        assert!(barrier_value_met(3, &gte));
        assert!(!barrier_value_met(2, &gte));
        assert!(!barrier_value_met(0, &packet(0, -1, 99)));
    }
}
