#!/usr/bin/env bash
# Installs the MCP reference server the tests talk to (one the project did
# not write): @modelcontextprotocol/server-everything from npm, pinned.
# Idempotent; prints the path of its entry point. Needs node and npm.
set -euo pipefail

version="2026.8.31"
dir="${FLYNN_TOOLS_DIR:-$HOME/.cache/flynn-ci-tools}/mcp-everything-$version"
entry="$dir/node_modules/@modelcontextprotocol/server-everything/dist/index.js"

if [[ ! -f "$entry" ]]; then
    if ! command -v npm >/dev/null; then
        echo "mcp-reference: npm is not installed; the MCP reference tests will be skipped" >&2
        exit 1
    fi
    mkdir -p "$dir"
    npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
        "@modelcontextprotocol/server-everything@$version" >&2
fi
[[ -f "$entry" ]] || { echo "mcp-reference: $entry missing after install" >&2; exit 1; }
echo "$entry"
