//! What a dispatched kernel *is*: its symbol name, a host implementation, or one of ROCr's blit kernels.
//!
//! * **Names.** On both layouts the loaded code object lies in memory the emulator allocated. Its first `PT_LOAD`
//!   segment starts with the ELF header and holds `.dynsym`/`.dynstr`; the kernel descriptor `name.kd` is a
//!   symbol whose value is the descriptor's offset from the load base. [`resolve_symbol`] finds the tracked range
//!   containing a kernel object, walks back page by page to the AMDGPU ELF header that covers it, follows
//!   `PT_DYNAMIC` to the dynamic symbol table and returns the name of the symbol at that offset. Every read is
//!   bounds-checked against the tracked range, and nothing outside tracked memory is ever read.
//! * **Host kernels.** C callers register a function by symbol name or kernel object ([`HostKernelRegistry`]); the
//!   command processor calls it when such a kernel launches.
//! * **ROCr's blit kernels** (`CopyAligned`, `CopyMisaligned`, `Fill`) are dispatched from raw `amd_kernel_code_t`
//!   objects (no ELF around them). [`recognise_blit`] identifies them without looking at their code, from the
//!   dispatch shape ROCr 5.2.3 always uses (1-D, workgroup 64, grid = 256 × CUs for copies and 64 × CUs for fills,
//!   with CUs = `NumFComputeCores / 4`) and from the internal consistency of the kernarg layout of
//!   `BlitKernel::KernelArgs`. The command processor then performs the copy or fill on the host.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use crate::memory::MemoryView;

/// Signature of a host-implemented kernel: `(packet, kernarg, user_data)`.
pub type HostKernelFn = unsafe extern "C" fn(
    packet: *const hsa_sys::hsa_kernel_dispatch_packet_t,
    kernarg: *mut libc::c_void,
    user_data: *mut libc::c_void,
);

/// How a host kernel is selected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostKernelKey {
    /// Symbol name without `.kd`.
    Name(String),
    /// Kernel object address.
    Object(u64),
}

/// A registered host kernel.
#[derive(Debug, Clone, Copy)]
pub struct HostKernel {
    /// The function.
    pub func: HostKernelFn,
    /// Its user data pointer.
    pub user_data: usize,
}

/// Registry of host kernels; its epoch changes on every change so caches can be invalidated.
#[derive(Debug, Default)]
pub struct HostKernelRegistry {
    entries: RwLock<Vec<(HostKernelKey, HostKernel)>>,
    epoch: AtomicU64,
}

impl HostKernelRegistry {
    /// Registers (or replaces) a host kernel.
    pub fn register(&self, key: HostKernelKey, kernel: HostKernel) {
        let mut e = self.entries.write().unwrap_or_else(|e| e.into_inner());
        e.retain(|(k, _)| *k != key);
        e.push((key, kernel));
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Removes a host kernel; returns whether one was registered.
    pub fn unregister(&self, key: &HostKernelKey) -> bool {
        let mut e = self.entries.write().unwrap_or_else(|e| e.into_inner());
        let before = e.len();
        e.retain(|(k, _)| k != key);
        self.epoch.fetch_add(1, Ordering::AcqRel);
        e.len() != before
    }

    /// Changes on every registration change.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// The host kernel for an object / name (object wins).
    pub fn lookup(&self, object: u64, name: Option<&str>) -> Option<HostKernel> {
        let e = self.entries.read().unwrap_or_else(|e| e.into_inner());
        e.iter()
            .find(|(k, _)| *k == HostKernelKey::Object(object))
            .or_else(|| {
                e.iter()
                    .find(|(k, _)| matches!((k, name), (HostKernelKey::Name(n), Some(m)) if n == m))
            })
            .map(|(_, h)| *h)
    }
}

fn rd_u16(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(off..off.checked_add(2)?)?.try_into().ok()?,
    ))
}
fn rd_u32(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(off..off.checked_add(4)?)?.try_into().ok()?,
    ))
}
fn rd_u64(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(off..off.checked_add(8)?)?.try_into().ok()?,
    ))
}

