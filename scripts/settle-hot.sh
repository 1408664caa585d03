#!/usr/bin/env bash
# What a HOT settle would buy on the Postgres fence store (docs/throughput.md,
# twenty-third session). A settle changes fence_receipts.state, which two
# of the table's five indexes name (fence_receipts_by_state, and the live
# index's predicate), so Postgres writes it as a new tuple with a new entry
# in every index instead of a heap-only (HOT) update. This script measures a
# model of a write's row changes (admission: receipt insert + resource row
# update, one transaction; settle: receipt update + the target's version
# update + resource row update, another; not the store's own statements)
# with pgbench on three schemas built from the store's own migrations, in alternating runs in the same script:
#   now        the schema as migrated;
#   hot        the live index's predicate on a `live` flag a COMMITTED settle
#              leaves as it is, no by_state index, fillfactor 80: every settle
#              HOT, and no index left that finds PENDING receipts (the upper
#              bound of the gain, not a schema the store could use);
#   unsettled  hot, plus a table of unsettled receipt IDs (inserted at the
#              admission, deleted at the settle): the cheapest index that
#              still finds PENDING receipts.
# Each run twice: durable (the server's synchronous_commit, as the gateway
# commits) and cpu (synchronous_commit=off, so the rate is the server's and
# pgbench's CPU, not the WAL flush). Prints per schema and mode the median
# writes/s, its ratio to `now` in the same mode, WAL bytes per write and the
# share of HOT updates of fence_receipts. WAL is the whole server's: run it
# on a server nothing else writes to.
# Usage: scripts/settle-hot.sh [RUNS] [SECONDS] [CLIENTS]   (default 3 10 8)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}" secs="${2:-10}" clients="${3:-8}"
pg=(-h 127.0.0.1 -U postgres)
if [ -f scripts/services.sh ]; then . scripts/services.sh; ensure_postgres >/dev/null 2>&1 || true; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; for s in now hot unsettled; do psql "${pg[@]}" -qc "DROP DATABASE IF EXISTS settlehot_$$_$s" 2>/dev/null || true; done' EXIT

