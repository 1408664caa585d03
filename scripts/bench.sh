#!/usr/bin/env bash
# Throughput of fenced writes through the built gateway on each store, beside
# its baseline in the same run (pgbench, bare bbolt+file, direct S3 PUTs):
# writes/s, p50/p99, ratio, gateway CPU, fsyncs, commits and WAL syncs per
# write; per-write stage times from the gateway's histograms and the load
# generator's CPU; at -check points (default embedded:8) the same writes
# driven by wrk and plain net/http. Needs Postgres (pgbench), versitygw,
# strace and wrk as `make test` has them (scripts/services.sh). Arguments go
# to loadbench, e.g.
#   scripts/bench.sh -d 10s -runs 3 -c 1,8,32 -paths postgres,embedded,s3
#   scripts/bench.sh -paths embedded -c 8 -profile /tmp/prof   # CPU profile + trace per point
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -f scripts/services.sh ] && [ -z "${FENCEGATE_TEST_PG:-}" ]; then
  . scripts/services.sh
  ensure_postgres >/dev/null 2>&1 || true
  ensure_s3 >/dev/null 2>&1 || true
  ensure_wrk >/dev/null 2>&1 || true
fi
exec go run ./internal/cmd/loadbench "$@"
