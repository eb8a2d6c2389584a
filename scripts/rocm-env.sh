#!/usr/bin/env bash
# Runs a command on one of the ROCm runtimes rprof is tested on.
#
#   scripts/rocm-env.sh VERSION [-- COMMAND ARGS...]
#
# VERSION  runtime                                   where
#   5.2    ROCr 5.2.3, HIP 5.2.3 (Debian 12)          this machine ("/")
#   6.1    ROCr 6.1.2, HIP 5.7.1 (Debian trixie)      a debootstrap root
#   6.4    ROCr 6.4.3, HIP 6.4.3 (Debian sid)         a debootstrap root
#   7.0    ROCr 7.0 (1.18.0), HIP 6.4.3               the sid root, with ROCr 7.0 built from source in /opt/rocr7
#   /PATH  whatever that root holds                   an existing root made elsewhere, used as is (never built,
#                                                     changed or deleted here), e.g. the rocprofv3 peer root
#                                                     /var/tmp/peer-roots/sid of ../shared/tools/peer-rocprofv3
#
# Debian does not package ROCr 7.0: it is built from the ROCm/rocm-systems sources (release/rocm-rel-7.0) into
# the sid root's /opt/rocr7 by a separate recipe (about 3 minutes; it needs those sources, so it is not part of
# CI). 7.0 then runs COMMAND in the sid root with /opt/rocr7/lib first on LD_LIBRARY_PATH.
#
# The first call for 6.1 or 6.4 builds the root (debootstrap + apt, a few minutes, needs root and Debian's
# package registry) and caches it under $RPROF_ROCM_ROOTS (default /var/cache/rprof-rocm), keyed by the suite
# and the package list below: change the list and the next call builds a fresh root (and drops the old one).
# COMMAND runs inside the root in a private mount namespace, with /proc, /sys, /dev, the repository, /tmp and
# $HOME bind-mounted at the same paths, in the current working directory and with the caller's environment;
# its exit status is passed through. Without COMMAND the root's path is printed.
set -euo pipefail

