// Raw-HSA async copies for the memory-copy trace tests (tests/memory_copy_trace.rs): every AMD-extension copy
// entry the runtime has, in every direction, with the completion-signal patterns apps use. Prints
// `COPIED direction=<rocprofv3 name> count=<n> bytes=<each>` for what it issued through the traced entries, then
// `key=value` checks, then `done=1`.
//
//   copies mix [rect]   linear copies H2D/D2H/D2D/H2H, one signal shared by four copies, a zero-handle signal,
//                       `_on_engine` where the headers have it; `rect` adds two rectangular copies (SDMA only)
//   copies exit N       N copies held back by a dependency signal that a thread releases 300 ms after main has
//                       called exit(): the copies are in flight when the process exits
//   copies stuck N      the same, never released: the copies never finish
#define HSA_TEST_PROGRAM "copies"
#include "hsa_test_util.h"

#include <hsa/hsa_ext_amd.h>

#include <stdint.h>
#include <unistd.h>

#include <thread>

static hsa_agent_t g_gpu, g_cpu;
static hsa_amd_memory_pool_t g_device_pool, g_host_pool;
static bool g_have_gpu, g_have_cpu, g_have_device_pool, g_have_host_pool;

static hsa_status_t find_agents(hsa_agent_t a, void*) {
  hsa_device_type_t t;
  CHECK(hsa_agent_get_info(a, HSA_AGENT_INFO_DEVICE, &t));
  if (t == HSA_DEVICE_TYPE_GPU && !g_have_gpu) g_gpu = a, g_have_gpu = true;
  if (t == HSA_DEVICE_TYPE_CPU && !g_have_cpu) g_cpu = a, g_have_cpu = true;
  return HSA_STATUS_SUCCESS;
}

static hsa_status_t find_device_pool(hsa_amd_memory_pool_t p, void*) {
  hsa_amd_segment_t seg;
  uint32_t flags = 0;
  CHECK(hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &seg));
  CHECK(hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags));
  if (seg == HSA_AMD_SEGMENT_GLOBAL && (flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED) &&
      !g_have_device_pool)
    g_device_pool = p, g_have_device_pool = true;
  return HSA_STATUS_SUCCESS;
}

static hsa_status_t find_host_pool(hsa_amd_memory_pool_t p, void*) {
  hsa_amd_segment_t seg;
  uint32_t flags = 0;
  CHECK(hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &seg));
  CHECK(hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags));
  if (seg == HSA_AMD_SEGMENT_GLOBAL && (flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED) && !g_have_host_pool)
    g_host_pool = p, g_have_host_pool = true;
  return HSA_STATUS_SUCCESS;
}

static void* alloc(hsa_amd_memory_pool_t pool, size_t bytes) {
  void* p = nullptr;
  CHECK(hsa_amd_memory_pool_allocate(pool, bytes, 0, &p));
  hsa_agent_t both[2] = {g_gpu, g_cpu};
  CHECK(hsa_amd_agents_allow_access(2, both, nullptr, p));
  return p;
}

static hsa_signal_t make_signal(hsa_signal_value_t v) {
  hsa_signal_t s;
  CHECK(hsa_signal_create(v, 0, nullptr, &s));
  return s;
}

static void wait_zero(hsa_signal_t s) {
  while (hsa_signal_wait_scacquire(s, HSA_SIGNAL_CONDITION_EQ, 0, UINT64_MAX, HSA_WAIT_STATE_BLOCKED) != 0) {
  }
}

// One copy through hsa_amd_memory_async_copy with a signal of its own, waited for.
static void copy1(void* dst, hsa_agent_t dst_agent, const void* src, hsa_agent_t src_agent, size_t bytes) {
  hsa_signal_t s = make_signal(1);
  CHECK(hsa_amd_memory_async_copy(dst, dst_agent, src, src_agent, bytes, 0, nullptr, s));
  wait_zero(s);
  printf("value_after_wait=%ld\n", (long)hsa_signal_load_scacquire(s));
  CHECK(hsa_signal_destroy(s));
}

