#!/usr/bin/env python3
"""Splits the wall time of rprof runs into phases and compares builds or options side by side.

Each MODE is `NAME=RPROF[:ARG,ARG...][@ENV=V,ENV=V]`: the rprof binary to run (untraced when no ARG is
given, e.g. `base=target/release/rprof`) and its options before `--`. The modes run in rotation (the
first mode of each round moves on by one), each run with the emulated GPU's event report
(`RPROF_EMU_EVENT_REPORT`, docs/emulated-gpu.md), whose boot-time stamps split a run into:

  pre    from spawning rprof to the emulator being set up (rprof's launcher, the runtime's loading)
  start  emulator set up to the first kernel (HIP's and rprof's start-up)
  kph    first kernel to the last kernel's end (the kernel phase); idle: the device idle in it
         (waiting for work); late: how late the emulated command processor retired kernels (it
         had no core when it needed one)
  gap1   the device's idle gap before the second kernel, when it is among the 8 longest (with HIP:
         from its own first kernel to the app's first, its start-up, which varies by milliseconds
         from run to run); kph1: the kernel phase without it
  exit   the last kernel's end to the emulator's exit report
  post   the report to the process being reaped (the runtime's teardown, the process's exit)

Prints, per mode, the medians of each phase, then for every mode after the first the median of the
per-round differences against the first mode (ms) and the paired wall ratio.

  python3 scripts/phases.py --runtime 6.4 --rounds 20 --env RPROF_EMU_KERNEL_NS=20000 \\
      base=target/release/rprof:--kernel-trace new=/tmp/b1/rprof:--kernel-trace \\
      -- target/bench-rocm-6.4/graph_storm 256 20
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

PHASES = ["wall", "pre", "start", "kph", "gap1", "kph1", "idle", "late", "exit", "post"]


def parse_mode(text):
    name, _, rest = text.partition("=")
    env = {}
    if "@" in rest:
        rest, _, env_text = rest.partition("@")
        for kv in env_text.split(","):
            k, _, v = kv.partition("=")
            env[k] = v
    binary, _, args = rest.partition(":")
    return {"name": name, "bin": binary, "args": [a for a in args.split(",") if a], "env": env}


def run_once(mode, runtime, app, env, out_dir):
    report = tempfile.NamedTemporaryFile(prefix="phases-", suffix=".txt", delete=False).name
    cmd = []
    if runtime != "5.2":
        cmd += ["bash", "scripts/rocm-env.sh", runtime, "--"]
    cmd += [os.path.abspath(mode["bin"]), "--device", "emulated"] + mode["args"]
    if mode["args"]:
        # rprof never overwrites an output: remove the previous run's.
        cmd += ["-d", out_dir, "-o", "phases"]
        for f in os.listdir(out_dir):
            if f.startswith("phases"):
                os.unlink(os.path.join(out_dir, f))
    cmd += ["--"] + app
    e = dict(os.environ)
    e.update(env)
    e.update(mode["env"])
    e["RPROF_EMU_EVENT_REPORT"] = report
    t0 = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    p = subprocess.run(cmd, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t1 = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    if p.returncode != 0:
        sys.exit(f"phases: {mode['name']} failed ({p.returncode}):\n{p.stderr.decode(errors='replace')}")
    r = {}
    with open(report) as f:
        for line in f:
            if line.startswith("kernel_object="):
                continue  # the per-kernel launch counts
            k, _, v = line.strip().partition("=")
            r[k] = int(v)
    os.unlink(report)
    ms = 1e-6
    gap1 = next(
        (r[f"idle_gap_{i}_ns"] for i in range(1, 9) if r.get(f"idle_gap_{i}_before_kernel") == 1),
        0,
    )
    return {
        "gap1": gap1 * ms,
        "kph1": (r["first_to_last_kernel_ns"] - gap1) * ms,
        "wall": (t1 - t0) * ms,
        "pre": (r["loaded_at_ns"] - t0) * ms,
        "start": r["loaded_to_first_kernel_ns"] * ms,
        "kph": r["first_to_last_kernel_ns"] * ms,
        "idle": r["idle_ns"] * ms,
        "late": r["late_retire_ns"] * ms,
        "exit": r["last_kernel_to_exit_ns"] * ms,
        "post": (t1 - r["report_at_ns"]) * ms,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runtime", default="5.2", help="5.2 (this machine), 6.1 or 6.4 (scripts/rocm-env.sh)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--env", action="append", default=[], help="ENV=V for every run")
    ap.add_argument("modes", nargs="+", help="NAME=RPROF[:ARGS][@ENV=V,...], then -- and the app")
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit("phases: no app (give it after --)")
    i = argv.index("--")
    a = ap.parse_args(argv[:i])
    app = argv[i + 1 :]
    if not app:
        sys.exit("phases: no app (give it after --)")
    modes = [parse_mode(m) for m in a.modes]
    env = dict(kv.split("=", 1) for kv in a.env)
    out_dir = tempfile.mkdtemp(prefix="phases-out-")
    runs = {m["name"]: [] for m in modes}
    for i in range(a.rounds):
        for k in range(len(modes)):
            m = modes[(i + k) % len(modes)]
            runs[m["name"]].append(run_once(m, a.runtime, app, env, out_dir))
        if sys.stderr.isatty():
            print(f"round {i + 1}/{a.rounds}", file=sys.stderr, end="\r")
    print(file=sys.stderr)
    print("mode      " + "".join(f"{p:>9}" for p in PHASES) + "   (medians, ms)")
    for m in modes:
        rs = runs[m["name"]]
        print(f"{m['name']:<10}" + "".join(f"{statistics.median(r[p] for r in rs):9.2f}" for p in PHASES))
    base = runs[modes[0]["name"]]
    for m in modes[1:]:
        rs = runs[m["name"]]
        diffs = [statistics.median(b[p] - a_[p] for a_, b in zip(base, rs)) for p in PHASES]
        ratio = statistics.median(b["wall"] / a_["wall"] for a_, b in zip(base, rs))
        print(
            f"{m['name'] + '-' + modes[0]['name']:<10}"
            + "".join(f"{d:+9.2f}" for d in diffs)
            + f"   paired wall ratio {ratio:.4f}"
        )


if __name__ == "__main__":
    main()