# The store's schema: every migration's Up section, in order.
for f in fencestore/postgres/migrations/*.sql; do
  awk '/-- \+goose Up/{u=1;next} /-- \+goose Down/{u=0} u' "$f"
done >"$tmp/up.sql"

admit_sql="INSERT INTO fence_receipts (receipt_id, resource, target, method, fence_token, segment,
  operation_id, operation_root, lease, owner, grant_digest, payload_digest, state, created_at)
 SELECT 'rc_' || lpad(n::text, 20, '0'), 'r' || :client_id, 'objects/r' || :client_id, 'PUT', 1, n,
  'op_' || n, 'root', 'lease_0123456789abcdef', 'worker-a',
  'sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef',
  'sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef', 'PENDING', now()
 FROM nextval('rid') n RETURNING quote_literal(receipt_id) AS rid \\gset"
row_sql="UPDATE fence_resources SET pending_receipt = :rid, last_segment_seq = last_segment_seq + 1, updated_at = now() WHERE resource = 'r' || :client_id;"
settle_sql="UPDATE fence_receipts SET state = 'COMMITTED', version = '\"0123456789abcdef\"', settled_at = now() WHERE receipt_id = :rid;
UPDATE fence_versions SET version = '\"0123456789abcdef\"', updated_at = now() WHERE target = 'objects/r' || :client_id;"
unrow_sql="UPDATE fence_resources SET pending_receipt = '', updated_at = now() WHERE resource = 'r' || :client_id;"
printf 'BEGIN;\n%b\n%s\nCOMMIT;\nBEGIN;\n%s\n%s\nCOMMIT;\n' "$admit_sql" "$row_sql" "$settle_sql" "$unrow_sql" >"$tmp/now.sql"
cp "$tmp/now.sql" "$tmp/hot.sql"
printf 'BEGIN;\n%b\nINSERT INTO fence_unsettled VALUES (:rid);\n%s\nCOMMIT;\nBEGIN;\n%s\nDELETE FROM fence_unsettled WHERE receipt_id = :rid;\n%s\nCOMMIT;\n' \
  "$admit_sql" "$row_sql" "$settle_sql" "$unrow_sql" >"$tmp/unsettled.sql"

hot_ddl="ALTER TABLE fence_receipts ADD COLUMN live boolean NOT NULL DEFAULT true;
DROP INDEX fence_receipts_by_state;
DROP INDEX fence_receipts_live;
CREATE UNIQUE INDEX fence_receipts_live ON fence_receipts (resource, fence_token, segment) WHERE live;
ALTER TABLE fence_receipts SET (fillfactor = 80);"
for s in now hot unsettled; do
  psql "${pg[@]}" -qc "DROP DATABASE IF EXISTS settlehot_$$_$s" -c "CREATE DATABASE settlehot_$$_$s" 2>/dev/null
  psql "${pg[@]}" -q -v ON_ERROR_STOP=1 -d "settlehot_$$_$s" -f "$tmp/up.sql"
  [ "$s" = now ] || psql "${pg[@]}" -q -v ON_ERROR_STOP=1 -d "settlehot_$$_$s" -c "$hot_ddl"
  [ "$s" = unsettled ] && psql "${pg[@]}" -q -d "settlehot_$$_$s" -c 'CREATE TABLE fence_unsettled (receipt_id text COLLATE "C" PRIMARY KEY)'
  psql "${pg[@]}" -q -d "settlehot_$$_$s" -c "CREATE SEQUENCE rid" \
    -c "INSERT INTO fence_resources (resource) SELECT 'r' || g FROM generate_series(0, $((clients - 1))) g" \
    -c "INSERT INTO fence_versions (target, version, updated_at) SELECT 'objects/r' || g, '', now() FROM generate_series(0, $((clients - 1))) g"
done

# run SCHEMA MODE: one pgbench run; appends "tps wal/w hot%" to $tmp/SCHEMA-MODE.
run() {
  local db="settlehot_$$_$1" opts=""
  [ "$2" = cpu ] && opts="-c synchronous_commit=off"
  psql "${pg[@]}" -d "$db" -qc checkpoint
  local n0 a b n tps hot
  n0=$(psql "${pg[@]}" -d "$db" -Atc "SELECT count(*) FROM fence_receipts")
  a=$(psql "${pg[@]}" -d "$db" -Atc "SELECT pg_current_wal_lsn()")
  tps=$(PGOPTIONS="$opts" pgbench -n "${pg[@]}" -c "$clients" -j 2 -T "$secs" -f "$tmp/$1.sql" "$db" 2>&1 |
    awk '/^tps/ {print int($3)}')
  b=$(psql "${pg[@]}" -d "$db" -Atc "SELECT pg_current_wal_lsn()")
  n=$(psql "${pg[@]}" -d "$db" -Atc "SELECT count(*) - $n0 FROM fence_receipts")
  hot=$(psql "${pg[@]}" -d "$db" -Atc "SELECT CASE WHEN n_tup_upd = 0 THEN 0 ELSE round(100.0 * n_tup_hot_upd / n_tup_upd) END
    FROM pg_stat_user_tables WHERE relname = 'fence_receipts'")
  echo "$tps $(( $(psql "${pg[@]}" -d "$db" -Atc "SELECT pg_wal_lsn_diff('$b', '$a')::bigint") / (n > 0 ? n : 1) )) $hot" >>"$tmp/$1-$2"
}

echo "settle-hot: $runs runs of ${secs}s, $clients clients, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$runs"); do
  for mode in durable cpu; do
    order=(now hot unsettled)
    [ $((i % 2)) = 0 ] && order=(unsettled hot now)
    for s in "${order[@]}"; do run "$s" "$mode"; done
  done
done

median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
printf '%-10s %-8s %9s %7s %7s %5s\n' schema mode writes/s ratio wal/w hot%
for mode in durable cpu; do
  base=$(cut -d' ' -f1 "$tmp/now-$mode" | median)
  for s in now hot unsettled; do
    t=$(cut -d' ' -f1 "$tmp/$s-$mode" | median)
    w=$(cut -d' ' -f2 "$tmp/$s-$mode" | median)
    h=$(cut -d' ' -f3 "$tmp/$s-$mode" | tail -1)
    awk -v s="$s" -v m="$mode" -v t="$t" -v b="$base" -v w="$w" -v h="$h" \
      'BEGIN {printf "%-10s %-8s %9s %6.2fx %7s %5s\n", s, m, t, t / b, w, h}'
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
