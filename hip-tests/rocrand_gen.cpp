// rocrand_gen [CALLS=8]
//
// A ROCm library's kernels, not ours: rocRAND generates CALLS batches of 64 Ki
// uniform floats with each of four generators (Philox4x32-10, XORWOW,
// MRG32k3a, Sobol32), then synchronises. How many kernels rocRAND dispatches
// for that, and under which names, is the library's business (generators
// that keep state run an initialisation kernel first; the names are
// templates, on ROCm 6.4 with clang's `auto` parameter declarations), so this
// program prints no LAUNCHED report: the tests count the dispatches the
// emulated GPU ran instead (RPROF_EMU_EVENT_REPORT).
// Prints `GENERATED pid=<pid> calls=<CALLS> generators=4 numbers=<total>`.
#include "common.h"

#include <rocrand/rocrand.h>

#define ROCRAND_CHECK(expr)                                                                  \
    do {                                                                                     \
        rocrand_status rocrand_check_status_ = (expr);                                       \
        if (rocrand_check_status_ != ROCRAND_STATUS_SUCCESS) {                               \
            std::fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #expr,       \
                         (int)rocrand_check_status_);                                        \
            std::exit(1);                                                                    \
        }                                                                                    \
    } while (0)

int main(int argc, char** argv) {
    hiptests::Args args(argc, argv, "[CALLS=8]");
    const int calls = (int)args.get(0, 8, 1, 100000, "CALLS");
    constexpr size_t kNumbers = 1 << 16;
    const rocrand_rng_type types[] = {ROCRAND_RNG_PSEUDO_PHILOX4_32_10, ROCRAND_RNG_PSEUDO_XORWOW,
                                      ROCRAND_RNG_PSEUDO_MRG32K3A, ROCRAND_RNG_QUASI_SOBOL32};
    float* out = nullptr;
    HIP_CHECK(hipMalloc(&out, kNumbers * sizeof(float)));
    size_t total = 0;
    for (rocrand_rng_type type : types) {
        rocrand_generator gen = nullptr;
        ROCRAND_CHECK(rocrand_create_generator(&gen, type));
        for (int c = 0; c < calls; ++c) {
            ROCRAND_CHECK(rocrand_generate_uniform(gen, out, kNumbers));
            total += kNumbers;
        }
        HIP_CHECK(hipDeviceSynchronize());
        ROCRAND_CHECK(rocrand_destroy_generator(gen));
    }
    HIP_CHECK(hipFree(out));
    std::printf("GENERATED pid=%d calls=%d generators=4 numbers=%zu\n", (int)getpid(), calls, total);
    return 0;
}
