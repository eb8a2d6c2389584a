// threads [THREADS=4] [PER_THREAD=250] [--verify]
//
// Many short kernels launched concurrently from several host threads, each
// with its own stream: thread t launches PER_THREAD x thread_work<t> and, on
// every 4th launch, the shared kernel tick (so one kernel name is dispatched
// from all threads at once). The threads start together behind a barrier.
// Each thread also prints `THREAD tid=<os tid> index=<t> stream_kernels=<n>`,
// its own total, for tracers that attribute dispatches to the enqueuing thread.
// --verify (real hardware): every thread's buffer holds PER_THREAD and the tick
// counter equals the number of tick launches.
#include "common.h"

#include <condition_variable>
#include <thread>
#include <utility>
#include <vector>

#include <sys/syscall.h>

constexpr int kMaxThreads = 8;
constexpr int kElements = 64;

template <int T>
__global__ void thread_work(int* data, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] += 1;
}

__global__ void tick(unsigned int* counter) {
    if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(counter, 1u);
}

using WorkKernel = void (*)(int*, int);

template <int... Ts>
static std::vector<WorkKernel> make_table(std::integer_sequence<int, Ts...>) {
    return {reinterpret_cast<WorkKernel>(&thread_work<Ts>)...};
}

int main(int argc, char** argv) {
    hiptests::Args args(argc, argv, "[THREADS=4] [PER_THREAD=250] [--verify]");
    const int nthreads = (int)args.get(0, 4, 1, kMaxThreads, "THREADS");
    const int per_thread = (int)args.get(1, 250, 0, 10000000, "PER_THREAD");
    const std::vector<WorkKernel> table = make_table(std::make_integer_sequence<int, kMaxThreads>{});

    unsigned int* counter = nullptr;
    HIP_CHECK(hipMalloc(&counter, sizeof(unsigned int)));
    HIP_CHECK(hipMemset(counter, 0, sizeof(unsigned int)));
    std::vector<int*> buffers(nthreads);
    for (int t = 0; t < nthreads; ++t) {
        HIP_CHECK(hipMalloc(&buffers[t], kElements * sizeof(int)));
        HIP_CHECK(hipMemset(buffers[t], 0, kElements * sizeof(int)));
    }
    HIP_CHECK(hipDeviceSynchronize());

    hiptests::LaunchLog log;
    std::mutex mu;
    std::condition_variable cv;
    int ready = 0;
    std::vector<std::thread> workers;
    for (int t = 0; t < nthreads; ++t) {
        workers.emplace_back([&, t] {
            hipStream_t stream;
            HIP_CHECK(hipStreamCreateWithFlags(&stream, hipStreamNonBlocking));
            {
                std::unique_lock<std::mutex> lk(mu);
                if (++ready == nthreads) cv.notify_all();
                cv.wait(lk, [&] { return ready == nthreads; });
            }
            long long mine = 0, ticks = 0;
            for (int i = 0; i < per_thread; ++i) {
                hipLaunchKernelGGL(table[t], dim3(1), dim3(kElements), 0, stream, buffers[t], kElements);
                HIP_CHECK_LAUNCH();
                ++mine;
                if (i % 4 == 3) {
                    hipLaunchKernelGGL(tick, dim3(1), dim3(64), 0, stream, counter);
                    HIP_CHECK_LAUNCH();
                    ++ticks;
                }
            }
            HIP_CHECK(hipStreamSynchronize(stream));
            HIP_CHECK(hipStreamDestroy(stream));
            log.add("void thread_work<" + std::to_string(t) + ">(int*, int)", dim3(1), dim3(kElements), mine);
            log.add("tick(unsigned int*)", dim3(1), dim3(64), ticks);
            hiptests::emit_line("THREAD tid=%ld index=%d stream_kernels=%lld", (long)syscall(SYS_gettid), t,
                                mine + ticks);
        });
    }
    for (auto& w : workers) w.join();
    HIP_CHECK(hipDeviceSynchronize());

    if (args.verify) {
        unsigned int host_counter = 0;
        HIP_CHECK(hipMemcpy(&host_counter, counter, sizeof host_counter, hipMemcpyDeviceToHost));
        const unsigned int expect_ticks = (unsigned int)(nthreads * (per_thread / 4));
        hiptests::verify_or_die(host_counter == expect_ticks, "tick counter %u, expected %u", host_counter,
                                expect_ticks);
        std::vector<int> host(kElements);
        for (int t = 0; t < nthreads; ++t) {
            HIP_CHECK(hipMemcpy(host.data(), buffers[t], kElements * sizeof(int), hipMemcpyDeviceToHost));
            for (int e = 0; e < kElements; ++e)
                hiptests::verify_or_die(host[e] == per_thread, "thread %d data[%d] = %d, expected %d", t, e,
                                        host[e], per_thread);
        }
        std::printf("verified: %d threads\n", nthreads);
    }

    for (int t = 0; t < nthreads; ++t) HIP_CHECK(hipFree(buffers[t]));
    HIP_CHECK(hipFree(counter));
    log.print();
    return 0;
}
