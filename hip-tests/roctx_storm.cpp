// roctx_storm [N=2000]
//
// The marker-trace benchmark workload (bench/src/markers.rs): N rounds of
//   roctxMarkA("tick"), roctxRangePushA("round"), one small kernel, roctxRangePop(),
// on one thread, then one hipDeviceSynchronize. With --marker-trace that is exactly 2N markers (N marks and N
// push/pop ranges) around N kernels. Each of the 3N ROCTx calls is timed on the app's thread (CLOCK_MONOTONIC
// around the call, the same in every mode), and the program prints their p50, p99, maximum and mean
// (`roctx_call_p50_ns=`, ...): what a marker costs the thread that makes it, apart from the run's start and exit.
// Linked to the ROCTx library the runtime's Debian ships (roctracer's libroctx64, `-lroctx64`); not in
// hip-tests/build.sh's list (that suite builds without ROCTx): scripts/bench.sh builds it on the runtimes whose root
// has ROCTx (6.1, 6.4, 7.0).
#include "common.h"

#include <time.h>

#include <algorithm>
#include <vector>

extern "C" {
void roctxMarkA(const char* message);
int roctxRangePushA(const char* message);
int roctxRangePop(void);
}

__global__ void tick(int* p) {
    if (threadIdx.x == 0) p[0] += 1;
}

static long long now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// Runs `call` and appends its duration to `ns`.
template <typename F>
static void timed(std::vector<long long>& ns, F call) {
    long long t0 = now_ns();
    call();
    ns.push_back(now_ns() - t0);
}

int main(int argc, char** argv) {
    hiptests::Args args(argc, argv, "[N=2000]");
    const int n = (int)args.get(0, 2000, 1, 10000000, "N");
    int* d = nullptr;
    HIP_CHECK(hipMalloc(&d, sizeof(int)));
    std::vector<long long> ns;
    ns.reserve(3 * (size_t)n);
    for (int i = 0; i < n; ++i) {
        timed(ns, [] { roctxMarkA("tick"); });
        timed(ns, [] { roctxRangePushA("round"); });
        hipLaunchKernelGGL(tick, dim3(1), dim3(64), 0, 0, d);
        HIP_CHECK_LAUNCH();
        timed(ns, [] { roctxRangePop(); });
    }
    HIP_CHECK(hipDeviceSynchronize());
    HIP_CHECK(hipFree(d));
    long long total = 0;
    for (long long v : ns) total += v;
    const double mean = (double)total / (double)ns.size();
    std::sort(ns.begin(), ns.end());
    std::printf("markers=%d\nroctx_calls=%zu\nroctx_call_p50_ns=%lld\nroctx_call_p99_ns=%lld\nroctx_call_max_ns=%lld\n"
                "roctx_call_mean_ns=%.1f\n",
                2 * n, ns.size(), ns[ns.size() / 2], ns[ns.size() * 99 / 100], ns.back(), mean);
    return 0;
}
