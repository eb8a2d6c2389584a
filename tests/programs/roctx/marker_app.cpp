// HIP program traced by tests/marker_trace.rs: ROCTx marks, nested push/pop ranges, a start/stop range ended on
// another thread, thread names, and kernels inside ranges (for --kernel-rename). It prints what it did:
//   LEVELS push_outer=0 push_inner=1 pop_inner=1 pop_outer=0 pop_empty=-1 range_id=<id>
//   ROCTX_CALLS <n>   (calls the ROCTx library itself received)
// Markers: marks "before-hip" (before any HIP call), "tick" x5, "worker-mark" (worker thread) = 7;
// push/pop ranges "outer" > "inner" (main), "worker-range" (worker) = 3; start/stop range "cross-thread" started
// on main and stopped on the worker = 1. Kernels: k_inner x3 inside "inner", k_outer x2 inside "outer",
// k_plain x1 outside any range, k_worker x2 inside "worker-range".
// `marker_app copies` (tests/marker_trace.rs, --sys-trace) adds, after the above, a push/pop range "copies" holding
// 3 rounds of: pageable hipMemcpy H2D (16 KiB), k_copy, pageable hipMemcpy D2H (16 KiB), pinned hipMemcpyAsync H2D
// (1 MiB), pinned hipMemcpyAsync D2H (1 MiB), and a mark "copied" after each round: ROCTx calls 18 + 2 + 3 = 23.
// `marker_app unclosed` (tests/marker_trace.rs) adds, after the above, ranges left open at exit: a thread that
// pushes "thread-left-open" and ends, then on main pushes "left-open-outer" > "left-open-inner", starts
// "left-started", and marks "last-mark": ROCTx calls 18 + 5 = 23; markers written 11 + 1 (the mark).
// `marker_app timed-mark` (tests/marker_trace.rs) calls hipInit (which starts the runtime, and so rprof's session)
// and then marks "after-init", before any other HIP call, and prints how long each took: HIP_INIT_US <us>,
// MARK_AFTER_INIT_US <us>. ROCTx calls 18 + 1 = 19; markers 11 + 1.
// Built with -DSHIPPED_ROCTX, it links to the ROCTx library the runtime's Debian ships (roctracer's libroctx64,
// which has no roctxNameOsThread): no thread names, and the calls the library received are counted through its
// tracer hook roctxRegisterTracerCallback (called once per ROCTx call): 16.
#include <hip/hip_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <chrono>
#include <thread>

extern "C" {
void roctxMarkA(const char* message);
int roctxRangePushA(const char* message);
int roctxRangePop(void);
uint64_t roctxRangeStartA(const char* message);
void roctxRangeStop(uint64_t id);
#ifndef SHIPPED_ROCTX
int roctxNameOsThread(const char* name);
unsigned long roctx_test_calls(void);
#endif
}
#ifdef SHIPPED_ROCTX
#define roctxNameOsThread(name) 0
// roctracer's libroctx64 calls the registered function once per ROCTx call (domain, operation, data).
extern "C" void roctxRegisterTracerCallback(int (*callback)(uint32_t domain, uint32_t operation, void* data));
static std::atomic<unsigned long> g_shipped_calls{0};
static int count_call(uint32_t, uint32_t, void*) {
  g_shipped_calls.fetch_add(1);
  return 0;
}
static unsigned long roctx_test_calls(void) { return g_shipped_calls.load(); }
#endif

extern "C" __global__ void k_inner(int* p) { if (threadIdx.x == 0) p[0] += 1; }
extern "C" __global__ void k_outer(int* p) { if (threadIdx.x == 0) p[1] += 1; }
extern "C" __global__ void k_plain(int* p) { if (threadIdx.x == 0) p[2] += 1; }
extern "C" __global__ void k_worker(int* p) { if (threadIdx.x == 0) p[3] += 1; }
extern "C" __global__ void k_copy(int* p) { if (threadIdx.x == 0) p[0] += 1; }

