#!/usr/bin/env bash
# Gateway memory under parallel listings: fills one operation with N receipts
# (default 20,000) through a fresh `gateway dev` (embedded store), then 8
# clients page through the whole operation at once; prints the gateway's RSS
# before, at its peak during, and after. Usage: scripts/list-memory.sh [N] [LIMIT]
# GATEWAY_BIN=path runs another build (e.g. an older commit) for comparison.
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-20000}"
limit="${2:-1000}"
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && { kill $pid 2>/dev/null; wait $pid 2>/dev/null; }; rm -rf "$tmp"' EXIT
bin="${GATEWAY_BIN:-$tmp/gateway}"
[ -n "${GATEWAY_BIN:-}" ] || go build -o "$bin" ./cmd/gateway
go build -o "$tmp/listmem" ./internal/cmd/listmem
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$bin" dev --addr "127.0.0.1:$port" --data-dir "$tmp/data" --identity worker-a=token-a --status-mode query >"$tmp/log" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
"$tmp/listmem" -gateway "http://127.0.0.1:$port" -pid "$pid" -receipts "$n" -limit "$limit"
