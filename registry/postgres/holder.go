package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate"
)

var _ fencegate.LeaseHolders = (*Backend)(nil)

// Holder implements fencegate.LeaseHolders.
func (b *Backend) Holder(ctx context.Context, resource string, now time.Time) (fencegate.Lease, error) {
	var current *string
	err := b.pool.QueryRow(ctx, `SELECT current_lease FROM registry_resources WHERE resource = $1`, resource).Scan(&current)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && current == nil) {
		return fencegate.Lease{}, fencegate.Errorf(fencegate.CodeNotFound, "no live lease holds %q", resource)
	}
	if err != nil {
		return fencegate.Lease{}, translate(err, "read holder")
	}
	l, err := b.Lease(ctx, *current, now)
	if err == nil && l.State != fencegate.StateHeld {
		err = fencegate.Errorf(fencegate.CodeNotFound, "no live lease holds %q", resource)
	}
	return l, err
}
