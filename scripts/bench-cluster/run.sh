#!/usr/bin/env bash
# The cluster benchmark of docs/benchmarks.md ("Several daemons on one
# PostgreSQL database"):
#
#   scripts/bench-cluster/run.sh NODES spread|sticky [SESSIONS [MESSAGES]]
#
# starts NODES release daemons (FLYNN_DAEMON, default target/release/
# flynn-daemon; build it first) on one fresh database `bench` of the test
# PostgreSQL (scripts/postgres.sh), a model that answers every call after
# 200 ms (fake.py), and SESSIONS clients (1,000) sending MESSAGES turns (3)
# each through /v1/chat/completions (load.py), to a random node (spread) or
# always the same one (sticky). Prints one JSON line: turns a second, p50
# and p99 latency in seconds, and the daemons' and PostgreSQL's CPU per
# turn. Everything runs on this machine's cores.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
N=$1; MODE=$2; SESSIONS=${3:-1000}; MESSAGES=${4:-3}
BIN=${FLYNN_DAEMON:-$here/../../target/release/flynn-daemon}
PG_URL="$("$here/../postgres.sh")"
PG="${PG_URL%/*}"
TOKEN=bench-gateway-token-0123456789abcdef-xyz
WORK=$(mktemp -d)
psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS bench WITH (FORCE)" -c "CREATE DATABASE bench" 2>/dev/null
python3 "$here/fake.py" 18080 0.2 & FAKE=$!
PIDS=(); PORTS=()
for i in $(seq 1 $N); do
  home=$WORK/n$i; mkdir -p $home
  port=$((19100 + i))
  cat > $home/flynn.yaml <<YAML
version: 1
providers:
  openai: {kind: openai, base_url: http://127.0.0.1:18080/v1, api_key: sk-x}
models:
  tiers:
    default: [openai/gpt-4o-mini]
sessions:
  url: $PG/bench
gateway:
  bind: 127.0.0.1:$port
  rate_limit_per_minute: 10000000
  max_connections: 8192
  max_connections_per_ip: 8192
memory:
  enabled: false
YAML
  FLYNN_HOME=$home FLYNN_GATEWAY_TOKEN=$TOKEN $BIN --config $home/flynn.yaml > $home/log 2>&1 &
  PIDS+=($!); PORTS+=($port)
done
for port in "${PORTS[@]}"; do
  for _ in $(seq 1 100); do curl -sf http://127.0.0.1:$port/healthz >/dev/null && break; sleep 0.1; done
done
cpu() { # user+system ticks of the given pids
  local total=0
  for p in "$@"; do [ -r /proc/$p/stat ] && total=$((total + $(awk '{print $14+$15}' /proc/$p/stat))); done
  echo $total
}
pgpids() { pgrep -u postgres -f "postgres" | tr '\n' ' '; }
d0=$(cpu "${PIDS[@]}"); p0=$(cpu $(pgpids))
OUT=$(python3 "$here/load.py" $(IFS=,; echo "${PORTS[*]}") $SESSIONS $MESSAGES $MODE $TOKEN)
d1=$(cpu "${PIDS[@]}"); p1=$(cpu $(pgpids))
HZ=$(getconf CLK_TCK)
echo "$OUT" | python3 -c "
import json,sys; r=json.load(sys.stdin); t=r['turns']
r['nodes']=$N; r['mode']='$MODE'
r['daemon_cpu_ms_per_turn']=round(($d1-$d0)*1000/$HZ/t,2)
r['pg_cpu_ms_per_turn']=round(($p1-$p0)*1000/$HZ/t,2)
print(json.dumps(r))"
kill "${PIDS[@]}" 2>/dev/null || true; wait "${PIDS[@]}" 2>/dev/null || true
kill $FAKE 2>/dev/null || true
rm -rf "$WORK"
