#!/usr/bin/env bash
# Builds the hip-tests programs with hipcc into OUTDIR (default: target/hip-tests
# under the repository). Rebuilds a program only when its source, common.h, this
# script, the compiler or the ISA list changed. Exits 0 with a message when
# hipcc is missing, so that machines without ROCm can still build the rest.
#
# Usage: hip-tests/build.sh [OUTDIR]
# Environment:
#   HIPCC             compiler (default: hipcc on PATH)
#   HIP_TESTS_ARCHS   space-separated ISAs (default: the emulated GPU's ISAs plus the
#                     data-center ISAs this hipcc supports; see DEFAULT_ARCHS)
#   HIP_TESTS_JOBS    parallel compiles (default: 2)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
out="${1:-$repo/target/hip-tests}"
hipcc="${HIPCC:-hipcc}"
jobs="${HIP_TESTS_JOBS:-2}"

# gfx900/gfx906/gfx908/gfx90a/gfx1030: every ISA the emulated GPU can present
# (gfx90a is its default); gfx908/gfx90a/gfx940 are the data-center ISAs that
# Debian's hipcc 5.2.3 (clang 15 + rocm-device-libs 5.2) can target. gfx941,
# gfx942 and gfx11xx need a newer compiler.
DEFAULT_ARCHS="gfx900 gfx906 gfx908 gfx90a gfx940 gfx1030"
archs="${HIP_TESTS_ARCHS:-$DEFAULT_ARCHS}"
PROGRAMS=(graph_storm multi_stream memcpy_mix threads exit_nosync multiproc)

if ! command -v "$hipcc" >/dev/null 2>&1; then
    echo "hip-tests: SKIPPED: '$hipcc' not found (install Debian's hipcc, libamdhip64-dev and rocm-device-libs:" \
        "bash scripts/setup.sh)" >&2
    exit 0
fi

mkdir -p "$out"
# One build at a time per output directory (test binaries may call us concurrently).
if command -v flock >/dev/null 2>&1; then
    exec 9>"$out/.build.lock"
    flock 9
fi

flags=(-std=c++17 -O2 -Wall -Wextra)
for a in $archs; do flags+=("--offload-arch=$a"); done
# What the binaries depend on besides their source: flags, compiler, this script, common.h.
signature="$(
    printf '%s\n' "${flags[*]}"
    command -v "$hipcc"
    "$hipcc" --version 2>/dev/null || true
    cat "$here/build.sh" "$here/common.h"
)"
signature_hash="$(printf '%s' "$signature" | sha256sum | cut -d' ' -f1)"

build_one() {
    local prog="$1" src="$here/$1.cpp" bin="$out/$1" stamp="$out/.$1.stamp"
    local want="$signature_hash $(sha256sum "$src" | cut -d' ' -f1)"
    if [[ -x "$bin" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        return 0
    fi
    echo "hip-tests: building $prog ($archs)"
    local tmp="$bin.tmp.$$"
    if ! "$hipcc" "${flags[@]}" -o "$tmp" "$src" >"$out/.$prog.log" 2>&1; then
        cat "$out/.$prog.log" >&2
        rm -f "$tmp"
        echo "hip-tests: FAILED to build $prog" >&2
        return 1
    fi
    mv -f "$tmp" "$bin"
    printf '%s' "$want" >"$stamp"
}

status=0
running=0
pids=()
for prog in "${PROGRAMS[@]}"; do
    build_one "$prog" &
    pids+=($!)
    running=$((running + 1))
    if ((running >= jobs)); then
        wait "${pids[0]}" || status=1
        pids=("${pids[@]:1}")
        running=$((running - 1))
    fi
done
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
if ((status == 0)); then
    echo "hip-tests: ${#PROGRAMS[@]} programs up to date in $out"
fi
exit $status
