package embedded

import (
	"context"

	bolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
)

var _ fencegate.HighWater = (*Store)(nil)

// HighestFence implements fencegate.HighWater: the highest highestFence over
// every resource, in one read transaction.
func (s *Store) HighestFence(ctx context.Context) (uint64, error) {
	var top uint64
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return treeOf(tx, bResources).ForEach(func(k, v []byte) error {
			var row fencegate.ResourceState
			if err := decodeResource(v, &row); err != nil {
				return err
			}
			top = max(top, row.HighestFence)
			return nil
		})
	})
	if err != nil {
		return 0, storeErr(err, "read highest fence")
	}
	return top, nil
}
