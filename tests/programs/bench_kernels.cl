// Kernels of the dispatch benchmark. On the emulated GPU they are only timed
// (RPROF_EMU_KERNEL_NS sets their modelled duration).
__kernel void bench_empty(void) {}
