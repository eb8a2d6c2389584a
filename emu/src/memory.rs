//! Host-backed "GPU" memory: allocations, registered user memory, pointer queries.
//!
//! # Safety
//! This module calls `mmap`/`munmap` and hands out raw slices of the memory it mapped. A slice is only built while
//! the table lock is held, and the lock is also what `free` takes before unmapping, so a slice never outlives its
//! mapping.
//!
//! Every allocation is an anonymous `MAP_NORESERVE` mapping, so ROCr's 4 GiB scratch reservation and large "VRAM"
//! allocations cost nothing until touched. The GPU virtual address of any memory is its host address (one shared
//! address space, as with a large-BAR dGPU); `hsaKmtMapMemoryToGPUNodes` just records the nodes. The table also
//! answers "which tracked range contains this address", which is how the command processor decides whether it may
//! read a kernel object or copy memory (pitfall: never dereference foreign addresses).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// What kind of tracked range an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeKind {
    /// Allocated by `hsaKmtAllocMemory` (owned, unmapped on free).
    Allocated,
    /// User memory registered by `hsaKmtRegisterMemory*` (not owned).
    RegisteredUser,
}

/// One tracked range.
#[derive(Debug)]
pub struct Range {
    /// First byte.
    pub base: usize,
    /// Length in bytes.
    pub size: usize,
    /// Node it belongs to (`PreferredNode`; 0 = system memory for registered memory).
    pub node: u32,
    /// Raw `HsaMemFlags` bits.
    pub flags: u32,
    /// Allocated or registered.
    pub kind: RangeKind,
    /// Nodes it is mapped to (stable storage for `HsaPointerInfo.MappedNodes`).
    pub mapped_nodes: Box<[u32]>,
    /// `hsaKmtSetMemoryUserData`.
    pub user_data: usize,
    /// Unique per allocation/registration (an address may be reused after a free; this never is).
    pub serial: u64,
}

#[derive(Debug, Default)]
struct Tables {
    allocated: BTreeMap<usize, Range>,
    registered: BTreeMap<usize, Range>,
    allocated_bytes: usize,
    /// GPU virtual address ranges that are not the host address of their memory: base -> (size, host base).
    /// (KFD's userptr BOs of locked memory get a GPU VA of their own; everything else is identity-mapped.)
    aliases: BTreeMap<usize, (usize, usize)>,
}

impl Tables {
    /// The host address of `[addr, addr + len)` if it lies inside one GPU-VA alias; `addr` otherwise.
    fn translate(&self, addr: usize, len: usize) -> usize {
        if let Some((&base, &(size, host))) = self.aliases.range(..=addr).next_back() {
            if addr.checked_add(len).is_some_and(|end| end <= base + size) {
                return host + (addr - base);
            }
        }
        addr
    }
}

/// All tracked memory.
#[derive(Debug, Default)]
pub struct MemoryTable {
    tables: Mutex<Tables>,
    epoch: AtomicU64,
    serial: AtomicU64,
}

/// Locked view of the memory table, used to read memory safely.
#[derive(Debug)]
pub struct MemoryView<'a> {
    tables: MutexGuard<'a, Tables>,
}

fn containing(map: &BTreeMap<usize, Range>, addr: usize) -> Option<&Range> {
    let (_, r) = map.range(..=addr).next_back()?;
    (addr < r.base + r.size.max(1)).then_some(r)
}

