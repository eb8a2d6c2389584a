#!/usr/bin/env bash
# Regenerates hsa-sys/src/{hsa,hsakmt}.rs and hsa-sys/tests/layout/{layout.cpp,rust_side.rs} from the Debian
# ROCr 5.2.3 (libhsa-runtime-dev) and libhsakmt-dev headers, and hsa-sys/src/hsakmt_v6.rs with
# hsa-sys/tests/layout/{layout_v6.cpp,rust_side_v6.rs} from the libhsakmt-dev 6.2.4 header of the ROCr 6.1.2 root
# (Debian trixie, scripts/rocm-env.sh 6.1), using the generator crate in hsa-sys/gen.
# Usage: scripts/gen-hsa-sys.sh [OUTPUT_CRATE_DIR]   (default: the hsa-sys crate in this checkout)
# HSAKMT_V6_INCLUDE overrides the directory holding the 6.x hsakmttypes.h (default: the trixie root's
# /usr/include/hsakmt).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$repo/hsa-sys}"

for header in /usr/include/hsa/hsa_api_trace.h /usr/include/hsakmttypes.h; do
    if [[ ! -f "$header" ]]; then
        echo "gen-hsa-sys: missing $header (install libhsa-runtime-dev and libhsakmt-dev)" >&2
        exit 2
    fi
done
v6_include="${HSAKMT_V6_INCLUDE:-}"
if [[ -z "$v6_include" ]]; then
    v6_include="$("$repo/scripts/rocm-env.sh" 6.1)/usr/include/hsakmt"
fi
if [[ ! -f "$v6_include/hsakmttypes.h" ]]; then
    echo "gen-hsa-sys: missing $v6_include/hsakmttypes.h (the trixie root's libhsakmt-dev; see scripts/rocm-env.sh)" >&2
    exit 2
fi
if [[ -z "${LIBCLANG_PATH:-}" && -d /usr/lib/llvm-15/lib ]]; then
    export LIBCLANG_PATH=/usr/lib/llvm-15/lib
fi

cargo build --quiet --release --manifest-path "$repo/hsa-sys/gen/Cargo.toml" \
    --target-dir "${CARGO_TARGET_DIR:-$repo/target}/hsa-sys-gen"
"${CARGO_TARGET_DIR:-$repo/target}/hsa-sys-gen/release/hsa-sys-gen" "$out" "$v6_include"
