package embedded

import (
	"context"

	bolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/internal/fencerules"
)

var _ fencegate.TargetBindings = (*Store)(nil)

// Binding implements fencegate.TargetBindings.
func (s *Store) Binding(ctx context.Context, target string) (string, error) {
	var bound string
	err := s.view(ctx, func(tx *bolt.Tx) error {
		bound = string(tx.Bucket(bTargets).Get([]byte(target)))
		if bound == "" {
			return fencegate.Errorf(fencegate.CodeNotFound, "target %q is bound to no resource", target)
		}
		return nil
	})
	if err != nil {
		return "", storeErr(err, "read binding")
	}
	return bound, nil
}

// Unbind implements fencegate.TargetBindings, in one transaction.
func (s *Store) Unbind(ctx context.Context, target, resource string) error {
	if err := ctx.Err(); err != nil {
		return ctxErr(err)
	}
	err := s.batch.do(func(tx *bolt.Tx) error {
		row, _, err := getResource(tx, resource)
		if err != nil {
			return err
		}
		if err := fencerules.CheckUnbind(string(tx.Bucket(bTargets).Get([]byte(target))), target, resource, row); err != nil {
			return refuse(err)
		}
		return tx.Bucket(bTargets).Delete([]byte(target))
	})
	if err != nil {
		return storeErr(err, "unbind target")
	}
	return nil
}