#define CHECK(x)                                                                      \
  do {                                                                                \
    hipError_t e_ = (x);                                                              \
    if (e_ != hipSuccess) {                                                           \
      fprintf(stderr, "%s failed: %s\n", #x, hipGetErrorString(e_));                  \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

// The `copies` part: copies in both directions, pageable and pinned, around a kernel.
static void copies() {
  const size_t small = 16384, large = 1 << 20;
  int *d_small = nullptr, *d_large = nullptr, *pinned = nullptr;
  CHECK(hipMalloc(&d_small, small));
  CHECK(hipMalloc(&d_large, large));
  CHECK(hipHostMalloc(&pinned, large, hipHostMallocDefault));
  static char pageable[16384], back[16384];
  hipStream_t stream;
  CHECK(hipStreamCreate(&stream));
  roctxRangePushA("copies");
  for (int r = 0; r < 3; r++) {
    memset(pageable, r, small);
    CHECK(hipMemcpy(d_small, pageable, small, hipMemcpyHostToDevice));
    hipLaunchKernelGGL(k_copy, dim3(1), dim3(64), 0, 0, d_small);
    CHECK(hipMemcpy(back, d_small, small, hipMemcpyDeviceToHost));
    CHECK(hipMemcpyAsync(d_large, pinned, large, hipMemcpyHostToDevice, stream));
    CHECK(hipMemcpyAsync(pinned, d_large, large, hipMemcpyDeviceToHost, stream));
    CHECK(hipStreamSynchronize(stream));
    roctxMarkA("copied");
  }
  roctxRangePop();
  CHECK(hipStreamDestroy(stream));
  CHECK(hipHostFree(pinned));
  CHECK(hipFree(d_large));
  CHECK(hipFree(d_small));
}

int main(int argc, char** argv) {
#ifdef SHIPPED_ROCTX
  roctxRegisterTracerCallback(count_call);
#endif
  roctxMarkA("before-hip");
  roctxNameOsThread("main-thread");
  if (argc > 1 && strcmp(argv[1], "timed-mark") == 0) {
    using clock = std::chrono::steady_clock;
    auto us = [](clock::time_point a, clock::time_point b) {
      return (long long)std::chrono::duration_cast<std::chrono::microseconds>(b - a).count();
    };
    auto t0 = clock::now();
    CHECK(hipInit(0));
    auto t1 = clock::now();
    roctxMarkA("after-init");
    auto t2 = clock::now();
    printf("HIP_INIT_US %lld\nMARK_AFTER_INIT_US %lld\n", us(t0, t1), us(t1, t2));
  }
  int* buf = nullptr;
  CHECK(hipMalloc(&buf, 64));
  int push_outer = roctxRangePushA("outer");
  int push_inner = roctxRangePushA("inner");
  for (int i = 0; i < 3; i++) hipLaunchKernelGGL(k_inner, dim3(1), dim3(64), 0, 0, buf);
  CHECK(hipDeviceSynchronize());
  int pop_inner = roctxRangePop();
  for (int i = 0; i < 2; i++) hipLaunchKernelGGL(k_outer, dim3(1), dim3(64), 0, 0, buf);
  CHECK(hipDeviceSynchronize());
  int pop_outer = roctxRangePop();
  int pop_empty = roctxRangePop();
  hipLaunchKernelGGL(k_plain, dim3(1), dim3(64), 0, 0, buf);
  CHECK(hipDeviceSynchronize());
  for (int i = 0; i < 5; i++) roctxMarkA("tick");
  uint64_t id = roctxRangeStartA("cross-thread");
  std::thread worker([&] {
    roctxNameOsThread("worker");
    roctxMarkA("worker-mark");
    roctxRangePushA("worker-range");
    for (int i = 0; i < 2; i++) hipLaunchKernelGGL(k_worker, dim3(1), dim3(64), 0, 0, buf);
    CHECK(hipDeviceSynchronize());
    roctxRangePop();
    roctxRangeStop(id);
  });
  worker.join();
  CHECK(hipFree(buf));
  if (argc > 1 && strcmp(argv[1], "copies") == 0) copies();
  if (argc > 1 && strcmp(argv[1], "unclosed") == 0) {
    std::thread([] { roctxRangePushA("thread-left-open"); }).join();
    roctxRangePushA("left-open-outer");
    roctxRangePushA("left-open-inner");
    roctxRangeStartA("left-started");
    roctxMarkA("last-mark");
  }
  printf("LEVELS push_outer=%d push_inner=%d pop_inner=%d pop_outer=%d pop_empty=%d range_id=%llu\n", push_outer,
         push_inner, pop_inner, pop_outer, pop_empty, (unsigned long long)id);
  printf("ROCTX_CALLS %lu\n", roctx_test_calls());
  return 0;
}