const EM_AMDGPU: u16 = 224;
const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const DT_NULL: u64 = 0;
const DT_HASH: u64 = 4;
const DT_STRTAB: u64 = 5;
const DT_SYMTAB: u64 = 6;
const DT_STRSZ: u64 = 10;
const MAX_PAGES_BACK: usize = 4096;

/// Finds the symbol of a loaded AMDGPU code object at `image[target]`. `image` starts at the ELF header.
pub fn symbol_at(image: &[u8], target: u64) -> Option<String> {
    if image.get(0..4)? != b"\x7fELF" || image[4] != 2 || rd_u16(image, 18)? != EM_AMDGPU {
        return None;
    }
    let phoff = rd_u64(image, 32)? as usize;
    let phentsize = rd_u16(image, 54)? as usize;
    let phnum = rd_u16(image, 56)? as usize;
    let mut dynamic = None;
    let mut span = 0u64;
    for i in 0..phnum {
        let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
        let ty = rd_u32(image, ph)?;
        let vaddr = rd_u64(image, ph + 16)?;
        let memsz = rd_u64(image, ph + 40)?;
        if ty == PT_LOAD {
            span = span.max(vaddr.saturating_add(memsz));
        } else if ty == PT_DYNAMIC {
            dynamic = Some(vaddr as usize);
        }
    }
    if target >= span {
        return None;
    }
    let (mut symtab, mut strtab, mut strsz, mut hash) = (None, None, None, None);
    let mut d = dynamic?;
    loop {
        let tag = rd_u64(image, d)?;
        let val = rd_u64(image, d + 8)?;
        match tag {
            DT_NULL => break,
            DT_HASH => hash = Some(val as usize),
            DT_STRTAB => strtab = Some(val as usize),
            DT_SYMTAB => symtab = Some(val as usize),
            DT_STRSZ => strsz = Some(val as usize),
            _ => {}
        }
        d += 16;
    }
    let (symtab, strtab) = (symtab?, strtab?);
    let strsz = strsz.unwrap_or(image.len().saturating_sub(strtab));
    let nsyms = match hash {
        Some(h) => rd_u32(image, h + 4)? as usize,
        None if strtab > symtab => (strtab - symtab) / 24,
        None => image.len().saturating_sub(symtab) / 24,
    };
    let strings = image.get(strtab..strtab.checked_add(strsz)?)?;
    let mut fallback = None;
    for i in 1..nsyms {
        let s = symtab + i * 24;
        let Some(value) = rd_u64(image, s + 8) else {
            break;
        };
        if value != target {
            continue;
        }
        let name_off = rd_u32(image, s)? as usize;
        let bytes = strings.get(name_off..)?;
        let end = bytes.iter().position(|&c| c == 0)?;
        let name = std::str::from_utf8(&bytes[..end]).ok()?;
        if let Some(stripped) = name.strip_suffix(".kd") {
            return Some(stripped.to_string());
        }
        fallback.get_or_insert_with(|| name.to_string());
    }
    fallback
}

/// Name of the kernel whose descriptor is at `kernel_object`, if it lies in a loaded code object in tracked memory.
pub fn resolve_symbol(view: &MemoryView<'_>, kernel_object: u64) -> Option<String> {
    let (base, bytes) = view.range_bytes(kernel_object as usize)?;
    let off = kernel_object as usize - base;
    let mut start = off & !0xfff;
    for _ in 0..MAX_PAGES_BACK {
        if bytes.get(start..start + 4) == Some(b"\x7fELF") {
            if let Some(name) = symbol_at(&bytes[start..], (off - start) as u64) {
                return Some(name);
            }
        }
        if start == 0 {
            break;
        }
        start -= 0x1000;
    }
    None
}

