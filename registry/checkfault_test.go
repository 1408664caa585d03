package registry_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// Rule: a backend restored with a lease from before the loss, found by a
// registry that then restarted during the pause, still reads that lease
// REVOKED once grants resume (not HELD under the new epoch), its renewal
// included.
func TestARestoredLeaseStaysRevokedAfterARestartDuringThePause(t *testing.T) {
	hw, mem, b := &highWater{}, &memory{}, newSwappable(t)
	e := newLossEnv(t, b, hw, mem)
	old := e.mustAcquire("alice", "db/a", "r1")
	snap := b.snapshot()
	if _, err := e.r.Release(context.Background(), "alice", old.Lease.ID); err != nil {
		t.Fatal(err)
	}
	later := e.mustAcquire("carol", "db/a", "c1")
	hw.v.Store(later.Lease.FenceToken)
	b.restore(snap) // alice's lease HELD again, carol's gone
	e.wantPaused("dave", "db/b", "d1")
	again := newLossEnv(t, b, hw, mem) // restarted during the pause
	again.clock.Advance(time.Second)
	again.wantPaused("dave", "db/b", "d1")
	again.clock.Advance(pause)
	if d := again.mustAcquire("dave", "db/b", "d1"); d.Lease.FenceToken <= later.Lease.FenceToken {
		t.Fatalf("fence %d issued after the pause, not above the accepted %d", d.Lease.FenceToken, later.Lease.FenceToken)
	}
	if st := again.proofState(old.Lease.ID); st != fencegate.StateRevoked {
		t.Fatalf("the restored pre-loss lease reads %s after the restart during the pause, want REVOKED", st)
	}
	if is, err := again.r.Renew(context.Background(), "alice", old.Lease.ID, time.Minute); err == nil && is.State != fencegate.StateRevoked {
		t.Fatalf("the restored pre-loss lease was renewed %s after the restart during the pause, want REVOKED", is.State)
	}
}

// failingOnce is a high-water mark whose first reads fail.
type failingOnce struct {
	fails atomic.Int32
	v     uint64
}

func (h *failingOnce) HighestFence(context.Context) (uint64, error) {
	if h.fails.Add(-1) >= 0 {
		return 0, errors.New("fence store unreachable")
	}
	return h.v, nil
}

// Rule: a Check that failed (the fence store unreachable) compared nothing,
// so the next mutation runs one again: on a backend emptied behind the
// registry's back, with gateways at fence 5, no fence at or below 5 is
// issued.
func TestAFailedCheckIsRunAgainBeforeTheNextMutation(t *testing.T) {
	hw := &failingOnce{v: 5}
	hw.fails.Store(1)
	e := newLossEnv(t, newSwappable(t), hw, &memory{}, unchecked())
	if _, err := e.acquire("alice", "db/a", "r1"); err == nil {
		t.Fatal("the acquire whose check failed was granted")
	}
	is, err := e.acquire("alice", "db/a", "r2")
	if err == nil && is.Lease.FenceToken <= 5 {
		t.Fatalf("fence %d issued at or below the accepted fence 5 after a failed check", is.Lease.FenceToken)
	}
	if fencegate.ErrorCode(err) != fencegate.CodeStateLost {
		t.Fatalf("the acquire after a failed check: %+v %v, want COORDINATION_STATE_LOST (the check run again finds the loss)", is.Lease, err)
	}
}

// blockingOnce is a high-water mark whose first read waits for release
// (entered is closed when it starts).
type blockingOnce struct {
	v                uint64
	once             atomic.Bool
	entered, release chan struct{}
}

func (h *blockingOnce) HighestFence(context.Context) (uint64, error) {
	if h.once.CompareAndSwap(false, true) {
		close(h.entered)
		<-h.release
	}
	return h.v, nil
}

// Rule: a mutation made while the first Check is still in flight waits
// for it, rather than going on beside it with the guard of a registry that
// has compared nothing yet: on a backend emptied with gateways at fence 5,
// no fence at or below 5 is issued.
func TestAMutationBesideTheFirstCheckWaitsForIt(t *testing.T) {
	hw := &blockingOnce{v: 5, entered: make(chan struct{}), release: make(chan struct{})}
	e := newLossEnv(t, newSwappable(t), hw, &memory{}, unchecked())
	checked := make(chan error, 1)
	go func() { checked <- e.r.Check(context.Background()) }()
	<-hw.entered
	type answer struct {
		fence uint64
		err   error
	}
	acquired := make(chan answer, 1)
	go func() {
		is, err := e.acquire("alice", "db/a", "r1")
		acquired <- answer{is.Lease.FenceToken, err}
	}()
	var a answer
	select {
	case a = <-acquired: // went on beside the check (it waits for nothing else)
		close(hw.release)
	case <-time.After(time.Second): // it waits for the check: let the check go on
		close(hw.release)
		a = <-acquired
	}
	<-checked
	if a.err == nil && a.fence <= 5 {
		t.Fatalf("fence %d issued beside the first check, at or below the accepted fence 5", a.fence)
	}
	if fencegate.ErrorCode(a.err) != fencegate.CodeStateLost {
		t.Fatalf("the acquire beside the first check: fence %d, %v; want COORDINATION_STATE_LOST (the check finds the loss)", a.fence, a.err)
	}
}

// Rule: a renewal that is a restarted registry's first request runs the
// check (Memory: the pause it was restarted in) before it reads the lease,
// so a lease from before the loss is refused, not extended.
func TestARenewalBeforeTheFirstCheckRefusesAPreLossLease(t *testing.T) {
	hw, mem, b := &highWater{}, &memory{}, newSwappable(t)
	e := newLossEnv(t, b, hw, mem)
	old := e.mustAcquire("alice", "db/a", "r1")
	snap := b.snapshot()
	later := e.mustAcquire("carol", "db/c", "c1")
	hw.v.Store(later.Lease.FenceToken)
	b.restore(snap)
	e.wantPaused("dave", "db/b", "d1")
	again := newLossEnv(t, b, hw, mem, unchecked()) // restarted during the pause, nothing asked yet
	before, err := b.Lease(context.Background(), old.Lease.ID, again.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.r.Renew(context.Background(), "alice", old.Lease.ID, time.Minute); fencegate.ErrorCode(err) != fencegate.CodeLeaseNotHeld {
		t.Fatalf("the first request, a renewal of a pre-loss lease: %v; want LEASE_NOT_HELD", err)
	}
	if after, _ := b.Lease(context.Background(), old.Lease.ID, again.clock.Now()); after != before {
		t.Fatalf("the refused renewal changed the lease: %+v -> %+v", before, after)
	}
}
