// Dispatch micro-benchmark for rprof-bench: measures, on the submitting
// thread, what an application sees.
//
//   dispatch_bench enqueue N CODE_OBJECT    host time per dispatch (packet
//                                           write + doorbell), N dispatches
//                                           in bursts of 64, then waits
//   dispatch_bench roundtrip N CODE_OBJECT  enqueue-to-completion-observed
//                                           latency of N single dispatches
//                                           with a completion signal (ACTIVE
//                                           wait)
//
// Prints `key=value` lines: p50/p90/p99 in ns, the emulator's live event
// count when running on the emulated GPU, and the process's peak resident
// memory (vmhwm_kb). Exit 0 on success.
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <string>
#include <vector>

#define HSA_TEST_PROGRAM "dispatch_bench"
#include "hsa_test_util.h"

static hsa_agent_t gpu;
static bool have_gpu = false;

static hsa_status_t pick_gpu(hsa_agent_t a, void*) {
  hsa_device_type_t t;
  CHECK(hsa_agent_get_info(a, HSA_AGENT_INFO_DEVICE, &t));
  if (t == HSA_DEVICE_TYPE_GPU && !have_gpu) {
    gpu = a;
    have_gpu = true;
  }
  return HSA_STATUS_SUCCESS;
}

static uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static uint64_t load_kernel(const char* path, const char* name) {
  return hsa_test_kernel_object(hsa_test_load_code_object(gpu, path), gpu, name);
}

static void write_dispatch(hsa_queue_t* q, uint64_t object, hsa_signal_t completion) {
  uint64_t idx = hsa_queue_add_write_index_relaxed(q, 1);
  while (idx - hsa_queue_load_read_index_scacquire(q) >= q->size) {
  }
  auto* p = (hsa_kernel_dispatch_packet_t*)q->base_address + (idx & (q->size - 1));
  memset((char*)p + 4, 0, sizeof(*p) - 4);
  p->setup = 1 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
  p->workgroup_size_x = 64;
  p->workgroup_size_y = 1;
  p->workgroup_size_z = 1;
  p->grid_size_x = 64;
  p->grid_size_y = 1;
  p->grid_size_z = 1;
  p->kernel_object = object;
  p->completion_signal = completion;
  uint16_t header = (HSA_PACKET_TYPE_KERNEL_DISPATCH << HSA_PACKET_HEADER_TYPE) |
                    (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) |
                    (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE);
  __atomic_store_n((uint32_t*)p, header | ((uint32_t)p->setup << 16), __ATOMIC_RELEASE);
  hsa_signal_store_screlease(q->doorbell_signal, idx);
}

static void print_percentiles(const char* key, std::vector<uint64_t>& v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, (size_t)(q * v.size()))]; };
  printf("%s_p50_ns=%llu\n%s_p90_ns=%llu\n%s_p99_ns=%llu\n", key, (unsigned long long)at(0.5), key,
         (unsigned long long)at(0.9), key, (unsigned long long)at(0.99));
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s enqueue|roundtrip N CODE_OBJECT\n", argv[0]);
    return 2;
  }
  std::string mode = argv[1];
  long n = atol(argv[2]);
  CHECK(hsa_init());
  CHECK(hsa_iterate_agents(pick_gpu, nullptr));
  if (!have_gpu) {
    fprintf(stderr, "no GPU agent\n");
    return 3;
  }
  uint64_t object = load_kernel(argv[3], "bench_empty");
  hsa_queue_t* q;
  CHECK(hsa_queue_create(gpu, 4096, HSA_QUEUE_TYPE_MULTI, nullptr, nullptr, UINT32_MAX, UINT32_MAX, &q));
  hsa_signal_t done;
  CHECK(hsa_signal_create(1, 0, nullptr, &done));
  std::vector<uint64_t> samples;
  samples.reserve(n);
  // Warm-up: fills signal pools on both sides.
  for (int i = 0; i < 512; i++) {
    hsa_signal_store_relaxed(done, 1);
    write_dispatch(q, object, done);
    while (hsa_signal_wait_scacquire(done, HSA_SIGNAL_CONDITION_LT, 1, UINT64_MAX, HSA_WAIT_STATE_ACTIVE) != 0) {
    }
  }
  hsa_signal_t none = {0};
  uint64_t t0 = now_ns();
  if (mode == "enqueue") {
    const long burst = 64;
    for (long i = 0; i < n; i += burst) {
      long m = std::min(burst, n - i);
      hsa_signal_store_relaxed(done, 1);
      for (long j = 0; j < m; j++) {
        uint64_t a = now_ns();
        write_dispatch(q, object, j == m - 1 ? done : none);
        samples.push_back(now_ns() - a);
      }
      while (hsa_signal_wait_scacquire(done, HSA_SIGNAL_CONDITION_LT, 1, UINT64_MAX, HSA_WAIT_STATE_ACTIVE) != 0) {
      }
    }
    print_percentiles("enqueue", samples);
  } else if (mode == "roundtrip") {
    for (long i = 0; i < n; i++) {
      hsa_signal_store_relaxed(done, 1);
      uint64_t a = now_ns();
      write_dispatch(q, object, done);
      while (hsa_signal_load_scacquire(done) != 0) {
      }
      samples.push_back(now_ns() - a);
    }
    print_percentiles("roundtrip", samples);
  } else {
    fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  printf("dispatches=%ld\nwall_ns=%llu\n", n, (unsigned long long)(now_ns() - t0));
  // The emulator's live driver events, when running on it.
  struct Stats {
    uint64_t v[13];
  } st;
  auto get_stats = (int (*)(Stats*))dlsym(RTLD_DEFAULT, "rprof_emu_get_stats");
  if (get_stats && get_stats(&st) == 0) printf("emu_events=%llu\n", (unsigned long long)st.v[11]);
  CHECK(hsa_signal_destroy(done));
  CHECK(hsa_queue_destroy(q));
  CHECK(hsa_shut_down());
  // Peak resident memory of this process, after the tracer's flush.
  if (FILE* st = fopen("/proc/self/status", "r")) {
    char line[256];
    while (fgets(line, sizeof line, st))
      if (strncmp(line, "VmHWM:", 6) == 0) printf("vmhwm_kb=%lld\n", atoll(line + 6));
    fclose(st);
  }
  return 0;
}
