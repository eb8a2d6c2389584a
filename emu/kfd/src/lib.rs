//! rprof-emu-kfd: the emulated GPU's front-end for runtimes with the thunk built in (ROCr >= 6.2), built as
//! `librprof_emu_kfd.so` and loaded with `LD_PRELOAD`. The device itself is [`rprof_emu`]; this crate plays the
//! kernel driver and the files around it.
//!
//! How the pieces fit:
//! * [`hooks`]: the interposed libc functions (`open`, `openat`, `close`, `ioctl`, `mmap`, `munmap`, `fopen`,
//!   `opendir`, `stat`, `lstat`, `access` and their 64-bit aliases). Every hook first checks the lock-free
//!   [`fds`] table (or the path prefix); anything that is not ours goes to the real function ([`real`]: raw system
//!   calls, or `dlsym(RTLD_NEXT)`), so the emulator's own calls and the allocator never deadlock on it.
//! * [`device`]: `/dev/kfd` itself: the KFD ioctls (topology apertures, VM, buffer objects, queues, events,
//!   clocks) and the mmaps of the kfd and render fds, translated onto the core's memory table, command processor
//!   and event table.
//! * [`sysfs`]: the KFD topology tree generated from the core's [`rprof_emu::topology::Topology`] into a private
//!   `mkdtemp` directory, and the path redirection that serves it (plus `/sys/module/amdgpu` for `rocminfo`).
//! * [`drm`]: libdrm / libdrm_amdgpu stand-ins for the emulated render nodes, forwarding everything else.
//! * The core's C API (`rprof_emu_*`, `emu/include/rprof_emu.h`) is exported from this library as well.
//!
//! The library is quiet unless `RPROF_EMU_LOG=1`; errors (a bad configuration, hooks that do not win the symbol
//! lookup) are always printed.
//!
//! # Safety
//! All unsafe code is at the FFI edge: the hooks receive C pointers from their callers and pass them on unchanged
//! or read them as the documented C structs; each block states its reasoning.
#![deny(missing_docs)]

pub mod device;
pub mod drm;
pub mod fds;
pub mod hooks;
pub mod real;
pub mod sysfs;

/// The device core, or None if its configuration is bad (the core printed why).
pub fn emu() -> Option<&'static rprof_emu::Emulator> {
    rprof_emu::emulator().ok()
}
