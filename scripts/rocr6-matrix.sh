#!/usr/bin/env bash
# Traces the raw-HSA trace_app and the hip-tests programs on ROCr 6.1.2 and 6.4.3 (scripts/rocm-env.sh roots) over
# the emulated GPU, with and without a second tool rewriting in front of rprof (tests/programs/chain_tool.cpp), and
# checks every run's CSV, JSON and Perfetto counts against what the program launched (tests/tools/trace_counts.py).
#
#   scripts/rocr6-matrix.sh [OUTDIR]     (default /tmp/rprof-rocr6-matrix; must be under /tmp, $HOME or the repo)
#
# Needs `cargo build` first (target/debug: rprof, librprof_tool.so, the thunk front-end for 6.1 and
# librprof_emu_kfd.so for 6.4), clang-15 on the host (trace_app's kernels) and root (the roots). Programs are built
# inside each root. Prints one line per run; exits 1 if any count is off.
# Environment: RPROF_MATRIX_VERSIONS (default "6.1 6.4"), RPROF_MATRIX_QUICK=1 (graph_storm 64x20 instead of the
# default 256x200).
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-/tmp/rprof-rocr6-matrix}"
versions=(${RPROF_MATRIX_VERSIONS:-6.1 6.4})
bin="$repo/target/debug"
env_sh="$repo/scripts/rocm-env.sh"
counts="$repo/tests/tools/trace_counts.py"
for f in rprof librprof_tool.so librprof_emu_kfd.so libhsakmt.so; do
    [ -e "$bin/$f" ] || { echo "rocr6-matrix: $bin/$f missing: run cargo build first" >&2; exit 2; }
done
mkdir -p "$out/bin"
# The thunk front-end under its SONAME, in this script's own output directory (rprof itself never links it
# anywhere: docs/security.md).
rm -rf "$out/emu-lib" && mkdir -p "$out/emu-lib" && ln -s "$bin/libhsakmt.so" "$out/emu-lib/libhsakmt.so.1"
status=0

clang-15 -x cl -cl-std=CL2.0 -target amdgcn-amd-amdhsa -mcpu=gfx90a -nogpulib -O2 \
    -o "$out/bin/trace_kernels.co" "$repo/tests/programs/trace_kernels.cl" || exit 2

for v in "${versions[@]}"; do
    b="$out/bin/$v"
    mkdir -p "$b"
    "$env_sh" "$v" -- g++ -O1 -std=c++17 -o "$b/trace_app" "$repo/tests/programs/trace_app.cpp" \
        -lhsa-runtime64 -lpthread || exit 2
    "$env_sh" "$v" -- g++ -std=c++17 -O1 -shared -fPIC -w -DAMD_INTERNAL_BUILD -I/usr/include/hsa \
        -o "$b/chain_tool.so" "$repo/tests/programs/chain_tool.cpp" -ldl || exit 2
    HIP_TESTS_ARCHS=gfx90a "$env_sh" "$v" -- "$repo/hip-tests/build.sh" "$b/hip" >/dev/null || exit 2
done

# run VERSION NAME CHAIN(0|1) SERIALIZE(0|1) APP ARGS...
run() {
    local v=$1 name=$2 chain=$3 ser=$4
    shift 4
    local dir="$out/runs/$v/$name" b="$out/bin/$v"
    rm -rf "$dir"
    mkdir -p "$dir"
    local tools="$bin/librprof_tool.so"
    [ "$chain" = 1 ] && tools="$tools $b/chain_tool.so"
    local envs=(HSA_TOOLS_LIB="$tools" RPROF_KERNEL_TRACE=1 RPROF_SERIALIZE_KERNELS="$ser" RPROF_VERBOSE=1
        RPROF_OUTPUT_FORMAT=csv,json,pftrace RPROF_OUTPUT_DIR="$dir" RPROF_OUTPUT_NAME=trace)
    if [ "$v" = 6.1 ]; then
        envs+=(LD_LIBRARY_PATH="$out/emu-lib")
    else
        envs+=(LD_PRELOAD="$bin/librprof_emu_kfd.so")
    fi
    local t0 t1 rc
    t0=$(date +%s%N)
    (cd "$dir" && timeout 900 "$env_sh" "$v" -- env "${envs[@]}" "$@" >"$dir/app.out" 2>"$dir/app.err")
    rc=$?
    t1=$(date +%s%N)
    local line
    local flag=()
    [ "$ser" = 1 ] && flag=(--serialized)
    line=$(python3 "$counts" "${flag[@]}" "$dir" trace "$dir/app.out" 2>&1)
    local ok=$?
    local chain_line
    chain_line=$(grep -o 'CHAIN.*' "$dir/app.out" || true)
    if [ "$chain" = 1 ] && ! grep -q 'misplaced=0$' <<<"$chain_line"; then ok=1; fi
    [ "$rc" = 0 ] || ok=1
    printf '%-4s %-28s rc=%s %6.1fs %s | %s %s\n' "$v" "$name" "$rc" "$(echo "($t1 - $t0) / 1000000000" | bc -l)" \
        "$(tr '\n' ' ' <<<"$line" | sed 's/dispatches of the program/of program/g')" "$chain_line" \
        "$([ $ok = 0 ] && echo OK || echo FAIL)"
    [ $ok = 0 ] || status=1
}

graph=(256 200)
[ "${RPROF_MATRIX_QUICK:-0}" = 1 ] && graph=(64 20)
for v in "${versions[@]}"; do
    b="$out/bin/$v"
    for chain in 0 1; do
        for ser in 0 1; do
            tag="$([ $chain = 1 ] && echo chain- || true)$([ $ser = 1 ] && echo ser- || true)"
            run "$v" "${tag}trace_app_threads" "$chain" "$ser" "$b/trace_app" "$out/bin/trace_kernels.co" threads 4 50
            run "$v" "${tag}trace_app_crossdep" "$chain" "$ser" "$b/trace_app" "$out/bin/trace_kernels.co" crossdep 20
            run "$v" "${tag}graph_storm" "$chain" "$ser" "$b/hip/graph_storm" "${graph[@]}"
            run "$v" "${tag}multi_stream" "$chain" "$ser" "$b/hip/multi_stream" 4 50
            run "$v" "${tag}memcpy_mix" "$chain" "$ser" "$b/hip/memcpy_mix" 40
            run "$v" "${tag}threads" "$chain" "$ser" "$b/hip/threads" 4 250
        done
    done
done
exit $status
