package registry_test

import (
	"context"
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

// The rule: while grants are paused after a loss (here a backend restored
// from before an acquisition, with no fence store, so the pause waits for an
// operator's floor), the tick prunes nothing on the restored copy and moves
// nothing there.
func TestWatchPrunesNothingWhileGrantsArePausedAfterALoss(t *testing.T) {
	sw := newSwappable(t)
	e := newLossEnv(t, sw, nil, &memory{})
	ctx := context.Background()
	id := e.forgottenLease("alice", "db/a", "a1")
	snap := sw.snapshot()
	e.mustAcquire("bob", "db/b", "b1")
	sw.restore(snap)
	if err := e.r.Watch(ctx); fencegate.ErrorCode(err) != fencegate.CodeStateLost || !e.r.Issuance().Paused {
		t.Fatalf("restore not detected: %v %+v", err, e.r.Issuance())
	}
	e.clock.Advance(pastRetention)
	before, err := sw.Incarnation(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.r.Watch(ctx); fencegate.ErrorCode(err) != fencegate.CodeStateLost {
		t.Fatalf("watch while paused: want COORDINATION_STATE_LOST, got %v", err)
	}
	if !e.recordKept(id) {
		t.Fatalf("the tick pruned lease %s on the restored copy while grants were paused", id)
	}
	if after, err := sw.Incarnation(ctx); err != nil || after != before {
		t.Fatalf("the tick moved the restored copy while paused: %+v -> %+v (%v)", before, after, err)
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
