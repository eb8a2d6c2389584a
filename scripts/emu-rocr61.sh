#!/usr/bin/env bash
# Runs the emulated GPU's own test programs, rocminfo and the tracer on ROCr 6.1.2 + HIP 5.7.1 (the Debian trixie
# root of scripts/rocm-env.sh) over this checkout's libhsakmt.so.1, and checks their results exactly.
#
#   cargo build -p rprof-tool -p rprof-emu-thunk && sudo scripts/emu-rocr61.sh [OUT_DIR]
#
# Programs are compiled inside the root (its g++, clang-17 and hipcc) into OUT_DIR (default /tmp/rprof-emu-rocr61).
# rocminfo first requires /sys/module/amdgpu/initstate = "live" and a read-write /dev/kfd, which only a kernel
# driver provides; the script gives it both inside the command's own private mount namespace (a tmpfs over
# /sys/module and an overlay over /dev, gone when the command exits), never on the host.
# This is the proof for issue 11 part 2; the multi-runtime test harness runs the full suites per runtime.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-/tmp/rprof-emu-rocr61}"
target="${CARGO_TARGET_DIR:-$repo/target}/debug"
env61() { "$repo/scripts/rocm-env.sh" 6.1 -- "$@"; }

[[ -f "$target/libhsakmt.so" && -x "$target/rprof" ]] || {
    echo "emu-rocr61: build first: cargo build -p rprof-tool -p rprof-emu-thunk" >&2
    exit 2
}
mkdir -p "$out/lib"
ln -sf "$target/libhsakmt.so" "$out/lib/libhsakmt.so.1"
cd "$repo"

programs=emu/tests/programs
env61 bash -c "set -e
  for mcpu in gfx90a gfx908; do
    clang-17 -x cl -cl-std=CL2.0 -target amdgcn-amd-amdhsa -nogpulib -O2 -mcpu=\$mcpu $programs/kernels.cl -o $out/kernels-\$mcpu.co
  done
  g++ -O1 -g -std=c++17 -Iemu/include $programs/hsa_raw.cpp -L$out/lib -l:libhsakmt.so.1 -lhsa-runtime64 -lpthread -o $out/hsa_raw
  hipcc --offload-arch=gfx90a -O1 -Iemu/include $programs/hip_app.cpp -L$out/lib -l:libhsakmt.so.1 -o $out/hip_app 2>/dev/null"

