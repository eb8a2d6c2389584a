// Raw-HSA test program run over the emulated GPU by emu/tests/raw_hsa.rs.
// Usage: hsa_raw <mode> [code-object]. Prints key=value lines that the Rust test asserts on; exits non-zero
// on any HSA error.
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "rprof_emu.h"

#define CHECK(x)                                                                      \
  do {                                                                                \
    hsa_status_t s_ = (x);                                                            \
    if (s_ != HSA_STATUS_SUCCESS) {                                                   \
      const char* m_ = "?";                                                           \
      hsa_status_string(s_, &m_);                                                     \
      fprintf(stderr, "%s:%d: %s -> 0x%x %s\n", __FILE__, __LINE__, #x, s_, m_);      \
      exit(2);                                                                        \
    }                                                                                 \
  } while (0)

static hsa_agent_t g_cpu, g_gpu;
static std::vector<hsa_agent_t> g_gpus;
static hsa_amd_memory_pool_t g_kernarg_pool, g_fine_pool, g_device_pool;
static bool g_have_device_pool = false;

static hsa_status_t find_agents(hsa_agent_t a, void*) {
  hsa_device_type_t t;
  CHECK(hsa_agent_get_info(a, HSA_AGENT_INFO_DEVICE, &t));
  if (t == HSA_DEVICE_TYPE_CPU && g_cpu.handle == 0) g_cpu = a;
  if (t == HSA_DEVICE_TYPE_GPU) g_gpus.push_back(a);
  return HSA_STATUS_SUCCESS;
}

static hsa_status_t find_cpu_pools(hsa_amd_memory_pool_t p, void*) {
  hsa_amd_segment_t seg;
  CHECK(hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &seg));
  if (seg != HSA_AMD_SEGMENT_GLOBAL) return HSA_STATUS_SUCCESS;
  uint32_t flags;
  CHECK(hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags));
  if (flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT) g_kernarg_pool = p;
  else if (flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED) g_fine_pool = p;
  return HSA_STATUS_SUCCESS;
}

static hsa_status_t find_gpu_pools(hsa_amd_memory_pool_t p, void*) {
  hsa_amd_segment_t seg;
  CHECK(hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &seg));
  if (seg != HSA_AMD_SEGMENT_GLOBAL || g_have_device_pool) return HSA_STATUS_SUCCESS;
  bool alloc_ok = false;
  CHECK(hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED, &alloc_ok));
  if (!alloc_ok) return HSA_STATUS_SUCCESS;
  g_device_pool = p;
  g_have_device_pool = true;
  return HSA_STATUS_SUCCESS;
}

static void* alloc_pool(hsa_amd_memory_pool_t pool, size_t bytes) {
  void* p = nullptr;
  CHECK(hsa_amd_memory_pool_allocate(pool, bytes, 0, &p));
  hsa_agent_t agents[2] = {g_gpu, g_cpu};
  CHECK(hsa_amd_agents_allow_access(2, agents, nullptr, p));
  return p;
}

static void init() {
  CHECK(hsa_init());
  CHECK(hsa_iterate_agents(find_agents, nullptr));
  if (g_gpus.empty()) {
    fprintf(stderr, "no GPU agent\n");
    exit(3);
  }
  g_gpu = g_gpus[0];
  CHECK(hsa_amd_agent_iterate_memory_pools(g_cpu, find_cpu_pools, nullptr));
  CHECK(hsa_amd_agent_iterate_memory_pools(g_gpu, find_gpu_pools, nullptr));
  if (!g_have_device_pool) g_device_pool = g_fine_pool;  // APU: no device-local pool
}

struct Kernel {
  uint64_t object = 0;
  uint32_t kernarg_size = 0;
};

static hsa_executable_t g_exec;

static void load_code_object(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(3);
  }
  std::vector<char> bytes;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) bytes.insert(bytes.end(), buf, buf + n);
  fclose(f);
  hsa_code_object_reader_t reader;
  CHECK(hsa_code_object_reader_create_from_memory(bytes.data(), bytes.size(), &reader));
  CHECK(hsa_executable_create_alt(HSA_PROFILE_FULL, HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT, nullptr, &g_exec));
  CHECK(hsa_executable_load_agent_code_object(g_exec, g_gpu, reader, nullptr, nullptr));
  CHECK(hsa_executable_freeze(g_exec, nullptr));
}

