// Benchmark of the emulated GPU through the real ROCr: dispatch round-trip latency, sustained dispatch throughput
// on one and on four queues, and CPU used while idle. Built and run by emu/benches/emu_bench.rs
// (`cargo bench -p rprof-emu`), which runs it with RPROF_EMU_KERNEL_NS=0 (zero-length kernels).
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#define CHECK(x)                                                            \
  do {                                                                      \
    hsa_status_t s_ = (x);                                                  \
    if (s_ != HSA_STATUS_SUCCESS) {                                         \
      fprintf(stderr, "%s:%d: %s -> 0x%x\n", __FILE__, __LINE__, #x, s_);   \
      exit(2);                                                              \
    }                                                                       \
  } while (0)

static hsa_agent_t g_gpu;
static hsa_amd_memory_pool_t g_fine;
static bool g_found = false;

static double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_s() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

static hsa_status_t pick_gpu(hsa_agent_t a, void*) {
  hsa_device_type_t t;
  CHECK(hsa_agent_get_info(a, HSA_AGENT_INFO_DEVICE, &t));
  if (t == HSA_DEVICE_TYPE_GPU && g_gpu.handle == 0) g_gpu = a;
  if (t == HSA_DEVICE_TYPE_CPU && !g_found) {
    auto cb = [](hsa_amd_memory_pool_t p, void*) {
      uint32_t flags = 0;
      hsa_amd_segment_t seg;
      CHECK(hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &seg));
      if (seg == HSA_AMD_SEGMENT_GLOBAL) {
        CHECK(hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags));
        if ((flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED) && !g_found) {
          g_fine = p;
          g_found = true;
        }
      }
      return HSA_STATUS_SUCCESS;
    };
    CHECK(hsa_amd_agent_iterate_memory_pools(a, cb, nullptr));
  }
  return HSA_STATUS_SUCCESS;
}

static uint64_t g_kernel_object;

static void submit(hsa_queue_t* q, hsa_signal_t sig) {
  uint64_t idx = hsa_queue_add_write_index_scacq_screl(q, 1);
  while (idx - hsa_queue_load_read_index_scacquire(q) >= q->size) std::this_thread::yield();
  auto* p = (hsa_kernel_dispatch_packet_t*)q->base_address + (idx & (q->size - 1));
  memset((char*)p + 4, 0, sizeof(*p) - 4);
  p->workgroup_size_x = 64;
  p->workgroup_size_y = p->workgroup_size_z = 1;
  p->grid_size_x = 64;
  p->grid_size_y = p->grid_size_z = 1;
  p->kernel_object = g_kernel_object;
  p->completion_signal = sig;
  uint16_t header = (HSA_PACKET_TYPE_KERNEL_DISPATCH << HSA_PACKET_HEADER_TYPE) |
                    (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) |
                    (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE);
  __atomic_store_n((uint32_t*)p, header | (1u << 16), __ATOMIC_RELEASE);
  hsa_signal_store_screlease(q->doorbell_signal, idx);
}

static double throughput(int queues, int per_queue) {
  std::vector<hsa_queue_t*> qs(queues);
  for (auto& q : qs) CHECK(hsa_queue_create(g_gpu, 4096, HSA_QUEUE_TYPE_SINGLE, nullptr, nullptr, UINT32_MAX, UINT32_MAX, &q));
  std::atomic<int> ready{0};
  double t0 = 0;
  std::vector<std::thread> threads;
  std::vector<hsa_signal_t> sigs(queues);
  for (int i = 0; i < queues; i++) CHECK(hsa_signal_create(per_queue, 0, nullptr, &sigs[i]));
  t0 = now_s();
  for (int i = 0; i < queues; i++)
    threads.emplace_back([&, i] {
      for (int k = 0; k < per_queue; k++) submit(qs[i], sigs[i]);
      while (hsa_signal_wait_scacquire(sigs[i], HSA_SIGNAL_CONDITION_EQ, 0, UINT64_MAX, HSA_WAIT_STATE_ACTIVE) != 0) {
      }
    });
  for (auto& t : threads) t.join();
  double dt = now_s() - t0;
  for (int i = 0; i < queues; i++) {
    CHECK(hsa_signal_destroy(sigs[i]));
    CHECK(hsa_queue_destroy(qs[i]));
  }
  return queues * (double)per_queue / dt;
}

int main(int argc, char** argv) {
  int iterations = argc > 1 ? atoi(argv[1]) : 20000;
  CHECK(hsa_init());
  CHECK(hsa_iterate_agents(pick_gpu, nullptr));
  void* fake = nullptr;  // a kernel object in tracked memory that is no code object: timed only
  CHECK(hsa_amd_memory_pool_allocate(g_fine, 4096, 0, &fake));
  g_kernel_object = (uint64_t)fake;

  // Round trip of a zero-length dispatch, ACTIVE wait.
  hsa_queue_t* q;
  CHECK(hsa_queue_create(g_gpu, 1024, HSA_QUEUE_TYPE_SINGLE, nullptr, nullptr, UINT32_MAX, UINT32_MAX, &q));
  hsa_signal_t s;
  CHECK(hsa_signal_create(1, 0, nullptr, &s));
  std::vector<double> lat;
  for (int i = 0; i < iterations; i++) {
    hsa_signal_store_relaxed(s, 1);
    double t = now_s();
    submit(q, s);
    while (hsa_signal_wait_scacquire(s, HSA_SIGNAL_CONDITION_EQ, 0, UINT64_MAX, HSA_WAIT_STATE_ACTIVE) != 0) {
    }
    lat.push_back(now_s() - t);
  }
  std::sort(lat.begin(), lat.end());
  printf("round_trip_us p50=%.2f p90=%.2f p99=%.2f (n=%d, ACTIVE wait)\n", lat[lat.size() / 2] * 1e6,
         lat[lat.size() * 9 / 10] * 1e6, lat[lat.size() * 99 / 100] * 1e6, iterations);
  lat.clear();
  for (int i = 0; i < iterations / 10; i++) {
    hsa_signal_store_relaxed(s, 1);
    double t = now_s();
    submit(q, s);
    while (hsa_signal_wait_scacquire(s, HSA_SIGNAL_CONDITION_EQ, 0, UINT64_MAX, HSA_WAIT_STATE_BLOCKED) != 0) {
    }
    lat.push_back(now_s() - t);
  }
  std::sort(lat.begin(), lat.end());
  printf("round_trip_us_blocked p50=%.2f p90=%.2f p99=%.2f (n=%d, BLOCKED wait)\n", lat[lat.size() / 2] * 1e6,
         lat[lat.size() * 9 / 10] * 1e6, lat[lat.size() * 99 / 100] * 1e6, iterations / 10);
  CHECK(hsa_signal_destroy(s));
  CHECK(hsa_queue_destroy(q));

  printf("throughput_1_queue dispatches_per_s=%.0f\n", throughput(1, iterations * 10));
  printf("throughput_4_queues dispatches_per_s=%.0f\n", throughput(4, iterations * 10 / 4));

  // Idle: let the command processor settle, then measure this process's CPU time over 3 s.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  double c0 = cpu_s(), w0 = now_s();
  std::this_thread::sleep_for(std::chrono::seconds(3));
  double cpu = (cpu_s() - c0) / (now_s() - w0);
  printf("idle_cpu percent_of_one_core=%.3f\n", cpu * 100);
  CHECK(hsa_amd_memory_pool_free(fake));
  CHECK(hsa_shut_down());
  return 0;
}