failures=0
# check NAME "KEY=VALUE ..." OUTPUT: every KEY=VALUE must be a line of OUTPUT.
check() {
    local name=$1 expected=$2 output=$3 missing=()
    for kv in $expected; do
        grep -qxF -- "$kv" <<<"$output" || missing+=("$kv")
    done
    if ((${#missing[@]})); then
        echo "FAIL $name: missing ${missing[*]}"
        failures=$((failures + 1))
    else
        echo "ok   $name ($(wc -w <<<"$expected") values)"
    fi
}
run() { env61 env LD_LIBRARY_PATH="$out/lib" "$@" 2>&1 || true; }

main_expect="gpu_count=1 gpu0_name=gfx90a gpu0_product=Emulated\ AMD\ Instinct\ MI210 gpu0_cus=104 gpu0_profile=base
  kname_vadd=vadd kernarg_size_vadd=28 vadd_wrong=0 vadd_calls=1 by_object_calls=5 mt_completed=600
  barrier_and_held=1 barrier_and_released=1 barrier_or_held=1 barrier_or_released=1 device_woken_value=3
  host_woken_value=0 wait_any_index=1 wait_any_value=0 async_calls=1 async_value=0 prof_slow_ns=500000
  prof_vadd_ns=3000 prof_order_ok=1 memory_copy_ok=1 async_copy_ok=1 copy_time_order_ok=1 fill_ok=1
  dev_pointer_type=1 dev_pointer_owner_is_gpu=1 stats_faults=0 stats_blits_skipped=0 stats_blits_nonzero=1
  stats_vendor_packets_nonzero=1 stats_host_kernels=9 done=1"
main_expect=${main_expect//\\ /_}
normalise() { sed 's/^gpu0_product=Emulated AMD Instinct MI210$/gpu0_product=Emulated_AMD_Instinct_MI210/'; }
check "hsa_raw main" "$main_expect stats_sdma_copies_nonzero=0" \
    "$(run RPROF_EMU_KERNEL_NS=slow=500000 RPROF_EMU_SDMA=0 timeout 120 "$out/hsa_raw" main "$out/kernels-gfx90a.co" | normalise)"
check "hsa_raw main, SDMA engine" "$main_expect stats_sdma_copies_nonzero=1" \
    "$(run RPROF_EMU_KERNEL_NS=slow=500000 RPROF_EMU_SDMA=1 timeout 120 "$out/hsa_raw" main "$out/kernels-gfx90a.co" | normalise)"
# ROCr 6.1.2 cannot create a queue on a single-node APU (FULL profile) with scratch reclaim on: see docs.
check "hsa_raw main, APU layout (HSA_NO_SCRATCH_RECLAIM=1)" \
    "gpu0_profile=full vadd_wrong=0 mt_completed=600 prof_slow_ns=500000 memory_copy_ok=1 async_copy_ok=1 done=1" \
    "$(run RPROF_EMU_APU=1 HSA_NO_SCRATCH_RECLAIM=1 RPROF_EMU_KERNEL_NS=slow=500000 timeout 120 "$out/hsa_raw" main "$out/kernels-gfx90a.co")"
check "hsa_raw main, gfx908" "gpu0_name=gfx908 kname_vadd=vadd vadd_wrong=0 done=1" \
    "$(run RPROF_EMU_GPUS=gfx908 RPROF_EMU_KERNEL_NS=slow=500000 timeout 120 "$out/hsa_raw" main "$out/kernels-gfx908.co")"
check "hsa_raw topology, five GPUs" \
    "gpu_count=5 gpu0_name=gfx90a gpu1_name=gfx908 gpu2_name=gfx906 gpu3_name=gfx900 gpu4_name=gfx1030 gpu0_cus=8 gpu4_cus=8 gpus_completed=5" \
    "$(run RPROF_EMU_GPUS=gfx90a,gfx908,gfx906,gfx900,gfx1030 RPROF_EMU_CUS=8 timeout 120 "$out/hsa_raw" topology)"
check "hsa_raw fault" \
    "bad_type_errors=1 bad_type_status=0x1009 bad_type_signal=1 null_kernel_errors=1 null_kernel_status=0x1010 null_kernel_signal=1 done=1" \
    "$(run timeout 120 "$out/hsa_raw" fault)"
check "hsa_raw leak" "leak_allocations=0 leak_bytes=0 leak_registrations=0 leak_events=0 leak_queues=0 done=1" \
    "$(run timeout 120 "$out/hsa_raw" leak)"
# 4096 signal events + ROCr 6.1.2's MEMORY and HW_EXCEPTION events (5.2.3 creates only MEMORY: 4097).
check "hsa_raw events" "signals=5000 live_events=4098 waits_ok=2 done=1" "$(run timeout 120 "$out/hsa_raw" events)"
check "hsa_raw concurrency" \
    "small_two_queues_overlap=1 full_two_queues_overlap=0 small_one_queue_overlap=1 small_one_queue_barrier_overlap=0 done=1" \
    "$(run RPROF_EMU_KERNEL_NS=empty=20000000 timeout 120 "$out/hsa_raw" concurrency "$out/kernels-gfx90a.co")"

hip_expect="device_count=1 arch=gfx90a:sramecc-:xnack- cus=104 scale_wrong=0 d2d_wrong=0 memset_wrong=0 streams_wrong=0
  slow_ms_at_least_2=1 slow_ms_below_50=1 graph_nodes=10 graph_wrong=0 host_kernels=601 faults=0 blits_skipped=0 done=1"
check "hip_app" "$hip_expect" "$(run RPROF_EMU_KERNEL_NS=slow=2000000 timeout 120 "$out/hip_app")"
check "hip_app, SDMA engine" "$hip_expect" "$(run RPROF_EMU_KERNEL_NS=slow=2000000 RPROF_EMU_SDMA=1 timeout 120 "$out/hip_app")"
check "hip_app, two GPUs" "device_count=2 graph_wrong=0 done=1" \
    "$(run RPROF_EMU_GPUS=gfx90a,gfx90a RPROF_EMU_KERNEL_NS=slow=2000000 timeout 120 "$out/hip_app")"

# libdrm: ROCr's amdgpu_query_gpu_info must bind to the emulator's definition.
rm -f "$out"/lddebug.*
run LD_DEBUG=bindings LD_DEBUG_OUTPUT="$out/lddebug" timeout 120 "$out/hip_app" >/dev/null
if grep -qh "libhsa-runtime64.so.1 .* to $out/lib/libhsakmt.so.1 .*amdgpu_query_gpu_info" "$out"/lddebug.*; then
    echo "ok   amdgpu_query_gpu_info binds to the emulator's libhsakmt.so.1"
else
    echo "FAIL amdgpu_query_gpu_info does not bind to the emulator"
    failures=$((failures + 1))
fi

rocminfo_out=$(env61 bash -c "mount -t tmpfs rprof-emu-sysmodule /sys/module && mkdir /sys/module/amdgpu &&
    echo live > /sys/module/amdgpu/initstate && mkdir -p $out/ovl && mount -t tmpfs rprof-emu-ovl $out/ovl &&
    mkdir $out/ovl/u $out/ovl/w &&
    mount -t overlay rprof-emu-dev -o lowerdir=/dev,upperdir=$out/ovl/u,workdir=$out/ovl/w /dev && touch /dev/kfd &&
    LD_LIBRARY_PATH=$out/lib timeout 60 rocminfo" 2>&1 || true)
agents=$(grep -c '^Agent [0-9]' <<<"$rocminfo_out" || true)
if [[ $agents == 2 ]] && grep -q 'Marketing Name: *Emulated AMD Instinct MI210' <<<"$rocminfo_out" &&
    grep -q 'Compute Unit: *104' <<<"$rocminfo_out"; then
    echo "ok   rocminfo lists 2 agents (CPU + gfx90a 'Emulated AMD Instinct MI210', 104 CUs)"
else
    echo "FAIL rocminfo: $agents agents"
    failures=$((failures + 1))
fi

rm -rf "$out/trace"
run RPROF_EMU_KERNEL_NS=slow=2000000 timeout 180 "$target/rprof" --device emulated --kernel-trace -d "$out/trace" -- "$out/hip_app" >/dev/null
csv=$(ls "$out"/trace/*/*_kernel_trace.csv 2>/dev/null | head -n1)
if [[ -n $csv ]]; then
    dispatches=$(($(wc -l <"$csv") - 1))
    add_one=$(grep -c ',add_one,' "$csv" || true)
    slow_ns=$(awk -F, '$7 == "slow" { print $10 - $9 }' "$csv")
    check "rprof --kernel-trace hip_app" "dispatches=610 add_one=600 slow_ns=2000000" \
        "$(printf 'dispatches=%s\nadd_one=%s\nslow_ns=%s\n' "$dispatches" "$add_one" "$slow_ns")"
else
    echo "FAIL rprof wrote no kernel trace"
    failures=$((failures + 1))
fi

echo "emu-rocr61: $failures failure(s)"
exit $((failures > 0))
