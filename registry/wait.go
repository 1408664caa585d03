package registry

import (
	"context"
	"sync"
	"time"

	"github.com/fencegate/fencegate"
)

// waitPoll bounds how long a waiting acquirer sleeps between attempts when no
// release wakes it (the holder's TTL may lapse, or another registry replica
// may release it).
const waitPoll = 25 * time.Millisecond

// releases wakes acquirers waiting for a resource when this process releases it.
type releases struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

func (rs *releases) waitCh(resource string) <-chan struct{} {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.ch == nil {
		rs.ch = map[string]chan struct{}{}
	}
	c, ok := rs.ch[resource]
	if !ok {
		c = make(chan struct{})
		rs.ch[resource] = c
	}
	return c
}

func (rs *releases) wake(resource string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if c, ok := rs.ch[resource]; ok {
		close(c)
		delete(rs.ch, resource)
	}
}

// AcquireWait is Acquire that, while the resource is held by another live
// lease, waits up to wait for the holder to release it or for its TTL to
// lapse (on the registry's clock), then takes it. It answers LEASE_HELD when
// the wait ends first. The same request ID makes retries idempotent.
func (r *Registry) AcquireWait(ctx context.Context, owner string, p AcquireParams, wait time.Duration) (Issued, error) {
	deadline := time.Now().Add(wait)
	for {
		woken := r.released.waitCh(p.Resource)
		is, err := r.Acquire(ctx, owner, p)
		if fencegate.ErrorCode(err) != fencegate.CodeLeaseHeld {
			return is, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return Issued{}, err
		}
		t := time.NewTimer(min(left, waitPoll))
		select {
		case <-ctx.Done():
			t.Stop()
			return Issued{}, fencegate.Wrap(ctx.Err(), fencegate.CodeLeaseHeld, "gave up waiting for the resource")
		case <-woken:
		case <-t.C:
		}
		t.Stop()
	}
}
