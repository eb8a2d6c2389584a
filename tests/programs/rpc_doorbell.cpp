// rpc-doorbell: LLVM libc's GPU RPC doorbell protocol on the real ROCr over rprof's emulated GPU.
//
// Built by scripts/build-workloads.sh; run by tests/rpc_workload.rs. `rpc-doorbell --help` explains the options.
//
// The protocol (what LLVM libc's GPU RPC server and client do since they stopped spinning):
// - The doorbell is an interrupt signal, created with hsa_signal_create(0, 0, NULL, &sig).
// - Device side (kernel `rpc_client`, see rpc_kernels.cl): per call, fill a request slot, publish its id in a
//   ring, then fetch-add 1 on the signal's value; if the old value was 0 the server may be asleep, so store the
//   signal's event id into its event mailbox and raise the interrupt.
// - Host side (the server thread): sleep in hsa_signal_wait_scacquire(doorbell, NE, 0, timeout, BLOCKED); a
//   return with value v != 0 means v ports are pending: serve at most v requests from the ring and subtract 1
//   from the doorbell after finishing each. Shutdown: once every call was served, the main thread sets a stop
//   flag and stores 1 into the doorbell; the server wakes, sees the flag, subtracts that 1 (so the doorbell ends
//   at 0) and exits. That wake is counted as `shutdown_wakes`, not as a wake.
//
// The emulator does not execute GPU code: `rpc_client` runs as a host function registered with
// rprof_emu_register_kernel, on the emulator's single command-processor (CP) thread at launch. It must not block
// the CP, so the kernel issues its calls and completes without waiting for replies (unlike a real client, which
// waits for the server's answer on its port). The checks below are done once everything finished.
//
// The ring is written by the CP thread only (single producer) and read by the server (single consumer). Positions
// are reserved with a fetch-add and slots published one by one, so the same layout also works with many device
// producers (the OpenCL reference body); the consumer then waits for a reserved but not yet published slot. The
// ring has a slot for every call of the run, so the producer never waits for room.
//
// Output: machine-readable lines starting with "RPC " (key=value pairs); exit 0 when every check passed, 1 when a
// check failed, 2 on a usage or HSA error.
//
// What a tracer wrapping the signal waits sees of a run: the server thread (`RPC server tid=`) calls
// hsa_signal_wait_scacquire on the doorbell (`RPC doorbell handle=`) exactly wakes + timeouts + shutdown_wakes times;
// each call returns the value the server acted on (`value_at_wake` of --wake-log). `rings` counts the 0 -> 1
// transitions that raised the interrupt; wakes - rings are waits that found the doorbell already non-zero. Ring
// times (CLOCK_BOOTTIME, the clock of rprof's records) are known here only, because the emulated device is host
// code; on the emulator a host kernel runs at launch, so its rings precede the kernel's modelled start time.
#include <hsa/amd_hsa_signal.h>
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#define HSA_TEST_PROGRAM "rpc-doorbell"
#include "hsa_test_util.h"

// --- Options -------------------------------------------------------------------------------------------------
struct Options {
  uint32_t kernels = 4;
  uint32_t lanes = 8;
  uint32_t calls = 4;
  uint32_t slow_us = 20;
  uint32_t queues = 1;
  uint32_t wait_timeout_ms = 100;
  uint32_t deadline_s = 60;
  uint32_t launch_gap_us = 0;
  uint32_t call_gap_us = 0;
  bool drain_between = false;
  int64_t fault_serve_twice = -1;
  bool exhaust_events = false;
  std::string code_object;
  std::string wake_log;
};

static const char kUsage[] =
    "usage: rpc-doorbell [options]\n"
    "\n"
    "Reproduces LLVM libc's GPU RPC doorbell protocol on ROCr over rprof's emulated GPU: N kernels `rpc_client`\n"
    "with M lanes each make C calls each (kinds by request id: print, alloc, slow); a host server thread sleeps in\n"
    "hsa_signal_wait_scacquire(doorbell, NE, 0, timeout, BLOCKED) on an interrupt signal and serves them.\n"
    "The kernels run as host functions on the emulator's command-processor thread, which must not block: they issue\n"
    "their calls (request, ring, doorbell fetch-add, interrupt on 0 -> 1) and complete WITHOUT waiting for replies;\n"
    "replies are checked after the run.\n"
    "\n"
    "  --kernels N          kernels to launch (default 4)\n"
    "  --lanes M            lanes (work-items) per kernel, at most 1024 (default 8)\n"
    "  --calls C            calls per lane (default 4)\n"
    "  --slow-us U          cost of a slow call on the server, busy-spin microseconds (default 20)\n"
    "  --queues Q           queues the kernels are spread over, launched from one thread each (default 1)\n"
    "  --launch-gap-us G    pause between two launches on a queue, so calls arrive spread out and the server\n"
    "                       sleeps and wakes more often (default 0: all kernels launched back to back)\n"
    "  --call-gap-us G      pause of the device between two calls of a kernel, as a slow wave would: the server\n"
    "                       then often finds a call while it is still spinning in its wait (default 0)\n"
    "  --drain-between      launch the kernels one at a time (queues in turn), each once every call of the\n"
    "                       previous ones was served: every kernel's first call then rings a drained doorbell,\n"
    "                       so rings >= kernels (the --launch-gap-us pause precedes each launch)\n"
    "  --wait-timeout-ms T  timeout of the server's doorbell wait (default 100; 0 = wait forever)\n"
    "  --deadline-s S       give up (exit 1, report a suspected lost wake-up) if not every call is served after S\n"
    "                       seconds (default 60)\n"
    "  --exhaust-events     before creating the doorbell, create interrupt signals until the emulator's 4096-event\n"
    "                       budget is used up, so ROCr gives the doorbell no event (its waits poll)\n"
    "  --fault-serve-twice ID  (tests the checks) serve request ID twice: the run must fail with exit status 1\n"
    "  --code-object PATH   code object with `rpc_client` (default: rpc_kernels.hsaco next to the executable)\n"
    "  --wake-log PATH      write one CSV row per server wake: wake,sleep_begin_ns,wake_ns,serve_end_ns,\n"
    "                       value_at_wake,served,timeouts,ring_ns,ring_kernel (CLOCK_BOOTTIME ns; ring_ns 0 and\n"
    "                       ring_kernel -1 for a wake no ring caused: the doorbell was already non-zero)\n"
    "\n"
    "Prints lines starting with \"RPC \": the configuration, `doorbell_event=0|1` (whether the doorbell has an event\n"
    "mailbox), the doorbell's handle, event id and mailbox, the server thread's tid,\n"
    "`calls= served= wakes= timeouts= shutdown_wakes= rings= kernels=` (wakes: waits that returned v != 0, the\n"
    "shutdown wake not included; rings: calls that found the doorbell at 0 and raised the interrupt), per-kind\n"
    "counts, batch sizes, ring-to-wake latencies, times, and `result=ok|fail`.\n"
    "Exit status: 0 all checks passed, 1 a check failed, 2 usage or HSA error.\n";

