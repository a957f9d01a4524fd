#!/usr/bin/env bash
# The real MCP servers tests/mcp.rs talks to, run by tests/setup.sh: mcp-server-time
# (PyPI, stdio) in a virtual environment and @modelcontextprotocol/server-everything
# (npm, stdio and Streamable HTTP) under an npm prefix, both in target/test-deps.
# Pinned, and installed again only when a pin changes.
#
# Needs: python3 with venv, node and npm (Debian packages python3-venv and nodejs, which
# the README's test line installs). Debian's nodejs comes without npm and NodeSource's
# carries it (and conflicts with Debian's npm package), so npm alone is installed here,
# only when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v npm > /dev/null && command -v apt-get > /dev/null && [ "$(id -u)" = 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm > /dev/null
fi
for tool in python3 node npm; do
  command -v "$tool" > /dev/null || { echo "tests/setup-mcp.sh: $tool is missing; install it (Debian: python3-venv, nodejs, npm)" >&2; exit 1; }
done
deps=target/test-deps
time_version=2026.10.19
everything_version=2026.8.31
stamp="mcp-server-time==$time_version @modelcontextprotocol/server-everything@$everything_version"
if [ "$(cat "$deps/mcp.stamp" 2>/dev/null)" != "$stamp" ] \
  || [ ! -x "$deps/mcp-venv/bin/mcp-server-time" ] \
  || [ ! -x "$deps/mcp-npm/node_modules/.bin/mcp-server-everything" ]; then
  rm -rf "$deps/mcp-venv" "$deps/mcp-npm" "$deps/mcp.stamp"
  mkdir -p "$deps"
  python3 -m venv "$deps/mcp-venv"
  "$deps/mcp-venv/bin/pip" install --quiet --disable-pip-version-check "mcp-server-time==$time_version"
  npm install --prefix "$deps/mcp-npm" --no-audit --no-fund --loglevel=error \
    "@modelcontextprotocol/server-everything@$everything_version"
  printf '%s' "$stamp" > "$deps/mcp.stamp"
fi
echo "tests/setup-mcp.sh: MCP servers in $deps/mcp-venv and $deps/mcp-npm"
