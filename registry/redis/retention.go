package redis

import (
	"context"
	"strconv"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry/internal/leaserule"
)

// Prune implements fencegate.LeaseBackend in one script (pruneScript): the
// guard, then up to leaserule.PruneBatch records past retention, found
// through the expiry sorted set as an acquisition's are. It moves no
// revision and waits for no replica: a prune lost in a failover leaves only
// records already forgotten, which a later one deletes.
func (b *Backend) Prune(ctx context.Context, now time.Time, g fencegate.Guard) (int, error) {
	cutoff, cutoffMs := b.cutoff(now)
	batch := leaserule.PruneBatch
	if cutoff == "" { // nothing is forgotten; the guard is still answered
		batch = 0
	}
	reply, err := b.run(ctx, pruneScript, cutoff, cutoffMs, batch, g.Incarnation, strconv.FormatUint(g.MinRevision, 10))
	if err != nil {
		return 0, translate(err, "prune")
	}
	if err := refused(reply, g); err != nil {
		return 0, err
	}
	if len(reply) != 2 || reply[0] != "OK" {
		return 0, fencegate.Errorf(fencegate.CodeInternal, "prune: unexpected script reply %q", reply)
	}
	n, err := strconv.Atoi(reply[1])
	if err != nil {
		return 0, fencegate.Wrap(err, fencegate.CodeInternal, "prune: malformed script reply")
	}
	return n, nil
}