static uint32_t parse_u32(const char* opt, const char* value, uint32_t min, uint32_t max) {
  if (!value) {
    fprintf(stderr, "rpc-doorbell: %s needs a value\n%s", opt, kUsage);
    exit(2);
  }
  char* end = nullptr;
  unsigned long v = strtoul(value, &end, 10);
  if (*value == '\0' || *end != '\0' || v < min || v > max) {
    fprintf(stderr, "rpc-doorbell: %s: '%s' is not a number in %u..%u\n", opt, value, min, max);
    exit(2);
  }
  return (uint32_t)v;
}

static Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    const char* next = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--help" || a == "-h") {
      fputs(kUsage, stdout);
      exit(0);
    } else if (a == "--kernels") {
      o.kernels = parse_u32("--kernels", next, 1, 100000), i++;
    } else if (a == "--lanes") {
      o.lanes = parse_u32("--lanes", next, 1, 1024), i++;
    } else if (a == "--calls") {
      o.calls = parse_u32("--calls", next, 1, 100000), i++;
    } else if (a == "--slow-us") {
      o.slow_us = parse_u32("--slow-us", next, 0, 10000000), i++;
    } else if (a == "--queues") {
      o.queues = parse_u32("--queues", next, 1, 64), i++;
    } else if (a == "--wait-timeout-ms") {
      o.wait_timeout_ms = parse_u32("--wait-timeout-ms", next, 0, UINT32_MAX), i++;
    } else if (a == "--launch-gap-us") {
      o.launch_gap_us = parse_u32("--launch-gap-us", next, 0, 10000000), i++;
    } else if (a == "--call-gap-us") {
      o.call_gap_us = parse_u32("--call-gap-us", next, 0, 1000000), i++;
    } else if (a == "--deadline-s") {
      o.deadline_s = parse_u32("--deadline-s", next, 1, 100000), i++;
    } else if (a == "--fault-serve-twice") {
      o.fault_serve_twice = parse_u32("--fault-serve-twice", next, 0, UINT32_MAX), i++;
    } else if (a == "--drain-between") {
      o.drain_between = true;
    } else if (a == "--exhaust-events") {
      o.exhaust_events = true;
    } else if (a == "--code-object" && next) {
      o.code_object = next, i++;
    } else if (a == "--wake-log" && next) {
      o.wake_log = next, i++;
    } else {
      fprintf(stderr, "rpc-doorbell: unknown or incomplete option '%s'\n%s", a.c_str(), kUsage);
      exit(2);
    }
  }
  uint64_t total = (uint64_t)o.kernels * o.lanes * o.calls;
  if (total > (1u << 24)) {
    fprintf(stderr, "rpc-doorbell: %lu calls are too many (at most %u)\n", (unsigned long)total, 1u << 24);
    exit(2);
  }
  return o;
}

// --- Shared memory layout (fine-grained system memory, visible to host and device) ---------------------------
enum Kind : uint32_t { KIND_PRINT = 0, KIND_ALLOC = 1, KIND_SLOW = 2 };
static const char* const kKindNames[3] = {"print", "alloc", "slow"};

// One call. The device part (up to `rang`) is written by the client; the rest by the server. 128 bytes, the
// layout struct rpc_request of rpc_kernels.cl mirrors.
struct RpcRequest {
  // Device part.
  uint32_t kind;
  uint32_t kernel_index;
  uint32_t lane;
  uint32_t call;
  uint64_t payload;  // print: a value to format; alloc: bytes; slow: microseconds
  uint64_t ring_ns;  // CLOCK_BOOTTIME just before the doorbell fetch-add (the emulated device knows the time)
  uint32_t rang;     // 1 if this call's fetch-add saw 0 and raised the interrupt
  // Server part.
  uint32_t served;   // times served (must end at 1)
  uint32_t status;   // 1 = the server's own check of the call passed
  uint32_t wake;     // index of the server wake that served it
  uint32_t batch_pos;  // position in that wake's batch (0 = first)
  uint32_t reserved;
  uint64_t result;   // alloc: checksum of the pattern; slow: measured ns
  char reply[64];    // print: the formatted string
};
static_assert(sizeof(RpcRequest) == 128, "RpcRequest must match struct rpc_request of rpc_kernels.cl");

