#!/usr/bin/env bash
# Lock handoff latency (old lease ends -> new grant -> first accepted write),
# p50/p99, against a fresh `gateway dev` on loopback. Usage: scripts/handoff-bench.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-50}"
tmp=$(mktemp -d)
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$tmp"' EXIT
go build -o "$tmp/gateway" ./cmd/gateway
"$tmp/gateway" dev --addr 127.0.0.1:18089 --metrics-addr 127.0.0.1:18090 --data-dir "$tmp/data" --identity worker-a=token-a --identity worker-b=token-b >"$tmp/log" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -sf http://127.0.0.1:18089/healthz >/dev/null && break; sleep 0.1; done
go run ./internal/cmd/handoffbench -gateway http://127.0.0.1:18089 -metrics http://127.0.0.1:18090/metrics -n "$n"
