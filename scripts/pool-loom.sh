#!/usr/bin/env bash
# Model-checks rprof-pool's concurrency (pool/tests/loom.rs) with loom.
# The crate's `primitive` module switches to loom's atomics/locks under `--cfg loom`.
# A preemption bound of 5 keeps the run to seconds on two cores (plus the build); it is the
# smallest bound that exposed a real bug during development (a spurious "full" free list on a
# weak memory model). Unbounded (LOOM_MAX_PREEMPTIONS unset: run cargo directly) was ~90 s.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="${RUSTFLAGS:-} --cfg loom"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-5}"
# Separate target dir: --cfg loom changes every crate's build.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom"
exec cargo test -p rprof-pool --release --test loom -- --test-threads=2 "$@"
