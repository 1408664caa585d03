package registry_test

import (
	"context"
	"math"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry"
)

// A floor the backend refuses (above its own range), set while grants wait
// for one, is refused and forgotten: the operator's next floor ends the
// pause. It used to be kept, and every later claim failed with it, so the
// recovery never completed.
func TestAnOperatorFloorTheBackendRefusesIsForgotten(t *testing.T) {
	b := newSwappable(t)
	b.claimLimit.Store(1 << 40)
	e := newLossEnv(t, b, nil, &memory{})
	e.mustAcquire("alice", "db/a", "r1")
	b.wipe()
	e.wantPaused("bob", "db/a", "b1")
	if err := e.r.SetFloor(context.Background(), 1<<41); fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
		t.Fatalf("a floor above the backend's range: %v", err)
	}
	if is := e.r.Issuance(); !is.NeedsFloor || is.HighWater >= 1<<41 {
		t.Fatalf("after the refused floor: %+v", is)
	}
	e.wantPaused("bob", "db/a", "b1")
	if err := e.r.SetFloor(context.Background(), 1000); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(pause)
	if l := e.mustAcquire("bob", "db/a", "b1"); l.Lease.FenceToken <= 1000 {
		t.Fatalf("fence %d not above the floor 1000", l.Lease.FenceToken)
	}
}

// A floor kept while the epoch was not yet retired, which the backend
// refuses when an acquisition then claims: that acquisition is answered
// COORDINATION_STATE_LOST (grants wait for another floor), not the floor's
// INVALID_REQUEST, which a client takes for its own request's fault.
func TestAFloorTheBackendRefusesAtAnAcquisitionLeavesGrantsPaused(t *testing.T) {
	b := newSwappable(t)
	b.claimLimit.Store(1 << 40)
	e := newLossEnv(t, b, nil, &memory{})
	e.mustAcquire("alice", "db/a", "r1")
	e.failOn.Store(true) // the retirement fails: SetFloor keeps the floor without claiming
	b.wipe()
	e.wantPaused("bob", "db/a", "b1")
	if err := e.r.SetFloor(context.Background(), 1<<41); err != nil {
		t.Fatalf("a floor set before the epoch is retired: %v", err)
	}
	e.failOn.Store(false)
	e.wantPaused("bob", "db/a", "b1")
	if is := e.r.Issuance(); !is.NeedsFloor {
		t.Fatalf("after the backend refused the floor: %+v; want waiting for another", is)
	}
}

// An operator floor serves the loss it was set for only: at the next loss a
// registry without a fence store waits for a new one. Registry B kept the
// first loss's floor and claimed the second by itself, handing out again a
// fence registry A had issued above that floor meanwhile.
func TestAnOperatorFloorDoesNotStandInAtTheNextLoss(t *testing.T) {
	ctx := context.Background()
	b := newSwappable(t)
	a := newLossEnv(t, b, nil, &memory{})
	bb := newLossEnv(t, b, nil, &memory{})
	b.wipe()
	a.wantPaused("x", "db/z", "z1")
	_ = bb.r.Watch(ctx)
	for _, e := range []*lossEnv{a, bb} {
		if err := e.r.SetFloor(ctx, 100); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(pause)
	}
	_ = bb.r.Watch(ctx)
	la := a.mustAcquire("alice", "db/x", "a1") // B has not looked since
	b.wipe()                                   // the second loss; A is down
	_ = bb.r.Watch(ctx)
	if is := bb.r.Issuance(); !is.Paused || !is.NeedsFloor {
		t.Fatalf("B after the second loss: %+v; want paused, waiting for a floor", is)
	}
	bb.clock.Advance(pause)
	if l, err := bb.acquire("bob", "db/x", "b1"); err == nil {
		t.Fatalf("B granted fence %d with no floor for the second loss (A issued %d)", l.Lease.FenceToken, la.Lease.FenceToken)
	}
}

func TestFloorLeavingNoRoomIsRefusedAndChangesNothing(t *testing.T) {
	e := newLossEnv(t, newSwappable(t), &highWater{}, nil)
	for _, f := range []uint64{math.MaxUint64, registry.MaxFloor + 1} {
		if err := e.r.SetFloor(context.Background(), f); fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
			t.Fatalf("floor %d: want INVALID_REQUEST, got %v", f, err)
		}
	}
	if l := e.mustAcquire("alice", "db/a", "r1"); l.Lease.FenceToken != 1 {
		t.Fatalf("refused floors moved the sequence: fence %d", l.Lease.FenceToken)
	}
	if err := e.r.SetFloor(context.Background(), registry.MaxFloor); err != nil {
		t.Fatalf("the highest usable floor: %v", err)
	}
}
