package postgres

import (
	"context"
	"strconv"

	"github.com/fencegate/fencegate"
)

var _ fencegate.HighWater = (*Store)(nil)

// HighestFence implements fencegate.HighWater with one aggregate read.
func (s *Store) HighestFence(ctx context.Context) (uint64, error) {
	var text string
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(highest_fence), 0)::text FROM fence_resources`).Scan(&text); err != nil {
		return 0, translate(err, "read highest fence")
	}
	v, err := strconv.ParseUint(text, 10, 64)
	if err != nil {
		return 0, fencegate.Wrap(err, fencegate.CodeInternal, "highest fence outside uint64")
	}
	return v, nil
}
