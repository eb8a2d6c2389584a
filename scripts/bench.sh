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
# rocprofv3 side by side (section peer): scripts/bench.sh --runtime 6.4 --peer-root /var/tmp/peer-roots/sid
#   --only peer [--reps 5]. The peer root is made by ../shared/tools/peer-rocprofv3/build.sh (rocprofiler-sdk
#   0.6.0 on Debian sid's ROCr 6.4.3); the workloads are compiled inside it into $work/peer-hip, and the
#   untraced, rprof and rocprofv3 runs all run in it (scripts/rocm-env.sh PATH).
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
# --peer-root PATH (anywhere among the options): the rocprofv3 root for section peer.
peer_root=
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --peer-root) peer_root="${args[i + 1]:-}" ;;
    --peer-root=*) peer_root="${args[i]#--peer-root=}" ;;
  esac
done
if [ -n "$peer_root" ] || printf '%s\n' "$@" | grep -qE '(^|,)peer(,|$)'; then
  peer_tool=opt/rocprofiler-sdk/bin/rocprofv3
  if [ -z "$peer_root" ]; then
    echo "bench: section peer needs --peer-root PATH, the rocprofv3 root made by" \
      "../shared/tools/peer-rocprofv3/build.sh (default /var/tmp/peer-roots/sid)" >&2
    exit 2
  fi
  if [ ! -x "$peer_root/$peer_tool" ]; then
    echo "bench: no rocprofv3 peer root at $peer_root (missing: $peer_root/$peer_tool)." \
      "Build it first (about 10 minutes, as root):" \
      "DEB_MIRROR=http://deb.debian.org/debian MIRROR=<fetch mirror> ../shared/tools/peer-rocprofv3/build.sh" \
      "(see its README)" >&2
    exit 2
  fi
fi
# The peer's workloads, compiled in the peer root itself, where they run, and the query-only aqlprofile
# rocprofv3 needs there (bench/peer/aqlprofile_query.c says why).
build_peer() {
  HIP_TESTS_ARCHS="${HIP_TESTS_ARCHS:-gfx90a}" bash scripts/rocm-env.sh "$peer_root" -- \
    bash hip-tests/build.sh "$1/peer-hip"
  mkdir -p "$1/peer-aqlprofile"
  bash scripts/rocm-env.sh "$peer_root" -- gcc -O2 -Wall -fPIC -shared -Wl,-soname,libhsa-amd-aqlprofile64.so.1 \
    -o "$1/peer-aqlprofile/libhsa-amd-aqlprofile64.so.1" bench/peer/aqlprofile_query.c
}
cargo build --release --workspace
if [ "$runtime" != 5.2 ]; then
  work="$target/bench-rocm-$runtime"
  mkdir -p "$work"
  HIP_TESTS_ARCHS="${HIP_TESTS_ARCHS:-gfx90a}" bash scripts/rocm-env.sh "$runtime" -- \
    bash hip-tests/build.sh "$work/hip"
  cp -f "$work/hip/graph_storm" "$work/graph_storm"
  [ -z "$peer_root" ] || build_peer "$work"
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
[ -z "$peer_root" ] || build_peer "$work"
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
