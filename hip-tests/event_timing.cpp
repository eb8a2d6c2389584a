// event_timing [LAUNCHES=5]
//
// Times kernels the way benchmarks do, with HIP events attached to the launch
// itself: hipExtLaunchKernelGGL(start, stop) LAUNCHES times, each followed by
// hipEventSynchronize(stop) and hipEventElapsedTime. HIP takes those times from
// the kernel's completion signal. Prints `EVENT_TIMING pid=<pid> launches=<n>
// min_us=<a> max_us=<b>` (whole microseconds, rounded) and the LAUNCHED report.
// On the emulated GPU, RPROF_EMU_KERNEL_NS sets how long the kernel runs.
#include "common.h"

#include <hip/hip_ext.h>

#include <algorithm>
#include <cmath>

__global__ void timed_kernel(int* data) { data[threadIdx.x] += 1; }

int main(int argc, char** argv) {
    hiptests::Args args(argc, argv, "[LAUNCHES=5]");
    const int launches = (int)args.get(0, 5, 1, 100000, "LAUNCHES");
    int* data = nullptr;
    HIP_CHECK(hipMalloc(&data, 64 * sizeof(int)));
    HIP_CHECK(hipMemset(data, 0, 64 * sizeof(int)));
    HIP_CHECK(hipDeviceSynchronize());
    hipEvent_t start, stop;
    HIP_CHECK(hipEventCreate(&start));
    HIP_CHECK(hipEventCreate(&stop));
    double lo = INFINITY, hi = 0;
    for (int i = 0; i < launches; ++i) {
        hipExtLaunchKernelGGL(timed_kernel, dim3(1), dim3(64), 0, 0, start, stop, 0, data);
        HIP_CHECK_LAUNCH();
        HIP_CHECK(hipEventSynchronize(stop));
        float ms = 0;
        HIP_CHECK(hipEventElapsedTime(&ms, start, stop));
        lo = std::min(lo, 1000.0 * ms);
        hi = std::max(hi, 1000.0 * ms);
    }
    HIP_CHECK(hipEventDestroy(start));
    HIP_CHECK(hipEventDestroy(stop));
    HIP_CHECK(hipFree(data));
    hiptests::LaunchLog log;
    log.add("timed_kernel(int*)", dim3(1), dim3(64), launches);
    hiptests::emit_line("EVENT_TIMING pid=%d launches=%d min_us=%.0f max_us=%.0f", (int)getpid(), launches, lo, hi);
    log.print();
    return 0;
}
