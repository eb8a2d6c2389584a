#!/usr/bin/env bash
# Builds the hip-tests programs with hipcc into OUTDIR (default: target/hip-tests
# under the repository). Rebuilds a program only when its source, common.h, this
# script, the compiler or the ISA list changed. Fails when hipcc is missing.
# The end-to-end tests run it inside each runtime's root (scripts/rocm-env.sh),
# with that root's hipcc, into one OUTDIR per runtime.
#
# Usage: hip-tests/build.sh [OUTDIR]
# Environment:
#   HIPCC             compiler (default: hipcc on PATH)
#   HIP_TESTS_ARCHS   space-separated ISAs (default: the emulated GPU's ISAs that
#                     this hipcc supports, probed once per compiler; see EMULATED_ARCHS)
#   HIP_TESTS_JOBS    parallel compiles (default: 2)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
out="${1:-$repo/target/hip-tests}"
hipcc="${HIPCC:-hipcc}"
jobs="${HIP_TESTS_JOBS:-2}"

# Every ISA the emulated GPU can present (gfx90a is its default, and must be
# in every build). Debian's hipcc 5.2.3 (clang 15, device libs 5.2) lacks
# gfx942 and gfx1100; the 6.x roots' hipcc (clang 17 / 21) has them all.
EMULATED_ARCHS="gfx900 gfx906 gfx908 gfx90a gfx942 gfx1030 gfx1100"
REQUIRED_ARCH=gfx90a
PROGRAMS=(graph_storm multi_stream memcpy_mix threads exit_nosync multiproc module_reload multi_gpu event_timing)
# Code objects a program loads at run time (hipModuleLoad), built next to it from
# module_kernels.cpp with --genco for the emulated GPU's default ISA: the file and
# the kernel name each is built with.
declare -A MODULE_OBJECTS=([module_reload]="module_kernel_alpha.co:kernel_alpha module_kernel_gamma.co:kernel_gamma")
# Programs on a ROCm library: built with that library when its header is installed
# (scripts/setup.sh and every runtime root install rocRAND and rocPRIM), skipped with a note otherwise.
LIBRARY_PROGRAMS=(rocrand_gen rocprim_ops)
declare -A LIBRARY_HEADER=([rocrand_gen]=/usr/include/rocrand/rocrand.h [rocprim_ops]=/usr/include/rocprim/rocprim.hpp)
declare -A LIBRARY_LINK=([rocrand_gen]=-lrocrand)
# Programs built for the emulated GPU's default ISA alone: rocPRIM's templates take ~10 s of
# compiling per ISA, and only the tests' default device runs them.
declare -A REQUIRED_ARCH_ONLY=([rocprim_ops]=1)
for prog in "${LIBRARY_PROGRAMS[@]}"; do
    if [[ -f "${LIBRARY_HEADER[$prog]}" ]]; then
        PROGRAMS+=("$prog")
    else
        echo "hip-tests: skipping $prog (no ${LIBRARY_HEADER[$prog]}; bash scripts/setup.sh installs it)" >&2
    fi
done

if ! command -v "$hipcc" >/dev/null 2>&1; then
    echo "hip-tests: '$hipcc' not found: install Debian's hipcc, libamdhip64-dev and rocm-device-libs" \
        "(bash scripts/setup.sh), or run inside a runtime root (scripts/rocm-env.sh VERSION -- $0)" >&2
    exit 1
fi

mkdir -p "$out"
# One build at a time per output directory (test binaries may call us concurrently).
if command -v flock >/dev/null 2>&1; then
    exec 9>"$out/.build.lock"
    flock 9
fi

# The ISAs of EMULATED_ARCHS this hipcc can build for: a device-only compile
# of an empty kernel per ISA (about a second each, in parallel), remembered
# per compiler version and script in OUTDIR.
supported_archs() {
    local key file a
    key="$( { command -v "$hipcc"; "$hipcc" --version 2>&1; cat "$here/build.sh"; } | sha256sum | cut -c1-16)"
    file="$out/.archs.$key"
    if [[ ! -f "$file" ]]; then
        local probe="$out/.probe.$$"
        mkdir -p "$probe"
        printf '__global__ void probe() {}\n' >"$probe/probe.hip"
        for a in $EMULATED_ARCHS; do
            ( "$hipcc" "--offload-arch=$a" --cuda-device-only -c -x hip "$probe/probe.hip" -o "$probe/$a.o" \
                >"$probe/$a.log" 2>&1 && echo "$a" >"$probe/$a.ok" ) &
        done
        wait
        for a in $EMULATED_ARCHS; do
            if [[ -f "$probe/$a.ok" ]]; then printf '%s ' "$a"; fi
        done >"$probe.result"
        if ! grep -qw "$REQUIRED_ARCH" "$probe.result"; then
            echo "hip-tests: $hipcc cannot build for $REQUIRED_ARCH, the emulated GPU's default ISA:" >&2
            cat "$probe/$REQUIRED_ARCH.log" >&2
            rm -rf "$probe" "$probe.result"
            exit 1
        fi
        rm -f "$out"/.archs.*
        mv "$probe.result" "$file"
        rm -rf "$probe"
    fi
    cat "$file"
}
archs="${HIP_TESTS_ARCHS:-$(supported_archs)}"
archs="${archs% }"

base_flags=(-std=c++17 -O2 -Wall -Wextra)
flags=("${base_flags[@]}")
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
    if [[ -n "${MODULE_OBJECTS[$prog]:-}" ]]; then
        want="$want $(sha256sum "$here/module_kernels.cpp" | cut -d' ' -f1)"
    fi
    if [[ -x "$bin" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        return 0
    fi
    local prog_flags=("${flags[@]}") prog_archs="$archs"
    if [[ -n "${REQUIRED_ARCH_ONLY[$prog]:-}" ]]; then
        prog_flags=("${base_flags[@]}" "--offload-arch=$REQUIRED_ARCH")
        prog_archs="$REQUIRED_ARCH"
    fi
    echo "hip-tests: building $prog ($prog_archs)"
    local tmp="$bin.tmp.$$"
    local link=()
    if [[ -n "${LIBRARY_LINK[$prog]:-}" ]]; then link=("${LIBRARY_LINK[$prog]}"); fi
    if ! "$hipcc" "${prog_flags[@]}" -o "$tmp" "$src" "${link[@]}" >"$out/.$prog.log" 2>&1; then
        cat "$out/.$prog.log" >&2
        rm -f "$tmp"
        echo "hip-tests: FAILED to build $prog" >&2
        return 1
    fi
    local object
    for object in ${MODULE_OBJECTS[$prog]:-}; do
        local file="${object%%:*}" kernel="${object#*:}"
        if ! "$hipcc" "${base_flags[@]}" --genco "--offload-arch=$REQUIRED_ARCH" "-DMODULE_KERNEL=$kernel" \
            -o "$out/$file.tmp.$$" "$here/module_kernels.cpp" >"$out/.$prog.$file.log" 2>&1; then
            cat "$out/.$prog.$file.log" >&2
            rm -f "$tmp" "$out/$file.tmp.$$"
            echo "hip-tests: FAILED to build $file for $prog" >&2
            return 1
        fi
        mv -f "$out/$file.tmp.$$" "$out/$file"
    done
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
