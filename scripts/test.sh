#!/usr/bin/env bash
# The whole test suite, as CI runs it (after scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
step() { echo; echo "=== $* ($(date +%T))"; }
step "format";            cargo fmt --all -- --check
step "clippy";            cargo clippy --workspace --all-targets -- -D warnings
step "docs";              RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
step "build";             cargo build --workspace
step "tests";             cargo test --workspace
for s in scripts/check-hsa-sys-drift.sh scripts/check-perfetto-drift.sh scripts/pool-loom.sh; do
  if [ -f "$s" ]; then step "$s"; bash "$s"; fi
done
step "all tests passed"