/// Copies `len` bytes at `addr` of this process without trusting that they are mapped: `process_vm_readv` on our
/// own pid reports `EFAULT` instead of crashing on an unmapped address.
pub fn read_untracked(addr: usize, len: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: `local` describes our own writable buffer of `len` bytes; the kernel validates `remote` and fails
    // with EFAULT rather than faulting if it is not mapped.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    (n == len as isize).then_some(buf)
}

/// Like [`resolve_symbol`] for code objects outside tracked memory (the APU layout loads them into memory ROCr
/// maps itself). Reads only through [`read_untracked`], so a bad address yields `None`, never a fault.
pub fn resolve_symbol_untracked(kernel_object: u64) -> Option<String> {
    let ko = kernel_object as usize;
    let mut start = ko & !0xfff;
    for _ in 0..256 {
        let head = read_untracked(start, 64)?;
        if head.get(0..4) == Some(b"\x7fELF") {
            let phoff = rd_u64(&head, 32)? as usize;
            let phnum = rd_u16(&head, 56)? as usize;
            let phdrs = read_untracked(start, phoff.checked_add(phnum.checked_mul(56)?)?)?;
            let span = (0..phnum)
                .filter_map(|i| {
                    let ph = phoff + i * 56;
                    (rd_u32(&phdrs, ph)? == PT_LOAD)
                        .then(|| rd_u64(&phdrs, ph + 16)?.checked_add(rd_u64(&phdrs, ph + 40)?))?
                })
                .max()? as usize;
            if span <= 64 << 20 && ko < start + span {
                let image = read_untracked(start, span)?;
                if let Some(name) = symbol_at(&image, (ko - start) as u64) {
                    return Some(name);
                }
            }
        }
        start = start.checked_sub(0x1000)?;
    }
    None
}

/// Symbol name of a kernel object, from tracked memory or, failing that, through safe reads of untracked memory.
pub fn kernel_symbol(memory: &crate::memory::MemoryTable, kernel_object: u64) -> Option<String> {
    let view = memory.view();
    if let Some(name) = resolve_symbol(&view, kernel_object) {
        return Some(name);
    }
    drop(view);
    resolve_symbol_untracked(kernel_object)
}

/// HIP's (ROCclr's) own blit kernels, which HIP dispatches by name from its runtime code object for device-to-device
/// copies and fills. The emulator runs them on the host; their kernarg layouts are those of the OpenCL kernels
/// `__amd_rocclr_copyBuffer(src, dst, ulong srcOrigin, ulong dstOrigin, ulong size, uint remain)`,
/// `__amd_rocclr_copyBufferAligned(src, dst, ulong srcOrigin, ulong dstOrigin, ulong size, uint alignment)` and
/// `__amd_rocclr_fillBufferAligned(uchar*, ushort*, uint*, ulong*, pattern, uint patternSize, ulong offset,
/// ulong size)`, with the argument conventions ROCclr 5.2 uses when it sets them (unaligned copies pass
/// `size = bytes / 4 + 1` and `remain = bytes % 4`; fills pass one non-null buffer whose element size is the unit of
/// `patternSize` and `offset`, and `size` pattern repetitions).
///
/// ROCclr 6.x (HIP 6.4) changed two of them, and both layouts are recognised (see [`rocclr6_blit`]).
pub fn rocclr_blit(name: &str, kernarg: &[u8]) -> Option<RocclrBlit> {
    if let Some(b) = rocclr6_blit(name, kernarg) {
        return Some(b);
    }
    match name {
        "__amd_rocclr_copyBuffer" => {
            let (src, dst, so, doff, size, remain) = (
                rd_u64(kernarg, 0)?,
                rd_u64(kernarg, 8)?,
                rd_u64(kernarg, 16)?,
                rd_u64(kernarg, 24)?,
                rd_u64(kernarg, 32)?,
                rd_u32(kernarg, 40)?,
            );
            let len = size
                .checked_sub(1)?
                .checked_mul(4)?
                .checked_add(u64::from(remain))?;
            Some(RocclrBlit::Copy {
                dst: dst.checked_add(doff)?,
                src: src.checked_add(so)?,
                len,
            })
        }
        "__amd_rocclr_copyBufferAligned" => {
            let align = u64::from(rd_u32(kernarg, 40)?.max(1));
            let (src, dst) = (rd_u64(kernarg, 0)?, rd_u64(kernarg, 8)?);
            let (so, doff, size) = (
                rd_u64(kernarg, 16)?,
                rd_u64(kernarg, 24)?,
                rd_u64(kernarg, 32)?,
            );
            Some(RocclrBlit::Copy {
                dst: dst.checked_add(doff.checked_mul(align)?)?,
                src: src.checked_add(so.checked_mul(align)?)?,
                len: size.checked_mul(align)?,
            })
        }
        "__amd_rocclr_fillBufferAligned" => {
            let (unit, base) = [1u64, 2, 4, 8].iter().enumerate().find_map(|(i, unit)| {
                rd_u64(kernarg, i * 8)
                    .filter(|p| *p != 0)
                    .map(|p| (*unit, p))
            })?;
            let pattern = rd_u64(kernarg, 32)?;
            let pattern_len = u64::from(rd_u32(kernarg, 40)?).checked_mul(unit)?;
            let (offset, reps) = (rd_u64(kernarg, 48)?, rd_u64(kernarg, 56)?);
            Some(RocclrBlit::Fill {
                dst: base.checked_add(offset.checked_mul(unit)?)?,
                pattern,
                pattern_len,
                repeats: reps,
            })
        }
        _ => None,
    }
}