// Kernarg of rpc_client; offsets fixed by the OpenCL parameter list (see rpc_kernels.cl), 60 bytes.
struct RpcClientArgs {
  RpcRequest* requests;
  uint64_t* ring_slots;
  uint64_t* ring_head;
  uint64_t doorbell;
  uint64_t ring_mask;
  uint32_t first_request;
  uint32_t lanes;
  uint32_t calls;
  uint32_t kernel_index;
  uint32_t slow_us;
};
static_assert(offsetof(RpcClientArgs, slow_us) == 56, "kernarg layout");
static const uint32_t kKernargBytes = offsetof(RpcClientArgs, slow_us) + sizeof(uint32_t);

static uint64_t boottime_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t alloc_payload(uint32_t id) { return 16u + (id * 97u) % 4000u; }
static uint8_t alloc_pattern(uint32_t id, uint64_t i) { return (uint8_t)(id * 31u + i * 7u + 1u); }
static void format_reply(char* out, size_t len, const RpcRequest& r, uint32_t id) {
  snprintf(out, len, "k%u l%u c%u id%u v%lu", r.kernel_index, r.lane, r.call, id, (unsigned long)r.payload);
}

// --- Emulator C API (looked up at run time: the emulator is the libhsakmt.so.1 that ROCr loads) ---------------
typedef void (*HostKernelFn)(const hsa_kernel_dispatch_packet_t*, void*, void*);
typedef int (*RegisterKernelFn)(const char*, HostKernelFn, void*);
typedef int (*SignalRingFn)(uint64_t, int64_t, int64_t*);

static SignalRingFn g_signal_ring = nullptr;

static void* emu_symbol(const char* name) {
  void* p = dlsym(RTLD_DEFAULT, name);
  if (!p) p = dlvsym(RTLD_DEFAULT, name, "HSAKMT_1");
  if (!p) {
    fprintf(stderr,
            "rpc-doorbell: %s not found: this program runs only over rprof's emulated GPU (LD_LIBRARY_PATH must "
            "hold the emulator's libhsakmt.so.1)\n",
            name);
    exit(2);
  }
  return p;
}

// Counters of the device side, touched only by the CP thread while kernels run.
static std::atomic<uint64_t> g_issued{0};
static std::atomic<uint64_t> g_rings{0};
static std::atomic<uint64_t> g_client_kernels{0};
static std::atomic<uint64_t> g_cp_thread{0};
static std::atomic<uint64_t> g_producer_threads{0};
static uint32_t g_call_gap_us = 0;  // --call-gap-us, set before the first launch

// The host implementation of `rpc_client`, run on the emulator's CP thread at launch. It must not block (the CP
// is single-threaded), so it cannot wait for the server's replies: it issues all calls and returns.
static void rpc_client_host(const hsa_kernel_dispatch_packet_t*, void* kernarg, void*) {
  const RpcClientArgs* a = (const RpcClientArgs*)kernarg;
  uint64_t self = (uint64_t)pthread_self();
  uint64_t expected = 0;
  if (!g_cp_thread.compare_exchange_strong(expected, self) && expected != self) g_producer_threads.fetch_add(1);
  // Lanes advance in lock step, as the work-items of one wavefront would.
  for (uint32_t call = 0; call < a->calls; call++) {
    for (uint32_t lane = 0; lane < a->lanes; lane++) {
      uint32_t id = a->first_request + lane * a->calls + call;
      RpcRequest* r = &a->requests[id];
      r->kind = id % 3;
      r->kernel_index = a->kernel_index;
      r->lane = lane;
      r->call = call;
      r->payload = r->kind == KIND_ALLOC ? alloc_payload(id) : r->kind == KIND_SLOW ? a->slow_us : id;
      uint64_t pos = __atomic_fetch_add(a->ring_head, 1, __ATOMIC_RELAXED);
      __atomic_store_n(&a->ring_slots[pos & a->ring_mask], (uint64_t)id + 1, __ATOMIC_RELEASE);
      __atomic_store_n(&r->ring_ns, boottime_ns(), __ATOMIC_RELAXED);
      // Add 1; if the doorbell was 0, ring it (mailbox store + event fire, as s_sendmsg would). The emulator
      // notes the ring time before the new value is visible.
      int64_t old = 0;
      if (g_signal_ring(a->doorbell, 1, &old) != 0) {
        fprintf(stderr, "rpc-doorbell: rprof_emu_signal_ring failed\n");
        abort();
      }
      if (old == 0) {
        __atomic_store_n(&r->rang, 1u, __ATOMIC_RELAXED);
        g_rings.fetch_add(1, std::memory_order_relaxed);
      }
      g_issued.fetch_add(1, std::memory_order_relaxed);
      if (g_call_gap_us != 0) usleep(g_call_gap_us);
    }
  }
  g_client_kernels.fetch_add(1, std::memory_order_release);
}

// --- HSA setup ------------------------------------------------------------------------------------------------
static hsa_agent_t g_cpu{0}, g_gpu{0};
static hsa_amd_memory_pool_t g_kernarg_pool{0}, g_fine_pool{0};

static hsa_status_t find_agents(hsa_agent_t agent, void*) {
  hsa_device_type_t type;
  CHECK(hsa_agent_get_info(agent, HSA_AGENT_INFO_DEVICE, &type));
  if (type == HSA_DEVICE_TYPE_CPU && g_cpu.handle == 0) g_cpu = agent;
  if (type == HSA_DEVICE_TYPE_GPU && g_gpu.handle == 0) g_gpu = agent;
  return HSA_STATUS_SUCCESS;
}

