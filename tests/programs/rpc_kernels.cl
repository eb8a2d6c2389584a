// Device side of the rpc-doorbell workload (tests/programs/rpc_doorbell.cpp).
//
// The emulated GPU does not execute this code: rpc_doorbell.cpp registers a host implementation of
// `rpc_client` with the emulator, which runs it on the command-processor thread at launch. This body is the
// reference of what that host implementation reproduces, written as a real AMDGPU kernel would do it, and it
// fixes the kernarg layout (struct RpcClientArgs in rpc_doorbell.cpp must match the parameter list below):
//
//   offset  0  requests       __global struct rpc_request*   request table (fine-grained host memory)
//   offset  8  ring_slots     __global ulong*                ring of published request ids (id + 1; 0 = empty)
//   offset 16  ring_head      __global ulong*                next ring position to reserve
//   offset 24  doorbell       ulong                          hsa_signal_t handle = address of its amd_signal_t
//   offset 32  ring_mask      ulong                          ring capacity - 1 (capacity is a power of two)
//   offset 40  first_request  uint                           id of this kernel's first request
//   offset 44  lanes          uint                           work-items (one workgroup)
//   offset 48  calls          uint                           calls per lane
//   offset 52  kernel_index   uint
//   offset 56  slow_us        uint                           cost of a "slow" call, in microseconds
//
// Per call a lane fills its request slot, publishes the id in the ring, then rings the doorbell the way LLVM
// libc's GPU RPC client does: a system-scope fetch-add of 1 on the signal's value; if the old value was 0 the
// server may be asleep, so the lane stores the signal's event id into the event mailbox and raises an interrupt
// (s_sendmsg MSG_INTERRUPT with the event id in M0). The kernel does not wait for replies.

#define KIND_PRINT 0u
#define KIND_ALLOC 1u
#define KIND_SLOW 2u

// Mirrors struct RpcRequest in rpc_doorbell.cpp (128 bytes); only the fields the device writes are named.
struct rpc_request {
  uint kind;
  uint kernel_index;
  uint lane;
  uint call;
  ulong payload;
  ulong ring_ns;
  uint rang;
  uint host_only[23];
};

// Mirrors amd_signal_t (hsa/amd_hsa_signal.h): kind, value, event_mailbox_ptr, event_id.
struct amd_signal_view {
  long kind;
  long value;
  ulong event_mailbox_ptr;
  uint event_id;
};

__kernel void rpc_client(__global struct rpc_request* requests, __global ulong* ring_slots,
                         __global ulong* ring_head, ulong doorbell, ulong ring_mask, uint first_request,
                         uint lanes, uint calls, uint kernel_index, uint slow_us) {
  uint lane = __builtin_amdgcn_workitem_id_x();
  if (lane >= lanes) return;
  __global struct amd_signal_view* sig = (__global struct amd_signal_view*)doorbell;
  for (uint call = 0; call < calls; call++) {
    uint id = first_request + lane * calls + call;
    __global struct rpc_request* r = &requests[id];
    r->kind = id % 3u;
    r->kernel_index = kernel_index;
    r->lane = lane;
    r->call = call;
    r->payload = r->kind == KIND_ALLOC ? (ulong)(16u + (id * 97u) % 4000u) : (r->kind == KIND_SLOW ? slow_us : id);
    r->ring_ns = 0;  // the device has no host clock; the emulated device records one
    ulong pos = __opencl_atomic_fetch_add((volatile __global atomic_ulong*)ring_head, 1ul, memory_order_relaxed,
                                          memory_scope_all_svm_devices);
    __opencl_atomic_store((volatile __global atomic_ulong*)&ring_slots[pos & ring_mask], (ulong)id + 1ul,
                          memory_order_release, memory_scope_all_svm_devices);
    long old = __opencl_atomic_fetch_add((volatile __global atomic_long*)&sig->value, 1l, memory_order_seq_cst,
                                         memory_scope_all_svm_devices);
    r->rang = old == 0;
    if (old == 0 && sig->event_mailbox_ptr != 0) {
      uint event = sig->event_id;
      __opencl_atomic_store((volatile __global atomic_ulong*)sig->event_mailbox_ptr, (ulong)event,
                            memory_order_release, memory_scope_all_svm_devices);
      __builtin_amdgcn_s_sendmsg(1, event & 0xffu);  // MSG_INTERRUPT, M0 = event id
    }
  }
}
