package gateway

import (
	"context"
	"testing"
)

// TestKeyedMutexOneHolderPerKeyAndNoEntryLeft: a key is held by one caller
// at a time (a second lock waits, and gives up when its context ends without
// taking the key), other keys are independent, and once every holder and
// waiter is gone no entry is left; a freed entry reused for another key
// locks and unlocks like a new one.
func TestKeyedMutexOneHolderPerKeyAndNoEntryLeft(t *testing.T) {
	var k keyedMutex
	ctx := context.Background()
	a, err := k.lock(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := k.lock(ctx, "b")
	if err != nil {
		t.Fatalf("another key waits for a: %v", err)
	}
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := k.lock(gone, "a"); err == nil {
		t.Fatal("a second holder of a held key")
	}
	got := make(chan heldKey)
	go func() {
		h, err := k.lock(ctx, "a")
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	select {
	case <-got:
		t.Fatal("a held key was taken")
	default:
	}
	a.unlock()
	(<-got).unlock()
	b.unlock()
	if n := len(k.m); n != 0 {
		t.Fatalf("%d entries left", n)
	}
	for _, key := range []string{"c", "c", "d"} { // freed entries come back empty
		h, err := k.lock(ctx, key)
		if err != nil || len(h.e.ch) != 1 || h.e.refs != 1 {
			t.Fatalf("%s: %v, token %d, refs %d", key, err, len(h.e.ch), h.e.refs)
		}
		h.unlock()
	}
	if n := len(k.m); n != 0 {
		t.Fatalf("%d entries left", n)
	}
}
