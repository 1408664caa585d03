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

// maxFenceKey holds the highest fence issued, moved by every acquire.
func (b *Backend) maxFenceKey() string { return b.prefix + "maxfence" }

// maxFence is the highest fence issued before this view: the maxfence key,
// or, for data written before the key existed, the top of every resource's
// sequence read at the view's revision.
func (v *view) maxFence(ctx context.Context) (uint64, error) {
	if _, ok := v.kvs[v.b.maxFenceKey()]; ok {
		return v.uint(v.b.maxFenceKey())
	}
	resp, err := v.b.client.Get(ctx, v.b.prefix+"res/", clientv3.WithPrefix(), clientv3.WithRev(v.at))
	if err != nil {
		return 0, err
	}
	var top uint64
	for _, kv := range resp.Kvs {
		var res resource
		if err := decode(kv.Value, &res); err != nil {
			return 0, err
		}
		top = max(top, res.LastFence)
	}
	return top, nil
}

// checkIncarnation is a mutation's guard (fencegate.Guard) on the view's
// snapshot, which must include the incarnation key.
func (v *view) checkIncarnation(g fencegate.Guard) error {
	var m marker
	if err := v.decode(v.b.incarnationKey(), &m); err != nil {
		return err
	}
	return leaserule.CheckIncarnation(g, m.ID, v.rev)
}

// Incarnation implements fencegate.LeaseBackend with one transaction of
// reads (one store revision): the marker, the revision, the floor and the
// highest fence issued (for data from before the maxfence key, every
// resource's last fence at that revision).
func (b *Backend) Incarnation(ctx context.Context) (fencegate.Incarnation, error) {
	resp, err := b.client.Txn(ctx).Then(clientv3.OpGet(b.incarnationKey()), clientv3.OpGet(b.revisionKey()),
		clientv3.OpGet(b.floorKey()), clientv3.OpGet(b.maxFenceKey())).Commit()
	if err != nil {
		return fencegate.Incarnation{}, translate(err, "read incarnation")
	}
	v := &view{b: b, at: resp.Header.Revision, kvs: map[string][]byte{}}
	for _, r := range resp.Responses {
		for _, kv := range r.GetResponseRange().Kvs {
			v.kvs[string(kv.Key)] = kv.Value
		}
	}
	var (
		inc fencegate.Incarnation
		m   marker
	)
	if err := v.decode(b.incarnationKey(), &m); err != nil {
		return inc, err
	}
	inc.ID, inc.Since = m.ID, m.Since
	if inc.Revision, err = v.uint(b.revisionKey()); err != nil {
		return inc, err
	}
	floor, err := v.uint(b.floorKey())
	if err != nil {
		return inc, err
	}
	top, err := v.maxFence(ctx)
	if err != nil {
		return inc, translate(err, "read incarnation")
	}
	inc.HighestFence = max(floor, top)
	return inc, nil
}

// Claim implements fencegate.LeaseBackend in one guarded transaction.
func (b *Backend) Claim(ctx context.Context, prev, id string, floor uint64) (fencegate.Incarnation, error) {
	if err := leaserule.CheckClaim(id, floor, math.MaxUint64); err != nil {
		return fencegate.Incarnation{}, err
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
