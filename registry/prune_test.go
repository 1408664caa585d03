package registry_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry"
)

// pastRetention is how far after an acquisition at the clock's time a
// lease of params' TTL is forgotten by the default retention.
const pastRetention = 30*time.Second + registry.DefaultLeaseRetention

// forgottenLease acquires and releases resource's lease through e and
// returns its ID.
func (e *lossEnv) forgottenLease(owner, resource, rid string) string {
	e.t.Helper()
	is := e.mustAcquire(owner, resource, rid)
	if _, err := e.r.Release(context.Background(), owner, is.Lease.ID); err != nil {
		e.t.Fatalf("release %s: %v", is.Lease.ID, err)
	}
	return is.Lease.ID
}

// recordKept reports whether the backend still keeps lease id's record.
func (e *lossEnv) recordKept(id string) bool {
	e.t.Helper()
	_, err := e.backend.Lease(context.Background(), id, e.clock.Now())
	if err != nil && fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		e.t.Fatalf("lease %s: %v", id, err)
	}
	return err == nil
}

// The rule: Watch, the registry's periodic tick, prunes lease records past
// expiry + retention with no acquisition at all (a quiet registry), and
// moves neither the backend's revision nor its marker doing so.
func TestWatchPrunesForgottenLeaseRecordsWithoutAnAcquisition(t *testing.T) {
	e := newLossEnv(t, newSwappable(t), nil, &memory{})
	ctx := context.Background()
	id := e.forgottenLease("alice", "db/a", "a1")
	e.clock.Advance(pastRetention - time.Millisecond)
	if err := e.r.Watch(ctx); err != nil || !e.recordKept(id) {
		t.Fatalf("watch before expiry + retention: %v; record kept %v, want kept", err, e.recordKept(id))
	}
	before, err := e.backend.Incarnation(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Millisecond)
	if err := e.r.Watch(ctx); err != nil {
		t.Fatalf("watch: %v", err)
	}
	if e.recordKept(id) {
		t.Fatalf("lease %s past expiry + retention: want its record pruned by the tick", id)
	}
	if after, err := e.backend.Incarnation(ctx); err != nil || after != before {
		t.Fatalf("the tick's prune moved the backend: %+v -> %+v (%v)", before, after, err)
	}
	if is := e.r.Issuance(); is.Paused || is.Losses != 0 {
		t.Fatalf("the tick's prune paused grants: %+v", is)
	}
}

// countPrunes counts the prunes that reach the backend.
type countPrunes struct {
	*swappable
	n atomic.Int32
}

func (c *countPrunes) Prune(ctx context.Context, now time.Time, g fencegate.Guard) (int, error) {
	c.n.Add(1)
	return c.swappable.Prune(ctx, now, g)
}

