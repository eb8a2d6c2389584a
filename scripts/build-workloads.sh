#!/usr/bin/env bash
# Builds the workloads of tests/programs/ that are binaries of this repository:
#   rpc-doorbell        LLVM libc's GPU RPC doorbell protocol on ROCr over the emulated GPU (rpc_doorbell.cpp)
#   rpc_kernels.hsaco   its code object (rpc_kernels.cl, gfx90a), found by rpc-doorbell next to itself
#
# Usage: scripts/build-workloads.sh [OUTDIR]     (default: target/workloads, relative to the repository)
# Environment: CXX (default g++), CLANG (default clang-15), AMDGPU_MCPU (default gfx90a).
# A target is rebuilt only when one of its inputs (sources, ROCr headers), the compiler command or the compiler's
# version changed since the last build.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$repo/target/workloads}"
CXX="${CXX:-g++}"
CLANG="${CLANG:-clang-15}"
MCPU="${AMDGPU_MCPU:-gfx90a}"
src="$repo/tests/programs"

need() {
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "build-workloads: $1 not found: $2 (scripts/setup.sh installs it)" >&2
    exit 1
  fi
}
need "$CXX" "a C++17 compiler is needed for the host programs (set CXX to use another)"
need "$CLANG" "clang with the AMDGPU target is needed for the kernels' code object (set CLANG to use another)"
if [ ! -f /usr/include/hsa/hsa.h ] || [ ! -f /usr/include/hsa/amd_hsa_signal.h ]; then
  echo "build-workloads: ROCr headers missing (/usr/include/hsa): install libhsa-runtime-dev (scripts/setup.sh)" >&2
  exit 1
fi
mkdir -p "$out"

# build NAME OUTPUT INPUT... -- COMMAND...: runs COMMAND (which writes "$tmp") unless OUTPUT exists and its stamp
# (a hash of the inputs, the command and the compiler's version) is unchanged. The output is replaced atomically.
build() {
  local name="$1" output="$2"
  shift 2
  local inputs=()
  while [ "$1" != "--" ]; do inputs+=("$1"); shift; done
  shift
  local stamp="$output.stamp" hash tmp
  hash="$( { cat "${inputs[@]}"; printf '%s\0' "$@"; "$1" --version 2>&1 | head -1; } | sha256sum | cut -d' ' -f1)"
  if [ -f "$output" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ]; then
    echo "build-workloads: $name is up to date"
    return
  fi
  tmp="$output.tmp.$$"
  local cmd=("${@//@OUT@/$tmp}")
  if ! "${cmd[@]}"; then
    rm -f "$tmp"
    echo "build-workloads: building $name failed: ${cmd[*]}" >&2
    exit 1
  fi
  mv -f "$tmp" "$output"
  echo "$hash" >"$stamp"
  echo "build-workloads: built $output"
}

build rpc_kernels.hsaco "$out/rpc_kernels.hsaco" "$src/rpc_kernels.cl" -- \
  "$CLANG" -x cl -cl-std=CL2.0 -target amdgcn-amd-amdhsa "-mcpu=$MCPU" -nogpulib -O2 \
  "$src/rpc_kernels.cl" -o @OUT@
build rpc-doorbell "$out/rpc-doorbell" "$src/rpc_doorbell.cpp" "$src/hsa_test_util.h" /usr/include/hsa/hsa.h \
  /usr/include/hsa/hsa_ext_amd.h /usr/include/hsa/amd_hsa_signal.h -- \
  "$CXX" -std=c++17 -O2 -g -Wall -Wextra "$src/rpc_doorbell.cpp" -o @OUT@ \
  -lhsa-runtime64 -ldl -lpthread