/// ROCclr 6.x's grid-stride blits (HIP 6.4):
/// `__amd_rocclr_copyBuffer(uchar* src, uchar* dst, ulong size, uint remainder, uint aligned_size, ulong end_ptr,
/// uint next_chunk)` copies `size` bytes (units of `aligned_size` = 4 or 16 bytes up to `end_ptr`, then the
/// `remainder` bytes), and `__amd_rocclr_fillBufferAligned(void* buf, uchar* pattern, uint pattern_size,
/// uint alignment, ulong end_ptr, uint next_chunk)` repeats a pattern of `pattern_size` elements of `alignment`
/// bytes (1 for unknown alignments) from `buf` to `end_ptr`. They are told from the 5.x layouts by their internal
/// consistency: for copies a unit of 4 or 16 and `dst <= end_ptr <= dst + size`; for fills two non-null pointers
/// first (5.x passes exactly one non-null buffer among four) and `buf < end_ptr`.
pub fn rocclr6_blit(name: &str, kernarg: &[u8]) -> Option<RocclrBlit> {
    match name {
        "__amd_rocclr_copyBuffer" => {
            let (src, dst, size) = (
                rd_u64(kernarg, 0)?,
                rd_u64(kernarg, 8)?,
                rd_u64(kernarg, 16)?,
            );
            let (remainder, unit, end) = (
                u64::from(rd_u32(kernarg, 24)?),
                rd_u32(kernarg, 28)?,
                rd_u64(kernarg, 32)?,
            );
            let consistent = matches!(unit, 4 | 16)
                && remainder <= size
                && dst <= end
                && end <= dst.checked_add(size)?
                && src != 0;
            consistent.then_some(RocclrBlit::Copy {
                dst,
                src,
                len: size,
            })
        }
        "__amd_rocclr_fillBufferAligned" => {
            let (buf, pattern) = (rd_u64(kernarg, 0)?, rd_u64(kernarg, 8)?);
            let (elements, align, end) = (
                u64::from(rd_u32(kernarg, 16)?),
                u64::from(rd_u32(kernarg, 20)?),
                rd_u64(kernarg, 24)?,
            );
            if buf == 0 || pattern == 0 || elements == 0 || end <= buf {
                return None;
            }
            let unit = if matches!(align, 2 | 4 | 8 | 16) {
                align
            } else {
                1
            };
            let pattern_len = elements.checked_mul(unit)?;
            Some(RocclrBlit::Fill {
                dst: buf,
                pattern,
                pattern_len,
                repeats: (end - buf).div_ceil(pattern_len),
            })
        }
        _ => None,
    }
}

