// multi_gpu [LAUNCHES=100]
//
// One host thread drives every GPU: for each launch round it selects each
// device in turn (hipSetDevice) and launches that device's own kernel,
// gpu_work<d>, with a grid of (d+1) blocks, on the device's null stream; then
// it synchronises every device. Prints `DEVICES pid=<pid> count=<n>` and the
// LAUNCHED report (LAUNCHES per device). Run it on the emulated GPU with
// RPROF_EMU_GPUS=gfx90a,gfx90a (two GPUs); it needs at least one.
#include "common.h"

#include <utility>
#include <vector>

constexpr int kMaxDevices = 4;

template <int D>
__global__ void gpu_work(int* data) {
    data[threadIdx.x] += D + 1;
}

using Work = void (*)(int*);

template <int... Ds>
static std::vector<Work> make_table(std::integer_sequence<int, Ds...>) {
    return {reinterpret_cast<Work>(&gpu_work<Ds>)...};
}

int main(int argc, char** argv) {
    hiptests::Args args(argc, argv, "[LAUNCHES=100]");
    const int launches = (int)args.get(0, 100, 1, 1000000, "LAUNCHES");
    int count = 0;
    HIP_CHECK(hipGetDeviceCount(&count));
    if (count > kMaxDevices) count = kMaxDevices;
    const std::vector<Work> table = make_table(std::make_integer_sequence<int, kMaxDevices>{});
    std::vector<int*> data(count);
    for (int d = 0; d < count; ++d) {
        HIP_CHECK(hipSetDevice(d));
        HIP_CHECK(hipMalloc(&data[d], 64 * sizeof(int)));
        HIP_CHECK(hipMemset(data[d], 0, 64 * sizeof(int)));
        HIP_CHECK(hipDeviceSynchronize());
    }
    hiptests::LaunchLog log;
    for (int i = 0; i < launches; ++i) {
        for (int d = 0; d < count; ++d) {
            HIP_CHECK(hipSetDevice(d));
            hipLaunchKernelGGL(table[d], dim3(d + 1), dim3(64), 0, 0, data[d]);
            HIP_CHECK_LAUNCH();
        }
    }
    for (int d = 0; d < count; ++d) {
        HIP_CHECK(hipSetDevice(d));
        HIP_CHECK(hipDeviceSynchronize());
        log.add("void gpu_work<" + std::to_string(d) + ">(int*)", dim3(d + 1), dim3(64), launches);
    }
    if (args.verify) {
        for (int d = 0; d < count; ++d) {
            int host[64];
            HIP_CHECK(hipSetDevice(d));
            HIP_CHECK(hipMemcpy(host, data[d], sizeof host, hipMemcpyDeviceToHost));
            hiptests::verify_or_die(host[0] == launches * (d + 1), "device %d: data[0] = %d, expected %d", d,
                                    host[0], launches * (d + 1));
        }
    }
    for (int d = 0; d < count; ++d) {
        HIP_CHECK(hipSetDevice(d));
        HIP_CHECK(hipFree(data[d]));
    }
    hiptests::emit_line("DEVICES pid=%d count=%d", (int)getpid(), count);
    log.print();
    return 0;
}