// The rule: while grants are paused after a loss, the tick's prune does not
// reach the backend. Here the loss (a backend restored from before an
// acquisition, with a fence store) is already claimed and the restored copy
// carries the new marker, so a prune under it would be accepted; the pause
// alone keeps the pre-loss records there. The prune is called directly:
// Watch's check answers first while paused.
func TestPruneDeletesNothingWhileGrantsArePausedAfterALoss(t *testing.T) {
	sw := newSwappable(t)
	b := &countPrunes{swappable: sw}
	hw := &highWater{}
	e := newLossEnv(t, sw, hw, &memory{}, through(b))
	ctx := context.Background()
	id := e.forgottenLease("alice", "db/a", "a1")
	old := e.r.Issuance().Incarnation
	snap := sw.snapshot()
	hw.v.Store(e.mustAcquire("bob", "db/b", "b1").Lease.FenceToken)
	sw.restore(snap)
	if err := e.r.Watch(ctx); fencegate.ErrorCode(err) != fencegate.CodeStateLost {
		t.Fatalf("restore not detected: %v", err)
	}
	if is := e.r.Issuance(); !is.Paused || is.Incarnation == old {
		t.Fatalf("want paused after a claim of the restored copy (a marker other than %q): %+v", old, is)
	}
	e.clock.Advance(pastRetention)
	before, err := sw.Incarnation(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.r.PruneForTest(ctx); err != nil {
		t.Fatalf("prune while paused: %v", err)
	}
	if n := b.n.Load(); n != 0 {
		t.Fatalf("the prune reached the backend %d times while grants were paused", n)
	}
	if !e.recordKept(id) {
		t.Fatalf("lease %s was pruned on the restored copy while grants were paused", id)
	}
	if after, err := sw.Incarnation(ctx); err != nil || after != before {
		t.Fatalf("the prune moved the restored copy while paused: %+v -> %+v (%v)", before, after, err)
	}
}

// The rule: a prune with no marker seen (an empty guard, which checks
// nothing) does not reach the backend. Here a backend carrying a forgotten
// record and no marker behind a registry that has not checked it yet: the
// prune's own check finds the missing marker and adopts none.
func TestPruneDeletesNothingWithoutAMarkerSeen(t *testing.T) {
	sw := newSwappable(t)
	ctx := context.Background()
	if _, err := sw.Acquire(ctx, fencegate.AcquireRequest{LeaseID: "l1", Resource: "db/a", Owner: "alice",
		RequestID: "a1", OperationID: "op-1", OperationCategory: "write", TTL: 30 * time.Second, Now: t0}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sw.Release(ctx, "l1", "alice", t0, fencegate.Guard{}); err != nil {
		t.Fatal(err)
	}
	b := &countPrunes{swappable: sw}
	e := newLossEnv(t, sw, nil, &memory{}, through(b), unchecked())
	e.clock.Advance(pastRetention)
	before, err := sw.Incarnation(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.r.PruneForTest(ctx); err != nil {
		t.Fatalf("prune: %v", err)
	}
	if is := e.r.Issuance(); is.Incarnation != "" {
		t.Fatalf("want no marker seen: %+v", is)
	}
	if n := b.n.Load(); n != 0 {
		t.Fatalf("the prune reached the backend %d times under an empty guard", n)
	}
	if !e.recordKept("l1") {
		t.Fatal("lease l1 was pruned under an empty guard")
	}
	if after, err := sw.Incarnation(ctx); err != nil || after != before {
		t.Fatalf("the prune moved the backend: %+v -> %+v (%v)", before, after, err)
	}
}

// restoreBeforePrune restores a snapshot just before the next prune reaches
// the backend: a restore between the tick's check and its prune.
type restoreBeforePrune struct {
	*swappable
	snap string
}

func (s *restoreBeforePrune) Prune(ctx context.Context, now time.Time, g fencegate.Guard) (int, error) {
	if s.snap != "" {
		s.restore(s.snap)
		s.snap = ""
	}
	return s.swappable.Prune(ctx, now, g)
}

// The rule: the tick's prune carries the guard of a renewal, so a backend
// restored after the tick's check refuses it: nothing is deleted on the
// restored copy, and the refusal is the loss it is (grants pause).
func TestATickPruneTheRestoredBackendRefusesIsALossAndDeletesNothing(t *testing.T) {
	sw := newSwappable(t)
	b := &restoreBeforePrune{swappable: sw}
	e := newLossEnv(t, sw, nil, &memory{}, through(b))
	ctx := context.Background()
	id := e.forgottenLease("alice", "db/a", "a1")
	snap := sw.snapshot()
	e.mustAcquire("bob", "db/b", "b1")
	e.clock.Advance(pastRetention)
	b.snap = snap
	if err := e.r.Watch(ctx); fencegate.ErrorCode(err) != fencegate.CodeStateLost {
		t.Fatalf("watch whose prune the restored backend refused: want COORDINATION_STATE_LOST, got %v", err)
	}
	if is := e.r.Issuance(); !is.Paused || is.Losses != 1 {
		t.Fatalf("the refused prune was not taken for a loss: %+v", is)
	}
	if !e.recordKept(id) {
		t.Fatalf("the refused prune deleted lease %s on the restored copy", id)
	}
}
