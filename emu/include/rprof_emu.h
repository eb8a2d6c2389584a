/* rprof_emu.h: C API of the rprof emulated AMD GPU (the replacement libhsakmt.so.1 built by crate rprof-emu).
 *
 * Link with the emulator (-L<dir> -l:libhsakmt.so.1) or look the functions up with dlsym(RTLD_DEFAULT, ...):
 * ROCr loads the library, so they are available once the program runs over the emulator. All symbols carry the
 * version HSAKMT_1.
 */
#ifndef RPROF_EMU_H
#define RPROF_EMU_H

#include <stddef.h>
#include <stdint.h>
#include <hsa/hsa.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A host implementation of a kernel. It runs on the emulator's command-processor thread when the dispatch
 * launches (before its modelled duration starts); the completion signal is decremented after the modelled
 * duration. `packet` is a copy of the dispatch packet, `kernarg` its kernarg_address. It must not block on
 * other GPU work (the command processor is single-threaded) and must not create or destroy queues. */
typedef void (*rprof_emu_host_kernel_fn)(const hsa_kernel_dispatch_packet_t* packet, void* kernarg,
                                         void* user_data);

/* Registers `fn` for the kernel whose symbol is `symbol_name` (with or without ".kd"). Replaces an earlier
 * registration of the same name. Returns 0, or -1 on bad arguments / bad emulator configuration. */
int rprof_emu_register_kernel(const char* symbol_name, rprof_emu_host_kernel_fn fn, void* user_data);

/* Registers `fn` for one kernel object (kernel descriptor address). Takes precedence over names. */
int rprof_emu_register_kernel_object(uint64_t kernel_object, rprof_emu_host_kernel_fn fn, void* user_data);

/* Removes the registration of `symbol_name`. Returns 0 if there was one, else -1. */
int rprof_emu_unregister_kernel(const char* symbol_name);

/* What device code does to an interrupt signal: atomically adds `delta` to the signal's value, stores the
 * signal's event_id into *event_mailbox_ptr and raises the interrupt (fires the KFD event), so host threads
 * blocked in hsa_signal_wait_* / async handlers wake up. `signal` is an hsa_signal_t handle. Returns 0 or -1. */
int rprof_emu_signal_add(uint64_t signal, int64_t delta);

/* Only the interrupt part (mailbox store + event fire), without changing the value. Returns 0 or -1. */
int rprof_emu_signal_interrupt(uint64_t signal);

/* What a wave ringing an RPC doorbell does: atomically adds `delta` to the signal's value and, if the value was
 * 0, raises the interrupt. The ring time (see rprof_emu_signal_interrupt_before) is noted before the new value
 * is visible, so a host thread that sees the value always finds the ring. Stores the old value in *old (when
 * not NULL). Returns 0 or -1. */
int rprof_emu_signal_ring(uint64_t signal, int64_t delta, int64_t* old);

/* CLOCK_BOOTTIME ns of the latest interrupt the device raised on `signal` at or before `t_ns`, among the last 8
 * (rprof_emu_signal_add / rprof_emu_signal_interrupt / rprof_emu_signal_ring, or a packet completing it), or 0 if none / the signal has no
 * event. Real hardware reports no such time; tracers use it as the ring time of an RPC doorbell on the emulated
 * GPU. */
uint64_t rprof_emu_signal_interrupt_before(uint64_t signal, uint64_t t_ns);

/* Symbol name (without ".kd") of the kernel at `kernel_object`, resolved from the loaded code object. Writes a
 * NUL-terminated, possibly truncated copy into buf[len]; returns the full length or -1 if unknown. */
int rprof_emu_kernel_name(uint64_t kernel_object, char* buf, size_t len);

/* Counters of the emulator since process start. */
struct rprof_emu_stats {
    uint64_t dispatches;      /* kernel dispatches retired */
    uint64_t barriers;        /* barrier-AND/OR packets retired */
    uint64_t vendor_packets;  /* vendor-specific (PM4 IB) and agent-dispatch packets retired */
    uint64_t blits;           /* ROCr blit kernels (copy/fill) executed on the host */
    uint64_t blits_skipped;   /* blits refused because they touched untracked memory */
    uint64_t host_kernels;    /* host-implemented kernels run */
    uint64_t faults;          /* queue faults raised */
    uint64_t queues;          /* live queues */
    uint64_t allocations;     /* live hsaKmtAllocMemory allocations */
    uint64_t allocated_bytes; /* bytes in them */
    uint64_t registrations;   /* live registrations of user memory */
    uint64_t events;          /* live events */
    uint64_t events_fired;    /* events fired so far */
    uint64_t sdma_copies;     /* SDMA copy/fill packets executed (RPROF_EMU_SDMA=1) */
};

/* Fills *out. Returns 0 or -1. */
int rprof_emu_get_stats(struct rprof_emu_stats* out);

#ifdef __cplusplus
}
#endif

#endif /* RPROF_EMU_H */
