// graph_storm K I [IDLE_MS] [--verify]
//
// Captures K small kernels into a HIP graph with stream capture and launches
// the graph I times (defaults K=256, I=200: 51,200 dispatches). This is the
// case of rocprofiler-sdk's hip-graph-bubbles regression test, where tracers
// lost a large share of graph kernels: a tracer must report exactly K*I
// dispatches, with unique dispatch ids and end >= start.
//
// Node j runs graph_node<j % 256>, so with K <= 256 every node has its own
// kernel name. Each node adds (j % 256) + 1 to every element of a small
// buffer, so after I launches element e holds I * sum_j ((j % 256) + 1);
// --verify checks that (real hardware only: the emulated GPU does not execute
// kernels). IDLE_MS (default 0): the process then sleeps that long with its
// queues alive and the GPU idle before it exits.
#include "common.h"

#include <chrono>
#include <thread>
#include <utility>
#include <vector>

constexpr int kDistinctKernels = 256;
constexpr int kElements = 64;

template <int N>
__global__ void graph_node(int* data, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] += N + 1;
}

using NodeKernel = void (*)(int*, int);

template <int... Ns>
static std::vector<NodeKernel> make_table(std::integer_sequence<int, Ns...>) {
    return {reinterpret_cast<NodeKernel>(&graph_node<Ns>)...};
}

static std::string node_name(int j) {
    return "void graph_node<" + std::to_string(j) + ">(int*, int)";
}

int main(int argc, char** argv) {
    hiptests::Args args(argc, argv, "[K=256] [I=200] [IDLE_MS=0] [--verify]");
    const int k = (int)args.get(0, 256, 1, 100000, "K (kernels per graph)");
    const int iters = (int)args.get(1, 200, 0, 10000000, "I (graph launches)");
    // A process that keeps its queues but gives the GPU nothing for a while before it exits.
    const int idle_ms = (int)args.get(2, 0, 0, 60000, "IDLE_MS (idle time before exit)");
    const std::vector<NodeKernel> table = make_table(std::make_integer_sequence<int, kDistinctKernels>{});

    int* data = nullptr;
    HIP_CHECK(hipMalloc(&data, kElements * sizeof(int)));
    HIP_CHECK(hipMemset(data, 0, kElements * sizeof(int)));
    HIP_CHECK(hipDeviceSynchronize());

    hipStream_t stream;
    HIP_CHECK(hipStreamCreateWithFlags(&stream, hipStreamNonBlocking));

    hiptests::LaunchLog log;
    hipGraph_t graph = nullptr;
    HIP_CHECK(hipStreamBeginCapture(stream, hipStreamCaptureModeGlobal));
    for (int j = 0; j < k; ++j) {
        hipLaunchKernelGGL(table[j % kDistinctKernels], dim3(1), dim3(kElements), 0, stream, data,
                           kElements);
        HIP_CHECK_LAUNCH();
    }
    HIP_CHECK(hipStreamEndCapture(stream, &graph));

    size_t nodes = 0;
    HIP_CHECK(hipGraphGetNodes(graph, nullptr, &nodes));
    if (nodes != (size_t)k) {
        std::fprintf(stderr, "graph has %zu nodes, captured %d kernels\n", nodes, k);
        return 1;
    }

    hipGraphExec_t exec = nullptr;
    HIP_CHECK(hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0));
    for (int i = 0; i < iters; ++i) {
        HIP_CHECK(hipGraphLaunch(exec, stream));
    }
    HIP_CHECK(hipStreamSynchronize(stream));
    for (int j = 0; j < k; ++j) log.add(node_name(j % kDistinctKernels), dim3(1), dim3(kElements), iters);

    if (args.verify) {
        long long per_launch = 0;
        for (int j = 0; j < k; ++j) per_launch += (j % kDistinctKernels) + 1;
        const long long expect = per_launch * iters;
        std::vector<int> host(kElements);
        HIP_CHECK(hipMemcpy(host.data(), data, kElements * sizeof(int), hipMemcpyDeviceToHost));
        for (int e = 0; e < kElements; ++e)
            hiptests::verify_or_die(host[e] == (int)expect, "data[%d] = %d, expected %lld", e, host[e],
                                    expect);
        std::printf("verified: every element is %lld\n", expect);
    }

    HIP_CHECK(hipGraphExecDestroy(exec));
    HIP_CHECK(hipGraphDestroy(graph));
    HIP_CHECK(hipStreamDestroy(stream));
    HIP_CHECK(hipFree(data));
    log.print();
    if (idle_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms));
    return 0;
}