static Kernel kernel(const char* name) {
  hsa_executable_symbol_t sym;
  CHECK(hsa_executable_get_symbol_by_name(g_exec, name, &g_gpu, &sym));
  Kernel k;
  CHECK(hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT, &k.object));
  CHECK(hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE, &k.kernarg_size));
  return k;
}

static uint16_t header(hsa_packet_type_t type, bool barrier) {
  return (uint16_t)((type << HSA_PACKET_HEADER_TYPE) | ((barrier ? 1 : 0) << HSA_PACKET_HEADER_BARRIER) |
                    (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) |
                    (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE));
}

static uint64_t reserve(hsa_queue_t* q) {
  uint64_t idx = hsa_queue_add_write_index_scacq_screl(q, 1);
  while (idx - hsa_queue_load_read_index_scacquire(q) >= q->size) std::this_thread::yield();
  return idx;
}

static void publish(hsa_queue_t* q, uint64_t idx, void* pkt, uint16_t hdr, uint16_t rest) {
  __atomic_store_n((uint32_t*)pkt, (uint32_t)hdr | ((uint32_t)rest << 16), __ATOMIC_RELEASE);
  hsa_signal_store_screlease(q->doorbell_signal, idx);
}

static void dispatch(hsa_queue_t* q, uint64_t kobj, void* kernarg, uint32_t grid, uint16_t wg, hsa_signal_t sig,
                     bool barrier = false, uint16_t type = HSA_PACKET_TYPE_KERNEL_DISPATCH) {
  uint64_t idx = reserve(q);
  auto* p = (hsa_kernel_dispatch_packet_t*)q->base_address + (idx & (q->size - 1));
  memset((char*)p + 4, 0, sizeof(*p) - 4);
  p->workgroup_size_x = wg;
  p->workgroup_size_y = 1;
  p->workgroup_size_z = 1;
  p->grid_size_x = grid;
  p->grid_size_y = 1;
  p->grid_size_z = 1;
  p->kernel_object = kobj;
  p->kernarg_address = kernarg;
  p->completion_signal = sig;
  publish(q, idx, p, header((hsa_packet_type_t)type, barrier), 1 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS);
}

static void barrier(hsa_queue_t* q, bool is_or, std::vector<hsa_signal_t> deps, hsa_signal_t done, bool bit) {
  uint64_t idx = reserve(q);
  auto* p = (hsa_barrier_and_packet_t*)q->base_address + (idx & (q->size - 1));
  memset((char*)p + 4, 0, sizeof(*p) - 4);
  for (size_t i = 0; i < deps.size(); i++) p->dep_signal[i] = deps[i];
  p->completion_signal = done;
  publish(q, idx, p, header(is_or ? HSA_PACKET_TYPE_BARRIER_OR : HSA_PACKET_TYPE_BARRIER_AND, bit), 0);
}

static hsa_signal_t signal(int64_t v) {
  hsa_signal_t s;
  CHECK(hsa_signal_create(v, 0, nullptr, &s));
  return s;
}

static hsa_queue_t* queue(hsa_agent_t agent = g_gpu, uint32_t size = 256) {
  hsa_queue_t* q;
  CHECK(hsa_queue_create(agent, size, HSA_QUEUE_TYPE_MULTI, nullptr, nullptr, UINT32_MAX, UINT32_MAX, &q));
  return q;
}

static void wait_zero(hsa_signal_t s, hsa_wait_state_t st) {
  while (hsa_signal_wait_scacquire(s, HSA_SIGNAL_CONDITION_EQ, 0, UINT64_MAX, st) != 0) {
  }
}

// Host kernels ---------------------------------------------------------------------------------------------
struct VaddArgs {
  const int* a;
  const int* b;
  int* c;
  int n;
};
static std::atomic<int> g_vadd_calls{0};
static void vadd_host(const hsa_kernel_dispatch_packet_t* pkt, void* kernarg, void* user) {
  auto* args = (VaddArgs*)kernarg;
  for (int i = 0; i < args->n && i < (int)pkt->grid_size_x; i++) args->c[i] = args->a[i] + args->b[i];
  ((std::atomic<int>*)user)->fetch_add(1);
}

