// rocprim_ops [CALLS=3]
//
// A header-only ROCm library's kernels, compiled into this program but
// written by nobody here: rocPRIM runs an inclusive scan, a reduction and a
// radix sort of 1 Mi ints, CALLS times each (every call first asks for its
// temporary storage, as rocPRIM's API wants), then synchronises. Which
// kernels rocPRIM launches for that, how many and under which names
// (templates several levels deep, with lambdas and configuration structs),
// is the library's business and changes between versions, so this program
// prints no LAUNCHED report: the tests compare the trace with what the
// emulated GPU itself ran, kernel by kernel (RPROF_EMU_EVENT_REPORT).
// Prints `COMPUTED pid=<pid> calls=<CALLS> algorithms=3 items=<n>`.
#include "common.h"

#include <rocprim/rocprim.hpp>

#include <algorithm>

int main(int argc, char** argv) {
    hiptests::Args args(argc, argv, "[CALLS=3]");
    const int calls = (int)args.get(0, 3, 1, 100000, "CALLS");
    constexpr unsigned int kItems = 1u << 20;
    int* in = nullptr;
    int* out = nullptr;
    int* sum = nullptr;
    HIP_CHECK(hipMalloc(&in, kItems * sizeof(int)));
    HIP_CHECK(hipMalloc(&out, kItems * sizeof(int)));
    HIP_CHECK(hipMalloc(&sum, sizeof(int)));

    // Temporary storage for the largest of the three, allocated once.
    size_t scan_bytes = 0, reduce_bytes = 0, sort_bytes = 0;
    HIP_CHECK(rocprim::inclusive_scan(nullptr, scan_bytes, in, out, kItems, rocprim::plus<int>()));
    HIP_CHECK(rocprim::reduce(nullptr, reduce_bytes, in, sum, kItems, rocprim::plus<int>()));
    HIP_CHECK(rocprim::radix_sort_keys(nullptr, sort_bytes, in, out, kItems));
    size_t bytes = std::max({scan_bytes, reduce_bytes, sort_bytes, size_t(1)});
    void* temp = nullptr;
    HIP_CHECK(hipMalloc(&temp, bytes));

    for (int c = 0; c < calls; ++c) {
        size_t b = bytes;
        HIP_CHECK(rocprim::inclusive_scan(temp, b, in, out, kItems, rocprim::plus<int>()));
        b = bytes;
        HIP_CHECK(rocprim::reduce(temp, b, in, sum, kItems, rocprim::plus<int>()));
        b = bytes;
        HIP_CHECK(rocprim::radix_sort_keys(temp, b, in, out, kItems));
    }
    HIP_CHECK(hipDeviceSynchronize());
    HIP_CHECK(hipFree(temp));
    HIP_CHECK(hipFree(sum));
    HIP_CHECK(hipFree(out));
    HIP_CHECK(hipFree(in));
    std::printf("COMPUTED pid=%d calls=%d algorithms=3 items=%u\n", (int)getpid(), calls, kItems);
    return 0;
}