static bool pattern_ok(const unsigned char* p, size_t n, unsigned char seed) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)(i * 13 + seed)) return false;
  return true;
}

static void fill(unsigned char* p, size_t n, unsigned char seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 13 + seed);
}

static int mix(bool rect) {
  const size_t big = 1 << 16;
  unsigned char* host = (unsigned char*)alloc(g_host_pool, big);
  unsigned char* host2 = (unsigned char*)alloc(g_host_pool, big);
  unsigned char* dev = (unsigned char*)alloc(g_device_pool, big);
  unsigned char* dev2 = (unsigned char*)alloc(g_device_pool, big);
  int ok = 1;

  // Host to device, 3 x 4096 bytes.
  fill(host, 4096, 1);
  for (int i = 0; i < 3; i++) copy1(dev, g_gpu, host, g_cpu, 4096);
  printf("COPIED direction=MEMORY_COPY_HOST_TO_DEVICE count=3 bytes=4096\n");
  // Device to device, 2 x 12288 bytes (dev -> dev2, first 4096 bytes known).
  for (int i = 0; i < 2; i++) copy1(dev2, g_gpu, dev, g_gpu, 12288);
  printf("COPIED direction=MEMORY_COPY_DEVICE_TO_DEVICE count=2 bytes=12288\n");
  // Device to host, 2 x 8192 bytes.
  memset(host2, 0, big);
  for (int i = 0; i < 2; i++) copy1(host2, g_cpu, dev2, g_gpu, 8192);
  printf("COPIED direction=MEMORY_COPY_DEVICE_TO_HOST count=2 bytes=8192\n");
  ok &= pattern_ok(host2, 4096, 1);
  // Host to host, 1 x 1024 bytes.
  fill(host, 1024, 7);
  memset(host2, 0, 1024);
  copy1(host2, g_cpu, host, g_cpu, 1024);
  printf("COPIED direction=MEMORY_COPY_HOST_TO_HOST count=1 bytes=1024\n");
  ok &= pattern_ok(host2, 1024, 7);

  // One signal shared by four copies (initial value 4): the app's wait for 0 ends after the fourth, and the
  // value never goes below 0.
  {
    hsa_signal_t shared = make_signal(4);
    fill(host, 4 * 2048, 3);
    for (int i = 0; i < 4; i++)
      CHECK(hsa_amd_memory_async_copy(dev + i * 2048, g_gpu, host + i * 2048, g_cpu, 2048, 0, nullptr, shared));
    wait_zero(shared);
    usleep(20000);
    printf("shared_value=%ld\n", (long)hsa_signal_load_scacquire(shared));
    CHECK(hsa_signal_destroy(shared));
    memset(host2, 0, big);
    copy1(host2, g_cpu, dev, g_gpu, 8192);
    ok &= pattern_ok(host2, 8192, 3);
    printf("COPIED direction=MEMORY_COPY_HOST_TO_DEVICE count=4 bytes=2048\n");
    printf("COPIED direction=MEMORY_COPY_DEVICE_TO_HOST count=1 bytes=8192\n");
  }

  // A zero-handle completion signal: whatever the runtime says, it says it with and without rprof.
  {
    hsa_signal_t none = {0};
    hsa_status_t st = hsa_amd_memory_async_copy(dev, g_gpu, host, g_cpu, 256, 0, nullptr, none);
    printf("null_signal_status=%u\n", (unsigned)st);
    if (st == HSA_STATUS_SUCCESS) {
      usleep(100000);
      printf("COPIED direction=MEMORY_COPY_HOST_TO_DEVICE count=1 bytes=256 untraced=1\n");
    }
  }

#if HSA_AMD_INTERFACE_VERSION_MAJOR > 1 || HSA_AMD_INTERFACE_VERSION_MINOR >= 2
  // On an engine (ROCr >= 6): 2 x 16384 bytes host to device, not forced onto SDMA.
  for (int i = 0; i < 2; i++) {
    hsa_signal_t s = make_signal(1);
    CHECK(hsa_amd_memory_async_copy_on_engine(dev, g_gpu, host, g_cpu, 16384, 0, nullptr, s,
                                              HSA_AMD_SDMA_ENGINE_0, false));
    wait_zero(s);
    CHECK(hsa_signal_destroy(s));
  }
  printf("COPIED direction=MEMORY_COPY_HOST_TO_DEVICE count=2 bytes=16384 api=on_engine\n");
#endif

  if (rect) {
    // A 64-byte x 8-row x 1 rectangle host -> device (pitch 256), then device -> host (pitch 128).
    fill(host, 2048, 9);
    hsa_pitched_ptr_t hsrc = {host, 256, 256 * 8}, ddst = {dev, 128, 128 * 8};
    hsa_dim3_t zero = {0, 0, 0}, range = {64, 8, 1};
    hsa_signal_t s = make_signal(1);
    CHECK(hsa_amd_memory_async_copy_rect(&ddst, &zero, &hsrc, &zero, &range, g_gpu, hsaHostToDevice, 0, nullptr,
                                         s));
    wait_zero(s);
    memset(host2, 0, big);
    hsa_pitched_ptr_t dsrc = {dev, 128, 128 * 8}, hdst = {host2, 64, 64 * 8};
    hsa_signal_store_screlease(s, 1);
    CHECK(hsa_amd_memory_async_copy_rect(&hdst, &zero, &dsrc, &zero, &range, g_gpu, hsaDeviceToHost, 0, nullptr,
                                         s));
    wait_zero(s);
    CHECK(hsa_signal_destroy(s));
    int rect_ok = 1;
    for (int row = 0; row < 8; row++)
      for (int x = 0; x < 64; x++)
        rect_ok &= host2[row * 64 + x] == (unsigned char)((row * 256 + x) * 13 + 9);
    printf("rect_ok=%d\n", rect_ok);
    printf("COPIED direction=MEMORY_COPY_HOST_TO_DEVICE count=1 bytes=512 api=rect\n");
    printf("COPIED direction=MEMORY_COPY_DEVICE_TO_HOST count=1 bytes=512 api=rect\n");
  }
  printf("data_ok=%d\n", ok);
  return 0;
}

