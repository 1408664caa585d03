package embedded

import (
	"context"
	"math"

	"go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry/internal/leaserule"
)

// Incarnation implements fencegate.LeaseBackend in one read transaction; the
// highest fence is the floor or the top of the resources' sequences.
func (b *Backend) Incarnation(ctx context.Context) (fencegate.Incarnation, error) {
	var out fencegate.Incarnation
	err := b.db.View(func(tx *bbolt.Tx) error {
		out = readIncarnation(tx.Bucket(bucketMeta))
		return tx.Bucket(bucketResources).ForEach(func(_, v []byte) error {
			res, err := decodeResource(v)
			out.HighestFence = max(out.HighestFence, res.LastFence)
			return err
		})
	})
	return out, translate(err, "read incarnation")
}

// Claim implements fencegate.LeaseBackend in one write transaction.
func (b *Backend) Claim(ctx context.Context, prev, id string, floor uint64) (fencegate.Incarnation, error) {
	if err := leaserule.CheckFloor(floor, math.MaxUint64); err != nil {
		return fencegate.Incarnation{}, err
	}
	if id == "" {
		return fencegate.Incarnation{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "claim needs an incarnation ID")
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
		Revision: getUint(meta, keyRevision), HighestFence: getUint(meta, keyFloor),
	}
}