struct RpcArgs {
  uint64_t signal;
  int rounds;
};
static void rpc_host(const hsa_kernel_dispatch_packet_t*, void* kernarg, void*) {
  auto* args = (RpcArgs*)kernarg;
  for (int i = 0; i < args->rounds; i++) rprof_emu_signal_add(args->signal, 1);
}

static std::atomic<int> g_async_calls{0};
static std::atomic<long> g_async_value{-1};
static bool async_handler(hsa_signal_value_t v, void*) {
  g_async_value = v;
  g_async_calls++;
  return false;
}

static uint64_t now_sys() {
  uint64_t t;
  CHECK(hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP, &t));
  return t;
}

static void print_agents() {
  printf("gpu_count=%zu\n", g_gpus.size());
  for (size_t i = 0; i < g_gpus.size(); i++) {
    char name[64] = {0}, product[64] = {0};
    uint32_t cus = 0;
    hsa_profile_t profile;
    CHECK(hsa_agent_get_info(g_gpus[i], HSA_AGENT_INFO_NAME, name));
    CHECK(hsa_agent_get_info(g_gpus[i], (hsa_agent_info_t)HSA_AMD_AGENT_INFO_PRODUCT_NAME, product));
    CHECK(hsa_agent_get_info(g_gpus[i], (hsa_agent_info_t)HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT, &cus));
    CHECK(hsa_agent_get_info(g_gpus[i], HSA_AGENT_INFO_PROFILE, &profile));
    printf("gpu%zu_name=%s\ngpu%zu_product=%s\ngpu%zu_cus=%u\ngpu%zu_profile=%s\n", i, name, i, product, i, cus, i,
           profile == HSA_PROFILE_FULL ? "full" : "base");
  }
}

// Modes ----------------------------------------------------------------------------------------------------
static int mode_topology() {
  init();
  print_agents();
  // A timed dispatch and a barrier on every GPU. The kernel object lies in tracked memory but is no code
  // object: the emulator only times it.
  int completed = 0;
  for (auto agent : g_gpus) {
    g_gpu = agent;
    hsa_queue_t* q = queue(agent);
    void* fake = alloc_pool(g_fine_pool, 4096);
    hsa_signal_t s = signal(2);
    dispatch(q, (uint64_t)fake, nullptr, 64, 64, s);
    barrier(q, false, {}, s, true);
    wait_zero(s, HSA_WAIT_STATE_BLOCKED);
    completed++;
    CHECK(hsa_signal_destroy(s));
    CHECK(hsa_queue_destroy(q));
    CHECK(hsa_amd_memory_pool_free(fake));
  }
  printf("gpus_completed=%d\n", completed);
  CHECK(hsa_shut_down());
  return 0;
}

