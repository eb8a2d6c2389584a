// multiproc [PROCS=2] [PER_PROC=100]
//
// Starts PROCS child processes (fork + exec of this program, like a tiny
// mpirun) and waits for them. Child r gets OMPI_COMM_WORLD_RANK=r and
// OMPI_COMM_WORLD_SIZE=PROCS in its environment, launches (r+1)*PER_PROC
// proc_work kernels and prints its own LAUNCHED report (with pid= and rank=).
// The parent never touches the GPU: it prints
//   MULTIPROC procs=<n> total=<sum over children>
// and exits 0 only if every child did. Traces of the children are what a
// merge of per-process traces is tested with.
#include "common.h"

#include <vector>

#include <sys/types.h>
#include <sys/wait.h>

__global__ void proc_work(int* data, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] += 1;
}

static int child_main(int rank, long long per_proc, bool verify) {
    constexpr int kElements = 256;
    const long long launches = (rank + 1) * per_proc;
    int* data = nullptr;
    HIP_CHECK(hipMalloc(&data, kElements * sizeof(int)));
    HIP_CHECK(hipMemset(data, 0, kElements * sizeof(int)));
    hiptests::LaunchLog log(rank);
    for (long long i = 0; i < launches; ++i) {
        hipLaunchKernelGGL(proc_work, dim3(kElements / 64), dim3(64), 0, 0, data, kElements);
        HIP_CHECK_LAUNCH();
    }
    HIP_CHECK(hipDeviceSynchronize());
    log.add("proc_work(int*, int)", dim3(kElements / 64), dim3(64), launches);
    if (verify) {
        std::vector<int> host(kElements);
        HIP_CHECK(hipMemcpy(host.data(), data, kElements * sizeof(int), hipMemcpyDeviceToHost));
        for (int e = 0; e < kElements; ++e)
            hiptests::verify_or_die(host[e] == launches, "rank %d: data[%d] = %d, expected %lld", rank, e,
                                    host[e], launches);
    }
    HIP_CHECK(hipFree(data));
    log.print();
    return 0;
}

int main(int argc, char** argv) {
    if (argc >= 4 && std::strcmp(argv[1], "--child") == 0) {
        bool verify = argc >= 5 && std::strcmp(argv[4], "--verify") == 0;
        return child_main(std::atoi(argv[2]), std::atoll(argv[3]), verify);
    }
    hiptests::Args args(argc, argv, "[PROCS=2] [PER_PROC=100] [--verify]");
    const int procs = (int)args.get(0, 2, 1, 64, "PROCS");
    const long long per_proc = args.get(1, 100, 0, 10000000, "PER_PROC");

    std::vector<pid_t> children;
    for (int r = 0; r < procs; ++r) {
        std::fflush(nullptr);
        pid_t pid = fork();
        if (pid < 0) {
            std::perror("fork");
            return 1;
        }
        if (pid == 0) {
            std::string rank = std::to_string(r), size = std::to_string(procs), per = std::to_string(per_proc);
            setenv("OMPI_COMM_WORLD_RANK", rank.c_str(), 1);
            setenv("OMPI_COMM_WORLD_SIZE", size.c_str(), 1);
            const char* child_argv[] = {argv[0], "--child", rank.c_str(), per.c_str(),
                                        args.verify ? "--verify" : nullptr, nullptr};
            execv("/proc/self/exe", const_cast<char* const*>(child_argv));
            std::perror("execv /proc/self/exe");
            _exit(127);
        }
        children.push_back(pid);
    }
    bool ok = true;
    for (pid_t pid : children) {
        int status = 0;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            std::fprintf(stderr, "multiproc: child %d failed (status 0x%x)\n", (int)pid, status);
            ok = false;
        }
    }
    long long total = 0;
    for (int r = 0; r < procs; ++r) total += (r + 1) * per_proc;
    hiptests::emit_line("MULTIPROC procs=%d total=%lld", procs, total);
    return ok ? 0 : 1;
}