impl MemoryView<'_> {
    /// The tracked range that contains `addr`.
    pub fn find(&self, addr: usize) -> Option<&Range> {
        containing(&self.tables.allocated, addr)
            .or_else(|| containing(&self.tables.registered, addr))
    }

    /// The host address behind GPU virtual address `addr` (itself unless it is in an alias, see
    /// [`MemoryTable::alias`]).
    pub fn translate(&self, addr: usize, len: usize) -> usize {
        self.tables.translate(addr, len)
    }

    /// True if `[addr, addr+len)` lies inside one tracked range (after alias translation).
    pub fn contains(&self, addr: usize, len: usize) -> bool {
        let addr = self.tables.translate(addr, len);
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        self.find(addr).is_some_and(|r| end <= r.base + r.size)
    }

    /// Bytes of the tracked range containing `addr`, from the start of that range.
    pub fn range_bytes(&self, addr: usize) -> Option<(usize, &[u8])> {
        let r = self.find(addr)?;
        // SAFETY: `r` is a live mapping (allocated by us or registered as valid user memory) of `r.size` bytes, and
        // it cannot be unmapped while `self` holds the table lock.
        Some((r.base, unsafe {
            std::slice::from_raw_parts(r.base as *const u8, r.size)
        }))
    }

    /// Copies `len` bytes (memmove semantics) if both ranges are tracked; returns false otherwise.
    pub fn copy(&self, dst: usize, src: usize, len: usize) -> bool {
        if len == 0 {
            return true;
        }
        if !self.contains(dst, len) || !self.contains(src, len) {
            return false;
        }
        let (dst, src) = (self.translate(dst, len), self.translate(src, len));
        // SAFETY: both ranges are inside live tracked mappings (checked above, lock held); `copy` allows overlap.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
        true
    }

    /// Fills `count` dwords at `dst` with `value` if the range is tracked.
    pub fn fill_u32(&self, dst: usize, value: u32, count: usize) -> bool {
        let Some(len) = count.checked_mul(4) else {
            return false;
        };
        if dst % 4 != 0 || !self.contains(dst, len) {
            return false;
        }
        let dst = self.translate(dst, len);
        // SAFETY: the range is inside a live tracked mapping and 4-byte aligned (checked above, lock held).
        let words = unsafe { std::slice::from_raw_parts_mut(dst as *mut u32, count) };
        words.fill(value);
        true
    }
}

