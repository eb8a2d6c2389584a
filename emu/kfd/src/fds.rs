//! Which file descriptors are ours: a lock-free table indexed by fd, checked before anything else in every hook so
//! that the pass-through path (the allocator's `mmap`, std's `close`, ...) takes no lock and allocates nothing.

use std::sync::atomic::{AtomicU32, Ordering};

/// Descriptors at or above this number are never ours (we refuse to hand one out).
pub const MAX_FD: usize = 65536;

/// What one of our descriptors stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FdKind {
    /// `/dev/kfd`.
    Kfd,
    /// A render node of the GPU on this topology node.
    Render(u32),
}

const NONE: u32 = 0;
const KFD: u32 = 1;
const RENDER: u32 = 0x100;

static TABLE: [AtomicU32; MAX_FD] = [const { AtomicU32::new(NONE) }; MAX_FD];

/// What `fd` is, if it is ours.
#[inline]
pub fn kind(fd: i32) -> Option<FdKind> {
    let v = TABLE
        .get(usize::try_from(fd).ok()?)?
        .load(Ordering::Acquire);
    match v {
        NONE => None,
        KFD => Some(FdKind::Kfd),
        v => Some(FdKind::Render(v - RENDER)),
    }
}

/// Marks `fd` as ours; false if it is out of the table's range.
pub fn insert(fd: i32, k: FdKind) -> bool {
    let Some(slot) = usize::try_from(fd).ok().and_then(|i| TABLE.get(i)) else {
        return false;
    };
    slot.store(
        match k {
            FdKind::Kfd => KFD,
            FdKind::Render(node) => RENDER + node,
        },
        Ordering::Release,
    );
    true
}

/// Forgets `fd` (it is being closed).
pub fn remove(fd: i32) -> Option<FdKind> {
    let k = kind(fd)?;
    TABLE[fd as usize].store(NONE, Ordering::Release);
    Some(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_kind_remove() {
        assert_eq!(kind(60000), None);
        assert!(insert(60000, FdKind::Render(3)));
        assert_eq!(kind(60000), Some(FdKind::Render(3)));
        assert!(insert(60001, FdKind::Kfd));
        assert_eq!(kind(60001), Some(FdKind::Kfd));
        assert_eq!(remove(60000), Some(FdKind::Render(3)));
        assert_eq!(kind(60000), None);
        assert_eq!(remove(60001), Some(FdKind::Kfd));
        assert!(!insert(-1, FdKind::Kfd));
        assert!(!insert(MAX_FD as i32, FdKind::Kfd));
        assert_eq!(kind(-5), None);
    }
}
