#!/usr/bin/env bash
# Installs what rprof's build, tests and demo need on a fresh Debian 12
# machine: the real ROCr/HIP 5.2.3 runtime and headers, the thunk headers
# (for hsa-sys layout tests), hipcc + device libraries, clang-15 with the
# AMDGPU target (test kernels, bindgen), valgrind, Open MPI's mpirun (the
# launcher test, 7 MB), rocRAND and rocPRIM (ROCm libraries traced by the
# tests: code not written here), the Python `perfetto`
# package used by the trace checker, and debootstrap, with which
# scripts/rocm-env.sh builds the ROCm 6.1 and 6.4 roots (scripts/test.sh
# builds them on first use). Idempotent; run as root (or with sudo).
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
PKGS=(libhsa-runtime64-1 libhsa-runtime-dev libhsakmt-dev hipcc libamdhip64-dev rocm-device-libs
      clang-15 libclang-15-dev lld-15 g++ python3-pip valgrind pkg-config debootstrap openmpi-bin
      librocrand-dev librocprim-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ! python3 -c "import perfetto.protos.perfetto.trace.perfetto_trace_pb2, google.protobuf" 2>/dev/null; then
  echo "setup: installing python packages perfetto protobuf"
  python3 -m pip install -q perfetto protobuf 2>/dev/null || python3 -m pip install -q --break-system-packages perfetto protobuf
fi
echo "setup: ok"
