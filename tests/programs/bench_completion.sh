#!/bin/sh
# Completion-mechanism benchmark (docs/completion.md): runs one workload untraced and under rprof's tool
# library in several modes, alternating, and prints best and median wall time and CPU time per mode.
#
#   tests/programs/bench_completion.sh TOOL_SO EMU_DIR RUNS -- PROGRAM [ARGS...]
#
# TOOL_SO: librprof_tool.so (release build); EMU_DIR: directory with libhsakmt.so.1 (emulated GPU), or "-"
# on real hardware. Modes:
#   untraced     no tool
#   passthrough  every queue an intercept queue with profiling on, packets unchanged (the floor)
#   rprof        rprof's kernel trace (pooled memory signals, barrier forwarding, polling completion thread)
#   rprof-crude  same, but the completion thread never sleeps longer than 50 us (fixed short naps)
set -eu
tool=$1 emu=$2 runs=$3
shift 3
[ "$1" = "--" ] && shift
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run_mode() {
  mode=$1
  shift
  set -- env
  [ "$emu" != "-" ] && set -- "$@" LD_LIBRARY_PATH="$emu"
  case $mode in
    untraced) ;;
    passthrough) set -- "$@" HSA_TOOLS_LIB="$tool" RPROF_KERNEL_TRACE=1 RPROF_INTERCEPT_PASSTHROUGH=1 ;;
    rprof) set -- "$@" HSA_TOOLS_LIB="$tool" RPROF_KERNEL_TRACE=1 ;;
    rprof-crude) set -- "$@" HSA_TOOLS_LIB="$tool" RPROF_KERNEL_TRACE=1 RPROF_COMPLETION_MAX_BACKOFF_US=50 ;;
  esac
  /usr/bin/time -f "%e %U %S" -o "$out/time" "$@" RPROF_OUTPUT_DIR="$out/res" RPROF_OUTPUT_FORMAT=csv \
    RPROF_OUTPUT_NAME=r "$PROG" $ARGS >/dev/null 2>"$out/err" || {
    echo "$mode: run failed: $(grep -v Warning "$out/err" | tail -1)" >&2
    echo "$mode failed" >>"$out/fail"
    return 0
  }
  read -r wall user sys <"$out/time"
  echo "$mode $wall $(echo "$user + $sys" | bc)" >>"$out/all"
}
PROG=$1
shift
ARGS="$*"
modes="untraced passthrough rprof rprof-crude"
i=0
while [ $i -lt "$runs" ]; do
  for m in $modes; do run_mode "$m"; done
  i=$((i + 1))
done
printf "%-12s %8s %8s %8s %8s %s\n" mode best_s median_s cpu_best ratio_best failures
base=$(awk '$1=="untraced"{print $2}' "$out/all" | sort -n | head -1)
for m in $modes; do
  if ! grep -q "^$m " "$out/all"; then
    printf "%-12s %8s\n" "$m" "failed"
    continue
  fi
  best=$(awk -v m="$m" '$1==m{print $2}' "$out/all" | sort -n | head -1)
  med=$(awk -v m="$m" '$1==m{print $2}' "$out/all" | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
  cpu=$(awk -v m="$m" '$1==m{print $3}' "$out/all" | sort -n | head -1)
  fails=$(grep -c "^$m failed" "$out/fail" 2>/dev/null || true)
  printf "%-12s %8s %8s %8s %8.2f %s\n" "$m" "$best" "$med" "$cpu" "$(echo "$best / $base" | bc -l)" "${fails:-0}"
done