usage() { echo "usage: $0 5.2|6.1|6.4|7.0|/ROOT/PATH [-- COMMAND ARGS...]" >&2; exit 2; }
[ $# -ge 1 ] || usage
version=$1; shift
if [ $# -gt 0 ]; then
  [ "$1" = "--" ] || usage
  shift
  [ $# -gt 0 ] || usage
fi

# What each root holds: the runtime and its headers, HIP and hipcc (with the AMDGPU clang it depends on), the
# device libraries, a C++ compiler, rocminfo, and two ROCm libraries to test on code we did not write: rocRAND
# (a shared library) and rocPRIM (header-only: its kernels compile into the test program).
common=(libhsa-runtime64-1 libhsa-runtime-dev hipcc libamdhip64-dev g++ make rocminfo librocrand-dev librocprim-dev)
# The ROCTx library Debian ships (roctracer's libroctx64, 5.7.1 in trixie, 6.4.1 in sid), for the marker trace
# of apps linked to it (tests/marker_trace.rs); Debian 12 has none for 5.2.
roctx=(libroctx64-4 libroctx-dev)
case "$version" in
  /*)
    # A root given by path: checked, then entered with the same mounts below; nothing is built.
    root=$(cd "$version" 2>/dev/null && pwd) || { echo "rocm-env: no root at $version" >&2; exit 2; }
    if [ ! -e "$root/usr/lib/x86_64-linux-gnu/libhsa-runtime64.so.1" ] || [ ! -x "$root/bin/sh" ]; then
      echo "rocm-env: $root is not a ROCm root (no /bin/sh or /usr/lib/x86_64-linux-gnu/libhsa-runtime64.so.1 in it)" >&2
      exit 2
    fi
    [ "$root" != / ] || { echo "rocm-env: / is the host (use 5.2)" >&2; exit 2; }
    suite=path ;;
  5.2)
    if [ $# -eq 0 ]; then echo /; exit 0; fi
    exec "$@" ;;
  6.1) suite=trixie; pkgs=("${common[@]}" rocm-device-libs-17 libhsakmt-dev "${roctx[@]}") ;;
  6.4|7.0) suite=sid; pkgs=("${common[@]}" rocm-device-libs-21 "${roctx[@]}") ;;
  *) echo "rocm-env: unknown runtime '$version' (expected 5.2, 6.1, 6.4 or 7.0)" >&2; exit 2 ;;
esac

if [ "$(id -u)" != 0 ]; then
  echo "rocm-env: the $version root needs root (debootstrap, chroot and bind mounts); run with sudo" >&2
  exit 2
fi

if [ "$suite" != path ]; then
cache=${RPROF_ROCM_ROOTS:-/var/cache/rprof-rocm}
recipe="v1 $suite ${pkgs[*]}"
key=$(printf '%s' "$recipe" | sha256sum | cut -c1-12)
root="$cache/$suite-$key"
mirror=${RPROF_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  mirror=$(grep -rhoE '^(URIs:|deb) *https?://[^ ]*debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d 2>/dev/null \
    | grep -oE 'https?://[^ ]*' | head -n1 || true)
  mirror=${mirror:-http://deb.debian.org/debian}
fi

build_root() {
  local tmp="$root.partial"
  echo "rocm-env: building the ROCm $version root ($suite) in $root (takes a few minutes, once)" >&2
  command -v debootstrap >/dev/null || {
    echo "rocm-env: installing debootstrap" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
  }
  # A base system left by an interrupted build is reused; the apt step below is idempotent.
  if [ ! -f "$tmp/.rprof-debootstrap-done" ]; then
    rm -rf "$tmp"
    debootstrap --variant=minbase "$suite" "$tmp" "$mirror" >"$cache/$suite.debootstrap.log" 2>&1 || {
      echo "rocm-env: debootstrap $suite failed; last lines of $cache/$suite.debootstrap.log:" >&2
      tail -n 20 "$cache/$suite.debootstrap.log" >&2; exit 1; }
    touch "$tmp/.rprof-debootstrap-done"
  fi
  # sid's Release file can carry an expired Valid-Until on the registry served here.
  echo 'Acquire::Check-Valid-Until "false";' >"$tmp/etc/apt/apt.conf.d/99rprof-no-valid-until"
  printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"; chmod +x "$tmp/usr/sbin/policy-rc.d"
  local log="$cache/$suite.apt.log"
  if ! unshare -m --propagation private sh -c '
      mount -t proc proc "$1/proc" && mount --rbind /dev "$1/dev" && shift &&
      chroot "$0" env DEBIAN_FRONTEND=noninteractive sh -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends $*"
    ' "$tmp" "$tmp" "${pkgs[@]}" >"$log" 2>&1; then
    echo "rocm-env: apt-get install in the $suite root failed; last lines of $log:" >&2
    tail -n 20 "$log" >&2; exit 1
  fi
  chroot "$tmp" apt-get clean
  echo "$recipe" >"$tmp/.rprof-rocm-recipe"
  mv "$tmp" "$root"
  # Roots of older package lists for this suite are stale now.
  find "$cache" -maxdepth 1 -name "$suite-*" ! -name "$suite-$key" ! -name '*.log' -exec rm -rf {} + 2>/dev/null || true
  echo "rocm-env: $version root ready" >&2
}

mkdir -p "$cache"
if [ ! -f "$root/.rprof-rocm-recipe" ]; then
  exec 9>"$cache/$suite.lock"
  flock 9
  [ -f "$root/.rprof-rocm-recipe" ] || build_root
  flock -u 9
fi
fi

rocr7=/opt/rocr7/lib
if [ "$version" = 7.0 ]; then
  if [ ! -e "$root$rocr7/libhsa-runtime64.so.1" ]; then
    echo "rocm-env: ROCr 7.0 is not built in the sid root ($root$rocr7 missing): build it from ROCm/rocm-systems" \
      "(release/rocm-rel-7.0, projects/rocr-runtime) with CMAKE_INSTALL_PREFIX=/opt/rocr7 inside $root" >&2
    exit 2
  fi
  export LD_LIBRARY_PATH="$rocr7${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

if [ $# -eq 0 ]; then echo "$root"; exit 0; fi

repo=$(cd "$(dirname "$0")/.." && pwd)
# The mounts live in a private namespace and vanish with the command; the command's status is the script's.
exec unshare -m --propagation private bash -c '
  root=$1 repo=$2 cwd=$3; shift 3
  mount -t proc proc "$root/proc"
  mount --rbind /sys "$root/sys"
  mount --rbind /dev "$root/dev"
  for d in "$repo" /tmp "${HOME:-/root}"; do
    [ -d "$d" ] || continue
    mkdir -p "$root$d"
    mount --rbind "$d" "$root$d"
  done
  exec chroot "$root" /bin/sh -c "cd \"\$0\" 2>/dev/null || cd /; exec \"\$@\"" "$cwd" "$@"
' rocm-env "$root" "$repo" "$PWD" "$@"
