#!/usr/bin/env bash
# The README's test command: installs what the tests need (only when it is
# missing), then runs every test of the workspace, offline.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-deps.sh
# The MCP reference server (npm), for the MCP client's tests.
FLYNN_MCP_REFERENCE="$(scripts/install-mcp-reference.sh)"
export FLYNN_MCP_REFERENCE
# A PostgreSQL server on loopback, for the PostgreSQL store's tests.
FLYNN_TEST_POSTGRES_URL="$(scripts/postgres.sh)"
export FLYNN_TEST_POSTGRES_URL
exec cargo test --workspace --locked "$@"
