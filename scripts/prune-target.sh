#!/usr/bin/env bash
# Keeps the shared cargo target directory from filling the disk. Every
# clone at a new path adds its own set of workspace artefacts, and
# incremental caches of local builds pile up, so the cache only grows.
# Above FLYNN_TARGET_MAX_GB (default 40): drop the incremental caches and
# the test and bench executables not touched for a day (cargo relinks any
# it needs). Idempotent, quick when there is nothing to do.
set -euo pipefail

target="${CARGO_TARGET_DIR:?CARGO_TARGET_DIR must be set}"
max_gb="${FLYNN_TARGET_MAX_GB:-40}"
[ -d "$target" ] || exit 0

size_gb=$(( $(du -sk "$target" | cut -f1) / 1024 / 1024 ))
if [ "$size_gb" -le "$max_gb" ]; then
  exit 0
fi
echo "prune-target: $target is ${size_gb} GB (over ${max_gb} GB); pruning"
for profile in debug release; do
  rm -rf "${target:?}/$profile/incremental"
  if [ -d "$target/$profile/deps" ]; then
    # Executables (no extension) untouched for a day: old test binaries.
    find "$target/$profile/deps" -maxdepth 1 -type f ! -name '*.*' -mtime +0 -delete
  fi
done
echo "prune-target: now $(( $(du -sk "$target" | cut -f1) / 1024 / 1024 )) GB"
