#!/usr/bin/env python3
"""Counts the kernel dispatches of one rprof run in each output format and checks them against what the program
says it launched.

usage: trace_counts.py [--serialized] OUTDIR STEM [PROGRAM_STDOUT]

Reads OUTDIR/STEM_kernel_trace.csv, OUTDIR/STEM_results.json and OUTDIR/STEM.pftrace (through pftrace_check.py
--json, next to this script). The program's output may hold `LAUNCHED kernel=<name> count=<n>` lines (trace_app,
hip-tests), with `<name>` a prefix of the traced kernel name, and a `TOTAL <n>` line. Prints one line per format
and exits 1 if any count differs, dispatch ids repeat, or a dispatch ends before it starts. With --serialized
(a --serialize-kernels run) it also fails if two dispatches of one agent overlap in time.
"""
import collections
import csv
import json
import os
import subprocess
import sys
import tempfile


def expected_counts(path):
    launched, total = {}, None
    if not path:
        return launched, total
    for line in open(path, errors="replace"):
        parts = line.split()
        if parts and parts[0] == "LAUNCHED":
            # trace_app: `LAUNCHED kernel=<name> count=<n> grid=<x>`; hip-tests: `LAUNCHED pid=<p> count=<n> ...
            # kernel=<demangled name, with spaces, to the end of the line>` and `LAUNCHED pid=<p> total=<n>`.
            fields = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
            if "total" in fields:
                total = (total or 0) + int(fields["total"])
                continue
            if parts[1].startswith("kernel="):
                name = parts[1][len("kernel="):]
            else:
                name = line.rstrip("\n").split(" kernel=", 1)[1]
            launched[name] = launched.get(name, 0) + int(fields["count"])
        elif len(parts) == 2 and parts[0] == "TOTAL":
            total = int(parts[1])
    return launched, total


def main():
    args = sys.argv[1:]
    serialized = "--serialized" in args
    args = [a for a in args if a != "--serialized"]
    outdir, stem = args[0], args[1]
    launched, total = expected_counts(args[2] if len(args) > 2 else None)
    errors = []
    by_format = {}

    rows = list(csv.DictReader(open(os.path.join(outdir, stem + "_kernel_trace.csv"))))
    by_format["csv"] = [(r["Kernel_Name"], int(r["Dispatch_Id"]), int(r["Start_Timestamp"]),
                         int(r["End_Timestamp"])) for r in rows]

    if serialized:
        spans = collections.defaultdict(list)
        for r in rows:
            spans[r["Agent_Id"]].append((int(r["Start_Timestamp"]), int(r["End_Timestamp"])))
        for agent, s in spans.items():
            s.sort()
            overlaps = sum(1 for a, b in zip(s, s[1:]) if a[1] > b[0])
            if overlaps:
                errors.append(f"csv: {overlaps} overlapping dispatches on agent {agent} with --serialize-kernels")

    doc = json.load(open(os.path.join(outdir, stem + "_results.json")))
    by_format["json"] = [(d["kernel_name"], d["dispatch_id"], d["start_ns"], d["end_ns"])
                         for d in doc["kernel_dispatches"]]
    meta = doc["metadata"]
    if meta["records_lost"]:
        errors.append(f"json metadata: {meta['records_lost']} records lost")

    checker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pftrace_check.py")
    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        run = subprocess.run([sys.executable, checker, os.path.join(outdir, stem + ".pftrace"), "--json", tmp.name],
                             capture_output=True, text=True)
        if run.returncode != 0:
            errors.append("pftrace_check.py: " + run.stdout.strip().splitlines()[-1])
        trace = json.load(open(tmp.name))
    # Dispatch slices live on the queue lanes under a "GPU n" track (not on the process, thread and
    # "kernels" table tracks).
    gpu_tracks = {int(k) for k, t in trace["tracks"].items() if t["path"].startswith("GPU ") and " / " in t["path"]}
    by_format["pftrace"] = [(s["name"], None, s["ts"], s["ts"] + s["dur"]) for s in trace["slices"]
                            if s["track"] in gpu_tracks]

    for fmt, dispatches in by_format.items():
        # The HIP runtime's own blit kernels are not in the program's report.
        runtime = sum(1 for n, _, _, _ in dispatches if n.startswith("__amd_rocclr_"))
        ids = [i for _, i, _, _ in dispatches if i is not None]
        if len(ids) != len(set(ids)):
            errors.append(f"{fmt}: {len(ids) - len(set(ids))} repeated dispatch ids")
        if any(e < s for _, _, s, e in dispatches):
            errors.append(f"{fmt}: dispatches ending before they start")
        dispatches = [d for d in dispatches if not d[0].startswith("__amd_rocclr_")]
        names = collections.Counter(n for n, _, _, _ in dispatches)
        if total is not None and len(dispatches) != total:
            errors.append(f"{fmt}: {len(dispatches)} dispatches, the program launched {total}")
        for kernel, count in launched.items():
            got = sum(c for n, c in names.items() if n == kernel or n.startswith(kernel + "."))
            if got != count:
                errors.append(f"{fmt}: {got} x {kernel}, the program launched {count}")
        print(f"{fmt}: {len(dispatches)} dispatches of the program ({len(names)} kernel names)"
              + (f" + {runtime} runtime blit kernels" if runtime else ""))
    for e in errors:
        print("ERROR", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
