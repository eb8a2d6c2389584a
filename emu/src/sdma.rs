//! An emulated SDMA engine (opt-in with `RPROF_EMU_SDMA=1`).
//!
//! # Safety
//! The engine reads a ring that ROCr owns while the queue is registered (under the CP's queue lock, like AQL
//! rings) and writes the read pointer it owns itself. Addresses inside packets are never dereferenced unless they
//! lie in tracked memory; otherwise they are accessed through `process_vm_readv`/`writev` on our own pid, which
//! fail cleanly on unmapped memory.
//!
//! ROCr's `BlitSdma` (gfx9 `V4` / gfx10 `V5` flavour: 64-bit monotonic byte indices, `count = size - 1`) writes
//! packets into a byte ring, stores the new write index to `*Queue_write_ptr` and to the doorbell. The engine
//! executes packets from its read index up to the doorbell value and publishes the read index through
//! `*Queue_read_ptr`. Packets (layouts as in ROCr's `sdma_registers.h`): NOP (a zero dword), COPY_LINEAR, COPY_LINEAR_RECT,
//! CONST_FILL (dword fill), FENCE (32-bit store), TRAP (interrupt: fire event `int_ctx`), POLL_REGMEM (memory poll
//! "equal"; the register form used for HDP flushes is retired), ATOMIC (64-bit add), TIMESTAMP (GPU ticks) and GCR
//! (cache control, retired). An unknown opcode stops the queue. Copies take no modelled time.

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

use crate::clock::{gpu_ticks_at, now_ns};
use crate::Emulator;

const OP_NOP: u32 = 0;
const OP_COPY: u32 = 1;
const OP_FENCE: u32 = 5;
const OP_TRAP: u32 = 6;
const OP_POLL_REGMEM: u32 = 8;
const OP_ATOMIC: u32 = 10;
const OP_CONST_FILL: u32 = 11;
const OP_TIMESTAMP: u32 = 13;
const OP_GCR: u32 = 17;
const SUBOP_COPY_LINEAR: u32 = 0;
const SUBOP_COPY_LINEAR_RECT: u32 = 4;
const ATOMIC_ADD64: u32 = 47;

/// State of one SDMA queue, owned by the command processor's queue list.
#[derive(Debug)]
pub struct SdmaState {
    /// Ring size in bytes (power of two).
    pub ring_bytes: u64,
    /// Read index published to ROCr (`Queue_read_ptr`); boxed so its address is stable.
    pub read_index: Box<AtomicU64>,
    /// Write index ROCr stores (`Queue_write_ptr`).
    pub write_index: Box<AtomicU64>,
    /// Engine stopped on a bad packet.
    pub halted: bool,
    /// Another address (0 = none) where the read index is published too: KFD's SDMA queues report it in the
    /// runtime's own queue structure (`read_pointer_address` of `CREATE_QUEUE`).
    pub external_read_ptr: usize,
}

impl SdmaState {
    /// A fresh queue.
    pub fn new(ring_bytes: u64) -> SdmaState {
        SdmaState {
            ring_bytes,
            read_index: Box::new(AtomicU64::new(0)),
            write_index: Box::new(AtomicU64::new(0)),
            halted: false,
            external_read_ptr: 0,
        }
    }
}

/// What one step of the engine did.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// A packet of this many bytes was executed.
    Done(u64),
    /// The packet must wait (poll not satisfied) or is incomplete.
    Wait,
    /// Bad packet: the engine halts.
    Halt,
}

fn addr(lo: u32, hi: u32) -> usize {
    ((u64::from(hi) << 32) | u64::from(lo)) as usize
}

fn write_u32(emu: &Emulator, at: usize, value: u32) -> bool {
    if at % 4 == 0 && emu.memory.view().contains(at, 4) {
        // SAFETY: aligned and inside tracked memory (checked above).
        unsafe { (*(at as *const AtomicU32)).store(value, Ordering::Release) };
        return true;
    }
    crate::memory::copy_untrusted(at, &value as *const u32 as usize, 4)
}

fn write_u64(emu: &Emulator, at: usize, value: u64) -> bool {
    if at % 8 == 0 && emu.memory.view().contains(at, 8) {
        // SAFETY: aligned and inside tracked memory (checked above).
        unsafe { (*(at as *const AtomicU64)).store(value, Ordering::Release) };
        return true;
    }
    crate::memory::copy_untrusted(at, &value as *const u64 as usize, 8)
}

