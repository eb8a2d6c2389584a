#!/usr/bin/env bash
# Regenerates hsa-sys into a temporary copy and fails (exit 1) if any generated file differs from the committed one.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

generated=(src/hsa.rs src/hsakmt.rs tests/layout/layout.cpp tests/layout/rust_side.rs
    src/hsakmt_v6.rs tests/layout/layout_v6.cpp tests/layout/rust_side_v6.rs)
"$repo/scripts/gen-hsa-sys.sh" "$tmp" 2>"$tmp.log" || { cat "$tmp.log" >&2; rm -f "$tmp.log"; exit 2; }
rm -f "$tmp.log"

status=0
for file in "${generated[@]}"; do
    if ! diff -u "$repo/hsa-sys/$file" "$tmp/$file"; then
        status=1
    fi
done
if [[ $status -ne 0 ]]; then
    echo "hsa-sys: committed bindings differ from a fresh generation; run scripts/gen-hsa-sys.sh and commit" >&2
else
    echo "hsa-sys: generated files match (${#generated[@]} files)"
fi
exit $status
