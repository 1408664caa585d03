package etcd

import (
	"context"
	"math"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry/internal/leaserule"
)

// marker is the incarnation key's value.
type marker struct {
	ID    string `json:"id"`
	Since uint64 `json:"since"`
}

func (b *Backend) incarnationKey() string { return b.prefix + "incarnation" }

// checkIncarnation is the acquire guard on the view's snapshot.
func (v *view) checkIncarnation(req fencegate.AcquireRequest) error {
	var m marker
	if err := v.decode(v.b.incarnationKey(), &m); err != nil {
		return err
	}
	return leaserule.CheckIncarnation(req, m.ID, v.rev)
}

// Incarnation implements fencegate.LeaseBackend with one transaction of
// reads (one store revision): the marker, the revision, the floor and every
// resource's last fence.
func (b *Backend) Incarnation(ctx context.Context) (fencegate.Incarnation, error) {
	resp, err := b.client.Txn(ctx).Then(clientv3.OpGet(b.incarnationKey()), clientv3.OpGet(b.revisionKey()),
		clientv3.OpGet(b.floorKey()), clientv3.OpGet(b.prefix+"res/", clientv3.WithPrefix())).Commit()
	if err != nil {
		return fencegate.Incarnation{}, translate(err, "read incarnation")
	}
	var inc fencegate.Incarnation
	one := func(i int) []byte {
		if kvs := resp.Responses[i].GetResponseRange().Kvs; len(kvs) > 0 {
			return kvs[0].Value
		}
		return nil
	}
	if raw := one(0); raw != nil {
		var m marker
		if err := decode(raw, &m); err != nil {
			return inc, err
		}
		inc.ID, inc.Since = m.ID, m.Since
	}
	for i, dst := range map[int]*uint64{1: &inc.Revision, 2: &inc.HighestFence} {
		if raw := one(i); raw != nil {
			if *dst, err = parseUint(raw); err != nil {
				return inc, err
			}
		}
	}
	for _, kv := range resp.Responses[3].GetResponseRange().Kvs {
		var res resource
		if err := decode(kv.Value, &res); err != nil {
			return inc, err
		}
		inc.HighestFence = max(inc.HighestFence, res.LastFence)
	}
	return inc, nil
}

// Claim implements fencegate.LeaseBackend in one guarded transaction.
func (b *Backend) Claim(ctx context.Context, prev, id string, floor uint64) (fencegate.Incarnation, error) {
	if err := leaserule.CheckFloor(floor, math.MaxUint64); err != nil {
		return fencegate.Incarnation{}, err
	}
	if id == "" {
		return fencegate.Incarnation{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "claim needs an incarnation ID")
	}
	err := b.update(ctx, []string{b.incarnationKey(), b.floorKey()}, func(v *view) ([]clientv3.Op, error) {
		var m marker
		if err := v.decode(b.incarnationKey(), &m); err != nil {
			return nil, err
		}
		if m.ID != prev {
			return nil, leaserule.ClaimLost(prev, m.ID)
		}
		cur, err := v.uint(b.floorKey())
		if err != nil {
			return nil, err
		}
		rev, err := v.next()
		if err != nil {
			return nil, err
		}
		return []clientv3.Op{putJSON(b.incarnationKey(), marker{ID: id, Since: rev}),
			clientv3.OpPut(b.floorKey(), strconv.FormatUint(max(cur, floor), 10))}, nil
	})
	if err != nil {
		return fencegate.Incarnation{}, translate(err, "claim")
	}
	return b.Incarnation(ctx)
}
