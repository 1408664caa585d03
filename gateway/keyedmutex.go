package gateway

import (
	"context"
	"sync"
)

// keyedMutex serialises work per key; entries live only while in use.
type keyedMutex struct {
	mu sync.Mutex
	m  map[string]*keyEntry
}

type keyEntry struct {
	ch   chan struct{} // holds one token while the key is locked
	refs int
}

// lock blocks until key is free or ctx ends; the returned func unlocks.
func (k *keyedMutex) lock(ctx context.Context, key string) (func(), error) {
	k.mu.Lock()
	if k.m == nil {
		k.m = make(map[string]*keyEntry)
	}
	e := k.m[key]
	if e == nil {
		e = &keyEntry{ch: make(chan struct{}, 1)}
		k.m[key] = e
	}
	e.refs++
	k.mu.Unlock()

	release := func() {
		k.mu.Lock()
		e.refs--
		if e.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
	select {
	case e.ch <- struct{}{}:
		return func() { <-e.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}
