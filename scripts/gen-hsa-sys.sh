#!/usr/bin/env bash
# Regenerates hsa-sys/src/{hsa,hsakmt}.rs and hsa-sys/tests/layout/{layout.cpp,rust_side.rs} from the Debian
# ROCr 5.2.3 (libhsa-runtime-dev) and libhsakmt-dev headers, using the generator crate in hsa-sys/gen.
# Usage: scripts/gen-hsa-sys.sh [OUTPUT_CRATE_DIR]   (default: the hsa-sys crate in this checkout)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$repo/hsa-sys}"

for header in /usr/include/hsa/hsa_api_trace.h /usr/include/hsakmttypes.h; do
    if [[ ! -f "$header" ]]; then
        echo "gen-hsa-sys: missing $header (install libhsa-runtime-dev and libhsakmt-dev)" >&2
        exit 2
    fi
done
if [[ -z "${LIBCLANG_PATH:-}" && -d /usr/lib/llvm-15/lib ]]; then
    export LIBCLANG_PATH=/usr/lib/llvm-15/lib
fi

cargo build --quiet --release --manifest-path "$repo/hsa-sys/gen/Cargo.toml" \
    --target-dir "${CARGO_TARGET_DIR:-$repo/target}/hsa-sys-gen"
"${CARGO_TARGET_DIR:-$repo/target}/hsa-sys-gen/release/hsa-sys-gen" "$out"
