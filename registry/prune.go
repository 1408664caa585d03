package registry

import (
	"context"

	"github.com/fencegate/fencegate"
)

// Lease records the backend keeps for retention (leaserule.Forgotten) are
// pruned by every acquisition in its own transaction and, so that a registry
// that makes no more acquisitions (a quiet deployment, workers that only
// renew) still bounds them, one batch per Watch (prune).

// prune deletes one batch of the lease records forgotten now
// (fencegate.LeaseBackend.Prune) under the guard a renewal or release
// carries: the marker and highest revision this registry has seen
// (mutationGuard). It runs neither while grants are paused after a loss nor
// without a marker seen (an empty guard checks nothing). A refusal of the
// guard is handled as any mutation's (underGuard): a new loss pauses grants.
// The backend's prune moves no revision and writes no marker, floor or
// fence, so even on a restored or foreign copy it could not hide a loss from
// the checks; the guard keeps it from touching such a copy at all.
func (r *Registry) prune(ctx context.Context) error {
	if r.rec.paused.Load() {
		return nil
	}
	now := r.now()
	var n int
	err := r.underGuard(ctx, now, r.mutationGuard(ctx), func(g fencegate.Guard) (err error) {
		if g.Incarnation == "" {
			return nil
		}
		n, err = r.backend.Prune(ctx, now, g)
		return err
	})
	if err != nil {
		return backendErr(err)
	}
	if n > 0 {
		r.log.Debug("pruned lease records past retention", "records", n)
	}
	return nil
}
