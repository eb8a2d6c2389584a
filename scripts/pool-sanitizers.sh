#!/usr/bin/env bash
# Runs rprof-pool's tests (including the 4-thread stress tests) under ThreadSanitizer.
# ThreadSanitizer needs a nightly toolchain (-Zsanitizer, -Zbuild-std). If none is installed
# this script says so and exits 0 without testing anything: the loom checks
# (scripts/pool-loom.sh) are the race checks that always run.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    echo "pool-sanitizers: no nightly toolchain installed (rustup toolchain list); ThreadSanitizer run SKIPPED"
    exit 0
fi
if ! rustup component list --toolchain nightly --installed 2>/dev/null | grep -q '^rust-src'; then
    echo "pool-sanitizers: nightly has no rust-src component (needed for -Zbuild-std); ThreadSanitizer run SKIPPED"
    echo "pool-sanitizers: install it with: rustup component add rust-src --toolchain nightly"
    exit 0
fi
host="$(rustc +nightly -vV | sed -n 's/^host: //p')"
export RUSTFLAGS="${RUSTFLAGS:-} -Zsanitizer=thread"
export RUSTDOCFLAGS="${RUSTDOCFLAGS:-} -Zsanitizer=thread"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/tsan"
exec cargo +nightly test -Zbuild-std --target "$host" -p rprof-pool --lib --test pool -- "$@"