/// Copies `len` bytes between addresses of this process that may be untracked, without trusting them:
/// `process_vm_writev` on our own pid reports `EFAULT` instead of crashing. Returns whether all bytes were copied.
/// (On an APU any host memory is GPU-accessible, so ROCr hands blits plain host pointers.)
pub fn copy_untrusted(dst: usize, src: usize, len: usize) -> bool {
    let mut done = 0usize;
    while done < len {
        let local = libc::iovec {
            iov_base: (src + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        let remote = libc::iovec {
            iov_base: (dst + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: the kernel validates both ranges and fails with EFAULT instead of faulting; nothing is read or
        // written through Rust references.
        let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
        if n <= 0 {
            return false;
        }
        done += n as usize;
    }
    true
}

/// Fills `count` dwords at a possibly untracked `dst` through [`copy_untrusted`].
pub fn fill_untrusted(dst: usize, value: u32, count: usize) -> bool {
    let chunk: Vec<u32> = vec![value; count.clamp(1, 16384)];
    let mut done = 0usize;
    while done < count {
        let n = (count - done).min(chunk.len());
        if !copy_untrusted(dst + done * 4, chunk.as_ptr() as usize, n * 4) {
            return false;
        }
        done += n;
    }
    true
}

/// Figures for tests and the stats API.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Live allocations.
    pub allocations: usize,
    /// Bytes in live allocations.
    pub allocated_bytes: usize,
    /// Live registrations of user memory.
    pub registrations: usize,
}

const PAGE: usize = 4096;

impl MemoryTable {
    fn lock(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Locks the table for reading memory.
    pub fn view(&self) -> MemoryView<'_> {
        MemoryView {
            tables: self.lock(),
        }
    }

    /// Changes whenever a range disappears (caches keyed by address must then be dropped).
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Maps `size` bytes (rounded up to pages). `exec` adds PROT_EXEC.
    pub fn allocate(&self, node: u32, size: usize, flags: u32, exec: bool) -> Option<usize> {
        if size == 0 {
            return None;
        }
        let size = size.checked_add(PAGE - 1)? & !(PAGE - 1);
        let prot = libc::PROT_READ | libc::PROT_WRITE | if exec { libc::PROT_EXEC } else { 0 };
        // SAFETY: an anonymous private mapping at a kernel-chosen address touches no existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let base = p as usize;
        let mut t = self.lock();
        t.allocated_bytes += size;
        t.allocated.insert(
            base,
            Range {
                base,
                size,
                node,
                flags,
                kind: RangeKind::Allocated,
                mapped_nodes: Box::new([]),
                user_data: 0,
                serial: self.serial.fetch_add(1, Ordering::Relaxed),
            },
        );
        Some(base)
    }

    /// Unmaps an allocation made by [`MemoryTable::allocate`]; `addr` must be its base.
    pub fn free(&self, addr: usize) -> bool {
        let mut t = self.lock();
        let Some(r) = t.allocated.remove(&addr) else {
            return false;
        };
        t.allocated_bytes -= r.size;
        self.epoch.fetch_add(1, Ordering::AcqRel);
        // SAFETY: `r` is a mapping we created with exactly this base and size; it is out of the table, and the lock
        // is held, so no slice of it is alive.
        unsafe { libc::munmap(r.base as *mut libc::c_void, r.size) };
        true
    }

    /// Registers user memory.
    pub fn register(&self, addr: usize, size: usize, flags: u32) -> bool {
        if addr == 0 || size == 0 {
            return false;
        }
        let mut t = self.lock();
        if let Some(r) = t.registered.get(&addr) {
            if r.size >= size {
                return true;
            }
        }
        t.registered.insert(
            addr,
            Range {
                base: addr,
                size,
                node: 0,
                flags,
                kind: RangeKind::RegisteredUser,
                mapped_nodes: Box::new([]),
                user_data: 0,
                serial: self.serial.fetch_add(1, Ordering::Relaxed),
            },
        );
        true
    }

    /// Deregisters user memory (succeeds on allocations too, as KFD does).
    pub fn deregister(&self, addr: usize) -> bool {
        let mut t = self.lock();
        if t.registered.remove(&addr).is_some() {
            self.epoch.fetch_add(1, Ordering::AcqRel);
            return true;
        }
        t.allocated.contains_key(&addr)
    }

    /// Applies `f` to the allocated or registered range containing `addr`;
    /// false if there is none.
    fn with_range_mut(&self, addr: usize, f: impl FnOnce(&mut Range)) -> bool {
        let mut t = self.lock();
        let Tables {
            allocated,
            registered,
            ..
        } = &mut *t;
        for map in [allocated, registered] {
            if let Some((_, r)) = map.range_mut(..=addr).next_back() {
                if addr < r.base + r.size {
                    f(r);
                    return true;
                }
            }
        }
        false
    }

    /// Records the nodes a range is mapped to.
    pub fn map_to_nodes(&self, addr: usize, nodes: &[u32]) -> bool {
        self.with_range_mut(addr, |r| r.mapped_nodes = nodes.into())
    }

    /// Clears the mapped nodes.
    pub fn unmap(&self, addr: usize) -> bool {
        self.map_to_nodes(addr, &[])
    }

    /// Sets the user data of the range containing `addr`.
    pub fn set_user_data(&self, addr: usize, data: usize) -> bool {
        self.with_range_mut(addr, |r| r.user_data = data)
    }

    /// Makes GPU virtual addresses `[gpu_va, gpu_va + size)` stand for host memory at `host` (which should be
    /// tracked) in [`MemoryView::contains`], [`MemoryView::copy`] and [`MemoryView::fill_u32`].
    pub fn alias(&self, gpu_va: usize, size: usize, host: usize) -> bool {
        if gpu_va == 0 || size == 0 || gpu_va.checked_add(size).is_none() {
            return false;
        }
        self.lock().aliases.insert(gpu_va, (size, host));
        true
    }

    /// Removes an alias made by [`MemoryTable::alias`].
    pub fn unalias(&self, gpu_va: usize) -> bool {
        let removed = self.lock().aliases.remove(&gpu_va).is_some();
        if removed {
            self.epoch.fetch_add(1, Ordering::AcqRel);
        }
        removed
    }

    /// Bytes in live allocations made for `node` (what `hsaKmtAvailableMemory` subtracts from a GPU's VRAM).
    pub fn allocated_bytes_on(&self, node: u32) -> usize {
        self.lock()
            .allocated
            .values()
            .filter(|r| r.node == node)
            .map(|r| r.size)
            .sum()
    }

    /// Live counts.
    pub fn stats(&self) -> MemoryStats {
        let t = self.lock();
        MemoryStats {
            allocations: t.allocated.len(),
            allocated_bytes: t.allocated_bytes,
            registrations: t.registered.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocated_bytes_are_counted_per_node() {
        let m = MemoryTable::default();
        let a = m.allocate(1, 100, 0, false).unwrap();
        let _b = m.allocate(1, 8192, 0, false).unwrap();
        let _c = m.allocate(0, 4096, 0, false).unwrap();
        assert_eq!(m.allocated_bytes_on(1), 4096 + 8192);
        assert_eq!(m.allocated_bytes_on(0), 4096);
        assert!(m.free(a));
        assert_eq!(m.allocated_bytes_on(1), 8192);
        assert_eq!(m.allocated_bytes_on(2), 0);
    }

    #[test]
    fn allocate_find_copy_free() {
        let m = MemoryTable::default();
        let a = m.allocate(1, 100, 0, false).unwrap();
        let b = m.allocate(0, 8192, 0, false).unwrap();
        assert_eq!(m.stats().allocations, 2);
        assert_eq!(m.stats().allocated_bytes, 4096 + 8192);
        {
            let v = m.view();
            assert_eq!(v.find(a + 4095).unwrap().base, a);
            assert_eq!(v.find(a + 4095).unwrap().node, 1);
            assert!(v.contains(b, 8192));
            assert!(!v.contains(b, 8193));
            assert!(v.fill_u32(a, 0xabcd, 16));
            assert!(v.copy(b + 3, a, 64));
            assert_eq!(v.range_bytes(b).unwrap().1[3..7], 0xabcdu32.to_ne_bytes());
            assert!(!v.copy(b, 16, 4), "untracked source");
        }
        let e = m.epoch();
        assert!(m.free(a));
        assert!(!m.free(a));
        assert_ne!(m.epoch(), e);
        assert!(m.view().find(a).is_none());
        assert!(m.free(b));
        assert_eq!(m.stats(), MemoryStats::default());
    }

    #[test]
    fn aliases_translate_gpu_addresses() {
        let m = MemoryTable::default();
        let mut buf = vec![0u8; 4096];
        let host = buf.as_mut_ptr() as usize;
        assert!(m.register(host, 4096, 0));
        let gva = 0x7000_0000_0000usize;
        assert!(!m.view().contains(gva, 8));
        assert!(m.alias(gva, 4096, host));
        {
            let v = m.view();
            assert!(v.contains(gva + 8, 8));
            assert!(!v.contains(gva + 4090, 8), "crosses the alias end");
            assert!(v.fill_u32(gva + 16, 0x0102_0304, 2));
            assert!(v.copy(gva + 100, gva + 16, 8));
        }
        assert_eq!(buf[16..24], [4, 3, 2, 1, 4, 3, 2, 1]);
        assert_eq!(buf[100..108], [4, 3, 2, 1, 4, 3, 2, 1]);
        let e = m.epoch();
        assert!(m.unalias(gva));
        assert_ne!(m.epoch(), e);
        assert!(!m.view().contains(gva, 8));
        assert!(m.deregister(host));
    }

    #[test]
    fn huge_reservations_are_noreserve() {
        let m = MemoryTable::default();
        let a = m
            .allocate(1, 64 << 30, 0, false)
            .expect("64 GiB NORESERVE mapping");
        assert!(m.free(a));
    }

    #[test]
    fn registered_user_memory() {
        let m = MemoryTable::default();
        let mut buf = vec![0u8; 1000];
        let p = buf.as_mut_ptr() as usize;
        assert!(m.register(p, 1000, 0));
        assert_eq!(
            m.view().find(p + 999).unwrap().kind,
            RangeKind::RegisteredUser
        );
        assert!(m.map_to_nodes(p, &[1]));
        assert_eq!(&*m.view().find(p).unwrap().mapped_nodes, &[1]);
        assert!(m.deregister(p));
        assert!(m.view().find(p).is_none());
        assert_eq!(m.stats().registrations, 0);
    }
}
