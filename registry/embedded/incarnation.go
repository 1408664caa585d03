package embedded

import (
	"context"
	"math"

	"go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry/internal/leaserule"
)

// Incarnation implements fencegate.LeaseBackend in one read transaction of
// the meta bucket; the highest fence is the floor or the highest fence
// issued, kept there by every acquire.
func (b *Backend) Incarnation(ctx context.Context) (fencegate.Incarnation, error) {
	var out fencegate.Incarnation
	err := b.db.View(func(tx *bbolt.Tx) error {
		out = readIncarnation(tx.Bucket(bucketMeta))
		return nil
	})
	return out, translate(err, "read incarnation")
}

// initMaxFence computes the highest fence issued once, for a file written
// before it was kept in the meta bucket.
func initMaxFence(tx *bbolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	if meta.Get(keyMaxFence) != nil {
		return nil
	}
	var top uint64
	err := tx.Bucket(bucketResources).ForEach(func(_, v []byte) error {
		res, err := decodeResource(v)
		top = max(top, res.LastFence)
		return err
	})
	if err != nil {
		return err
	}
	return putUint(meta, keyMaxFence, top)
}

// Claim implements fencegate.LeaseBackend in one write transaction.
func (b *Backend) Claim(ctx context.Context, prev, id string, floor uint64) (fencegate.Incarnation, error) {
	if err := leaserule.CheckClaim(id, floor, math.MaxUint64); err != nil {
		return fencegate.Incarnation{}, err
	}
	err := b.db.Update(func(tx *bbolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if cur := string(meta.Get(keyIncarnation)); cur != prev {
			return leaserule.ClaimLost(prev, cur)
		}
		rev, err := bumpRevision(meta)
		if err != nil {
			return err
		}
		if floor > getUint(meta, keyFloor) {
			if err := putUint(meta, keyFloor, floor); err != nil {
				return err
			}
		}
		if err := meta.Put(keyIncarnation, []byte(id)); err != nil {
			return err
		}
		return putUint(meta, keySince, rev)
	})
	if err != nil {
		return fencegate.Incarnation{}, translate(err, "claim")
	}
	return b.Incarnation(ctx)
}

func readIncarnation(meta *bbolt.Bucket) fencegate.Incarnation {
	return fencegate.Incarnation{
		ID: string(meta.Get(keyIncarnation)), Since: getUint(meta, keySince),
		Revision: getUint(meta, keyRevision), HighestFence: max(getUint(meta, keyFloor), getUint(meta, keyMaxFence)),
	}
}

// checkGuard is the guard of every mutation (fencegate.Guard), read from the
// meta bucket of the mutation's own write transaction.
func checkGuard(meta *bbolt.Bucket, g fencegate.Guard) error {
	return leaserule.CheckIncarnation(g, string(meta.Get(keyIncarnation)), getUint(meta, keyRevision))
}
