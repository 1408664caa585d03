package main

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/fencestore/postgres"
)

// prefill migrates the store at url and bulk-inserts n settled receipts
// spread over n/10 resources (with their bindings and versions), as a store
// that has served n writes holds them, then ANALYZEs the tables.
func prefill(ctx context.Context, url string, n int) error {
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		return err
	}
	if err := postgres.Migrate(ctx, cc); err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	res := max(1, n/10)
	for _, st := range []struct {
		q    string
		args []any
	}{
		{`INSERT INTO fence_resources (resource, highest_fence, root, lease, last_segment_seq, grant_issued_at)
			SELECT 'local/fill/' || i, 1, 'root', 'lease', 10, 1 FROM generate_series(1, $1::int) i`, []any{res}},
		{`INSERT INTO fence_targets (target, resource) SELECT 'local/fill/' || i, 'local/fill/' || i FROM generate_series(1, $1::int) i`, []any{res}},
		{`INSERT INTO fence_versions (target, version, updated_at) SELECT 'local/fill/' || i, 'v' || i, now() FROM generate_series(1, $1::int) i`, []any{res}},
		{`INSERT INTO fence_receipts (receipt_id, resource, target, method, fence_token, segment, operation_id, operation_root,
			lease, owner, grant_digest, payload_digest, state, version, created_at, settled_at)
			SELECT 'fill-' || i, 'local/fill/' || (i % $2 + 1), 'local/fill/' || (i % $2 + 1), 'PUT', 1, i / $2 + 1,
				'op-fill-' || (i % $2 + 1), 'root', 'lease', 'owner', 'sha256:g', 'sha256:p', 'COMMITTED', 'v' || i,
				now() - interval '1 day', now() - interval '1 day'
			FROM generate_series(0, $1::int - 1) i`, []any{n, res}},
		{`ANALYZE`, nil},
	} {
		if _, err := conn.Exec(ctx, st.q, st.args...); err != nil {
			return err
		}
	}
	return nil
}
