#!/usr/bin/env bash
# Keeps the shared cargo target directory from filling the disk. Every
# clone at a new path adds its own set of workspace artefacts, and
# incremental caches of local builds pile up, so the cache only grows.
# Above FLYNN_TARGET_MAX_GB (default 40), or when the disk has less than
# FLYNN_MIN_FREE_GB (default 20) free: drop the incremental caches and the
# test and bench executables not touched for a day (cargo relinks any it
# needs). If the disk is still short of FLYNN_MIN_FREE_GB after that, stop
# here with the numbers: a cold build of every step needs about that much,
# and a full disk otherwise shows up an hour later as a linker error.
# Idempotent, quick when there is nothing to do.
set -euo pipefail

target="${CARGO_TARGET_DIR:?CARGO_TARGET_DIR must be set}"
max_gb="${FLYNN_TARGET_MAX_GB:-40}"
min_free_gb="${FLYNN_MIN_FREE_GB:-20}"
mkdir -p "$target"

free_gb() { df -Pk "$target" | awk 'NR == 2 { print int($4 / 1024 / 1024) }'; }
size_gb() { echo $(( $(du -sk "$target" | cut -f1) / 1024 / 1024 )); }

size=$(size_gb)
free=$(free_gb)
if [ "$size" -gt "$max_gb" ] || [ "$free" -lt "$min_free_gb" ]; then
  echo "prune-target: $target is ${size} GB (bound ${max_gb} GB), ${free} GB free (need ${min_free_gb} GB); pruning"
  for profile in debug release; do
    rm -rf "${target:?}/$profile/incremental"
    if [ -d "$target/$profile/deps" ]; then
      # Executables (no extension) untouched for a day: old test binaries.
      find "$target/$profile/deps" -maxdepth 1 -type f ! -name '*.*' -mtime +0 -delete
    fi
  done
  size=$(size_gb)
  free=$(free_gb)
  echo "prune-target: now ${size} GB, ${free} GB free"
fi
if [ "$free" -lt "$min_free_gb" ]; then
  echo "prune-target: only ${free} GB free on the disk of $target; the build needs about ${min_free_gb} GB." >&2
  echo "prune-target: free space (the largest directories: du -sh \$HOME/.cache/* | sort -h), or set FLYNN_MIN_FREE_GB to go on anyway." >&2
  exit 1
fi
