package registry_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry"
)

// startLate builds a registry over b that runs its start check after after
// has passed on its own clock (a replica started later than the others).
func startLate(t *testing.T, b *swappable, hw fencegate.HighWater, mem registry.Memory, after time.Duration) *lossEnv {
	t.Helper()
	e := newLossEnv(t, b, hw, mem, unchecked())
	e.clock.Advance(after)
	if err := e.r.Check(context.Background()); err != nil {
		t.Fatalf("check: %v", err)
	}
	return e
}

// wantHeld asks e for resource and wants the hold's refusal: COORDINATION_STATE_LOST
// saying why and until when, with the backend's fences and revision unchanged.
func (e *lossEnv) wantHeld(owner, resource, rid string, until time.Time) {
	e.t.Helper()
	ctx := context.Background()
	before, err := e.backend.Incarnation(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	is, err := e.acquire(owner, resource, rid)
	if fencegate.ErrorCode(err) != fencegate.CodeStateLost {
		e.t.Fatalf("acquire %s at %v during the hold: want COORDINATION_STATE_LOST, got fence %d, %v", resource, e.clock.Now(), is.Lease.FenceToken, err)
	}
	if msg := fencegate.ErrorMessage(err); !strings.Contains(msg, "without memory") || !strings.Contains(msg, until.Format(time.RFC3339Nano)) {
		e.t.Fatalf("refusal does not say why and until when (%v): %q", until, msg)
	}
	after, err := e.backend.Incarnation(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if after != before {
		e.t.Fatalf("a refused acquisition changed the backend: %+v, was %+v", after, before)
	}
	st := e.r.Issuance()
	if !st.Paused || st.DetectedAt != nil || st.ResumeAt == nil || !st.ResumeAt.Equal(until) || st.Losses != 0 || !strings.Contains(st.Reason, "without memory") {
		e.t.Fatalf("issuance during the hold: %+v", st)
	}
	if st.AfterLoss() { // the grants-paused gauge pages on it: a hold is no loss
		e.t.Fatalf("a hold reported as a pause after a loss: %+v", st)
	}
}

// A replica that starts without memory of the backend's marker while another
// registry is in the pause after its claim (a marker of generation 2) makes
// no new grant for one pause from its start: a HELD proof signed before the
// loss may still be alive. Then it grants above every fence issued before.
func TestMemorylessStartOnAClaimAfterALossHoldsNewGrantsForOnePause(t *testing.T) {
	b := newSwappable(t)
	hw := &highWater{}
	a := newLossEnv(t, b, hw, &memory{})
	al := a.mustAcquire("alice", "db/a", "a1") // HELD proof until t0+5s
	hw.v.Store(al.Lease.FenceToken)
	b.wipe()
	a.wantPaused("x", "db/b", "x1") // A claims, pauses until t0+7s
	if !a.r.Issuance().AfterLoss() {
		t.Fatalf("A's pause is not reported as after a loss: %+v", a.r.Issuance())
	}

	mem := &memory{}
	c := startLate(t, b, hw, mem, time.Second) // a new replica, started at t0+1s
	until := t0.Add(time.Second + pause)
	c.wantHeld("bob", "db/a", "b1", until)

	// Restarted during the hold (its memory now names the marker): the
	// hold goes on.
	again := startLate(t, b, hw, mem, 2*time.Second)
	again.wantHeld("bob", "db/a", "b1", until)

	c.clock.Advance(pause - time.Millisecond)
	c.wantHeld("bob", "db/a", "b1", until)
	c.clock.Advance(time.Millisecond)
	bl := c.mustAcquire("bob", "db/a", "b1")
	if bl.Lease.FenceToken <= al.Lease.FenceToken || bl.State != fencegate.StateHeld {
		t.Fatalf("after the hold: bob's fence %d (%s), alice's was %d", bl.Lease.FenceToken, bl.State, al.Lease.FenceToken)
	}
	if !c.clock.Now().After(al.StatusExpiresAt.Add(fencegate.MaxClockSkew)) {
		t.Fatalf("bob granted at %v, alice's proof lives until %v", c.clock.Now(), al.StatusExpiresAt)
	}
	if st := c.r.Issuance(); st.Paused {
		t.Fatalf("issuance after the hold: %+v", st)
	}
}

// A replica that starts without memory on a first-start claim (generation
// 1: no loss behind it), or on an empty backend, grants at once.
func TestMemorylessStartOnAFirstClaimGrantsAtOnce(t *testing.T) {
	b := newSwappable(t)
	a := newLossEnv(t, b, &highWater{}, &memory{})
	a.mustAcquire("alice", "db/a", "a1")
	c := newLossEnv(t, b, &highWater{}, &memory{})
	if st := c.r.Issuance(); st.Paused {
		t.Fatalf("issuance of a memoryless start on a first claim: %+v", st)
	}
	c.mustAcquire("bob", "db/b", "b1")

	first := newLossEnv(t, newSwappable(t), &highWater{}, &memory{}) // an empty backend
	first.mustAcquire("bob", "db/b", "b1")
}

// During the hold of a memoryless start, leases issued under the claim (by
// the registry that made it, after its pause) are renewed through the new
// replica and read HELD there: the hold refuses new grants only.
func TestRenewAndStatusGoOnThroughAMemorylessReplicaDuringItsHold(t *testing.T) {
	b := newSwappable(t)
	hw := &highWater{}
	a := newLossEnv(t, b, hw, &memory{})
	hw.v.Store(a.mustAcquire("alice", "db/a", "a1").Lease.FenceToken)
	b.wipe()
	a.wantPaused("x", "db/b", "x1")
	carol := a.resumeAbove(hw.v.Load(), "carol", "db/c", "c1") // issued at t0+7s

	c := startLate(t, b, hw, &memory{}, pause+time.Second)
	c.wantHeld("bob", "db/b", "b1", t0.Add(2*pause+time.Second))
	if got := c.proofState(carol.Lease.ID); got != fencegate.StateHeld {
		t.Fatalf("carol's lease through the replica during its hold: %s, want HELD", got)
	}
	rn, err := c.r.Renew(context.Background(), "carol", carol.Lease.ID, 30*time.Second)
	if err != nil || rn.State != fencegate.StateHeld {
		t.Fatalf("renewal of carol's lease through the replica during its hold: %v (%s)", err, rn.State)
	}
	if got := a.proofState(carol.Lease.ID); got != fencegate.StateHeld {
		t.Fatalf("carol's renewed lease at the claimer: %s, want HELD", got)
	}
}
