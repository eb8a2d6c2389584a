// multi_stream [STREAMS=4] [ROUNDS=50] [--verify]
//
// Several streams ordered by events: every round, stream 0 runs `produce`
// and records an event; every other stream waits for it (hipStreamWaitEvent),
// runs `consume` on its own slice and records its own event; stream 0 waits
// for all of them and runs `reduce`. The kernels of one round thus form a
// fork/join across queues, which a tracer has to follow through barrier
// packets and cross-queue signal waits.
//
// Per round: 1 produce, STREAMS-1 consume, 1 reduce.
// --verify (real hardware): produce writes e + r in round r and consume doubles
// it, so after R rounds out[e] = 2 * (STREAMS-1) * (R*e + R*(R-1)/2); a consume
// that ran before its round's produce would leave a smaller value.
#include "common.h"

#include <vector>

constexpr int kElements = 256;

__global__ void produce(int* buf, int n, int round) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) buf[i] = i + round;
}

__global__ void consume(const int* buf, int* part, int n, int scale) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) part[i] = buf[i] * scale;
}

__global__ void reduce(const int* parts, int* out, int n, int nparts) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int s = 0;
    for (int p = 0; p < nparts; ++p) s += parts[p * n + i];
    out[i] += s;
}

int main(int argc, char** argv) {
    hiptests::Args args(argc, argv, "[STREAMS=4] [ROUNDS=50] [--verify]");
    const int nstreams = (int)args.get(0, 4, 2, 16, "STREAMS");
    const int rounds = (int)args.get(1, 50, 0, 1000, "ROUNDS");
    const int nconsumers = nstreams - 1;

    int *buf = nullptr, *parts = nullptr, *out = nullptr;
    HIP_CHECK(hipMalloc(&buf, kElements * sizeof(int)));
    HIP_CHECK(hipMalloc(&parts, (size_t)nconsumers * kElements * sizeof(int)));
    HIP_CHECK(hipMalloc(&out, kElements * sizeof(int)));
    HIP_CHECK(hipMemset(out, 0, kElements * sizeof(int)));
    HIP_CHECK(hipDeviceSynchronize());

    std::vector<hipStream_t> streams(nstreams);
    std::vector<hipEvent_t> done(nstreams);
    for (int s = 0; s < nstreams; ++s) {
        HIP_CHECK(hipStreamCreateWithFlags(&streams[s], hipStreamNonBlocking));
        HIP_CHECK(hipEventCreateWithFlags(&done[s], hipEventDisableTiming));
    }

    const dim3 block(64), grid((kElements + 63) / 64);
    hiptests::LaunchLog log;
    for (int r = 0; r < rounds; ++r) {
        hipLaunchKernelGGL(produce, grid, block, 0, streams[0], buf, kElements, r);
        HIP_CHECK_LAUNCH();
        log.add("produce(int*, int, int)", grid, block);
        HIP_CHECK(hipEventRecord(done[0], streams[0]));
        for (int c = 0; c < nconsumers; ++c) {
            hipStream_t s = streams[c + 1];
            HIP_CHECK(hipStreamWaitEvent(s, done[0], 0));
            hipLaunchKernelGGL(consume, grid, block, 0, s, buf, parts + (size_t)c * kElements, kElements, 2);
            HIP_CHECK_LAUNCH();
            log.add("consume(int const*, int*, int, int)", grid, block);
            HIP_CHECK(hipEventRecord(done[c + 1], s));
        }
        for (int c = 0; c < nconsumers; ++c) HIP_CHECK(hipStreamWaitEvent(streams[0], done[c + 1], 0));
        hipLaunchKernelGGL(reduce, grid, block, 0, streams[0], parts, out, kElements, nconsumers);
        HIP_CHECK_LAUNCH();
        log.add("reduce(int const*, int*, int, int)", grid, block);
    }
    for (int s = 0; s < nstreams; ++s) HIP_CHECK(hipStreamSynchronize(streams[s]));
    HIP_CHECK(hipDeviceSynchronize());

    if (args.verify) {
        std::vector<int> host(kElements);
        HIP_CHECK(hipMemcpy(host.data(), out, kElements * sizeof(int), hipMemcpyDeviceToHost));
        for (int e = 0; e < kElements; ++e) {
            long long expect = 2LL * nconsumers * ((long long)rounds * e + (long long)rounds * (rounds - 1) / 2);
            hiptests::verify_or_die(host[e] == expect, "out[%d] = %d, expected %lld", e, host[e], expect);
        }
        std::printf("verified: %d elements\n", kElements);
    }

    for (int s = 0; s < nstreams; ++s) {
        HIP_CHECK(hipEventDestroy(done[s]));
        HIP_CHECK(hipStreamDestroy(streams[s]));
    }
    HIP_CHECK(hipFree(buf));
    HIP_CHECK(hipFree(parts));
    HIP_CHECK(hipFree(out));
    log.print();
    return 0;
}
