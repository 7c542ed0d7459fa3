#!/usr/bin/env bash
# The README's test command: installs what the tests need (only when it is
# missing), then runs every test of the workspace, offline.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-deps.sh
# The MCP reference server (npm); its tests skip, saying so, without it.
if reference="$(scripts/mcp-reference.sh)"; then
    export FLYNN_MCP_REFERENCE="$reference"
fi
exec cargo test --workspace --locked "$@"
