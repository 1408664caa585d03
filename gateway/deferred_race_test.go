package gateway_test

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate"
)

// readHookStore runs afterRead once, right after the next receipt read
// returned from the store (before the gateway looks at what it read).
type readHookStore struct {
	fencegate.PriorSettling
	afterRead func()
}

func (s *readHookStore) Receipt(ctx context.Context, id string) (fencegate.Receipt, error) {
	r, err := s.PriorSettling.Receipt(ctx, id)
	if h := s.afterRead; h != nil {
		s.afterRead = nil
		h()
	}
	return r, err
}

// TestReadRacingTheFoldReadsTheAnsweredWriteCommitted: a read that found an
// answered receipt still PENDING while the next write on the resource folded
// its settle (and overwrote the object, so the object no longer proves it)
// reads it COMMITTED, not PENDING: read your writes holds across the race.
func TestReadRacingTheFoldReadsTheAnsweredWriteCommitted(t *testing.T) {
	f := newFixture(t)
	st := &readHookStore{PriorSettling: f.store.(fencegate.PriorSettling)}
	gw := f.deferring(st, never)
	ctx := context.Background()
	first, err := gw.Apply(ctx, f.request(5, 1, "v1"))
	if err != nil {
		t.Fatal(err)
	}
	st.afterRead = func() {
		if _, err := gw.Apply(ctx, f.request(5, 2, "v2")); err != nil {
			t.Errorf("next write: %v", err)
		}
	}
	got, err := gw.Store().Receipt(ctx, first.Receipt.ID)
	if err != nil || got.State != fencegate.ReceiptCommitted || got.Version != first.Receipt.Version {
		t.Fatalf("read %s %q (%v), answered COMMITTED %q", got.State, got.Version, err, first.Receipt.Version)
	}
}

// countReadsStore counts receipt reads.
type countReadsStore struct {
	fencegate.PriorSettling
	reads int
}

func (s *countReadsStore) Receipt(ctx context.Context, id string) (fencegate.Receipt, error) {
	s.reads++
	return s.PriorSettling.Receipt(ctx, id)
}

// TestReadThatFlushedReadsTheStoreOnceMore: a read of this process's
// deferred receipt flushes it and reads it again, once: the flushed receipt
// is not also proven from its object or read a third time.
func TestReadThatFlushedReadsTheStoreOnceMore(t *testing.T) {
	f := newFixture(t)
	st := &countReadsStore{PriorSettling: f.store.(fencegate.PriorSettling)}
	gw := f.deferring(st, never)
	ctx := context.Background()
	first, err := gw.Apply(ctx, f.request(5, 1, "v1"))
	if err != nil {
		t.Fatal(err)
	}
	st.reads = 0
	got, err := gw.Store().Receipt(ctx, first.Receipt.ID)
	if err != nil || got.State != fencegate.ReceiptCommitted || st.reads != 2 {
		t.Fatalf("read %s (%v) in %d store reads, want COMMITTED in 2", got.State, err, st.reads)
	}
}
