// A second HSA tool that rewrites packets in front of rprof, the way another profiler in the same process would.
// Two modes, chosen by the headers it is compiled against:
// * ROCr >= 6.0 (AMD extension table major 2): for every kernel dispatch it calls its writer (rprof's interceptor)
//   twice, first with [intercept marker, kernel, no-op barrier], then with [no-op barrier, no-op barrier]. The marker
//   (a vendor packet of format AMD_AQL_FORMAT_INTERCEPT_MARKER) carries the kernel object; its callback, which ROCr
//   runs with the hardware packet id the next packet gets, checks that the packet written there is that kernel (once
//   the writer call returns, when the packet is in the ring).
// * ROCr 5.x (major 1): what 5.2.3's intercept queue allows: ONE writer call per interceptor call (its PacketWriter
//   does not restore the interceptor index, so a second call jumps through a null pointer) and no intercept markers
//   (5.2.3 has none): [kernel, no-op barrier, no-op barrier] in a single call.
// At exit it prints
//   CHAIN mode=<markers|single> kernels=<n> markers_checked=<m> misplaced=<k>
// Build inside the runtime's root: g++ -std=c++17 -shared -fPIC -DAMD_INTERNAL_BUILD -I/usr/include/hsa
//   -o chain_tool.so chain_tool.cpp -ldl            (the test harness does: tests/support, chain_tool())
// Load after rprof: HSA_TOOLS_LIB="librprof_tool.so chain_tool.so", or HSA_TOOLS_LIB=chain_tool.so under the rprof
// command (which puts its tool first); its hsa_queue_create wraps rprof's, so its interceptor is registered last and
// runs first.
#include <hsa_api_trace.h>

#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#if HSA_AMD_EXT_API_TABLE_MAJOR_VERSION >= 0x02
#define CHAIN_MARKERS 1
#else
#define CHAIN_MARKERS 0
#endif