static int mode_main(const char* code_object) {
  init();
  print_agents();
  load_code_object(code_object);
  Kernel vadd = kernel("vadd.kd"), empty = kernel("empty.kd"), slow = kernel("slow.kd"), rpc = kernel("rpc.kd");
  char kname[64];
  int kname_len = rprof_emu_kernel_name(vadd.object, kname, sizeof kname);
  if (kname_len < 0) snprintf(kname, sizeof kname, "<unknown %lx>", (unsigned long)vadd.object);
  printf("kname_vadd=%s\n", kname);
  printf("kernarg_size_vadd=%u\n", vadd.kernarg_size);
  if (rprof_emu_register_kernel("vadd", vadd_host, &g_vadd_calls) != 0) return 4;
  if (rprof_emu_register_kernel("rpc.kd", rpc_host, nullptr) != 0) return 4;

  // vadd with a host implementation.
  const int n = 1000;
  int* a = (int*)alloc_pool(g_fine_pool, n * 4);
  int* b = (int*)alloc_pool(g_fine_pool, n * 4);
  int* c = (int*)alloc_pool(g_fine_pool, n * 4);
  for (int i = 0; i < n; i++) a[i] = i, b[i] = 3 * i, c[i] = -1;
  auto* va = (VaddArgs*)alloc_pool(g_kernarg_pool, sizeof(VaddArgs));
  *va = VaddArgs{a, b, c, n};
  hsa_queue_t* q = queue();
  hsa_signal_t s = signal(1);
  dispatch(q, vadd.object, va, n, 64, s);
  wait_zero(s, HSA_WAIT_STATE_ACTIVE);
  int wrong = 0;
  for (int i = 0; i < n; i++) wrong += c[i] != 4 * i;
  printf("vadd_wrong=%d\nvadd_calls=%d\n", wrong, g_vadd_calls.load());

  // A host kernel registered by kernel object.
  {
    static std::atomic<int> by_object{0};
    auto count = [](const hsa_kernel_dispatch_packet_t*, void*, void* user) { ((std::atomic<int>*)user)->fetch_add(1); };
    if (rprof_emu_register_kernel_object(slow.object, count, &by_object) != 0) return 4;
    hsa_signal_t os = signal(5);
    for (int i = 0; i < 5; i++) dispatch(q, slow.object, nullptr, 64, 64, os);
    wait_zero(os, HSA_WAIT_STATE_BLOCKED);
    printf("by_object_calls=%d\n", by_object.load());
    CHECK(hsa_signal_destroy(os));
  }

  // Dispatches from several threads, each on its own queue; serial waits (ACTIVE and BLOCKED), then a batch of
  // 50 in flight at once on one signal. The queues are destroyed one at a time once the threads are done: ROCr
  // 5.2.3 can hang destroying queues from several threads at once (a lost wake-up on the event all its queues
  // share; docs/emulated-gpu.md, "A lost wake-up that was ROCr's"), on a real KFD as on the emulated one.
  std::atomic<int> completed{0};
  std::vector<std::thread> threads;
  std::vector<hsa_queue_t*> thread_queues(4, nullptr);
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([&, t] {
      hsa_queue_t* tq = thread_queues[t] = queue();
      hsa_signal_t ts = signal(1);
      for (int i = 0; i < 100; i++) {
        hsa_signal_store_relaxed(ts, 1);
        dispatch(tq, empty.object, nullptr, 64, 64, ts);
        wait_zero(ts, (i + t) % 2 ? HSA_WAIT_STATE_BLOCKED : HSA_WAIT_STATE_ACTIVE);
        completed++;
      }
      hsa_signal_store_relaxed(ts, 50);
      for (int i = 0; i < 50; i++) dispatch(tq, empty.object, nullptr, 64, 64, ts);
      wait_zero(ts, HSA_WAIT_STATE_BLOCKED);
      completed += 50;
      if (hsa_queue_load_read_index_scacquire(tq) != hsa_queue_load_write_index_scacquire(tq)) completed = -100000;
      CHECK(hsa_signal_destroy(ts));
    });
  }
  for (auto& th : threads) th.join();
  for (auto* tq : thread_queues) CHECK(hsa_queue_destroy(tq));
  printf("mt_completed=%d\n", completed.load());

  // Barrier-AND on a host signal holds the queue (and the dispatch behind it); releasing it lets both finish.
  {
    hsa_signal_t dep = signal(1), bdone = signal(1), kdone = signal(1);
    uint64_t rd0 = hsa_queue_load_read_index_scacquire(q);
    barrier(q, false, {dep}, bdone, false);
    dispatch(q, empty.object, nullptr, 64, 64, kdone, true);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    printf("barrier_and_held=%d\n", hsa_signal_load_scacquire(bdone) == 1 && hsa_signal_load_scacquire(kdone) == 1 &&
                                        hsa_queue_load_read_index_scacquire(q) == rd0);
    hsa_signal_store_screlease(dep, 0);
    wait_zero(bdone, HSA_WAIT_STATE_BLOCKED);
    wait_zero(kdone, HSA_WAIT_STATE_BLOCKED);
    printf("barrier_and_released=%d\n", hsa_queue_load_read_index_scacquire(q) == rd0 + 2);
    hsa_signal_t d1 = signal(1), d2 = signal(1), odone = signal(1);
    barrier(q, true, {d1, d2}, odone, false);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    int held = hsa_signal_load_scacquire(odone) == 1;
    hsa_signal_store_screlease(d2, 0);
    wait_zero(odone, HSA_WAIT_STATE_ACTIVE);
    printf("barrier_or_held=%d\nbarrier_or_released=1\n", held);
    for (auto x : {dep, bdone, kdone, d1, d2, odone}) CHECK(hsa_signal_destroy(x));
  }

  // Interrupt signal woken by the device: a host thread blocks, the "device" (rpc host kernel) adds 1 three times
  // through rprof_emu_signal_add (value, mailbox, event).
  {
    hsa_signal_t doorbell = signal(0);
    std::atomic<long> seen{-1};
    std::thread waiter([&] {
      seen = hsa_signal_wait_scacquire(doorbell, HSA_SIGNAL_CONDITION_GTE, 3, UINT64_MAX, HSA_WAIT_STATE_BLOCKED);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    auto* ra = (RpcArgs*)alloc_pool(g_kernarg_pool, sizeof(RpcArgs));
    *ra = RpcArgs{doorbell.handle, 3};
    hsa_signal_t rs = signal(1);
    dispatch(q, rpc.object, ra, 64, 64, rs);
    waiter.join();
    wait_zero(rs, HSA_WAIT_STATE_BLOCKED);
    printf("device_woken_value=%ld\n", seen.load());
    // Woken by the host.
    hsa_signal_t hs = signal(1);
    std::atomic<long> hseen{-1};
    std::thread hwaiter([&] {
      hseen = hsa_signal_wait_scacquire(hs, HSA_SIGNAL_CONDITION_EQ, 0, UINT64_MAX, HSA_WAIT_STATE_BLOCKED);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    hsa_signal_store_screlease(hs, 0);
    hwaiter.join();
    printf("host_woken_value=%ld\n", hseen.load());
    for (auto x : {doorbell, rs, hs}) CHECK(hsa_signal_destroy(x));
    CHECK(hsa_amd_memory_pool_free(ra));
  }

  // hsa_amd_signal_wait_any (hsaKmtWaitOnMultipleEvents, wait-any) woken by a device-side signal update.
  {
    hsa_signal_t ws[2] = {signal(1), signal(1)};
    hsa_signal_condition_t conds[2] = {HSA_SIGNAL_CONDITION_EQ, HSA_SIGNAL_CONDITION_EQ};
    hsa_signal_value_t vals[2] = {0, 0};
    std::thread t([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      rprof_emu_signal_add(ws[1].handle, -1);
    });
    hsa_signal_value_t seen = -1;
    uint32_t which = hsa_amd_signal_wait_any(2, ws, conds, vals, UINT64_MAX, HSA_WAIT_STATE_BLOCKED, &seen);
    t.join();
    printf("wait_any_index=%u\nwait_any_value=%ld\n", which, (long)seen);
    CHECK(hsa_signal_destroy(ws[0]));
    CHECK(hsa_signal_destroy(ws[1]));
  }

  // Async handler on a completion signal.
  {
    hsa_signal_t as = signal(1);
    CHECK(hsa_amd_signal_async_handler(as, HSA_SIGNAL_CONDITION_LT, 1, async_handler, nullptr));
    dispatch(q, empty.object, nullptr, 64, 64, as);
    for (int i = 0; i < 5000 && g_async_calls.load() == 0; i++) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    printf("async_calls=%d\nasync_value=%ld\n", g_async_calls.load(), g_async_value.load());
    CHECK(hsa_signal_destroy(as));
  }

  // Profiling: `slow` takes RPROF_EMU_KERNEL_NS (500 µs in the test); vadd follows the model.
  {
    hsa_queue_t* pq = queue();
    CHECK(hsa_amd_profiling_set_profiler_enabled(pq, 1));
    hsa_signal_t ps = signal(1);
    uint64_t before = now_sys();
    dispatch(pq, slow.object, nullptr, 64, 64, ps);
    wait_zero(ps, HSA_WAIT_STATE_BLOCKED);
    uint64_t after = now_sys();
    hsa_amd_profiling_dispatch_time_t t;
    CHECK(hsa_amd_profiling_get_dispatch_time(g_gpu, ps, &t));
    printf("prof_slow_ns=%lu\nprof_order_ok=%d\n", (unsigned long)(t.end - t.start),
           before <= t.start && t.start <= t.end && t.end <= after);
    hsa_signal_store_relaxed(ps, 1);
    dispatch(pq, vadd.object, va, 2048, 64, ps);
    wait_zero(ps, HSA_WAIT_STATE_ACTIVE);
    CHECK(hsa_amd_profiling_get_dispatch_time(g_gpu, ps, &t));
    printf("prof_vadd_ns=%lu\n", (unsigned long)(t.end - t.start));
    CHECK(hsa_signal_destroy(ps));
    CHECK(hsa_queue_destroy(pq));
  }

  // Copies.
  {
    const size_t bytes = 1 << 20;
    std::vector<unsigned char> src(bytes), back(bytes);
    for (size_t i = 0; i < bytes; i++) src[i] = (unsigned char)(i * 7 + 3);
    void* host = alloc_pool(g_fine_pool, bytes);
    void* dev = alloc_pool(g_device_pool, bytes);
    memcpy(host, src.data(), bytes);
    CHECK(hsa_memory_copy(dev, host, bytes));
    memset(host, 0, bytes);
    CHECK(hsa_memory_copy(host, dev, bytes));
    printf("memory_copy_ok=%d\n", memcmp(host, src.data(), bytes) == 0);

    void* dev2 = alloc_pool(g_device_pool, bytes);
    hsa_signal_t cs = signal(1);
    CHECK(hsa_amd_memory_async_copy(dev2, g_gpu, dev, g_gpu, bytes, 0, nullptr, cs));
    wait_zero(cs, HSA_WAIT_STATE_BLOCKED);
    // Locked user memory as the destination.
    void* locked_ptr = nullptr;
    CHECK(hsa_amd_memory_lock(back.data(), bytes, &g_gpu, 1, &locked_ptr));
    hsa_signal_store_relaxed(cs, 1);
    CHECK(hsa_amd_memory_async_copy(locked_ptr, g_cpu, dev2, g_gpu, bytes, 0, nullptr, cs));
    wait_zero(cs, HSA_WAIT_STATE_BLOCKED);
    printf("async_copy_ok=%d\n", memcmp(back.data(), src.data(), bytes) == 0);
    CHECK(hsa_amd_memory_unlock(back.data()));
    // Async-copy profiling.
    CHECK(hsa_amd_profiling_async_copy_enable(true));
    hsa_signal_store_relaxed(cs, 1);
    uint64_t before = now_sys();
    CHECK(hsa_amd_memory_async_copy(dev2, g_gpu, host, g_cpu, bytes, 0, nullptr, cs));
    wait_zero(cs, HSA_WAIT_STATE_BLOCKED);
    uint64_t after = now_sys();
    hsa_amd_profiling_async_copy_time_t ct;
    CHECK(hsa_amd_profiling_get_async_copy_time(cs, &ct));
    printf("copy_time_order_ok=%d\n", before <= ct.start && ct.start <= ct.end && ct.end <= after);
    CHECK(hsa_amd_profiling_async_copy_enable(false));
    CHECK(hsa_amd_memory_fill(dev2, 0x5a5a5a5a, bytes / 4));
    CHECK(hsa_memory_copy(host, dev2, bytes));
    int fill_ok = 1;
    for (size_t i = 0; i < bytes; i++) fill_ok &= ((unsigned char*)host)[i] == 0x5a;
    printf("fill_ok=%d\n", fill_ok);
    hsa_amd_pointer_info_t info;
    info.size = sizeof(info);
    CHECK(hsa_amd_pointer_info(dev, &info, nullptr, nullptr, nullptr));
    printf("dev_pointer_type=%d\ndev_pointer_owner_is_gpu=%d\n", (int)info.type, info.agentOwner.handle == g_gpu.handle);
    CHECK(hsa_signal_destroy(cs));
    for (void* p : {host, dev, dev2}) CHECK(hsa_amd_memory_pool_free(p));
  }

  struct rprof_emu_stats st;
  rprof_emu_get_stats(&st);
  printf("stats_faults=%lu\nstats_blits_skipped=%lu\nstats_host_kernels=%lu\n", (unsigned long)st.faults,
         (unsigned long)st.blits_skipped, (unsigned long)st.host_kernels);
  printf("stats_blits_nonzero=%d\nstats_vendor_packets_nonzero=%d\nstats_sdma_copies_nonzero=%d\n", st.blits > 0,
         st.vendor_packets > 0, st.sdma_copies > 0);
  CHECK(hsa_signal_destroy(s));
  CHECK(hsa_queue_destroy(q));
  CHECK(hsa_executable_destroy(g_exec));
  CHECK(hsa_shut_down());
  printf("done=1\n");
  return 0;
}

// Concurrency: profiled kernels (20 ms in the test, so that preemption of this thread cannot hide an overlap). Small kernels on two queues overlap; kernels that each need every CU
// run one after the other; on one queue two kernels overlap unless the second has the barrier bit.
static int mode_concurrency(const char* code_object) {
  init();
  load_code_object(code_object);
  Kernel empty = kernel("empty.kd");
  uint32_t cus = 0;
  CHECK(hsa_agent_get_info(g_gpu, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT, &cus));
  hsa_queue_t* q1 = queue();
  hsa_queue_t* q2 = queue();
  CHECK(hsa_amd_profiling_set_profiler_enabled(q1, 1));
  CHECK(hsa_amd_profiling_set_profiler_enabled(q2, 1));
  auto pair = [&](hsa_queue_t* qa, hsa_queue_t* qb, uint32_t grid, bool barrier_bit) {
    hsa_signal_t a = signal(1), b = signal(1);
    dispatch(qa, empty.object, nullptr, grid, 64, a);
    dispatch(qb, empty.object, nullptr, grid, 64, b, barrier_bit);
    wait_zero(a, HSA_WAIT_STATE_BLOCKED);
    wait_zero(b, HSA_WAIT_STATE_BLOCKED);
    hsa_amd_profiling_dispatch_time_t ta, tb;
    CHECK(hsa_amd_profiling_get_dispatch_time(g_gpu, a, &ta));
    CHECK(hsa_amd_profiling_get_dispatch_time(g_gpu, b, &tb));
    CHECK(hsa_signal_destroy(a));
    CHECK(hsa_signal_destroy(b));
    bool overlap = ta.start < tb.end && tb.start < ta.end;
    return overlap;
  };
  printf("small_two_queues_overlap=%d\n", pair(q1, q2, 64, false));
  printf("full_two_queues_overlap=%d\n", pair(q1, q2, cus * 64, false));
  printf("small_one_queue_overlap=%d\n", pair(q1, q1, 64, false));
  printf("small_one_queue_barrier_overlap=%d\n", pair(q1, q1, 64, true));
  CHECK(hsa_queue_destroy(q1));
  CHECK(hsa_queue_destroy(q2));
  CHECK(hsa_shut_down());
  printf("done=1\n");
  return 0;
}

// Two producers of one queue ring its doorbell out of order: packet idx+1 is published and rung first, then
// packet idx, so the last value the doorbell holds is idx. A GPU with AQL doorbells (DoorbellType 2) still runs
// both: the doorbell only tells it that packets are there, and their valid headers say which. Prints how many of
// the two completion signals reached 0 within 5 s.
static int mode_doorbell_order() {
  init();
  hsa_queue_t* q = queue();
  int done_count = 0;
  for (int round = 0; round < 20; round++) {
    hsa_signal_t first = signal(1), second = signal(1);
    uint64_t idx = reserve(q);
    uint64_t next = reserve(q);
    hsa_barrier_and_packet_t* pkts[2] = {(hsa_barrier_and_packet_t*)q->base_address + (idx & (q->size - 1)),
                                         (hsa_barrier_and_packet_t*)q->base_address + (next & (q->size - 1))};
    hsa_signal_t sigs[2] = {first, second};
    for (int k = 0; k < 2; k++) {
      memset((char*)pkts[k] + 4, 0, sizeof(*pkts[k]) - 4);
      pkts[k]->completion_signal = sigs[k];
    }
    publish(q, next, pkts[1], header(HSA_PACKET_TYPE_BARRIER_AND, false), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    publish(q, idx, pkts[0], header(HSA_PACKET_TYPE_BARRIER_AND, false), 0);
    for (hsa_signal_t s : sigs) {
      if (hsa_signal_wait_scacquire(s, HSA_SIGNAL_CONDITION_EQ, 0, 5000000000ull, HSA_WAIT_STATE_BLOCKED) == 0)
        done_count++;
    }
    bool stuck = hsa_signal_load_scacquire(second) != 0;
    CHECK(hsa_signal_destroy(first));
    CHECK(hsa_signal_destroy(second));
    if (stuck) break;
  }
  printf("doorbell_order_completed=%d\n", done_count);
  fflush(stdout);
  // A queue whose packet never ran cannot be destroyed cleanly: leave it to the process exit.
  if (done_count == 40) {
    CHECK(hsa_queue_destroy(q));
    CHECK(hsa_shut_down());
  }
  return 0;
}

static std::atomic<int> g_errors{0};
static std::atomic<unsigned> g_error_status{0};
static void queue_error(hsa_status_t status, hsa_queue_t*, void*) {
  g_error_status = status;
  g_errors++;
}

static int mode_fault() {
  init();
  const char* which[2] = {"bad_type", "null_kernel"};
  for (int k = 0; k < 2; k++) {
    g_errors = 0;
    hsa_queue_t* q;
    CHECK(hsa_queue_create(g_gpu, 64, HSA_QUEUE_TYPE_MULTI, queue_error, nullptr, UINT32_MAX, UINT32_MAX, &q));
    hsa_signal_t s = signal(1);
    if (k == 0)
      dispatch(q, 0x1000, nullptr, 64, 64, s, false, 7);
    else
      dispatch(q, 0, nullptr, 64, 64, s);
    for (int i = 0; i < 5000 && g_errors.load() == 0; i++) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    printf("%s_errors=%d\n%s_status=0x%x\n", which[k], g_errors.load(), which[k], g_error_status.load());
    printf("%s_signal=%ld\n", which[k], (long)hsa_signal_load_scacquire(s));
    CHECK(hsa_signal_destroy(s));
    CHECK(hsa_queue_destroy(q));
  }
  CHECK(hsa_shut_down());
  printf("done=1\n");
  return 0;
}

static int mode_leak() {
  init();
  struct rprof_emu_stats before, after;
  // Warm up once so that lazily created runtime objects exist before the first snapshot.
  for (int round = 0; round < 2; round++) {
    rprof_emu_get_stats(&before);
    for (int i = 0; i < 300; i++) {
      void* d = alloc_pool(g_device_pool, (size_t)(i % 7 + 1) << 20);
      void* h = alloc_pool(g_fine_pool, 4096 * (i % 5 + 1));
      std::vector<char> user(1 << 16);
      void* locked;
      CHECK(hsa_amd_memory_lock(user.data(), user.size(), &g_gpu, 1, &locked));
      CHECK(hsa_amd_memory_unlock(user.data()));
      hsa_signal_t s = signal(0);
      CHECK(hsa_signal_destroy(s));
      CHECK(hsa_amd_memory_pool_free(d));
      CHECK(hsa_amd_memory_pool_free(h));
      if (i % 30 == 0) {
        hsa_queue_t* q = queue();
        CHECK(hsa_queue_destroy(q));
      }
    }
    rprof_emu_get_stats(&after);
  }
  printf("leak_allocations=%ld\nleak_bytes=%ld\nleak_registrations=%ld\nleak_events=%ld\nleak_queues=%ld\n",
         (long)(after.allocations - before.allocations), (long)(after.allocated_bytes - before.allocated_bytes),
         (long)(after.registrations - before.registrations), (long)(after.events - before.events),
         (long)(after.queues - before.queues));
  CHECK(hsa_shut_down());
  printf("done=1\n");
  return 0;
}

static int mode_events() {
  init();
  const int count = 5000;
  std::vector<hsa_signal_t> sigs;
  for (int i = 0; i < count; i++) sigs.push_back(signal(1));
  struct rprof_emu_stats st;
  rprof_emu_get_stats(&st);
  printf("signals=%zu\nlive_events=%lu\n", sigs.size(), (unsigned long)st.events);
  // The last signals have no event left (ROCr falls back); waits on them still work.
  int ok = 0;
  for (int idx : {0, count - 1}) {
    hsa_signal_t s = sigs[idx];
    std::thread t([s] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      hsa_signal_store_screlease(s, 0);
    });
    ok += hsa_signal_wait_scacquire(s, HSA_SIGNAL_CONDITION_EQ, 0, UINT64_MAX, HSA_WAIT_STATE_BLOCKED) == 0;
    t.join();
  }
  printf("waits_ok=%d\n", ok);
  for (auto s : sigs) CHECK(hsa_signal_destroy(s));
  CHECK(hsa_shut_down());
  printf("done=1\n");
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string mode = argc > 1 ? argv[1] : "main";
  if (mode == "main" && argc > 2) return mode_main(argv[2]);
  if (mode == "topology") return mode_topology();
  if (mode == "concurrency" && argc > 2) return mode_concurrency(argv[2]);
  if (mode == "fault") return mode_fault();
  if (mode == "leak") return mode_leak();
  if (mode == "events") return mode_events();
  if (mode == "doorbell_order") return mode_doorbell_order();
  fprintf(stderr, "usage: hsa_raw main <code-object> | topology | fault | leak | events | doorbell_order\n");
  return 1;
}
