// memcpy_mix [ROUNDS=40] [--verify]
//
// Copies interleaved with kernels, the way most applications look:
//   pageable hipMemcpy H2D (16 KiB) -> scale -> pageable hipMemcpy D2H,
//   pinned hipMemcpyAsync H2D (1 MiB) -> add_one -> hipMemcpyAsync D2D -> pinned D2H,
// every round on one stream. The HIP runtime may implement copies with its own
// blit kernels (`__amd_rocclr_*`); a kernel tracer shows them too, so only the
// kernels listed in the LAUNCHED report are this program's.
// --verify (real hardware) checks every result that comes back.
#include "common.h"

#include <vector>

constexpr int kSmall = 4096;      // ints: 16 KiB
constexpr int kLarge = 262144;    // ints: 1 MiB

__global__ void scale(int* data, int factor, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] *= factor;
}

__global__ void add_one(int* data, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] += 1;
}

int main(int argc, char** argv) {
    hiptests::Args args(argc, argv, "[ROUNDS=40] [--verify]");
    const int rounds = (int)args.get(0, 40, 0, 1000000, "ROUNDS");

    hipStream_t stream;
    HIP_CHECK(hipStreamCreate(&stream));
    int *d_small = nullptr, *d_large = nullptr, *d_copy = nullptr, *pinned = nullptr;
    HIP_CHECK(hipMalloc(&d_small, kSmall * sizeof(int)));
    HIP_CHECK(hipMalloc(&d_large, kLarge * sizeof(int)));
    HIP_CHECK(hipMalloc(&d_copy, kLarge * sizeof(int)));
    HIP_CHECK(hipHostMalloc(&pinned, kLarge * sizeof(int), hipHostMallocDefault));
    std::vector<int> pageable(kSmall), back(kSmall);

    hiptests::LaunchLog log;
    for (int r = 0; r < rounds; ++r) {
        for (int i = 0; i < kSmall; ++i) pageable[i] = i + r;
        HIP_CHECK(hipMemcpy(d_small, pageable.data(), kSmall * sizeof(int), hipMemcpyHostToDevice));
        hipLaunchKernelGGL(scale, dim3(kSmall / 256), dim3(256), 0, 0, d_small, 3, kSmall);
        HIP_CHECK_LAUNCH();
        log.add("scale(int*, int, int)", dim3(kSmall / 256), dim3(256));
        HIP_CHECK(hipMemcpy(back.data(), d_small, kSmall * sizeof(int), hipMemcpyDeviceToHost));
        if (args.verify)
            for (int i = 0; i < kSmall; ++i)
                hiptests::verify_or_die(back[i] == 3 * (i + r), "round %d: small[%d] = %d, expected %d", r, i,
                                        back[i], 3 * (i + r));

        for (int i = 0; i < kLarge; ++i) pinned[i] = 2 * i + r;
        HIP_CHECK(hipMemcpyAsync(d_large, pinned, kLarge * sizeof(int), hipMemcpyHostToDevice, stream));
        hipLaunchKernelGGL(add_one, dim3(kLarge / 256), dim3(256), 0, stream, d_large, kLarge);
        HIP_CHECK_LAUNCH();
        log.add("add_one(int*, int)", dim3(kLarge / 256), dim3(256));
        HIP_CHECK(hipMemcpyAsync(d_copy, d_large, kLarge * sizeof(int), hipMemcpyDeviceToDevice, stream));
        HIP_CHECK(hipMemcpyAsync(pinned, d_copy, kLarge * sizeof(int), hipMemcpyDeviceToHost, stream));
        HIP_CHECK(hipStreamSynchronize(stream));
        if (args.verify)
            for (int i = 0; i < kLarge; ++i)
                hiptests::verify_or_die(pinned[i] == 2 * i + r + 1, "round %d: large[%d] = %d, expected %d", r,
                                        i, pinned[i], 2 * i + r + 1);
    }
    HIP_CHECK(hipDeviceSynchronize());
    if (args.verify) std::printf("verified: %d rounds\n", rounds);

    HIP_CHECK(hipHostFree(pinned));
    HIP_CHECK(hipFree(d_copy));
    HIP_CHECK(hipFree(d_large));
    HIP_CHECK(hipFree(d_small));
    HIP_CHECK(hipStreamDestroy(stream));
    log.print();
    return 0;
}
