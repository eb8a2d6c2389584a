#!/bin/sh
# A stand-in for an MPI launcher where none is installed (the ROCm 6.x roots):
#   mpirun-like.sh -np N [-rankvar VAR] -- CMD ARGS...
# starts N ranks of CMD at once, as mpirun does on one node: each a child process of this launcher with
# VAR (default PMI_RANK, MPICH/Hydra's; OMPI_COMM_WORLD_RANK for Open MPI's) set to its rank and the world size
# in PMI_SIZE / OMPI_COMM_WORLD_SIZE, the rest of the environment inherited; waits for all of them and exits
# with the first non-zero status (0 if every rank succeeded). Used by tests/processes_and_limits.rs.
set -u
np=1
var=PMI_RANK
while [ $# -gt 0 ]; do
  case "$1" in
    -np) np=$2; shift 2 ;;
    -rankvar) var=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
pids=""
r=0
while [ "$r" -lt "$np" ]; do
  env "$var=$r" PMI_SIZE="$np" OMPI_COMM_WORLD_SIZE="$np" "$@" &
  pids="$pids $!"
  r=$((r + 1))
done
status=0
for p in $pids; do
  wait "$p"
  s=$?
  if [ "$status" -eq 0 ] && [ "$s" -ne 0 ]; then status=$s; fi
done
exit "$status"
