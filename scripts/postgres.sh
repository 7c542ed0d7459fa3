#!/usr/bin/env bash
# Starts the PostgreSQL server the tests use, on loopback, unless it is
# already running, and prints its URL (for FLYNN_TEST_POSTGRES_URL).
#
# The server is Debian's (scripts/install-test-deps.sh installs it when it
# is missing); its cluster lives in FLYNN_TEST_PG_DIR (default
# /tmp/flynn-test-postgres) and listens on 127.0.0.1:FLYNN_TEST_PG_PORT
# (default 55432), with a password (SCRAM) for the role `flynn`. It is a
# throwaway for tests: it does not sync to disk. Idempotent and quick when
# the server is up. PostgreSQL refuses to run as root: as root, the server
# runs as the `postgres` user the package created.
set -euo pipefail

dir="${FLYNN_TEST_PG_DIR:-/tmp/flynn-test-postgres}"
port="${FLYNN_TEST_PG_PORT:-55432}"
password="flynn-test"
url="postgres://flynn:${password}@127.0.0.1:${port}/postgres"

bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
if [ -z "$bin" ] || [ ! -x "$bin/postgres" ]; then
  echo "postgres.sh: no PostgreSQL server here; run scripts/install-test-deps.sh" >&2
  exit 1
fi

if "$bin/pg_isready" -q -h 127.0.0.1 -p "$port"; then
  echo "$url"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  as_server=(runuser -u postgres --)
  owner=postgres
else
  as_server=()
  owner="$(id -un)"
fi

mkdir -p "$dir"
chown "$owner" "$dir"
chmod 0700 "$dir"
if [ ! -f "$dir/data/PG_VERSION" ]; then
  rm -rf "$dir/data"
  printf '%s\n' "$password" > "$dir/pwfile"
  chown "$owner" "$dir/pwfile"
  "${as_server[@]}" "$bin/initdb" -D "$dir/data" -U flynn --auth=scram-sha-256 \
    --pwfile="$dir/pwfile" -E UTF8 --locale=C.UTF-8 --no-sync >"$dir/initdb.log" 2>&1 || {
    cat "$dir/initdb.log" >&2
    exit 1
  }
  rm -f "$dir/pwfile"
fi

"${as_server[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
  -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$dir \
      -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
      -c max_connections=300 -c shared_buffers=64MB" start >/dev/null || {
  tail -n 20 "$dir/server.log" >&2
  exit 1
}
echo "$url"