/// A host operation standing in for one of HIP's blit kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RocclrBlit {
    /// memmove.
    Copy {
        /// Destination.
        dst: u64,
        /// Source.
        src: u64,
        /// Bytes.
        len: u64,
    },
    /// Repeat the `pattern_len` bytes at `pattern` `repeats` times at `dst`.
    Fill {
        /// Destination.
        dst: u64,
        /// Pattern address.
        pattern: u64,
        /// Pattern bytes.
        pattern_len: u64,
        /// Repetitions.
        repeats: u64,
    },
}

/// A host operation standing in for one of ROCr's blit kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blit {
    /// memmove `len` bytes.
    Copy {
        /// Destination.
        dst: u64,
        /// Source.
        src: u64,
        /// Bytes.
        len: u64,
    },
    /// Store `count` dwords of `value`.
    Fill {
        /// Destination (4-byte aligned).
        dst: u64,
        /// Fill pattern.
        value: u32,
        /// Dwords.
        count: u64,
    },
}

fn chain_ok(points: &[u64]) -> bool {
    points.windows(2).all(|w| w[0] <= w[1])
}

/// Recognises a dispatch of ROCr's blit kernels (see the module doc). `kernarg` is the bytes at the kernarg address.
pub fn recognise_blit(
    p: &hsa_sys::hsa_kernel_dispatch_packet_t,
    kernarg: &[u8],
    fcompute_cores: u32,
) -> Option<Blit> {
    let cus = u64::from(fcompute_cores / 4);
    let shape_ok = p.setup & 3 == 1
        && p.workgroup_size_x == 64
        && p.workgroup_size_y == 1
        && p.workgroup_size_z == 1
        && p.grid_size_y == 1
        && p.grid_size_z == 1;
    if !shape_ok || cus == 0 {
        return None;
    }
    let grid = u64::from(p.grid_size_x);
    let q = |i: usize| rd_u64(kernarg, i * 8);
    if grid == 256 * cus {
        // CopyAligned: 4 phases of (src, dst) starts, then (src_end, dst_end), then num_workitems at 80.
        if rd_u32(kernarg, 80).map(u64::from) == Some(grid) {
            let v: Option<Vec<u64>> = (0..10).map(q).collect();
            let v = v?;
            let srcs = [v[0], v[2], v[4], v[6], v[8]];
            let dsts = [v[1], v[3], v[5], v[7], v[9]];
            let delta = v[1].wrapping_sub(v[0]);
            if chain_ok(&srcs)
                && chain_ok(&dsts)
                && dsts
                    .iter()
                    .zip(&srcs)
                    .all(|(d, s)| d.wrapping_sub(*s) == delta)
            {
                return Some(Blit::Copy {
                    dst: v[1],
                    src: v[0],
                    len: v[9] - v[1],
                });
            }
        }
        // CopyMisaligned: 2 phases, then ends, num_workitems at 48.
        if rd_u32(kernarg, 48).map(u64::from) == Some(grid) {
            let v: Option<Vec<u64>> = (0..6).map(q).collect();
            let v = v?;
            let srcs = [v[0], v[2], v[4]];
            let dsts = [v[1], v[3], v[5]];
            if chain_ok(&srcs) && chain_ok(&dsts) && v[4] - v[0] == v[5] - v[1] {
                return Some(Blit::Copy {
                    dst: v[1],
                    src: v[0],
                    len: v[5] - v[1],
                });
            }
        }
    }
    if grid == 64 * cus && rd_u32(kernarg, 28).map(u64::from) == Some(grid) {
        let (d1, d2, end) = (q(0)?, q(1)?, q(2)?);
        if d1 <= d2 && d2 <= end && (end - d1) % 4 == 0 && d1 % 4 == 0 {
            return Some(Blit::Fill {
                dst: d1,
                value: rd_u32(kernarg, 24)?,
                count: (end - d1) / 4,
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(grid: u32) -> hsa_sys::hsa_kernel_dispatch_packet_t {
        hsa_sys::hsa_kernel_dispatch_packet_t {
            header: 0,
            setup: 1,
            workgroup_size_x: 64,
            workgroup_size_y: 1,
            workgroup_size_z: 1,
            reserved0: 0,
            grid_size_x: grid,
            grid_size_y: 1,
            grid_size_z: 1,
            private_segment_size: 0,
            group_segment_size: 0,
            kernel_object: 0x1000,
            kernarg_address: std::ptr::null_mut(),
            reserved2: 0,
            completion_signal: hsa_sys::hsa_signal_t { handle: 0 },
        }
    }

    fn args(words: &[u64], tail: &[(usize, u32)]) -> Vec<u8> {
        let mut v = vec![0u8; 96];
        for (i, w) in words.iter().enumerate() {
            v[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        for (off, x) in tail {
            v[*off..*off + 4].copy_from_slice(&x.to_le_bytes());
        }
        v
    }

    #[test]
    fn recognises_the_three_blits() {
        let cores = 104 * 4;
        let (s, d) = (0x10_0000u64, 0x90_0000u64);
        let ca = args(
            &[
                s,
                d,
                s + 16,
                d + 16,
                s + 32,
                d + 32,
                s + 40,
                d + 40,
                s + 43,
                d + 43,
            ],
            &[(80, 256 * 104)],
        );
        assert_eq!(
            recognise_blit(&packet(256 * 104), &ca, cores),
            Some(Blit::Copy {
                dst: d,
                src: s,
                len: 43
            })
        );
        let cm = args(
            &[s, d + 1, s + 8, d + 9, s + 10, d + 11],
            &[(48, 256 * 104)],
        );
        assert_eq!(
            recognise_blit(&packet(256 * 104), &cm, cores),
            Some(Blit::Copy {
                dst: d + 1,
                src: s,
                len: 10
            })
        );
        let f = args(&[d, d + 64, d + 80], &[(24, 0xdead_beef), (28, 64 * 104)]);
        assert_eq!(
            recognise_blit(&packet(64 * 104), &f, cores),
            Some(Blit::Fill {
                dst: d,
                value: 0xdead_beef,
                count: 20
            })
        );
        // A user kernel with another shape is not a blit.
        assert_eq!(recognise_blit(&packet(1024), &ca, cores), None);
        let broken = args(
            &[
                s,
                d,
                s + 16,
                d + 17,
                s + 32,
                d + 32,
                s + 40,
                d + 40,
                s + 43,
                d + 43,
            ],
            &[(80, 256 * 104)],
        );
        assert_eq!(recognise_blit(&packet(256 * 104), &broken, cores), None);
    }

    #[test]
    fn registry_prefers_objects() {
        unsafe extern "C" fn f(
            _: *const hsa_sys::hsa_kernel_dispatch_packet_t,
            _: *mut libc::c_void,
            _: *mut libc::c_void,
        ) {
        }
        let r = HostKernelRegistry::default();
        r.register(
            HostKernelKey::Name("k".into()),
            HostKernel {
                func: f,
                user_data: 1,
            },
        );
        r.register(
            HostKernelKey::Object(7),
            HostKernel {
                func: f,
                user_data: 2,
            },
        );
        assert_eq!(r.lookup(7, Some("k")).unwrap().user_data, 2);
        assert_eq!(r.lookup(8, Some("k")).unwrap().user_data, 1);
        assert!(r.lookup(8, None).is_none());
        assert!(r.unregister(&HostKernelKey::Name("k".into())));
        assert!(r.lookup(8, Some("k")).is_none());
    }

    #[test]
    fn rocclr6_blit_arguments() {
        let mut k = vec![0u8; 64];
        let put =
            |k: &mut Vec<u8>, off: usize, v: u64| k[off..off + 8].copy_from_slice(&v.to_le_bytes());
        let put32 =
            |k: &mut Vec<u8>, off: usize, v: u32| k[off..off + 4].copy_from_slice(&v.to_le_bytes());
        // copyBuffer of 1003 bytes: 62 16-byte units, then 11 bytes.
        put(&mut k, 0, 0x10_0000);
        put(&mut k, 8, 0x20_0000);
        put(&mut k, 16, 1003);
        put32(&mut k, 24, 11);
        put32(&mut k, 28, 16);
        put(&mut k, 32, 0x20_0000 + 992);
        put32(&mut k, 40, 4096);
        assert_eq!(
            rocclr_blit("__amd_rocclr_copyBuffer", &k),
            Some(RocclrBlit::Copy {
                dst: 0x20_0000,
                src: 0x10_0000,
                len: 1003
            })
        );
        // end_ptr beyond dst + size: not this layout.
        put(&mut k, 32, 0x20_0000 + 2000);
        assert_eq!(rocclr6_blit("__amd_rocclr_copyBuffer", &k), None);
        // fillBufferAligned: a 4-byte pattern of 1 element with alignment 4 over 4096 bytes.
        let mut f = vec![0u8; 64];
        put(&mut f, 0, 0x30_0000);
        put(&mut f, 8, 0x40_0000);
        put32(&mut f, 16, 1);
        put32(&mut f, 20, 4);
        put(&mut f, 24, 0x30_0000 + 4096);
        assert_eq!(
            rocclr_blit("__amd_rocclr_fillBufferAligned", &f),
            Some(RocclrBlit::Fill {
                dst: 0x30_0000,
                pattern: 0x40_0000,
                pattern_len: 4,
                repeats: 1024
            })
        );
        // A 5.x fill (one non-null buffer among four) is not taken for a 6.x one.
        let mut old = vec![0u8; 64];
        put(&mut old, 16, 0x30_0000);
        assert_eq!(rocclr6_blit("__amd_rocclr_fillBufferAligned", &old), None);
    }

    #[test]
    fn rocclr_blit_arguments() {
        let mut k = vec![0u8; 64];
        let put =
            |k: &mut Vec<u8>, off: usize, v: u64| k[off..off + 8].copy_from_slice(&v.to_le_bytes());
        put(&mut k, 0, 0x1000);
        put(&mut k, 8, 0x2000);
        put(&mut k, 16, 3);
        put(&mut k, 24, 5);
        put(&mut k, 32, 11); // 10 whole dwords + remain
        k[40..44].copy_from_slice(&2u32.to_le_bytes());
        assert_eq!(
            rocclr_blit("__amd_rocclr_copyBuffer", &k),
            Some(RocclrBlit::Copy {
                dst: 0x2005,
                src: 0x1003,
                len: 42
            })
        );
        let mut f = vec![0u8; 64];
        put(&mut f, 16, 0x8000); // uint buffer
        put(&mut f, 32, 0x9000);
        f[40..44].copy_from_slice(&2u32.to_le_bytes()); // 2 uints of pattern
        put(&mut f, 48, 4);
        put(&mut f, 56, 100);
        assert_eq!(
            rocclr_blit("__amd_rocclr_fillBufferAligned", &f),
            Some(RocclrBlit::Fill {
                dst: 0x8010,
                pattern: 0x9000,
                pattern_len: 8,
                repeats: 100
            })
        );
        assert_eq!(rocclr_blit("user_kernel", &f), None);
    }

    #[test]
    fn rejects_non_elf() {
        assert_eq!(symbol_at(&[0u8; 64], 0), None);
    }
}
