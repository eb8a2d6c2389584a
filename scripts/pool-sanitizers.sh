#!/usr/bin/env bash
# Runs rprof-pool's tests (the 4-thread stress tests and the hand-over test
# `a_release_publishes_the_holders_writes_to_the_next_holder`) under ThreadSanitizer. Never skips: a run that cannot
# be set up fails.
#
# Preferred: nightly with rust-src (-Zbuild-std: std instrumented too, no suppressions needed).
# Otherwise the STABLE toolchain, which ships the TSan runtime (librustc-stable_rt.tsan.a): RUSTC_BOOTSTRAP=1 unlocks
# -Zsanitizer=thread, -Cunsafe-allow-abi-mismatch=sanitizer links the uninstrumented std. TSan cannot see std's own
# synchronisation then, hence:
#   - scripts/tsan.supp suppresses the two std-internal false positives (each line says why);
#   - tests join every scoped thread explicitly (std::thread::scope's end-of-scope wait is an uninstrumented futex
#     park; pthread_join is intercepted);
#   - only code without std::sync::Mutex can be checked (its futex lock is in uninstrumented std: every access it
#     guards looks racy), so the engine's tests (src/engine) do not run here; the pool and its free list use atomics
#     only.
# TSan halts on the first report (exit 66). Extra arguments go to the test binaries (e.g. a test name).
set -euo pipefail
cd "$(dirname "$0")/.."
host="$(rustc -vV | sed -n 's/^host: //p')"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1 second_deadlock_stack=1}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/tsan"
tests=(-p rprof-pool --lib --test pool)
if rustup toolchain list 2>/dev/null | grep -q '^nightly' &&
   rustup component list --toolchain nightly --installed 2>/dev/null | grep -q '^rust-src'; then
    echo "pool-sanitizers: nightly + build-std (std instrumented)"
    export RUSTFLAGS="${RUSTFLAGS:-} -Zsanitizer=thread"
    export RUSTDOCFLAGS="${RUSTDOCFLAGS:-} -Zsanitizer=thread"
    exec cargo +nightly test -Zbuild-std --target "$host" "${tests[@]}" -- "$@"
fi
sysroot="$(rustc --print sysroot)"
if ! ls "$sysroot/lib/rustlib/$host/lib/"librustc-*_rt.tsan.a >/dev/null 2>&1; then
    echo "pool-sanitizers: FAILED: this toolchain ships no ThreadSanitizer runtime (librustc-*_rt.tsan.a in $sysroot)"
    exit 1
fi
echo "pool-sanitizers: stable toolchain's TSan runtime, std uninstrumented (suppressions: scripts/tsan.supp)"
export RUSTC_BOOTSTRAP=1
export RUSTFLAGS="${RUSTFLAGS:-} -Zsanitizer=thread -Cunsafe-allow-abi-mismatch=sanitizer --cfg rprof_tsan"
export TSAN_OPTIONS="$TSAN_OPTIONS suppressions=$PWD/scripts/tsan.supp"
exec cargo test --target "$host" "${tests[@]}" -- "$@"