static hsa_status_t find_pools(hsa_amd_memory_pool_t pool, void*) {
  hsa_amd_segment_t segment;
  CHECK(hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &segment));
  if (segment != HSA_AMD_SEGMENT_GLOBAL) return HSA_STATUS_SUCCESS;
  uint32_t flags;
  CHECK(hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags));
  if (flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT) {
    if (g_kernarg_pool.handle == 0) g_kernarg_pool = pool;
  } else if (flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED) {
    if (g_fine_pool.handle == 0) g_fine_pool = pool;
  }
  return HSA_STATUS_SUCCESS;
}

static void* alloc_shared(hsa_amd_memory_pool_t pool, size_t bytes) {
  void* p = nullptr;
  CHECK(hsa_amd_memory_pool_allocate(pool, bytes, 0, &p));
  hsa_agent_t agents[2] = {g_gpu, g_cpu};
  CHECK(hsa_amd_agents_allow_access(2, agents, nullptr, p));
  memset(p, 0, bytes);
  return p;
}

static std::string default_code_object() {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return "rpc_kernels.hsaco";
  exe[n] = '\0';
  std::string dir(exe);
  dir.resize(dir.rfind('/') + 1);
  return dir + "rpc_kernels.hsaco";
}

static hsa_executable_t load_code_object(const std::string& path) {
  return hsa_test_load_code_object(g_gpu, path.c_str(),
                                   " (build it with scripts/build-workloads.sh or pass --code-object)");
}

static void dispatch(hsa_queue_t* q, uint64_t kernel_object, void* kernarg, uint32_t lanes, hsa_signal_t done) {
  uint64_t idx = hsa_queue_add_write_index_scacq_screl(q, 1);
  while (idx - hsa_queue_load_read_index_scacquire(q) >= q->size) std::this_thread::yield();
  auto* p = (hsa_kernel_dispatch_packet_t*)q->base_address + (idx & (q->size - 1));
  memset((char*)p + 4, 0, sizeof(*p) - 4);
  p->workgroup_size_x = (uint16_t)lanes;
  p->workgroup_size_y = 1;
  p->workgroup_size_z = 1;
  p->grid_size_x = lanes;
  p->grid_size_y = 1;
  p->grid_size_z = 1;
  p->kernel_object = kernel_object;
  p->kernarg_address = kernarg;
  p->completion_signal = done;
  uint16_t header = (uint16_t)((HSA_PACKET_TYPE_KERNEL_DISPATCH << HSA_PACKET_HEADER_TYPE) |
                               (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) |
                               (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE));
  uint16_t setup = 1 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
  __atomic_store_n((uint32_t*)p, (uint32_t)header | ((uint32_t)setup << 16), __ATOMIC_RELEASE);
  hsa_signal_store_screlease(q->doorbell_signal, (hsa_signal_value_t)idx);
}

static uint64_t mailbox_of(hsa_signal_t s) { return ((const amd_signal_t*)s.handle)->event_mailbox_ptr; }

// --- The server -------------------------------------------------------------------------------------------------
// One record per wake (a wait return with v != 0), preallocated: the serving loop allocates nothing but what the
// alloc calls themselves ask for.
struct WakeRecord {
  uint64_t sleep_begin_ns;  // entry of the first wait of this sleep (timeouts extend the sleep)
  uint64_t wake_ns;         // return of the wait that saw v != 0
  uint64_t serve_end_ns;    // after the last subtract of the batch
  int64_t value;            // v: pending ports at wake
  uint32_t served;          // requests served in the batch
  uint32_t timeouts;        // timed-out waits of this sleep
};

struct Server {
  hsa_signal_t doorbell{0};
  RpcRequest* requests = nullptr;
  uint64_t* ring_slots = nullptr;
  uint64_t ring_mask = 0;
  uint64_t ring_tail = 0;  // consumer position (server thread only)
  uint64_t total = 0;
  uint64_t timeout_ticks = UINT64_MAX;
  int64_t fault_serve_twice = -1;  // --fault-serve-twice
  std::vector<WakeRecord> wakes;   // capacity total + 1, reserved up front
  uint64_t timeouts = 0;
  uint64_t shutdown_wakes = 0;
  uint64_t duplicates = 0;       // requests served a second time
  uint64_t failed_calls = 0;     // calls whose own check failed on the server
  uint64_t ring_underflows = 0;  // v said pending, the ring had nothing published in time
  uint64_t ring_waits = 0;       // slots reserved but not yet published when read (multi-producer case)
  uint64_t bad_values = 0;       // negative values, or a shutdown wake with v != 1 or a non-empty ring
  uint64_t busy_ns = 0;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> served_total{0};
  std::mutex mu;
  std::condition_variable all_served;

  // Pops the next request id, waiting up to 1 s for a reserved but unpublished slot. Returns -1 if none.
  int64_t pop() {
    uint64_t* slot = &ring_slots[ring_tail & ring_mask];
    uint64_t v = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (v == 0) {
      ring_waits++;
      uint64_t give_up = boottime_ns() + 1000000000ull;
      while ((v = __atomic_load_n(slot, __ATOMIC_ACQUIRE)) == 0 && boottime_ns() < give_up) std::this_thread::yield();
      if (v == 0) return -1;
    }
    __atomic_store_n(slot, 0, __ATOMIC_RELAXED);
    ring_tail++;
    return (int64_t)(v - 1);
  }

