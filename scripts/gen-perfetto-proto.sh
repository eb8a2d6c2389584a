#!/usr/bin/env bash
# Regenerates perfetto/src/generated/ (prost code + descriptor set) from
# perfetto/proto/perfetto_subset.proto. Commit the result. Needs only cargo:
# the generator (perfetto/gen) parses the .proto with the pure-Rust protox.
#
# Usage: scripts/gen-perfetto-proto.sh [OUT_DIR]   (default: perfetto/src/generated)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/perfetto/src/generated}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
cargo run --quiet --release --manifest-path "$root/perfetto/gen/Cargo.toml" -- "$out"
