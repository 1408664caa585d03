package redis

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate"
)

var _ fencegate.LeaseHolders = (*Backend)(nil)

// Holder implements fencegate.LeaseHolders: the resource's last acquired
// lease (<p>cur:<resource>), if it is HELD at now.
func (b *Backend) Holder(ctx context.Context, resource string, now time.Time) (fencegate.Lease, error) {
	id, err := b.client.Get(ctx, b.prefix+"cur:"+resource).Result()
	if errors.Is(err, redis.Nil) || (err == nil && id == "") {
		return fencegate.Lease{}, fencegate.Errorf(fencegate.CodeNotFound, "no live lease holds %q", resource)
	}
	if err != nil {
		return fencegate.Lease{}, translate(err, "read holder")
	}
	l, err := b.Lease(ctx, id, now)
	if fencegate.ErrorCode(err) == fencegate.CodeNotFound || (err == nil && l.State != fencegate.StateHeld) {
		return fencegate.Lease{}, fencegate.Errorf(fencegate.CodeNotFound, "no live lease holds %q", resource)
	}
	return l, err
}
