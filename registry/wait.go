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

// releases wakes acquirers waiting for a resource when this process releases
// it. An entry lives while someone waits on it.
type releases struct {
	mu sync.Mutex
	ch map[string]*waitEntry
}

// testHookParked, set only by tests (export_test.go), runs each time an
// acquirer goes to sleep between attempts: tests see a waiter park without
// sleeping themselves.
var testHookParked func()

type waitEntry struct {
	c       chan struct{}
	waiters int
}

// wait registers a waiter on resource; done must be called when it stops.
func (rs *releases) wait(resource string) (woken <-chan struct{}, done func()) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.ch == nil {
		rs.ch = map[string]*waitEntry{}
	}
	e, ok := rs.ch[resource]
	if !ok {
		e = &waitEntry{c: make(chan struct{})}
		rs.ch[resource] = e
	}
	e.waiters++
	return e.c, func() {
		rs.mu.Lock()
		defer rs.mu.Unlock()
		e.waiters--
		if e.waiters == 0 && rs.ch[resource] == e {
			delete(rs.ch, resource)
		}
	}
}

func (rs *releases) wake(resource string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if e, ok := rs.ch[resource]; ok {
		close(e.c)
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
		woken, done := r.released.wait(p.Resource)
		is, err := r.Acquire(ctx, owner, p)
		if fencegate.ErrorCode(err) != fencegate.CodeLeaseHeld {
			done()
			return is, err
		}
		r.holderExpiry(ctx, p.Resource)
		if testHookParked != nil {
			testHookParked()
		}
		err = r.sleepUntilWoken(ctx, woken, deadline)
		done()
		if err != nil {
			return Issued{}, err
		}
	}
}

// sleepUntilWoken waits for a release in this process, a poll interval (the
// holder's TTL may lapse, or another replica may release it), or the
// deadline; past the deadline it answers LEASE_HELD.
func (r *Registry) sleepUntilWoken(ctx context.Context, woken <-chan struct{}, deadline time.Time) error {
	left := time.Until(deadline)
	if left <= 0 {
		return fencegate.Errorf(fencegate.CodeLeaseHeld, "resource is held by another lease")
	}
	t := time.NewTimer(min(left, waitPoll))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fencegate.Wrap(ctx.Err(), fencegate.CodeLeaseHeld, "gave up waiting for the resource")
	case <-woken:
	case <-t.C:
	}
	return nil
}