  bool ring_has_published() const { return __atomic_load_n(&ring_slots[ring_tail & ring_mask], __ATOMIC_ACQUIRE) != 0; }

  void serve(uint32_t id, uint32_t wake_index, uint32_t batch_pos) {
    RpcRequest& r = requests[id];
    bool ok = false;
    switch (r.kind) {
      case KIND_PRINT: {
        format_reply(r.reply, sizeof r.reply, r, id);
        ok = r.reply[0] == 'k';
        break;
      }
      case KIND_ALLOC: {
        uint64_t bytes = r.payload;
        uint8_t* p = (uint8_t*)malloc(bytes);
        if (p) {
          for (uint64_t i = 0; i < bytes; i++) p[i] = alloc_pattern(id, i);
          uint64_t sum = 0;
          ok = true;
          for (uint64_t i = 0; i < bytes; i++) {
            ok &= p[i] == alloc_pattern(id, i);
            sum += p[i];
          }
          r.result = sum;
          free(p);
        }
        break;
      }
      case KIND_SLOW: {
        uint64_t start = boottime_ns(), until = start + r.payload * 1000u, now;
        while ((now = boottime_ns()) < until) {
        }
        r.result = now - start;
        ok = true;
        break;
      }
      default:
        ok = false;
    }
    uint32_t before = __atomic_fetch_add(&r.served, 1u, __ATOMIC_RELAXED);
    if (before != 0) duplicates++;
    if (!ok) failed_calls++;
    r.status = ok ? 1 : 0;
    r.wake = wake_index;
    r.batch_pos = batch_pos;
  }

  void run() {
    uint64_t sleep_begin = 0;
    uint32_t sleep_timeouts = 0;
    for (;;) {
      uint64_t entry = boottime_ns();
      if (sleep_begin == 0) sleep_begin = entry;
      hsa_signal_value_t v =
          hsa_signal_wait_scacquire(doorbell, HSA_SIGNAL_CONDITION_NE, 0, timeout_ticks, HSA_WAIT_STATE_BLOCKED);
      uint64_t woke = boottime_ns();
      if (v == 0) {  // timed out: the sleep goes on
        timeouts++;
        sleep_timeouts++;
        continue;
      }
      if (stop.load(std::memory_order_acquire)) {
        // Shutdown wake: the main thread stored 1 after every call was served. Take the 1 back so the doorbell
        // ends at 0, and leave.
        shutdown_wakes++;
        if (v != 1 || ring_has_published()) bad_values++;
        hsa_signal_subtract_screlease(doorbell, 1);
        return;
      }
      if (v < 0) {  // cannot happen in this protocol; count it and fall back to serving what the ring holds
        bad_values++;
        v = 1;
      }
      uint32_t wake_index = (uint32_t)wakes.size();
      WakeRecord w{sleep_begin, woke, 0, (int64_t)v, 0, sleep_timeouts};
      sleep_begin = 0;
      sleep_timeouts = 0;
      for (int64_t i = 0; i < v; i++) {
        int64_t id = pop();
        if (id < 0 || (uint64_t)id >= total) {
          ring_underflows++;
          break;
        }
        serve((uint32_t)id, wake_index, w.served);
        if (id == fault_serve_twice) serve((uint32_t)id, wake_index, w.served);
        w.served++;
        hsa_signal_subtract_screlease(doorbell, 1);
        uint64_t done = served_total.fetch_add(1, std::memory_order_acq_rel) + 1;
        if (done == total) {
          std::lock_guard<std::mutex> lock(mu);
          all_served.notify_all();
        }
      }
      w.serve_end_ns = boottime_ns();
      busy_ns += w.serve_end_ns - woke;
      if (wakes.size() < wakes.capacity()) wakes.push_back(w);
      else bad_values++;  // more wakes than calls: impossible unless a wake served nothing
    }
  }
};

// --- main ---------------------------------------------------------------------------------------------------------
static int g_failed_checks = 0;
static void check(bool ok, const char* what, const char* fmt = nullptr, ...) {
  if (ok) return;
  g_failed_checks++;
  printf("RPC check_failed=%s", what);
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    printf(" ");
    vprintf(fmt, ap);
    va_end(ap);
  }
  printf("\n");
}

