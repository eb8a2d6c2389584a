#!/usr/bin/env bash
# Fails if perfetto/src/generated/ differs from what the generator produces
# from perfetto/proto/perfetto_subset.proto (someone edited one without the other).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$root/scripts/gen-perfetto-proto.sh" "$tmp"
if ! diff -r "$root/perfetto/src/generated" "$tmp"; then
    echo "perfetto/src/generated is out of date: run scripts/gen-perfetto-proto.sh and commit" >&2
    exit 1
fi
echo "perfetto generated code is up to date"
