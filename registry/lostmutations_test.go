package registry_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// Rule: a backend restored from a copy taken after the last acquisition but
// before a floor, a release or a renewal is a loss, found before the next
// fence or proof it would falsify: the floor's fence is never issued below
// it, a released lease never reads HELD again, and a resource whose lease a
// lost renewal extended is not granted to another owner while that
// renewal's HELD proof lives.
func TestARestoreThatLosesAFloorIsFoundBeforeAFenceBelowIt(t *testing.T) {
	ctx := context.Background()
	b := newSwappable(t)
	e := newLossEnv(t, b, nil, &memory{})
	snap := b.snapshot()
	if err := e.r.SetFloor(ctx, 100); err != nil {
		t.Fatal(err)
	}
	b.restore(snap)
	is, err := e.acquire("alice", "db/a", "a1")
	if err == nil && is.Lease.FenceToken <= 100 {
		t.Fatalf("fence %d issued below the floor 100 the registry had accepted (issuance %+v)", is.Lease.FenceToken, e.r.Issuance())
	}
	if fencegate.ErrorCode(err) != fencegate.CodeStateLost {
		t.Fatalf("the first acquisition after the restore: %v, want COORDINATION_STATE_LOST", err)
	}
}

func TestARestoreThatLosesAReleaseIsFoundAndTheLeaseReadsRevoked(t *testing.T) {
	ctx := context.Background()
	b := newSwappable(t)
	e := newLossEnv(t, b, &highWater{}, &memory{})
	a := e.mustAcquire("alice", "db/a", "a1")
	snap := b.snapshot()
	if _, err := e.r.Release(ctx, "alice", a.Lease.ID); err != nil {
		t.Fatal(err)
	}
	b.restore(snap)
	_ = e.r.Watch(ctx)
	if is := e.r.Issuance(); !is.Paused {
		t.Fatalf("the restore was not found: %+v", is)
	}
	if got := e.proofState(a.Lease.ID); got == fencegate.StateHeld {
		t.Fatalf("alice's released lease reads HELD again after the restore (issuance %+v)", e.r.Issuance())
	}
}

func TestARestoreThatLosesARenewalIsFoundBeforeTheResourceIsGrantedAgain(t *testing.T) {
	ctx := context.Background()
	b := newSwappable(t)
	e := newLossEnv(t, b, &highWater{}, &memory{})
	a := e.mustAcquire("alice", "db/a", "a1") // TTL 30 s
	snap := b.snapshot()
	e.clock.Advance(28 * time.Second)
	rn, err := e.r.Renew(ctx, "alice", a.Lease.ID, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b.restore(snap)
	e.clock.Advance(2 * time.Second) // the lease as restored has ended
	bob, err := e.acquire("bob", "db/a", "b1")
	if err == nil {
		t.Fatalf("bob granted db/a (fence %d) at %v while alice's renewed HELD proof lives until %v (issuance %+v)",
			bob.Lease.FenceToken, e.clock.Now(), rn.StatusExpiresAt, e.r.Issuance())
	}
	if fencegate.ErrorCode(err) != fencegate.CodeStateLost {
		t.Fatalf("bob's acquisition after the restore: %v, want COORDINATION_STATE_LOST", err)
	}
}

// Rule: a registry that remembers no marker (a new replica, a lost memory
// file) and finds a restored backend claims it anew rather than joining the
// restored marker: leases restored with the backup read REVOKED once grants
// resume, as with a registry that remembers, and fences go on above what
// the fence store accepted.
func TestARegistryWithoutMemoryClaimsARestoredBackendAnew(t *testing.T) {
	ctx := context.Background()
	b, hw := newSwappable(t), &highWater{}
	e := newLossEnv(t, b, hw, &memory{})
	a := e.mustAcquire("alice", "db/a", "a1")
	backup := b.snapshot()
	if _, err := e.r.Release(ctx, "alice", a.Lease.ID); err != nil {
		t.Fatal(err)
	}
	c := e.mustAcquire("carol", "db/a", "c1")
	hw.v.Store(c.Lease.FenceToken) // the gateways accepted carol's fence
	b.restore(backup)
	f := newLossEnv(t, b, hw, &memory{}) // remembers nothing of the backend
	if is := f.r.Issuance(); !is.Paused {
		t.Fatalf("the restore was not found: %+v", is)
	}
	f.clock.Advance(pause)
	d := f.mustAcquire("dave", "db/b", "d1")
	if d.Lease.FenceToken <= c.Lease.FenceToken {
		t.Fatalf("fence %d issued at or below %d, which the gateways accepted", d.Lease.FenceToken, c.Lease.FenceToken)
	}
	if got := f.proofState(a.Lease.ID); got != fencegate.StateRevoked {
		t.Fatalf("alice's lease, restored from before the loss, reads %s after grants resume, want REVOKED", got)
	}
}
