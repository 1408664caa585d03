package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/internal/fencerules"
)

var _ fencegate.TargetBindings = (*Store)(nil)

// Binding implements fencegate.TargetBindings.
func (s *Store) Binding(ctx context.Context, target string) (string, error) {
	var bound string
	err := s.pool.QueryRow(ctx, `SELECT resource FROM fence_targets WHERE target = $1`, target).Scan(&bound)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fencegate.Errorf(fencegate.CodeNotFound, "target %q is bound to no resource", target)
	}
	if err != nil {
		return "", translate(err, "read binding")
	}
	return bound, nil
}

// Unbind implements fencegate.TargetBindings. It locks the target's row, then
// the resource's. An admission batch locks only resource rows and reads the
// binding after that lock (without locking it), so an admission under the
// resource either commits first (Unbind then sees its pending receipt and
// refuses) or waits for Unbind and finds the target unbound; an admission
// under another resource finds the binding (RESOURCE_MISMATCH) or, once
// Unbind committed, none.
func (s *Store) Unbind(ctx context.Context, target, resource string) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var bound string
		err := tx.QueryRow(ctx, `SELECT resource FROM fence_targets WHERE target = $1 FOR UPDATE`, target).Scan(&bound)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		row, err := scanResource(tx.QueryRow(ctx, `SELECT `+resourceCols+` FROM fence_resources WHERE resource = $1 FOR UPDATE`, resource))
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if err := fencerules.CheckUnbind(bound, target, resource, row); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM fence_targets WHERE target = $1 AND resource = $2`, target, resource)
		return err
	})
	if err != nil {
		return translate(err, "unbind target")
	}
	return nil
}
