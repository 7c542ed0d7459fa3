#!/usr/bin/env bash
# Installs the reference MCP server that flynn-mcp's tests talk to (one the
# project did not write): @modelcontextprotocol/server-everything from npm,
# at a pinned version, into ${FLYNN_TOOLS_DIR:-~/.cache/flynn-ci-tools}.
# Prints the path of its command on stdout (its own argument picks the
# transport: `stdio` or `streamableHttp`); everything else goes to stderr.
#
#   export FLYNN_MCP_REFERENCE="$(scripts/install-mcp-reference.sh)"
#
# Idempotent and quick when it is already there. Needs Node.js (>= 18) and
# npm, and the npm registry the first time.
set -euo pipefail

package="@modelcontextprotocol/server-everything"
version="2026.8.31"
tools="${FLYNN_TOOLS_DIR:-$HOME/.cache/flynn-ci-tools}"
dir="$tools/mcp-server-everything-$version"
command="$dir/node_modules/.bin/mcp-server-everything"

say() { echo "install-mcp-reference: $*" >&2; }

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  say "node and npm are needed to install $package; install Node.js (apt-get install nodejs npm)"
  exit 1
fi

# A marker written last: an install cut short is done again.
if [ ! -f "$dir/.installed" ] || [ ! -x "$command" ]; then
  say "installing $package@$version into $dir"
  mkdir -p "$tools"
  staging="$(mktemp -d "$tools/.mcp-server-everything.XXXXXX")"
  trap 'rm -rf "$staging"' EXIT
  npm install --prefix "$staging" --no-audit --no-fund --no-save \
    --loglevel=error "$package@$version" >&2
  touch "$staging/.installed"
  rm -rf "$dir"
  mv "$staging" "$dir"
  trap - EXIT
fi

if [ ! -x "$command" ]; then
  say "$command is missing after the install"
  exit 1
fi
echo "$command"
