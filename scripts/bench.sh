#!/usr/bin/env bash
# Builds rprof (release) and the benchmark workloads, then runs rprof-bench.
# Usage: scripts/bench.sh [--runtime 5.2|6.1|6.4] [rprof-bench options, e.g. --reps 5 --svg docs/overhead.svg]
# With --runtime 6.x the workloads are compiled inside that runtime's root and every run goes through
# scripts/rocm-env.sh (see rprof-bench --runtime); the raw-HSA and RPC workloads are built for 5.2 only,
# so on 6.x pass e.g. --only storm,mix.
# Run it on a quiet machine: it measures wall time side by side.
# The trace-cost sections (--only copies,markers,systrace,rocpd) use hip-tests' memcpy_mix from $work/hip
# (built below with the other hip-tests), graph_storm, and (markers, on 6.x and 7.0) hip-tests/roctx_storm.
# A short check (about a minute once built): scripts/bench.sh --only storm --launches 10 --reps 1
# Scale (not in CI, minutes per run; only when named): scripts/bench.sh --only scale [--scale-sizes 100000,1000000]
#   uses graph_storm and hip/threads (built below with the other hip-tests).
# `scripts/bench.sh --help` lists rprof-bench's options (crate bench/) without building the workloads.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
for a in "$@"; do
  if [ "$a" = --help ] || [ "$a" = -h ]; then
    exec cargo run --quiet --release -p rprof-bench -- --help
  fi
done
runtime=5.2
if [ "${1:-}" = "--runtime" ]; then
  runtime="$2"
  shift 2
fi
cargo build --release --workspace
if [ "$runtime" != 5.2 ]; then
  work="$target/bench-rocm-$runtime"
  mkdir -p "$work"
  HIP_TESTS_ARCHS="${HIP_TESTS_ARCHS:-gfx90a}" bash scripts/rocm-env.sh "$runtime" -- \
    bash hip-tests/build.sh "$work/hip"
  cp -f "$work/hip/graph_storm" "$work/graph_storm"
  # The marker-trace workload links to the ROCTx library the root's Debian ships (libroctx64; the 6.x and 7.0
  # roots have it, the 5.2 host does not): bench section `markers`.
  bash scripts/rocm-env.sh "$runtime" -- bash -c \
    'if [ ! -f "$1" ] || [ hip-tests/roctx_storm.cpp -nt "$1" ] || [ hip-tests/common.h -nt "$1" ]; then
       hipcc --offload-arch=gfx90a -O2 hip-tests/roctx_storm.cpp -lroctx64 -o "$1"; fi' _ "$work/roctx_storm"
  exec "$target/release/rprof-bench" --bin-dir "$target/release" --work-dir "$work" --runtime "$runtime" "$@"
fi
work="$target/bench"
mkdir -p "$work"
HIP_TESTS_ARCHS="${HIP_TESTS_ARCHS:-gfx90a}" bash hip-tests/build.sh "$work/hip"
cp -f "$work/hip/graph_storm" "$work/graph_storm"
src=tests/programs
if [ ! -f "$work/bench_kernels.hsaco" ] || [ "$src/bench_kernels.cl" -nt "$work/bench_kernels.hsaco" ]; then
  clang-15 -x cl -cl-std=CL2.0 -target amdgcn-amd-amdhsa -mcpu=gfx90a -nogpulib -O2 \
    "$src/bench_kernels.cl" -o "$work/bench_kernels.hsaco"
fi
if [ ! -f "$work/dispatch_bench" ] || [ "$src/dispatch_bench.cpp" -nt "$work/dispatch_bench" ] \
   || [ "$src/hsa_test_util.h" -nt "$work/dispatch_bench" ]; then
  g++ -O2 -std=c++17 "$src/dispatch_bench.cpp" -lhsa-runtime64 -ldl -o "$work/dispatch_bench"
fi
bash scripts/build-workloads.sh "$work" >/dev/null
exec "$target/release/rprof-bench" --bin-dir "$target/release" --work-dir "$work" "$@"
