#!/usr/bin/env python3
"""Prints the longest Rust files and functions of the checkout (generated code and tests left out).

Usage: scripts/code-size.py [--most N] [--all]

Files marked `@generated` in their first lines are generated code. Lines are physical lines. A function runs from its `fn` line to its closing brace, found by
counting braces outside strings, chars and comments. `--all` keeps test files. Used for the
before/after figures of structural changes; it reads files only.
"""
import argparse
import re
import subprocess
import sys
from pathlib import Path

GENERATED_MARK = "@generated"
FN = re.compile(r'^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(unsafe\s+)?(extern\s+"C"\s+)?fn\s+(\w+)')


def tracked_rust_files(root, keep_tests):
    out = subprocess.run(["git", "-C", str(root), "ls-files", "*.rs"], capture_output=True,
                         text=True, check=True).stdout.split()
    for path in out:
        with open(root / path, errors="replace") as f:
            if GENERATED_MARK in f.read(2000):
                continue
        if not keep_tests and (path.startswith("tests/") or "/tests/" in path
                               or path.endswith("tests.rs") or "/benches/" in path):
            continue
        yield path


def strip_noise(line, state):
    """Returns the line without strings, chars and comments; state carries block comments."""
    out = []
    i = 0
    while i < len(line):
        if state["block"]:
            end = line.find("*/", i)
            if end < 0:
                return "".join(out)
            state["block"] = False
            i = end + 2
            continue
        c = line[i]
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["block"] = True
            i += 2
            continue
        if c == '"':
            i += 1
            while i < len(line) and line[i] != '"':
                i += 2 if line[i] == "\\" else 1
            i += 1
            continue
        if c == "'" and re.match(r"'(\\.|[^\\'])'", line[i:i + 4]):
            i += line[i:].index("'", 2) + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def functions(path):
    lines = Path(path).read_text(errors="replace").splitlines()
    state = {"block": False}
    clean = [strip_noise(l, state) for l in lines]
    for start, line in enumerate(lines):
        m = FN.match(line)
        if not m:
            continue
        depth = 0
        opened = False
        for end in range(start, len(clean)):
            text = clean[end]
            if not opened and ";" in text and "{" not in text:
                break  # a declaration without a body
            depth += text.count("{") - text.count("}")
            opened = opened or "{" in text
            if opened and depth <= 0:
                yield m.group(6), start + 1, end - start + 1
                break


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--most", type=int, default=10)
    parser.add_argument("--all", action="store_true", help="keep test files")
    args = parser.parse_args()
    root = Path(subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True,
                               text=True, check=True).stdout.strip())
    files = []
    funcs = []
    for path in tracked_rust_files(root, args.all):
        full = root / path
        files.append((len(full.read_text(errors="replace").splitlines()), path))
        for name, line, length in functions(full):
            funcs.append((length, f"{path}:{line}", name))
    files.sort(reverse=True)
    funcs.sort(reverse=True)
    total = sum(n for n, _ in files)
    print(f"{len(files)} files, {total} lines, {len(funcs)} functions")
    print(f"longest files:")
    for n, path in files[:args.most]:
        print(f"  {n:6} {path}")
    print(f"longest functions:")
    for n, place, name in funcs[:args.most]:
        print(f"  {n:6} {name} ({place})")
    over = sum(1 for n, _, _ in funcs if n > 60)
    print(f"functions over 60 lines: {over}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
