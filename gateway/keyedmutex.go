package gateway

import (
	"context"
	"sync"

	"github.com/fencegate/fencegate"
)

// lockResource takes this process's lock of resource, held across a
// write's admission, effect and settle; a caller whose context ends while
// it waits gets RESOURCE_BUSY, with nothing admitted.
func (g *Gateway) lockResource(ctx context.Context, resource string) (heldKey, error) {
	held, err := g.locks.lock(ctx, resource)
	if err != nil {
		return heldKey{}, fencegate.Wrap(err, fencegate.CodeResourceBusy, "gave up waiting for the resource")
	}
	return held, nil
}

// keyedMutex serialises work per key; entries live only while in use, and a
// freed entry (its channel empty, no holder or waiter left) is reused, so
// locking a free key allocates nothing.
type keyedMutex struct {
	mu   sync.Mutex
	m    map[string]*keyEntry
	free sync.Pool // of *keyEntry with refs 0 and an empty ch
}

type keyEntry struct {
	ch   chan struct{} // holds one token while the key is locked
	refs int
}

// heldKey is a locked key; unlock releases it.
type heldKey struct {
	k   *keyedMutex
	key string
	e   *keyEntry
}

// lock blocks until key is free or ctx ends; the returned heldKey unlocks.
func (k *keyedMutex) lock(ctx context.Context, key string) (heldKey, error) {
	k.mu.Lock()
	if k.m == nil {
		k.m = make(map[string]*keyEntry)
	}
	e := k.m[key]
	if e == nil {
		e, _ = k.free.Get().(*keyEntry)
		if e == nil {
			e = &keyEntry{ch: make(chan struct{}, 1)}
		}
		k.m[key] = e
	}
	e.refs++
	k.mu.Unlock()

	select {
	case e.ch <- struct{}{}:
		return heldKey{k: k, key: key, e: e}, nil
	case <-ctx.Done():
		k.release(key, e)
		return heldKey{}, ctx.Err()
	}
}

// unlock frees the key for the next waiter.
func (h heldKey) unlock() {
	<-h.e.ch
	h.k.release(h.key, h.e)
}

// release drops one reference to e; the last one removes the entry and
// keeps it for reuse (nobody holds its token then: ch is empty).
func (k *keyedMutex) release(key string, e *keyEntry) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e.refs--
	if e.refs == 0 {
		delete(k.m, key)
		k.free.Put(e)
	}
}
