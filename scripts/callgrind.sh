#!/usr/bin/env bash
# Instructions per dispatch on the interceptor, completion and writer paths, counted by
# callgrind (repeatable on a noisy machine). Runs the engine benchmark
# `bench_interceptor_cost_per_dispatch` (200,000 single-kernel interceptor
# calls, one in four with an application completion signal, against a fake
# device that completes everything) and prints the inclusive instruction
# counts of `Engine::intercept` and `Engine::run_completion` per call.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "callgrind.sh: valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
bin=$(cargo test -p rprof-core --release --lib --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m["target"]["name"]=="rprof_core" and m["profile"]["test"]:
        print(m["executable"])' | tail -1)
out=$(mktemp)
valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" --ignored --exact \
  engine::tests::bench_interceptor_cost_per_dispatch >/dev/null 2>&1
callgrind_annotate --inclusive=yes "$out" 2>/dev/null | python3 -c '
import re, sys
calls = 200_000
found = {}
for line in sys.stdin:
    m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(.*?)(?: \[[^\]]*\])?$", line.rstrip())
    if not m:
        continue
    name = m.group(2).split(":", 1)[-1]
    # An inherent method defined in a child module of `engine` prints as `<impl ...Engine<S>>::name`.
    name = name.replace("Engine<S>>::intercept", "Engine<S>::intercept")
    for key in ("Engine<S>::intercept", "Engine<S>>::run_completion"):
        if name.endswith(key) and key not in found:
            found[key] = int(m.group(1).replace(",", ""))
for key, label in (("Engine<S>::intercept", "interceptor"), ("Engine<S>>::run_completion", "completion")):
    v = found.get(key)
    print("%-12s %s instructions per dispatch (inclusive)" % (label, "n/a" if v is None else "%.0f" % (v / calls)))
'
rm -f "$out"

# The writer thread with the default outputs (CSV and Perfetto) on a storm-like
# record stream: `bench_writer_cost_per_dispatch` (200,000 dispatches, one
# interceptor call each). Its periodic flush is timed by the wall clock, so under
# callgrind (about 50 times slower) it deflates smaller bundles than a real run:
# compare figures from this script with each other, not with a live run.
valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" --ignored --exact \
  engine::tests::bench_writer_cost_per_dispatch >/dev/null 2>&1
callgrind_annotate --inclusive=yes "$out" 2>/dev/null | python3 -c '
import re, sys
for line in sys.stdin:
    m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(.*?)(?: \[[^\]]*\])?$", line.rstrip())
    if m and m.group(2).split(":", 1)[-1].endswith("Engine<S>>::run_writer"):
        print("%-12s %.0f instructions per dispatch (inclusive: CSV and Perfetto)" % ("writer", int(m.group(1).replace(",", "")) / 200_000))
        break
'
rm -f "$out"