static uint64_t percentile(std::vector<uint64_t>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = (size_t)(p * (double)(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  Options opt = parse_options(argc, argv);
  const uint64_t total = (uint64_t)opt.kernels * opt.lanes * opt.calls;
  g_call_gap_us = opt.call_gap_us;
  printf("RPC config kernels=%u lanes=%u calls=%u slow_us=%u queues=%u launch_gap_us=%u call_gap_us=%u "
         "drain_between=%d wait_timeout_ms=%u exhaust_events=%d\n",
         opt.kernels, opt.lanes, opt.calls, opt.slow_us, opt.queues, opt.launch_gap_us, opt.call_gap_us,
         opt.drain_between ? 1 : 0, opt.wait_timeout_ms, opt.exhaust_events ? 1 : 0);

  if (hsa_status_t st = hsa_init(); st != HSA_STATUS_SUCCESS) {
    const char* msg = "?";
    hsa_status_string(st, &msg);
    fprintf(stderr, "rpc-doorbell: hsa_init failed (0x%x %s): run it over rprof's emulated GPU, with LD_LIBRARY_PATH "
            "holding a libhsakmt.so.1 that links to the emulator's libhsakmt.so\n", (unsigned)st, msg);
    return 2;
  }
  CHECK(hsa_iterate_agents(find_agents, nullptr));
  if (g_gpu.handle == 0 || g_cpu.handle == 0) {
    fprintf(stderr, "rpc-doorbell: no GPU agent (is the emulator's libhsakmt.so.1 on LD_LIBRARY_PATH?)\n");
    return 2;
  }
  CHECK(hsa_amd_agent_iterate_memory_pools(g_cpu, find_pools, nullptr));
  if (g_kernarg_pool.handle == 0 || g_fine_pool.handle == 0) {
    fprintf(stderr, "rpc-doorbell: no kernarg or fine-grained system memory pool\n");
    return 2;
  }
  auto register_kernel = (RegisterKernelFn)emu_symbol("rprof_emu_register_kernel");
  g_signal_ring = (SignalRingFn)emu_symbol("rprof_emu_signal_ring");

  hsa_executable_t exec = load_code_object(opt.code_object.empty() ? default_code_object() : opt.code_object);
  hsa_executable_symbol_t sym;
  CHECK(hsa_executable_get_symbol_by_name(exec, "rpc_client.kd", &g_gpu, &sym));
  uint64_t kernel_object = 0;
  uint32_t kernarg_size = 0;
  CHECK(hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT, &kernel_object));
  CHECK(hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE, &kernarg_size));
  if (kernarg_size < kKernargBytes) {
    fprintf(stderr, "rpc-doorbell: rpc_client takes %u kernarg bytes, the host side needs %u: rpc_kernels.cl and "
            "RpcClientArgs disagree\n", kernarg_size, kKernargBytes);
    return 2;
  }
  if (register_kernel("rpc_client", rpc_client_host, nullptr) != 0) {
    fprintf(stderr, "rpc-doorbell: rprof_emu_register_kernel(rpc_client) failed\n");
    return 2;
  }

  // Shared memory: requests, the ring (a slot per call: the device side never waits for room), its head.
  uint64_t ring_capacity = 1;
  while (ring_capacity < total) ring_capacity <<= 1;
  auto* requests = (RpcRequest*)alloc_shared(g_fine_pool, total * sizeof(RpcRequest));
  auto* ring_slots = (uint64_t*)alloc_shared(g_fine_pool, ring_capacity * sizeof(uint64_t));
  auto* ring_head = (uint64_t*)alloc_shared(g_fine_pool, 64);
  const size_t kernarg_stride = (std::max<size_t>(kernarg_size, sizeof(RpcClientArgs)) + 63) & ~(size_t)63;
  auto* kernargs = (char*)alloc_shared(g_kernarg_pool, kernarg_stride * opt.kernels);

  std::vector<hsa_queue_t*> queues(opt.queues);
  uint32_t per_queue = (opt.kernels + opt.queues - 1) / opt.queues;
  uint32_t queue_size = 64;
  while (queue_size < per_queue && queue_size < 4096) queue_size <<= 1;
  for (auto& q : queues)
    CHECK(hsa_queue_create(g_gpu, queue_size, HSA_QUEUE_TYPE_MULTI, nullptr, nullptr, UINT32_MAX, UINT32_MAX, &q));
  std::vector<hsa_signal_t> done(opt.kernels);
  for (auto& s : done) CHECK(hsa_signal_create(1, 0, nullptr, &s));

  // --exhaust-events: use up the event budget so that the doorbell gets no event.
  std::vector<hsa_signal_t> hogs;
  if (opt.exhaust_events) {
    for (int i = 0; i < 10000; i++) {
      hsa_signal_t s;
      CHECK(hsa_signal_create(0, 0, nullptr, &s));
      hogs.push_back(s);
      if (mailbox_of(s) == 0) break;  // ROCr fell back: no event left
    }
    printf("RPC exhaust_signals=%zu exhausted=%d\n", hogs.size(), mailbox_of(hogs.back()) == 0 ? 1 : 0);
  }

  Server server;
  CHECK(hsa_signal_create(0, 0, nullptr, &server.doorbell));
  const bool doorbell_event = mailbox_of(server.doorbell) != 0;
  printf("RPC doorbell_event=%d\n", doorbell_event ? 1 : 0);
  printf("RPC doorbell handle=0x%lx event_id=%u mailbox=0x%lx\n", (unsigned long)server.doorbell.handle,
         ((const amd_signal_t*)server.doorbell.handle)->event_id, (unsigned long)mailbox_of(server.doorbell));
  check(doorbell_event == !opt.exhaust_events, "doorbell_event",
        opt.exhaust_events ? "the doorbell still has an event mailbox after exhausting events"
                           : "the doorbell has no event mailbox");

  uint64_t freq = 0;
  CHECK(hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY, &freq));
  server.requests = requests;
  server.ring_slots = ring_slots;
  server.ring_mask = ring_capacity - 1;
  server.total = total;
  server.fault_serve_twice = opt.fault_serve_twice;
  server.timeout_ticks = opt.wait_timeout_ms == 0 ? UINT64_MAX : (uint64_t)opt.wait_timeout_ms * (freq / 1000);
  server.wakes.reserve(total + 1);

  for (uint32_t k = 0; k < opt.kernels; k++) {
    auto* a = (RpcClientArgs*)(kernargs + k * kernarg_stride);
    *a = RpcClientArgs{requests, ring_slots, ring_head, server.doorbell.handle, ring_capacity - 1,
                       k * opt.lanes * opt.calls, opt.lanes, opt.calls, k, opt.slow_us};
  }

  const uint64_t t_start = boottime_ns();
  std::thread server_thread([&server] {
    printf("RPC server tid=%ld\n", (long)gettid());
    server.run();
  });
  const uint64_t deadline = t_start + (uint64_t)opt.deadline_s * 1000000000ull;
  auto give_up = [&](const char* what) {
    printf("RPC check_failed=%s served=%lu of %lu doorbell_value=%ld issued=%lu kernels_ran=%lu\nRPC result=fail\n",
           what, (unsigned long)server.served_total.load(), (unsigned long)total,
           (long)hsa_signal_load_scacquire(server.doorbell), (unsigned long)g_issued.load(),
           (unsigned long)g_client_kernels.load());
    fflush(stdout);
    _exit(1);  // the server thread may be asleep forever: do not join it
  };
  // Launch: one thread per queue, each dispatching its kernels (k % Q == q) back to back; or, with
  // --drain-between, kernel by kernel (queues in turn), each once every call of the previous ones was served.
  std::vector<std::thread> launchers;
  for (uint32_t k = 0; opt.drain_between && k < opt.kernels; k++) {
    // The pause comes before every launch, the first included, so the server is already asleep when it rings.
    if (opt.launch_gap_us) std::this_thread::sleep_for(std::chrono::microseconds(opt.launch_gap_us));
    dispatch(queues[k % opt.queues], kernel_object, kernargs + k * kernarg_stride, opt.lanes, done[k]);
    const uint64_t target = (uint64_t)(k + 1) * opt.lanes * opt.calls;
    while (server.served_total.load(std::memory_order_acquire) < target) {
      if (boottime_ns() > deadline) give_up("lost_wakeup");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  for (uint32_t q = 0; !opt.drain_between && q < opt.queues; q++) {
    launchers.emplace_back([&, q] {
      for (uint32_t k = q; k < opt.kernels; k += opt.queues) {
        if (k != q && opt.launch_gap_us) std::this_thread::sleep_for(std::chrono::microseconds(opt.launch_gap_us));
        dispatch(queues[q], kernel_object, kernargs + k * kernarg_stride, opt.lanes, done[k]);
      }
    });
  }
  for (auto& t : launchers) t.join();
  // Every kernel completes (the device side never waits), then every call must be served.
  for (auto s : done) {
    while (hsa_signal_wait_scacquire(s, HSA_SIGNAL_CONDITION_EQ, 0, freq / 10, HSA_WAIT_STATE_BLOCKED) != 0) {
      if (boottime_ns() > deadline) give_up("kernels_complete");
    }
  }
  const uint64_t t_kernels_done = boottime_ns();
  {
    std::unique_lock<std::mutex> lock(server.mu);
    while (server.served_total.load(std::memory_order_acquire) < total) {
      if (boottime_ns() > deadline) give_up("lost_wakeup");
      server.all_served.wait_for(lock, std::chrono::milliseconds(100));
    }
  }
  const uint64_t t_served = boottime_ns();
  server.stop.store(true, std::memory_order_release);
  hsa_signal_store_screlease(server.doorbell, 1);
  server_thread.join();
  const uint64_t t_end = boottime_ns();

  // --- Checks ---
  uint64_t kinds[3] = {0, 0, 0}, served = 0, bad_served = 0, bad_status = 0, bad_reply = 0, bad_alloc = 0,
           bad_slow = 0, rang = 0, rang_not_first = 0;
  std::vector<uint64_t> latencies;
  for (uint64_t id = 0; id < total; id++) {
    const RpcRequest& r = requests[id];
    if (r.kind < 3) kinds[r.kind]++;
    served += r.served;
    bad_served += r.served != 1;
    bad_status += r.served >= 1 && r.status != 1;
    if (r.kind == KIND_PRINT) {
      char expect[sizeof r.reply];
      format_reply(expect, sizeof expect, r, (uint32_t)id);
      bad_reply += strcmp(expect, r.reply) != 0 || r.payload != id;
    } else if (r.kind == KIND_ALLOC) {
      uint64_t sum = 0;
      for (uint64_t i = 0; i < r.payload; i++) sum += alloc_pattern((uint32_t)id, i);
      bad_alloc += r.payload != alloc_payload((uint32_t)id) || r.result != sum;
    } else if (r.kind == KIND_SLOW) {
      bad_slow += r.payload != opt.slow_us || r.result < (uint64_t)opt.slow_us * 1000u;
    }
    if (r.rang) {
      rang++;
      // A call that found the doorbell at 0 rang; the server had served everything before it, so it is the first
      // of the next wake's batch. That wake's latency is known: wake time minus ring time.
      if (r.batch_pos != 0 || r.served != 1 || r.wake >= server.wakes.size()) {
        rang_not_first++;
      } else {
        latencies.push_back(server.wakes[r.wake].wake_ns - std::min(r.ring_ns, server.wakes[r.wake].wake_ns));
      }
    }
  }
  const uint64_t wakes = server.wakes.size();
  uint64_t max_batch = 0, batch_sum = 0;
  for (const auto& w : server.wakes) {
    max_batch = std::max<uint64_t>(max_batch, w.served);
    batch_sum += w.served;
  }
  check(g_issued.load() == total, "calls", "issued=%lu expected=%lu", (unsigned long)g_issued.load(),
        (unsigned long)total);
  check(g_client_kernels.load() == opt.kernels, "kernels", "ran=%lu", (unsigned long)g_client_kernels.load());
  check(server.served_total.load() == total && served == total && batch_sum == total, "served",
        "server=%lu per_request_sum=%lu batches=%lu", (unsigned long)server.served_total.load(),
        (unsigned long)served, (unsigned long)batch_sum);
  check(bad_served == 0 && server.duplicates == 0, "served_once", "not_once=%lu duplicates=%lu",
        (unsigned long)bad_served, (unsigned long)server.duplicates);
  check(bad_status == 0 && server.failed_calls == 0, "call_status", "%lu", (unsigned long)bad_status);
  check(bad_reply == 0, "print_replies", "%lu", (unsigned long)bad_reply);
  check(bad_alloc == 0, "alloc_patterns", "%lu", (unsigned long)bad_alloc);
  check(bad_slow == 0, "slow_calls", "%lu", (unsigned long)bad_slow);
  check(server.ring_underflows == 0, "ring_underflows", "%lu", (unsigned long)server.ring_underflows);
  check(server.bad_values == 0, "doorbell_values", "%lu", (unsigned long)server.bad_values);
  check(server.shutdown_wakes == 1, "shutdown_wakes", "%lu", (unsigned long)server.shutdown_wakes);
  check(rang == g_rings.load() && rang >= 1 && rang <= wakes, "rings", "rang=%lu counted=%lu wakes=%lu",
        (unsigned long)rang, (unsigned long)g_rings.load(), (unsigned long)wakes);
  check(!opt.drain_between || rang >= opt.kernels, "drained_kernels_ring", "rang=%lu kernels=%u", (unsigned long)rang,
        opt.kernels);
  check(rang_not_first == 0, "ring_starts_batch", "%lu", (unsigned long)rang_not_first);
  check(g_producer_threads.load() == 0, "single_producer", "the host kernel ran on more than one thread");
  const int64_t final_value = hsa_signal_load_scacquire(server.doorbell);
  check(final_value == 0, "doorbell_final_value", "%ld", (long)final_value);

  // --- Report ---
  printf("RPC calls=%lu served=%lu wakes=%lu timeouts=%lu shutdown_wakes=%lu rings=%lu kernels=%lu\n",
         (unsigned long)g_issued.load(), (unsigned long)server.served_total.load(), (unsigned long)wakes,
         (unsigned long)server.timeouts, (unsigned long)server.shutdown_wakes, (unsigned long)g_rings.load(),
         (unsigned long)g_client_kernels.load());
  printf("RPC kinds print=%lu alloc=%lu slow=%lu\n", (unsigned long)kinds[0], (unsigned long)kinds[1],
         (unsigned long)kinds[2]);
  printf("RPC batches max=%lu mean_x100=%lu ring_waits=%lu\n", (unsigned long)max_batch,
         (unsigned long)(wakes ? batch_sum * 100 / wakes : 0), (unsigned long)server.ring_waits);
  size_t samples = latencies.size();
  uint64_t p50 = percentile(latencies, 0.5), p99 = percentile(latencies, 0.99),
           lat_max = latencies.empty() ? 0 : latencies.back();
  printf("RPC wake_latency_ns samples=%zu p50=%lu p99=%lu max=%lu\n", samples, (unsigned long)p50,
         (unsigned long)p99, (unsigned long)lat_max);
  printf("RPC time_ms total=%.3f kernels_done=%.3f all_served=%.3f server_busy=%.3f\n", (t_end - t_start) / 1e6,
         (t_kernels_done - t_start) / 1e6, (t_served - t_start) / 1e6, server.busy_ns / 1e6);

  if (!opt.wake_log.empty()) {
    FILE* f = fopen(opt.wake_log.c_str(), "w");
    if (!f) {
      fprintf(stderr, "rpc-doorbell: cannot write %s: %s\n", opt.wake_log.c_str(), strerror(errno));
      return 2;
    }
    fprintf(f, "wake,sleep_begin_ns,wake_ns,serve_end_ns,value_at_wake,served,timeouts,ring_ns,ring_kernel\n");
    // The ring that caused a wake is the first call of its batch (see the checks); wakes without one found the
    // doorbell already non-zero when the server came back to wait.
    std::vector<uint64_t> ring_of(wakes, 0);
    std::vector<int64_t> kernel_of(wakes, -1);
    for (uint64_t id = 0; id < total; id++) {
      const RpcRequest& r = requests[id];
      if (r.rang && r.batch_pos == 0 && r.wake < wakes) {
        ring_of[r.wake] = r.ring_ns;
        kernel_of[r.wake] = r.kernel_index;
      }
    }
    for (uint64_t i = 0; i < wakes; i++) {
      const WakeRecord& w = server.wakes[i];
      fprintf(f, "%lu,%lu,%lu,%lu,%ld,%u,%u,%lu,%ld\n", (unsigned long)i, (unsigned long)w.sleep_begin_ns,
              (unsigned long)w.wake_ns, (unsigned long)w.serve_end_ns, (long)w.value, w.served, w.timeouts,
              (unsigned long)ring_of[i], (long)kernel_of[i]);
    }
    fclose(f);
  }

  // --- Cleanup ---
  for (auto s : hogs) CHECK(hsa_signal_destroy(s));
  for (auto s : done) CHECK(hsa_signal_destroy(s));
  CHECK(hsa_signal_destroy(server.doorbell));
  for (auto q : queues) CHECK(hsa_queue_destroy(q));
  for (void* p : {(void*)requests, (void*)ring_slots, (void*)ring_head, (void*)kernargs})
    CHECK(hsa_amd_memory_pool_free(p));
  CHECK(hsa_executable_destroy(exec));
  CHECK(hsa_shut_down());
  printf("RPC result=%s\n", g_failed_checks == 0 ? "ok" : "fail");
  return g_failed_checks == 0 ? 0 : 1;
}
