// HIP program run over the emulated GPU by emu/tests/hip.rs. Kernels are executed by host implementations
// registered with the emulator (rprof_emu_register_kernel), so results can be checked exactly.
#include <hip/hip_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "rprof_emu.h"

#define CHECK(x)                                                                              \
  do {                                                                                        \
    hipError_t e_ = (x);                                                                      \
    if (e_ != hipSuccess) {                                                                   \
      fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #x, hipGetErrorString(e_));    \
      exit(2);                                                                                \
    }                                                                                         \
  } while (0)

extern "C" __global__ void scale(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}

extern "C" __global__ void add_one(int* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1;
}

extern "C" __global__ void slow(int* x) { x[0] = 7; }

struct ScaleArgs {
  float* x;
  float a;
  int n;
};
static void scale_host(const hsa_kernel_dispatch_packet_t*, void* kernarg, void*) {
  auto* k = (ScaleArgs*)kernarg;
  for (int i = 0; i < k->n; i++) k->x[i] *= k->a;
}

struct AddArgs {
  int* x;
  int n;
};
static void add_one_host(const hsa_kernel_dispatch_packet_t*, void* kernarg, void*) {
  auto* k = (AddArgs*)kernarg;
  for (int i = 0; i < k->n; i++) k->x[i] += 1;
}

int main() {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (rprof_emu_register_kernel("scale", scale_host, nullptr) || rprof_emu_register_kernel("add_one", add_one_host, nullptr))
    return 3;
  int count = 0;
  CHECK(hipGetDeviceCount(&count));
  hipDeviceProp_t prop;
  CHECK(hipGetDeviceProperties(&prop, 0));
  printf("device_count=%d\narch=%s\ncus=%d\n", count, prop.gcnArchName, prop.multiProcessorCount);

  // hipMalloc + hipMemcpy both ways + a launch.
  const int n = 4096;
  std::vector<float> h(n), back(n);
  for (int i = 0; i < n; i++) h[i] = (float)i;
  float* d;
  CHECK(hipMalloc(&d, n * sizeof(float)));
  CHECK(hipMemcpy(d, h.data(), n * sizeof(float), hipMemcpyHostToDevice));
  hipLaunchKernelGGL(scale, dim3(n / 256), dim3(256), 0, 0, d, 2.5f, n);
  CHECK(hipGetLastError());
  CHECK(hipMemcpy(back.data(), d, n * sizeof(float), hipMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < n; i++) wrong += back[i] != 2.5f * i;
  printf("scale_wrong=%d\n", wrong);

  // Device-to-device copy and memset.
  float* d2;
  CHECK(hipMalloc(&d2, n * sizeof(float)));
  CHECK(hipMemcpy(d2, d, n * sizeof(float), hipMemcpyDeviceToDevice));
  CHECK(hipMemcpy(back.data(), d2, n * sizeof(float), hipMemcpyDeviceToHost));
  wrong = 0;
  for (int i = 0; i < n; i++) wrong += back[i] != 2.5f * i;
  printf("d2d_wrong=%d\n", wrong);
  CHECK(hipMemset(d2, 0x3c, n * sizeof(float) - 3));
  CHECK(hipMemcpy(back.data(), d2, n * sizeof(float), hipMemcpyDeviceToHost));
  wrong = 0;
  const unsigned char* bytes = (const unsigned char*)back.data();
  for (int i = 0; i < n * 4 - 3; i++) wrong += bytes[i] != 0x3c;
  float last = 2.5f * (n - 1);
  wrong += memcmp(bytes + n * 4 - 3, (const unsigned char*)&last + 1, 3) != 0;
  printf("memset_wrong=%d\n", wrong);

  // Several streams, 100 launches each, events.
  const int streams = 4, launches = 100, m = 1000;
  hipStream_t st[streams];
  int* bufs[streams];
  hipEvent_t done[streams];
  for (int s = 0; s < streams; s++) {
    CHECK(hipStreamCreate(&st[s]));
    CHECK(hipMalloc(&bufs[s], m * sizeof(int)));
    CHECK(hipMemsetAsync(bufs[s], 0, m * sizeof(int), st[s]));
    CHECK(hipEventCreate(&done[s]));
  }
  for (int i = 0; i < launches; i++)
    for (int s = 0; s < streams; s++) hipLaunchKernelGGL(add_one, dim3(4), dim3(256), 0, st[s], bufs[s], m);
  for (int s = 0; s < streams; s++) CHECK(hipEventRecord(done[s], st[s]));
  for (int s = 0; s < streams; s++) CHECK(hipEventSynchronize(done[s]));
  wrong = 0;
  std::vector<int> ib(m);
  for (int s = 0; s < streams; s++) {
    CHECK(hipMemcpy(ib.data(), bufs[s], m * sizeof(int), hipMemcpyDeviceToHost));
    for (int i = 0; i < m; i++) wrong += ib[i] != launches;
  }
  printf("streams_wrong=%d\n", wrong);

  // Event timing around a kernel with a modelled duration (RPROF_EMU_KERNEL_NS=slow=2000000 in the test).
  hipEvent_t t0, t1;
  CHECK(hipEventCreate(&t0));
  CHECK(hipEventCreate(&t1));
  CHECK(hipEventRecord(t0, st[0]));
  hipLaunchKernelGGL(slow, dim3(1), dim3(64), 0, st[0], bufs[0]);
  CHECK(hipEventRecord(t1, st[0]));
  CHECK(hipEventSynchronize(t1));
  float ms = 0;
  CHECK(hipEventElapsedTime(&ms, t0, t1));
  printf("slow_ms_at_least_2=%d\nslow_ms_below_50=%d\n", ms >= 2.0f, ms < 50.0f);

  // Stream capture into a graph, launched repeatedly.
  int* g;
  CHECK(hipMalloc(&g, m * sizeof(int)));
  CHECK(hipMemset(g, 0, m * sizeof(int)));
  hipGraph_t graph;
  hipGraphExec_t exec;
  CHECK(hipStreamBeginCapture(st[1], hipStreamCaptureModeGlobal));
  for (int i = 0; i < 10; i++) hipLaunchKernelGGL(add_one, dim3(4), dim3(256), 0, st[1], g, m);
  CHECK(hipStreamEndCapture(st[1], &graph));
  size_t nodes = 0;
  CHECK(hipGraphGetNodes(graph, nullptr, &nodes));
  CHECK(hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0));
  for (int i = 0; i < 20; i++) CHECK(hipGraphLaunch(exec, st[1]));
  CHECK(hipStreamSynchronize(st[1]));
  CHECK(hipMemcpy(ib.data(), g, m * sizeof(int), hipMemcpyDeviceToHost));
  wrong = 0;
  for (int i = 0; i < m; i++) wrong += ib[i] != 200;
  printf("graph_nodes=%zu\ngraph_wrong=%d\n", nodes, wrong);

  CHECK(hipGraphExecDestroy(exec));
  CHECK(hipGraphDestroy(graph));
  for (int s = 0; s < streams; s++) {
    CHECK(hipStreamDestroy(st[s]));
    CHECK(hipFree(bufs[s]));
    CHECK(hipEventDestroy(done[s]));
  }
  CHECK(hipFree(d));
  CHECK(hipFree(d2));
  CHECK(hipFree(g));
  struct rprof_emu_stats stats;
  rprof_emu_get_stats(&stats);
  printf("host_kernels=%lu\nfaults=%lu\nblits_skipped=%lu\n", (unsigned long)stats.host_kernels,
         (unsigned long)stats.faults, (unsigned long)stats.blits_skipped);
  printf("done=1\n");
  return 0;
}
