#!/usr/bin/env bash
# Installs rprof into PREFIX (default ~/.local; /usr/local needs root):
#   PREFIX/bin/rprof
#   PREFIX/lib/rprof/librprof_tool.so        the tool library (HSA_TOOLS_LIB)
#   PREFIX/lib/rprof/librprof_emu_kfd.so     the emulated GPU's front-end for ROCr >= 6.2 (LD_PRELOAD)
#   PREFIX/lib/rprof/emu/libhsakmt.so.1      its front-end for ROCr <= 6.1, under its final name, alone in the
#                                            directory rprof puts on LD_LIBRARY_PATH
# rprof finds them from its own path, read-only: nothing is created at run time (docs/security.md).
#
#   scripts/install.sh [--profile release|debug] [--no-build] [PREFIX]
#
# --no-build installs what target/<profile> already holds (CARGO_TARGET_DIR is honoured).
set -euo pipefail
cd "$(dirname "$0")/.."
profile=release
build=1
prefix=
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    -*) echo "install.sh: unknown option $1" >&2; exit 2 ;;
    *) prefix=$1; shift ;;
  esac
done
prefix=${prefix:-$HOME/.local}
target=${CARGO_TARGET_DIR:-target}
case "$profile" in
  release) flags=(--release); dir=$target/release ;;
  debug) flags=(); dir=$target/debug ;;
  *) echo "install.sh: --profile is release or debug" >&2; exit 2 ;;
esac
if [ $build = 1 ]; then
  cargo build "${flags[@]}" -p rprof-tool -p rprof-emu-thunk -p rprof-emu-kfd
fi
for f in rprof librprof_tool.so libhsakmt.so librprof_emu_kfd.so; do
  [ -f "$dir/$f" ] || { echo "install.sh: $dir/$f missing (build first, or drop --no-build)" >&2; exit 1; }
done
# install(1) sets modes 755/644 whatever the umask; directories get 755.
umask 022
install -d "$prefix/bin" "$prefix/lib/rprof/emu"
install -m 755 "$dir/rprof" "$prefix/bin/rprof"
install -m 644 "$dir/librprof_tool.so" "$prefix/lib/rprof/librprof_tool.so"
install -m 644 "$dir/librprof_emu_kfd.so" "$prefix/lib/rprof/librprof_emu_kfd.so"
install -m 644 "$dir/libhsakmt.so" "$prefix/lib/rprof/emu/libhsakmt.so.1"
echo "installed rprof into $prefix (run $prefix/bin/rprof; uninstall: rm -r $prefix/bin/rprof $prefix/lib/rprof)"