namespace {

decltype(hsa_queue_create)* g_next_queue_create = nullptr;
decltype(hsa_amd_queue_intercept_register)* g_register = nullptr;
std::atomic<uint64_t> g_kernels{0};
std::mutex g_mutex;
uint64_t g_checked = 0, g_misplaced = 0;
// The marker whose packet is not in the ring yet when its callback runs. Per thread: the callback runs on the
// thread whose writer call submits the marker, which checks it once that call returns.
thread_local const hsa_queue_t* g_pending_queue = nullptr;
thread_local uint64_t g_pending_id = 0, g_pending_object = 0;

uint16_t packet_type(const void* p) {
  uint16_t header;
  std::memcpy(&header, p, 2);
  return (header >> HSA_PACKET_HEADER_TYPE) & ((1 << HSA_PACKET_HEADER_WIDTH_TYPE) - 1);
}

#if CHAIN_MARKERS
// Caller holds g_mutex.
void check_pending() {
  if (g_pending_queue == nullptr) return;
  const auto* ring = static_cast<const hsa_kernel_dispatch_packet_t*>(g_pending_queue->base_address);
  const auto& slot = ring[g_pending_id & (g_pending_queue->size - 1)];
  ++g_checked;
  if (slot.kernel_object != g_pending_object) {
    ++g_misplaced;
    if (g_misplaced <= 5)
      std::fprintf(stderr, "chain_tool: marker for kernel object 0x%lx landed on packet %lu holding 0x%lx\n",
                   (unsigned long)g_pending_object, (unsigned long)g_pending_id, (unsigned long)slot.kernel_object);
  }
  g_pending_queue = nullptr;
}

void on_marker(const amd_aql_intercept_marker_t* marker, hsa_queue_t* hw_queue, uint64_t packet_id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  check_pending();
  g_pending_queue = hw_queue;
  g_pending_id = packet_id;
  g_pending_object = marker->user_data[0];
}
#else
void check_pending() {}
#endif

hsa_barrier_and_packet_t noop_barrier() {
  hsa_barrier_and_packet_t b;
  std::memset(&b, 0, sizeof b);
  b.header = (HSA_PACKET_TYPE_BARRIER_AND << HSA_PACKET_HEADER_TYPE) |
             (HSA_FENCE_SCOPE_NONE << HSA_PACKET_HEADER_ACQUIRE_FENCE_SCOPE) |
             (HSA_FENCE_SCOPE_NONE << HSA_PACKET_HEADER_RELEASE_FENCE_SCOPE);
  return b;
}

void interceptor(const void* pkts, uint64_t count, uint64_t, void*, hsa_amd_queue_intercept_packet_writer writer) {
  const auto* in = static_cast<const hsa_kernel_dispatch_packet_t*>(pkts);
  for (uint64_t i = 0; i < count; ++i) {
    if (packet_type(&in[i]) != HSA_PACKET_TYPE_KERNEL_DISPATCH) {
      writer(&in[i], 1);
      continue;
    }
    g_kernels.fetch_add(1, std::memory_order_relaxed);
#if CHAIN_MARKERS
    union Slot {
      amd_aql_intercept_marker_t marker;
      hsa_kernel_dispatch_packet_t kernel;
      hsa_barrier_and_packet_t barrier;
    } first[3], second[2];
    std::memset(first, 0, sizeof first);
    first[0].marker.header = HSA_PACKET_TYPE_VENDOR_SPECIFIC << HSA_PACKET_HEADER_TYPE;
    first[0].marker.format = AMD_AQL_FORMAT_INTERCEPT_MARKER;
    first[0].marker.callback = on_marker;
    first[0].marker.user_data[0] = in[i].kernel_object;
    first[1].kernel = in[i];
    first[2].barrier = noop_barrier();
    second[0].barrier = noop_barrier();
    second[1].barrier = noop_barrier();
    writer(first, 3);
    {
      // ROCr's final submit ran the marker's callback and copied the kernel into the hardware ring before the
      // writer returned (unless the ring was full and it deferred them).
      std::lock_guard<std::mutex> lock(g_mutex);
      check_pending();
    }
    writer(second, 2);
#else
    // ROCr calls the first rewriter with one packet at a time, so this is the only writer call of the interceptor
    // call (a kernel never shares a call with another packet).
    union Slot {
      hsa_kernel_dispatch_packet_t kernel;
      hsa_barrier_and_packet_t barrier;
    } all[3];
    std::memset(all, 0, sizeof all);
    all[0].kernel = in[i];
    all[1].barrier = noop_barrier();
    all[2].barrier = noop_barrier();
    writer(all, 3);
#endif
  }
}

hsa_status_t queue_create(hsa_agent_t agent, uint32_t size, hsa_queue_type32_t type,
                          void (*callback)(hsa_status_t, hsa_queue_t*, void*), void* data,
                          uint32_t private_segment_size, uint32_t group_segment_size, hsa_queue_t** queue) {
  hsa_status_t s = g_next_queue_create(agent, size, type, callback, data, private_segment_size,
                                       group_segment_size, queue);
  if (s == HSA_STATUS_SUCCESS && g_register(*queue, interceptor, nullptr) != HSA_STATUS_SUCCESS)
    std::fprintf(stderr, "chain_tool: the queue is not an intercept queue (is rprof loaded first?)\n");
  return s;
}

void report() {
  std::lock_guard<std::mutex> lock(g_mutex);
  static bool done = false;
  if (done) return;
  done = true;
  std::printf("CHAIN mode=%s kernels=%lu markers_checked=%lu misplaced=%lu\n", CHAIN_MARKERS ? "markers" : "single",
              (unsigned long)g_kernels.load(), (unsigned long)g_checked, (unsigned long)g_misplaced);
  std::fflush(stdout);
}

}  // namespace

extern "C" bool OnLoad(HsaApiTable* table, uint64_t, uint64_t, const char* const*) {
  g_next_queue_create = table->core_->hsa_queue_create_fn;
  g_register = table->amd_ext_->hsa_amd_queue_intercept_register_fn;
  table->core_->hsa_queue_create_fn = queue_create;
  // ROCr unloads its tools at hsa_shut_down; stay mapped for the exit report (HIP apps never shut down).
  Dl_info self;
  if (dladdr(reinterpret_cast<void*>(&OnLoad), &self) != 0) dlopen(self.dli_fname, RTLD_NOW | RTLD_NODELETE);
  std::atexit(report);
  return true;
}

extern "C" void OnUnload() {}
