#!/usr/bin/env bash
# The whole test suite, as CI runs it (after scripts/setup.sh): checks, the build and every test on ROCm 5.2 (the
# host), then the end-to-end suites again on ROCm 6.1 and 6.4 (RPROF_TEST_ROCM, tests/harness), whose roots
# scripts/rocm-env.sh builds on first use (in the background here, while the 5.2 steps run). Every step is timed;
# a failing step does not stop the later ones, but fails the run.
set -uo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
mkdir -p target
failed=()
times=()
run_step() {
  local name=$1; shift
  echo; echo "=== $name ($(date +%T))"
  local t0=$SECONDS
  "$@"
  local rc=$?
  times+=("$(printf '%5ss  %s%s' $((SECONDS - t0)) "$name" "$([ $rc = 0 ] || echo "  FAILED ($rc)")")")
  [ $rc = 0 ] || failed+=("$name")
  return 0
}

# The 6.x roots (debootstrap + apt: network and disk more than CPU) build while the 5.2 steps compile and test.
declare -A root_pid
for v in 6.1 6.4; do
  bash scripts/rocm-env.sh "$v" >"target/rocm-$v-root.log" 2>&1 &
  root_pid[$v]=$!
done
root_ready() { # VERSION: waits for the root's build; fails with its log
  local rc=0
  wait "${root_pid[$1]}" || rc=$?
  if [ $rc != 0 ]; then
    echo "the ROCm $1 root could not be built (scripts/rocm-env.sh $1 exited $rc):"
    cat "target/rocm-$1-root.log"
    return $rc
  fi
  echo "ROCm $1 root: $(tail -n1 "target/rocm-$1-root.log")"
}

# The end-to-end suites: every test binary that runs programs on a runtime over the emulated GPU, all through the
# one harness tests/harness (which builds rprof, the tool library and the emulator itself, into
# <target>/harness/cargo; the "build" step below is for the other checks).
E2E=(-p rprof-core --test kernel_trace --test chained_rewriter --test rocminfo --test hip_programs
     --test hip_multiprocess --test rpc_workload --test rpc_trace --test raw_hsa --test emu_hip --test security
     --test marker_trace --test memory_copy_trace --test processes_and_limits)

run_step "format"              cargo fmt --all -- --check
run_step "clippy"              cargo clippy --workspace --all-targets -- -D warnings
run_step "docs"                env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
run_step "build"               cargo build --workspace
run_step "tests (ROCm 5.2)"    cargo test --workspace --no-fail-fast
run_step "valgrind teardown (ROCm 5.2)" cargo test -p rprof-core --test kernel_trace -- --ignored teardown_races_under_valgrind_memcheck
run_step "Open MPI mpirun (ROCm 5.2)" cargo test -p rprof-core --test processes_and_limits -- --ignored ranks_started_by_open_mpi_mpirun
for s in scripts/check-hsa-sys-drift.sh scripts/check-perfetto-drift.sh scripts/pool-loom.sh scripts/pool-sanitizers.sh; do
  if [ -f "$s" ]; then run_step "$s" bash "$s"; fi
done
for v in 6.1 6.4; do
  run_step "ROCm $v root"      root_ready "$v"
  run_step "end-to-end (ROCm $v)" env RPROF_TEST_ROCM="$v" cargo test --no-fail-fast "${E2E[@]}"
done

echo; echo "=== step times"
printf '%s\n' "${times[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo; echo "FAILED: ${failed[*]}"
  exit 1
fi
echo; echo "=== all tests passed"
