// module_reload [LAUNCHES=100] [ROUNDS=2]
//
// Kernels loaded at run time, as JIT compilers load theirs: each round loads a
// code object with hipModuleLoad, launches its one kernel LAUNCHES times with
// hipModuleLaunchKernel, synchronises and unloads it with hipModuleUnload. The
// rounds alternate between module_kernel_alpha.co and module_kernel_gamma.co
// (next to this program, built by build.sh): code objects of the same layout
// whose one kernel differs only in name (kernel_alpha, kernel_gamma), so a
// round's kernel can sit at the address the previous round's kernel had.
// Prints `RELOADED pid=<pid> rounds=<ROUNDS> launches=<LAUNCHES>` and the
// LAUNCHED report.
#include "common.h"

#include <climits>
#include <string>

#include <unistd.h>

static std::string next_to_this_program(const char* file) {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        std::fprintf(stderr, "module_reload: cannot read /proc/self/exe\n");
        std::exit(1);
    }
    self[n] = '\0';
    std::string dir(self);
    return dir.substr(0, dir.rfind('/') + 1) + file;
}

int main(int argc, char** argv) {
    hiptests::Args args(argc, argv, "[LAUNCHES=100] [ROUNDS=2]");
    const int launches = (int)args.get(0, 100, 1, 1000000, "LAUNCHES");
    const int rounds = (int)args.get(1, 2, 1, 1000, "ROUNDS");
    int* data = nullptr;
    HIP_CHECK(hipMalloc(&data, 64 * sizeof(int)));
    HIP_CHECK(hipMemset(data, 0, 64 * sizeof(int)));
    HIP_CHECK(hipDeviceSynchronize());
    hiptests::LaunchLog log;
    for (int r = 0; r < rounds; ++r) {
        const char* kernel = r % 2 == 0 ? "kernel_alpha" : "kernel_gamma";
        const std::string file = next_to_this_program(r % 2 == 0 ? "module_kernel_alpha.co" : "module_kernel_gamma.co");
        hipModule_t module;
        hipFunction_t function;
        HIP_CHECK(hipModuleLoad(&module, file.c_str()));
        HIP_CHECK(hipModuleGetFunction(&function, module, kernel));
        void* params[] = {&data};
        for (int i = 0; i < launches; ++i) {
            HIP_CHECK(hipModuleLaunchKernel(function, 1, 1, 1, 64, 1, 1, 0, nullptr, params, nullptr));
        }
        HIP_CHECK(hipDeviceSynchronize());
        HIP_CHECK(hipModuleUnload(module));
        log.add(kernel, dim3(1), dim3(64), launches);
    }
    if (args.verify) {
        int host[64];
        HIP_CHECK(hipMemcpy(host, data, sizeof host, hipMemcpyDeviceToHost));
        for (int i = 0; i < 64; ++i)
            hiptests::verify_or_die(host[i] == launches * rounds, "data[%d] = %d, expected %d", i, host[i],
                                    launches * rounds);
    }
    HIP_CHECK(hipFree(data));
    hiptests::emit_line("RELOADED pid=%d rounds=%d launches=%d", (int)getpid(), rounds, launches);
    log.print();
    return 0;
}
