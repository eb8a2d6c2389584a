// exit_nosync [N=2000] [exit|return|quick]
//
// Enqueues N long-ish kernels (nosync_work, 1024 workgroups each) and one
// final last_kernel on a stream, prints the LAUNCHED report and leaves without
// any synchronisation: `exit` calls exit(0) (default), `return` returns from
// main, `quick` calls quick_exit(0) (no static destructors; atexit handlers
// registered with at_quick_exit only). The kernels were enqueued before the
// exit, so the device runs them all; a tracer must flush every one of them
// (and never hang or crash the exit). There is nothing to --verify: nobody
// waits for the results.
#include "common.h"

constexpr int kBlocks = 1024;
constexpr int kBlockSize = 256;

__global__ void nosync_work(int* data, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] = data[i] * 3 + 1;
}

__global__ void last_kernel(int* data) {
    if (blockIdx.x == 0 && threadIdx.x == 0) data[0] = -1;
}

int main(int argc, char** argv) {
    const char* mode = "exit";
    if (argc > 2) mode = argv[2];
    if (std::strcmp(mode, "exit") != 0 && std::strcmp(mode, "return") != 0 && std::strcmp(mode, "quick") != 0) {
        std::fprintf(stderr, "usage: %s [N=2000] [exit|return|quick]\n", argv[0]);
        return 2;
    }
    hiptests::Args args(argc > 2 ? 2 : argc, argv, "[N=2000] [exit|return|quick]");
    const int n = (int)args.get(0, 2000, 0, 100000000, "N");

    const int elements = kBlocks * kBlockSize;
    int* data = nullptr;
    HIP_CHECK(hipMalloc(&data, elements * sizeof(int)));
    hipStream_t stream;
    HIP_CHECK(hipStreamCreateWithFlags(&stream, hipStreamNonBlocking));

    hiptests::LaunchLog log;
    for (int i = 0; i < n; ++i) {
        hipLaunchKernelGGL(nosync_work, dim3(kBlocks), dim3(kBlockSize), 0, stream, data, elements);
        HIP_CHECK_LAUNCH();
    }
    hipLaunchKernelGGL(last_kernel, dim3(1), dim3(64), 0, stream, data);
    HIP_CHECK_LAUNCH();
    log.add("nosync_work(int*, int)", dim3(kBlocks), dim3(kBlockSize), n);
    log.add("last_kernel(int*)", dim3(1), dim3(64));
    log.print();

    // No hipStreamSynchronize, no hipFree, no hipStreamDestroy.
    if (std::strcmp(mode, "exit") == 0) std::exit(0);
    if (std::strcmp(mode, "quick") == 0) std::quick_exit(0);
    return 0;
}
