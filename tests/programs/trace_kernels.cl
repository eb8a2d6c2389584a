// Kernels dispatched by trace_app.cpp. The emulated GPU only times them; their bodies do not matter.
__kernel void alpha(void) {}
__kernel void beta_kernel(__global int* out) { out[0] = 1; }
__kernel void gamma_with_a_longer_name(__global int* out, int n) { if (n > 0) out[0] = n; }
