// Kernels of the raw-HSA test program. The emulator does not execute GPU code: the test registers host
// implementations for the kernels whose results it checks (vadd, rpc); the others are only timed.
__kernel void vadd(__global const int* a, __global const int* b, __global int* c, int n) {
  int i = (int)(__builtin_amdgcn_workgroup_id_x() * 64 + __builtin_amdgcn_workitem_id_x());
  if (i < n) c[i] = a[i] + b[i];
}

__kernel void empty(void) {}

__kernel void slow(__global int* out) { out[0] = 1; }

__kernel void rpc(__global long* doorbell_signal, int rounds) {}
