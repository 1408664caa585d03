package embedded

import (
	"context"
	"time"

	"go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
)

var _ fencegate.LeaseHolders = (*Backend)(nil)

// Holder implements fencegate.LeaseHolders.
func (b *Backend) Holder(ctx context.Context, resource string, now time.Time) (fencegate.Lease, error) {
	if err := ctx.Err(); err != nil {
		return fencegate.Lease{}, translate(err, "read holder")
	}
	var out fencegate.Lease
	err := b.db.View(func(tx *bbolt.Tx) error {
		raw := tx.Bucket(bucketResources).Get([]byte(resource))
		if raw == nil {
			return errNoHolder(resource)
		}
		res, err := decodeResource(raw)
		if err != nil {
			return err
		}
		if res.Current == "" {
			return errNoHolder(resource)
		}
		rec, err := getRecord(tx.Bucket(bucketLeases), res.Current)
		if err != nil {
			return err
		}
		if out = rec.Lease(now); out.State != fencegate.StateHeld {
			return errNoHolder(resource)
		}
		return nil
	})
	return out, translate(err, "read holder")
}

func errNoHolder(resource string) error {
	return fencegate.Errorf(fencegate.CodeNotFound, "no live lease holds %q", resource)
}
