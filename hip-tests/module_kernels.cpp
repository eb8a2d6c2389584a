// The kernel of module_reload's two code objects, built by build.sh twice with
// `--genco` for the emulated GPU's default ISA: once as kernel_alpha, once as
// kernel_gamma. The names have the same length, so the two code objects have
// the same layout and size, and the runtime's allocator can hand the second one
// the memory the first one had.
#include <hip/hip_runtime.h>

#ifndef MODULE_KERNEL
#error "build with -DMODULE_KERNEL=<name>"
#endif

extern "C" __global__ void MODULE_KERNEL(int* data) { data[threadIdx.x] += 1; }
