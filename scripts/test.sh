#!/usr/bin/env bash
# The whole test suite: starts (and, as root, installs) the servers the tests
# need on loopback, exports where they are, and runs every Go test.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/services.sh

ensure_postgres
ensure_redis
ensure_s3
ensure_etcd
ensure_spin
ensure_promtool
ensure_wrk
ensure_systemd_analyze
ensure_chromium
ensure_s3clients
ensure_shells
ensure_nats

# Every server is configured from here on: a suite that would skip for a
# missing one fails instead (testenv's rule under CI), so this script, which
# is what CI runs, never passes with a suite skipped.
export CI="${CI:-true}"
export FENCEGATE_TEST_PG="postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
export FENCEGATE_TEST_REDIS="127.0.0.1:6379"

go vet ./...
# The timeout catches a hang, not slowness: e2e alone takes 5-7 minutes
# on a busy 2-core machine, too close to a 10-minute bound.
go test -count=1 -p 2 -timeout 20m "$@" ./...
# The race detector over the packages whose tests race their own goroutines
# on purpose (the verifier cache against bundle swaps, a direct PUT's retry
# against the previous attempt's body reader, the local store's writers, the S3
# front door's completions beside the counts of open uploads):
# under plain go test such a test cannot fail.
go test -count=1 -race -timeout 10m ./proofs/... ./backends/s3/... ./backends/local/... ./s3door/...

# Modules of their own (./... does not descend into them): the shared domain
# types, the worker client (its test fails if a worker importing it pulls more
# modules than stated), the stripe-go example, which runs the SDK through the
# binary, and deploy/kit, which validates the deploy kit (Dockerfile, compose,
# kustomize, systemd).
for m in domain client examples/stripe deploy/kit; do
  (cd "$m" && go vet ./... && go test -count=1 -timeout 10m ./...)
done
# The client's lease state machine and writers run goroutines of their own.
(cd client && go test -count=1 -race -timeout 10m ./...)
