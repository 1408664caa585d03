package registry

import (
	"context"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/fencegate/fencegate"
)

// HandoffObserver is told of each lock handoff this registry process sees: a
// new lease on resource (with fence) granted at granted, after the previous
// lease on it ended at ended (released here, or its TTL lapsed while an
// acquirer waited here), both on the registry's clock.
type HandoffObserver interface {
	Handoff(resource string, fence uint64, ended, granted time.Time)
}

// handoffEnds remembers, per resource, when its last lease ended in this
// process (bounded: the least recently ended resources are forgotten).
type handoffEnds struct{ ends *lru.Cache[string, time.Time] }

const handoffMemory = 4096

func newHandoffEnds() handoffEnds {
	c, _ := lru.New[string, time.Time](handoffMemory)
	return handoffEnds{ends: c}
}

// ended records that resource's lease ended at t.
func (r *Registry) ended(resource string, t time.Time) {
	if r.handoffObs != nil {
		r.handoff.ends.Add(resource, t)
	}
}

// granted reports the handoff to l, answered to an acquisition that asked
// for a new lease with ID newID, if the end of its predecessor is known and
// precedes it; the end is forgotten either way. A repeat of an earlier
// acquisition (same owner and request ID) is answered with the first lease,
// not newID: it grants nothing, so it neither reports nor forgets the end,
// which belongs to the next new lease.
func (r *Registry) granted(l fencegate.Lease, newID string) {
	if r.handoffObs == nil || l.ID != newID {
		return
	}
	end, ok := r.handoff.ends.Peek(l.Resource)
	if !ok {
		return
	}
	r.handoff.ends.Remove(l.Resource)
	if !l.AcquiredAt.Before(end) {
		r.handoffObs.Handoff(l.Resource, l.FenceToken, end, l.AcquiredAt)
	}
}

// holderExpiry records when the live lease of resource runs out, for an
// acquirer waiting on it: if it is not released first, that is when it ends.
func (r *Registry) holderExpiry(ctx context.Context, resource string) {
	if r.handoffObs == nil {
		return
	}
	if l, err := r.Holder(ctx, resource); err == nil {
		r.ended(resource, l.ExpiresAt)
	}
}
