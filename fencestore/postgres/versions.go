package postgres

import (
	"context"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate"
)

// SwapVersion sets target's version from -> to atomically.
func (s *Store) SwapVersion(ctx context.Context, target, from, to string) error {
	var tag pgconn.CommandTag
	var err error
	switch {
	case from == "" && to == "":
		var n int
		err = s.pool.QueryRow(ctx, `SELECT count(*) FROM fence_versions WHERE target = $1`, target).Scan(&n)
		if err != nil {
			return translate(err, "swap version")
		}
		if n > 0 {
			return fencegate.Errorf(fencegate.CodeBackendConflict, "version of %q is set", target)
		}
		return nil
	case from == "":
		tag, err = s.pool.Exec(ctx, `INSERT INTO fence_versions (target, version, updated_at) VALUES ($1, $2, now())
			ON CONFLICT (target) DO NOTHING`, target, to)
	case to == "":
		tag, err = s.pool.Exec(ctx, `DELETE FROM fence_versions WHERE target = $1 AND version = $2`, target, from)
	default:
		tag, err = s.pool.Exec(ctx, `UPDATE fence_versions SET version = $3, updated_at = now() WHERE target = $1 AND version = $2`, target, from, to)
	}
	if err != nil {
		return translate(err, "swap version")
	}
	if tag.RowsAffected() != 1 {
		return fencegate.Errorf(fencegate.CodeBackendConflict, "version of %q is not %q", target, from)
	}
	return nil
}