fn read_u32(emu: &Emulator, at: usize) -> Option<u32> {
    if at % 4 == 0 && emu.memory.view().contains(at, 4) {
        // SAFETY: aligned and inside tracked memory (checked above).
        return Some(unsafe { (*(at as *const AtomicU32)).load(Ordering::Acquire) });
    }
    let b = crate::kernels::read_untracked(at, 4)?;
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

/// Executes the packet whose dwords start at `dw` (at most `avail` dwords are readable).
pub fn step(emu: &Emulator, dw: &[u32]) -> Step {
    let Some(&header) = dw.first() else {
        return Step::Wait;
    };
    let op = header & 0xff;
    let sub_op = (header >> 8) & 0xff;
    let need = |n: usize| dw.len() >= n;
    match op {
        OP_NOP => Step::Done(4),
        OP_COPY if sub_op == SUBOP_COPY_LINEAR => {
            if !need(7) {
                return Step::Wait;
            }
            let len = (dw[1] & 0x3fff_ffff) as usize + 1;
            let (src, dst) = (addr(dw[3], dw[4]), addr(dw[5], dw[6]));
            let ok = emu.memory.view().copy(dst, src, len)
                || crate::memory::copy_untrusted(dst, src, len);
            count(emu, ok);
            Step::Done(28)
        }
        OP_COPY if sub_op == SUBOP_COPY_LINEAR_RECT => {
            if !need(13) {
                return Step::Wait;
            }
            count(emu, copy_rect(emu, header, dw));
            Step::Done(52)
        }
        OP_CONST_FILL => {
            if !need(5) {
                return Step::Wait;
            }
            let dst = addr(dw[1], dw[2]);
            let dwords = (dw[4] & 0x3fff_ffff) as usize / 4 + 1;
            let ok = emu.memory.view().fill_u32(dst, dw[3], dwords)
                || crate::memory::fill_untrusted(dst, dw[3], dwords);
            count(emu, ok);
            Step::Done(20)
        }
        OP_FENCE => {
            if !need(4) {
                return Step::Wait;
            }
            write_u32(emu, addr(dw[1], dw[2]), dw[3]);
            Step::Done(16)
        }
        OP_TRAP => {
            if !need(2) {
                return Step::Wait;
            }
            let _ = emu.events.fire(dw[1] & 0x0fff_ffff);
            Step::Done(8)
        }
        OP_POLL_REGMEM => {
            if !need(6) {
                return Step::Wait;
            }
            let mem_poll = header >> 31 != 0;
            let func = (header >> 28) & 7;
            if !mem_poll {
                return Step::Done(24); // register poll (HDP flush): nothing to wait for
            }
            let Some(v) = read_u32(emu, addr(dw[1], dw[2])) else {
                return Step::Halt;
            };
            let (reference, mask) = (dw[3], dw[4]);
            let ok = match func {
                0 => true,
                1 => v & mask < reference,
                2 => v & mask <= reference,
                3 => v & mask == reference,
                4 => v & mask != reference,
                5 => v & mask >= reference,
                6 => v & mask > reference,
                _ => false,
            };
            if ok {
                Step::Done(24)
            } else {
                Step::Wait
            }
        }
        OP_ATOMIC => {
            if !need(8) {
                return Step::Wait;
            }
            let at = addr(dw[1], dw[2]);
            let operand = ((u64::from(dw[4]) << 32) | u64::from(dw[3])) as i64;
            if (header >> 25) != ATOMIC_ADD64 || at % 8 != 0 || !emu.memory.view().contains(at, 8) {
                return Step::Halt;
            }
            // SAFETY: aligned and inside tracked memory (checked above).
            unsafe { (*(at as *const AtomicI64)).fetch_add(operand, Ordering::AcqRel) };
            Step::Done(32)
        }
        OP_TIMESTAMP => {
            if !need(3) {
                return Step::Wait;
            }
            write_u64(emu, addr(dw[1], dw[2]), gpu_ticks_at(now_ns()));
            Step::Done(12)
        }
        OP_GCR => Step::Done(20),
        _ => Step::Halt,
    }
}

/// One side of a COPY_LINEAR_RECT packet: base, offsets and pitches, in
/// elements (the packet stores pitches minus one).
struct RectSide {
    base: usize,
    x: usize,
    y: usize,
    z: usize,
    pitch: usize,
    slice: usize,
}

impl RectSide {
    /// The side whose five dwords start at `d` (address lo/hi, x|y, z|pitch, slice).
    fn parse(d: &[u32]) -> RectSide {
        RectSide {
            base: addr(d[0], d[1]),
            x: (d[2] & 0x3fff) as usize,
            y: ((d[2] >> 16) & 0x3fff) as usize,
            z: (d[3] & 0x7ff) as usize,
            pitch: (d[3] >> 13) as usize + 1,
            slice: (d[4] & 0x0fff_ffff) as usize + 1,
        }
    }

    /// Byte address of row `y`, slice `z` of the rectangle (element size `e`).
    fn row(&self, e: usize, y: usize, z: usize) -> usize {
        self.base + e * (self.x + (self.y + y) * self.pitch + (self.z + z) * self.slice)
    }
}

/// COPY_LINEAR_RECT (pre-gfx12 layout, ROCr's `hsa_amd_memory_async_copy_rect`): `rect_x` elements of
/// `1 << element` bytes per row, `rect_y` rows, `rect_z` slices (all stored minus one). Returns whether every row
/// was copied.
fn copy_rect(emu: &Emulator, header: u32, dw: &[u32]) -> bool {
    let e = 1usize << ((header >> 29) & 7);
    let (src, dst) = (RectSide::parse(&dw[1..6]), RectSide::parse(&dw[6..11]));
    let rect_x = (dw[11] & 0x3fff) as usize + 1;
    let rect_y = ((dw[11] >> 16) & 0x3fff) as usize + 1;
    let rect_z = (dw[12] & 0x7ff) as usize + 1;
    let len = rect_x * e;
    let mut ok = true;
    for z in 0..rect_z {
        for y in 0..rect_y {
            let (s, d) = (src.row(e, y, z), dst.row(e, y, z));
            ok &= emu.memory.view().copy(d, s, len) || crate::memory::copy_untrusted(d, s, len);
        }
    }
    ok
}

fn count(emu: &Emulator, ok: bool) {
    let s = &emu.cp.stats;
    if ok { &s.sdma_copies } else { &s.blits_skipped }.fetch_add(1, Ordering::Relaxed);
}

/// Runs one SDMA queue: executes packets from the read index up to `doorbell`. Returns whether anything ran.
///
/// # Safety
/// `ring` must be the live ring of a registered SDMA queue, `state.ring_bytes` long.
pub unsafe fn run_queue(emu: &Emulator, ring: usize, state: &mut SdmaState, doorbell: u64) -> bool {
    let mut progress = false;
    let mut rd = state.read_index.load(Ordering::Relaxed);
    while !state.halted && rd < doorbell {
        let off = (rd % state.ring_bytes) as usize;
        // A packet never wraps (ROCr pads the ring end with NOPs), so read up to the end of the ring or the doorbell.
        let avail = ((state.ring_bytes as usize - off).min((doorbell - rd) as usize)) / 4;
        // SAFETY: per the contract the ring is live for `ring_bytes` bytes; `off + avail*4` stays inside it, and
        // the producer published these bytes before storing the doorbell (acquire-loaded by the caller).
        let dwords = unsafe { std::slice::from_raw_parts((ring + off) as *const u32, avail) };
        match step(emu, dwords) {
            Step::Done(bytes) => {
                rd += bytes;
                state.read_index.store(rd, Ordering::Release);
                if state.external_read_ptr != 0 {
                    write_u64(emu, state.external_read_ptr, rd);
                }
                progress = true;
            }
            Step::Wait => break,
            Step::Halt => {
                state.halted = true;
                emu.cp.stats.faults.fetch_add(1, Ordering::Relaxed);
                if emu.config.log {
                    eprintln!(
                        "rprof-emu: SDMA queue halted on packet {:#x} at {rd:#x}",
                        dwords.first().copied().unwrap_or(0)
                    );
                }
            }
        }
    }
    progress
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_decode_and_execute() {
        let emu = crate::emulator().expect("default configuration");
        let buf = emu.memory.allocate(0, 16384, 0, false).unwrap();
        let lo = |a: usize| a as u32;
        let hi = |a: usize| (a >> 32) as u32;
        let (src, dst, word, fill) = (buf, buf + 4096, buf + 8192, buf + 12288);
        // SAFETY: `buf` is a fresh 16 KiB mapping we own.
        unsafe { std::ptr::write_bytes(src as *mut u8, 0xab, 100) };
        let copy = [OP_COPY, 99, 0, lo(src), hi(src), lo(dst), hi(dst)];
        assert_eq!(step(emu, &copy), Step::Done(28));
        // SAFETY: inside our mapping.
        let copied = unsafe { std::slice::from_raw_parts(dst as *const u8, 101) };
        assert!(copied[..100].iter().all(|b| *b == 0xab) && copied[100] == 0);
        let fence = [OP_FENCE, lo(word), hi(word), 0x1234_5678];
        assert_eq!(step(emu, &fence), Step::Done(16));
        assert_eq!(read_u32(emu, word), Some(0x1234_5678));
        let poll_eq = |v: u32| {
            [
                OP_POLL_REGMEM | (3 << 28) | (1 << 31),
                lo(word),
                hi(word),
                v,
                0xffff_ffff,
                0,
            ]
        };
        assert_eq!(step(emu, &poll_eq(1)), Step::Wait);
        assert_eq!(step(emu, &poll_eq(0x1234_5678)), Step::Done(24));
        let atomic = [
            OP_ATOMIC | (ATOMIC_ADD64 << 25),
            lo(word + 8),
            hi(word),
            0xffff_ffff,
            0xffff_ffff,
            0,
            0,
            0,
        ];
        assert_eq!(step(emu, &atomic), Step::Done(32));
        // SAFETY: inside our mapping, aligned.
        let counter = unsafe { *((word + 8) as *const i64) };
        assert_eq!(counter, -1);
        let fill_packet = [OP_CONST_FILL | (2 << 30), lo(fill), hi(fill), 7, 4 * 3];
        assert_eq!(step(emu, &fill_packet), Step::Done(20));
        // SAFETY: inside our mapping, aligned.
        let filled = unsafe { std::slice::from_raw_parts(fill as *const u32, 5) };
        assert_eq!(filled, &[7, 7, 7, 7, 0]);
        assert_eq!(step(emu, &[OP_NOP]), Step::Done(4));
        assert_eq!(step(emu, &[0x77]), Step::Halt);
        assert_eq!(step(emu, &[OP_FENCE, 0]), Step::Wait, "incomplete packet");
        assert!(emu.memory.free(buf));
    }
}
