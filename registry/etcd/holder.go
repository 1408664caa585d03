package etcd

import (
	"context"
	"time"

	"github.com/fencegate/fencegate"
)

var _ fencegate.LeaseHolders = (*Backend)(nil)

// Holder implements fencegate.LeaseHolders: the resource's last acquired
// lease, if it is HELD at now.
func (b *Backend) Holder(ctx context.Context, name string, now time.Time) (fencegate.Lease, error) {
	none := fencegate.Errorf(fencegate.CodeNotFound, "no live lease holds %q", name)
	resp, err := b.client.Get(ctx, b.resourceKey(name))
	if err != nil {
		return fencegate.Lease{}, translate(err, "read holder")
	}
	if len(resp.Kvs) == 0 {
		return fencegate.Lease{}, none
	}
	var res resource
	if err := decode(resp.Kvs[0].Value, &res); err != nil {
		return fencegate.Lease{}, err
	}
	if res.Current == "" {
		return fencegate.Lease{}, none
	}
	l, err := b.Lease(ctx, res.Current, now)
	if fencegate.ErrorCode(err) == fencegate.CodeNotFound || (err == nil && l.State != fencegate.StateHeld) {
		return fencegate.Lease{}, none
	}
	return l, err
}