// N copies gated on a dependency signal, released by a thread 300 ms after main calls exit() (or never).
static int exit_in_flight(int n, bool release) {
  unsigned char* host = (unsigned char*)alloc(g_host_pool, 4096);
  unsigned char* dev = (unsigned char*)alloc(g_device_pool, 4096 * n);
  hsa_signal_t gate = make_signal(1);
  hsa_signal_t done = make_signal(n);
  for (int i = 0; i < n; i++)
    CHECK(hsa_amd_memory_async_copy(dev + 4096 * i, g_gpu, host, g_cpu, 4096, 1, &gate, done));
  printf("COPIED direction=MEMORY_COPY_HOST_TO_DEVICE count=%d bytes=4096\n", n);
  printf("done=1\n");
  fflush(stdout);
  if (release)
    std::thread([gate] {
      usleep(300000);
      hsa_signal_store_screlease(gate, 0);
    }).detach();
  exit(0);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: copies mix [rect] | copies exit N\n");
    return 2;
  }
  CHECK(hsa_init());
  CHECK(hsa_iterate_agents(find_agents, nullptr));
  if (!g_have_gpu || !g_have_cpu) {
    fprintf(stderr, "copies: need a GPU and a CPU agent\n");
    return 2;
  }
  CHECK(hsa_amd_agent_iterate_memory_pools(g_gpu, find_device_pool, nullptr));
  CHECK(hsa_amd_agent_iterate_memory_pools(g_cpu, find_host_pool, nullptr));
  if (!g_have_device_pool || !g_have_host_pool) {
    fprintf(stderr, "copies: no device or host pool\n");
    return 2;
  }
  int rc;
  if (!strcmp(argv[1], "exit") || !strcmp(argv[1], "stuck")) {
    rc = exit_in_flight(argc > 2 ? atoi(argv[2]) : 4, !strcmp(argv[1], "exit"));
  } else {
    rc = mix(argc > 2 && !strcmp(argv[2], "rect"));
  }
  printf("done=1\n");
  CHECK(hsa_shut_down());
  return rc;
}
