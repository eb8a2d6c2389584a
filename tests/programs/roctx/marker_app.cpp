// HIP program traced by tests/marker_trace.rs: ROCTx marks, nested push/pop ranges, a start/stop range ended on
// another thread, thread names, and kernels inside ranges (for --kernel-rename). It prints what it did:
//   LEVELS push_outer=0 push_inner=1 pop_inner=1 pop_outer=0 pop_empty=-1 range_id=<id>
//   ROCTX_CALLS <n>   (calls the ROCTx library itself received)
// Markers: marks "before-hip" (before any HIP call), "tick" x5, "worker-mark" (worker thread) = 7;
// push/pop ranges "outer" > "inner" (main), "worker-range" (worker) = 3; start/stop range "cross-thread" started
// on main and stopped on the worker = 1. Kernels: k_inner x3 inside "inner", k_outer x2 inside "outer",
// k_plain x1 outside any range, k_worker x2 inside "worker-range".
#include <hip/hip_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <thread>

extern "C" {
void roctxMarkA(const char* message);
int roctxRangePushA(const char* message);
int roctxRangePop(void);
uint64_t roctxRangeStartA(const char* message);
void roctxRangeStop(uint64_t id);
int roctxNameOsThread(const char* name);
unsigned long roctx_test_calls(void);
}

extern "C" __global__ void k_inner(int* p) { if (threadIdx.x == 0) p[0] += 1; }
extern "C" __global__ void k_outer(int* p) { if (threadIdx.x == 0) p[1] += 1; }
extern "C" __global__ void k_plain(int* p) { if (threadIdx.x == 0) p[2] += 1; }
extern "C" __global__ void k_worker(int* p) { if (threadIdx.x == 0) p[3] += 1; }

#define CHECK(x)                                                                      \
  do {                                                                                \
    hipError_t e_ = (x);                                                              \
    if (e_ != hipSuccess) {                                                           \
      fprintf(stderr, "%s failed: %s\n", #x, hipGetErrorString(e_));                  \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

int main() {
  roctxMarkA("before-hip");
  roctxNameOsThread("main-thread");
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
  printf("LEVELS push_outer=%d push_inner=%d pop_inner=%d pop_outer=%d pop_empty=%d range_id=%llu\n", push_outer,
         push_inner, pop_inner, pop_outer, pop_empty, (unsigned long long)id);
  printf("ROCTX_CALLS %lu\n", roctx_test_calls());
  return 0;
}
