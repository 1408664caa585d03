package redis

import (
	"context"
	"strconv"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry/internal/leaserule"
)

// Incarnation implements fencegate.LeaseBackend with one script (one instant).
func (b *Backend) Incarnation(ctx context.Context) (fencegate.Incarnation, error) {
	reply, err := b.run(ctx, incarnationScript)
	if err != nil {
		return fencegate.Incarnation{}, translate(err, "read incarnation")
	}
	if len(reply) != 5 || reply[0] != "OK" {
		return fencegate.Incarnation{}, fencegate.Errorf(fencegate.CodeInternal, "read incarnation: unexpected reply %q", reply)
	}
	inc := fencegate.Incarnation{ID: reply[1]}
	for i, dst := range []*uint64{&inc.Since, &inc.Revision, &inc.HighestFence} {
		if *dst, err = strconv.ParseUint(reply[i+2], 10, 64); err != nil {
			return fencegate.Incarnation{}, fencegate.Wrap(err, fencegate.CodeInternal, "incarnation field is malformed")
		}
	}
	return inc, nil
}

// Claim implements fencegate.LeaseBackend with one script.
func (b *Backend) Claim(ctx context.Context, prev, id string, floor uint64) (fencegate.Incarnation, error) {
	if err := leaserule.CheckClaim(id, floor, MaxFence); err != nil {
		return fencegate.Incarnation{}, err
	}
	reply, err := b.run(ctx, claimScript, prev, id, strconv.FormatUint(floor, 10))
	if err != nil {
		return fencegate.Incarnation{}, translate(err, "claim")
	}
	if len(reply) == 2 && reply[0] == "CLAIMED" {
		return fencegate.Incarnation{}, leaserule.ClaimLost(prev, reply[1])
	}
	if _, err := b.answer(reply, time.Time{}, "claim"); err != nil {
		return fencegate.Incarnation{}, err
	}
	if err := b.replicate(ctx, "claim"); err != nil {
		return fencegate.Incarnation{}, err
	}
	return b.Incarnation(ctx)
}
