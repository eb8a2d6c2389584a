#!/usr/bin/env bash
# The main job: build rprof, build the bundled HIP graph-storm workload and
# trace it on the emulated GPU (or the real one where /dev/kfd exists).
# Usage: scripts/demo.sh [KERNELS_PER_GRAPH] [LAUNCHES]
set -euo pipefail
cd "$(dirname "$0")/.."
K="${1:-256}"
I="${2:-200}"
cargo build --release --workspace
HIP_TESTS_ARCHS="${HIP_TESTS_ARCHS:-gfx90a}" bash hip-tests/build.sh target/hip-tests
target/release/rprof --kernel-trace --stats -d rprof-results -o demo_%pid% \
  -- target/hip-tests/graph_storm "$K" "$I"
echo "Open the .pftrace above at https://ui.perfetto.dev (Open trace file)."
