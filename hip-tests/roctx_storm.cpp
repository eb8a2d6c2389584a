// roctx_storm [N=2000]
//
// The marker-trace benchmark workload (bench/src/markers.rs): N rounds of
//   roctxMarkA("tick"), roctxRangePushA("round"), one small kernel, roctxRangePop(),
// on one thread, then one hipDeviceSynchronize. With --marker-trace that is exactly 2N markers (N marks and N
// push/pop ranges) around N kernels. Linked to the ROCTx library the runtime's Debian ships (roctracer's
// libroctx64, `-lroctx64`); not in hip-tests/build.sh's list (that suite builds without ROCTx): scripts/bench.sh
// builds it on the runtimes whose root has ROCTx (6.1, 6.4, 7.0).
#include "common.h"

extern "C" {
void roctxMarkA(const char* message);
int roctxRangePushA(const char* message);
int roctxRangePop(void);
}

__global__ void tick(int* p) {
    if (threadIdx.x == 0) p[0] += 1;
}

int main(int argc, char** argv) {
    hiptests::Args args(argc, argv, "[N=2000]");
    const int n = (int)args.get(0, 2000, 1, 10000000, "N");
    int* d = nullptr;
    HIP_CHECK(hipMalloc(&d, sizeof(int)));
    for (int i = 0; i < n; ++i) {
        roctxMarkA("tick");
        roctxRangePushA("round");
        hipLaunchKernelGGL(tick, dim3(1), dim3(64), 0, 0, d);
        HIP_CHECK_LAUNCH();
        roctxRangePop();
    }
    HIP_CHECK(hipDeviceSynchronize());
    HIP_CHECK(hipFree(d));
    std::printf("markers=%d\n", 2 * n);
    return 0;
}
