package registry_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry"
)

// stallRenew lets a renewal take its guard and then holds it before the
// backend, as a slow network or a busy backend does.
type stallRenew struct {
	*swappable
	armed            atomic.Bool
	entered, proceed chan struct{}
}

func (s *stallRenew) Renew(ctx context.Context, id, owner string, ttl time.Duration, now time.Time, g fencegate.Guard) (fencegate.Lease, error) {
	if s.armed.CompareAndSwap(true, false) { // the first renewal once armed
		s.entered <- struct{}{}
		<-s.proceed
	}
	return s.swappable.Renew(ctx, id, owner, ttl, now, g)
}

// The rule: a renewal in flight while the operator's floor claims the backend
// and ends the pause (the floor came after ResumeAt) carries the pre-claim
// marker; the backend refuses it, and that refusal is the registry's own
// claim, not a second loss (underGuard runs it once more under the new one).
func TestRenewalInFlightAcrossTheClaimThatEndsThePauseIsNotASecondLoss(t *testing.T) {
	sw := newSwappable(t)
	b := &stallRenew{swappable: sw, entered: make(chan struct{}), proceed: make(chan struct{})}
	e := newLossEnv(t, sw, nil, &memory{}, through(b)) // no fence store: an operator sets the floor
	r, clk, ctx := e.r, e.clock, context.Background()
	a, err := r.Acquire(ctx, "alice", params("db/a", "a1"))
	if err != nil {
		t.Fatal(err)
	}
	sw.wipe()
	if err := r.Watch(ctx); fencegate.ErrorCode(err) != fencegate.CodeStateLost || !r.Issuance().Paused {
		t.Fatalf("wipe not detected: %v %+v", err, r.Issuance())
	}
	clk.Advance(pause) // the operator comes after ResumeAt

	b.armed.Store(true)
	done := make(chan error, 1)
	go func() { _, err := r.Renew(ctx, "alice", a.Lease.ID, time.Minute); done <- err }() // the client keeps renewing
	<-b.entered                                                                           // its guard is the pre-loss marker
	if err := r.SetFloor(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if is := r.Issuance(); is.Paused || is.Losses != 1 {
		t.Fatalf("the floor should claim and resume: %+v", is)
	}
	close(b.proceed)
	if err := <-done; fencegate.ErrorCode(err) != fencegate.CodeNotFound { // the lease is gone with the wipe
		t.Fatalf("the renewal retried under the new marker should reach the backend and find no lease: %v", err)
	}

	if is := r.Issuance(); is.Paused || is.Losses != 1 || e.retired.Load() != 1 {
		t.Fatalf("a renewal carrying the marker of before the registry's own claim was taken for a new loss: %+v, %d retirements", is, e.retired.Load())
	}
}

// The rule: while grants are paused for a loss not yet claimed (here: no
// fence store, so an operator's floor is awaited), a renewal the backend
// refuses is answered COORDINATION_STATE_LOST as that loss's, without
// running the recovery again (no backend read, no second loss, no second
// retirement); the floor still ends the pause.
func TestRenewalsRefusedDuringAPauseDoNotRerunTheRecovery(t *testing.T) {
	b := newSwappable(t)
	e := newLossEnv(t, b, nil, &memory{})
	a := e.mustAcquire("alice", "db/a", "a1")
	b.wipe()
	ctx := context.Background()
	if err := e.r.Watch(ctx); fencegate.ErrorCode(err) != fencegate.CodeStateLost || !e.r.Issuance().NeedsFloor {
		t.Fatalf("wipe not detected as a pause awaiting a floor: %v %+v", err, e.r.Issuance())
	}
	before, retired := b.reads.Load(), e.retired.Load()
	for range 5 {
		if _, err := e.r.Renew(ctx, "alice", a.Lease.ID, time.Minute); fencegate.ErrorCode(err) != fencegate.CodeStateLost {
			t.Fatalf("renewal during the pause: %v, want COORDINATION_STATE_LOST", err)
		}
	}
	if n := b.reads.Load() - before; n != 0 {
		t.Fatalf("5 refused renewals read the backend's incarnation %d times: they re-ran the recovery", n)
	}
	if is := e.r.Issuance(); !is.Paused || is.Losses != 1 || e.retired.Load() != retired {
		t.Fatalf("refused renewals changed the pause: %+v, %d retirements (was %d)", is, e.retired.Load(), retired)
	}
	e.clock.Advance(pause)
	if err := e.r.SetFloor(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if is := e.r.Issuance(); is.Paused || is.Losses != 1 {
		t.Fatalf("the floor should end the pause: %+v", is)
	}
	if d := e.mustAcquire("dave", "db/c", "d1"); d.Lease.FenceToken <= 10 {
		t.Fatalf("after the floor: fence %d, want above 10", d.Lease.FenceToken)
	}
}

// The rule: a refusal of the marker this registry issued under, taken for a
// loss only after the registry's own claim has ended (the claim ran between
// the refusal and its handling), is that claim's, not a second loss: no new
// pause, retirement or claim; the request runs once more under the claim's
// marker.
func TestRefusalHandledAfterTheRegistrysOwnClaimIsNotASecondLoss(t *testing.T) {
	b := newSwappable(t)
	e := newLossEnv(t, b, nil, &memory{}) // no fence store: an operator sets the floor
	a := e.mustAcquire("alice", "db/a", "a1")
	b.wipe()
	ctx := context.Background()
	if err := e.r.Watch(ctx); fencegate.ErrorCode(err) != fencegate.CodeStateLost {
		t.Fatalf("wipe not detected: %v", err)
	}
	e.clock.Advance(pause) // the floor will end the pause at once
	var once sync.Once
	defer registry.SetTestHookBeforeLost(func() {
		once.Do(func() {
			if err := e.r.SetFloor(ctx, 10); err != nil { // the claim lands in the window
				t.Errorf("floor: %v", err)
			}
		})
	})()
	if _, err := e.r.Renew(ctx, "alice", a.Lease.ID, time.Minute); fencegate.ErrorCode(err) != fencegate.CodeNotFound { // the lease is gone with the wipe
		t.Fatalf("the renewal refused under the pre-claim marker should run again under the claim's and find no lease: %v", err)
	}
	if is := e.r.Issuance(); is.Paused || is.Losses != 1 || e.retired.Load() != 1 {
		t.Fatalf("the refusal was taken for a second loss: %+v, %d retirements", is, e.retired.Load())
	}
	if d := e.mustAcquire("dave", "db/d", "d1"); d.Lease.FenceToken <= 10 {
		t.Fatalf("after the floor: fence %d, want above 10", d.Lease.FenceToken)
	}
}

// The rule: a loss found by a guard while grants are still paused after this
// registry's claim is a new loss (counted, its own retirement and claim), and
// an operator's floor that finds it does not end the pause.
func TestFloorFindingASecondLossWhilePausedAfterTheClaimStartsTheRecoveryOver(t *testing.T) {
	b := newSwappable(t)
	e := newLossEnv(t, b, &highWater{}, &memory{})
	e.mustAcquire("bob", "db/b", "b0")
	b.wipe()
	e.wantPaused("dave", "db/c", "d1") // detects, retires, claims (a fence store is there)
	if is := e.r.Issuance(); !is.Paused || is.Losses != 1 || is.Incarnation == "" {
		t.Fatalf("setup: %+v", is)
	}
	b.wipe() // a second loss after the claim, during the pause
	e.clock.Advance(pause)
	if err := e.r.SetFloor(context.Background(), 40); err != nil {
		t.Fatal(err)
	}
	if is := e.r.Issuance(); !is.Paused || is.Losses != 2 {
		t.Fatalf("the floor's guard found a second loss, yet: %+v", is)
	}
	if inc, _ := b.Incarnation(context.Background()); inc.HighestFence >= 40 {
		t.Fatalf("the refused floor was written: the backend's highest fence is %d", inc.HighestFence)
	}
	e.wantPaused("dave", "db/c", "d1") // retires the claimed epoch
	if e.retired.Load() != 2 {
		t.Fatalf("the second loss must retire its epoch too: %d retirements", e.retired.Load())
	}
	e.clock.Advance(pause)
	if d := e.mustAcquire("dave", "db/c", "d1"); d.Lease.FenceToken <= 40 {
		t.Fatalf("after the second recovery: fence %d, want above the floor 40", d.Lease.FenceToken)
	}
}

// The rule: every mutation carries the guard, so renewals or releases on a
// backend restored from a snapshot cannot raise its revision back to the one
// the registry saw and hide the rollback from the next acquire, which would
// then hand out the lost acquisition's fence a second time (here: C's fence
// on db/c, below the global highest, so only the revision shows the loss).
func TestRollbackMaskedByRenewalsOrReleasesIsDetectedAtTheFirstOne(t *testing.T) {
	for _, via := range []string{"renew", "release"} {
		t.Run(via, func(t *testing.T) {
			b := newSwappable(t)
			e := newLossEnv(t, b, &highWater{}, &memory{})
			e.mustAcquire("bob", "db/b", "b0")
			e.mustAcquire("bob", "db/b2", "b1") // the global highest fence stays above db/c's
			a := e.mustAcquire("alice", "db/a", "a1")
			snap := b.snapshot()
			c := e.mustAcquire("carol", "db/c", "c1") // lost with the restore
			b.restore(snap)

			var err error
			if via == "renew" {
				_, err = e.r.Renew(context.Background(), "alice", a.Lease.ID, time.Minute)
			} else {
				_, err = e.r.Release(context.Background(), "alice", a.Lease.ID)
			}
			if fencegate.ErrorCode(err) != fencegate.CodeStateLost {
				t.Fatalf("%s on the restored backend: want COORDINATION_STATE_LOST, got %v", via, err)
			}
			if is := e.r.Issuance(); !is.Paused || e.retired.Load() != 1 {
				t.Fatalf("the rollback was not taken for a loss: %+v, %d retirements", is, e.retired.Load())
			}
			if l, err := b.Lease(context.Background(), a.Lease.ID, e.clock.Now()); err != nil ||
				l.State != fencegate.StateHeld || !l.ExpiresAt.Equal(a.Lease.ExpiresAt) {
				t.Fatalf("the refused %s changed A's lease: %+v -> %+v, %v", via, a.Lease, l, err)
			}
			e.wantPaused("dave", "db/c", "d1")
			e.clock.Advance(pause)
			d := e.mustAcquire("dave", "db/c", "d1")
			if d.Lease.FenceToken <= c.Lease.FenceToken {
				t.Fatalf("db/c's fence %d was handed out again (lost acquisition's: %d)", d.Lease.FenceToken, c.Lease.FenceToken)
			}
		})
	}
}

// The rule: an operator's floor carries the guard too, so a floor set on a
// restored backend before anything else found the loss starts the recovery
// (grants resume above the floor and every known fence, after the epoch is
// retired) instead of moving the restored revision.
func TestFloorOnARestoredBackendIsALossAndTheFloorIsKept(t *testing.T) {
	b := newSwappable(t)
	e := newLossEnv(t, b, &highWater{}, &memory{})
	e.mustAcquire("bob", "db/b", "b0")
	snap := b.snapshot()
	c := e.mustAcquire("carol", "db/c", "c1")
	b.restore(snap)
	if err := e.r.SetFloor(context.Background(), 40); err != nil {
		t.Fatalf("floor on the restored backend: %v", err)
	}
	if is := e.r.Issuance(); !is.Paused {
		t.Fatalf("a floor on a restored backend must find the loss: %+v", is)
	}
	if inc, _ := b.Incarnation(context.Background()); inc.HighestFence >= 40 {
		t.Fatalf("the refused floor was written on the restored backend before the recovery: %+v", inc)
	}
	e.wantPaused("dave", "db/c", "d1") // retires the epoch
	if e.retired.Load() != 1 {
		t.Fatalf("the pre-loss epoch was not retired: %d", e.retired.Load())
	}
	e.clock.Advance(pause)
	d := e.mustAcquire("dave", "db/c", "d1")
	if d.Lease.FenceToken <= 40 || d.Lease.FenceToken <= c.Lease.FenceToken {
		t.Fatalf("after the recovery: fence %d, want above the floor 40 and the lost %d", d.Lease.FenceToken, c.Lease.FenceToken)
	}
}

// The rule: an acquisition's grant is returned only once the registry's
// memory covers it, so a registry restarted on a backend restored from
// before it (nothing saved it since, no watch tick, no shutdown) finds the
// revision behind what it saw and does not hand the lost fence out again.
func TestRestartOnABackendRestoredFromBeforeTheLastAcquisitionIsALoss(t *testing.T) {
	b, mem := newSwappable(t), &memory{}
	e := newLossEnv(t, b, &highWater{}, mem)
	e.mustAcquire("bob", "db/b", "b0")
	snap := b.snapshot()
	c := e.mustAcquire("carol", "db/c", "c1") // lost with the restore; the global highest fence stays 1
	b.restore(snap)
	again := newLossEnv(t, b, &highWater{}, mem) // the registry restarts on the restored backend
	if is := again.r.Issuance(); !is.Paused {
		t.Fatalf("restart on a backend restored from before the last acquisition: %+v", is)
	}
	again.clock.Advance(pause)
	d := again.mustAcquire("dave", "db/c", "d1")
	if d.Lease.FenceToken <= c.Lease.FenceToken {
		t.Fatalf("db/c's fence %d was handed out again (the lost acquisition's: %d)", d.Lease.FenceToken, c.Lease.FenceToken)
	}
}

// failingMemory is a Memory whose saves fail while fail is set.
type failingMemory struct {
	memory
	fail atomic.Bool
}

func (m *failingMemory) Save(inc registry.Remembered) error {
	if m.fail.Load() {
		return fmt.Errorf("disk full")
	}
	return m.memory.Save(inc)
}

// The rule: an acquisition whose memory save fails returns no grant (an
// error), and asking again with the same request ID, once saves work,
// returns the same lease and fence.
func TestAcquisitionIsNotAnsweredUntilTheMemoryCoversIt(t *testing.T) {
	mem := &failingMemory{}
	e := newLossEnv(t, newSwappable(t), &highWater{}, mem)
	mem.fail.Store(true)
	if _, err := e.acquire("carol", "db/c", "c1"); fencegate.ErrorCode(err) != fencegate.CodeInternal {
		t.Fatalf("acquire with a failing memory: want INTERNAL, got %v", err)
	}
	mem.fail.Store(false)
	first := e.mustAcquire("carol", "db/c", "c1")
	if first.Lease.FenceToken != 1 {
		t.Fatalf("asking again: fence %d, want the first acquisition's 1", first.Lease.FenceToken)
	}
	if got, _ := mem.Load(); got.Revision < first.Lease.Revision {
		t.Fatalf("the memory (revision %d) does not cover the answered acquisition (revision %d)", got.Revision, first.Lease.Revision)
	}
}

// The rule: a mutation before Check (a library caller's order) runs Check
// first, so it neither goes unguarded (moving a restored backend's revision
// back and hiding the restore) nor overwrites an earlier process's memory:
// here the acquisition finds the loss and is refused.
func TestAcquisitionBeforeCheckRunsTheCheckFirst(t *testing.T) {
	b, mem := newSwappable(t), &memory{}
	e := newLossEnv(t, b, nil, mem)
	e.mustAcquire("bob", "db/b", "b0")
	snap := b.snapshot()
	e.mustAcquire("carol", "db/c", "c1")
	saved, _ := mem.Load()
	b.restore(snap)
	restored, _ := b.Incarnation(context.Background())
	r := newLossEnv(t, b, nil, mem, unchecked()).r // a second process, Check not run
	if _, err := r.Acquire(context.Background(), "erin", params("db/c", "e1")); fencegate.ErrorCode(err) != fencegate.CodeStateLost {
		t.Fatalf("an acquisition before Check on a restored backend: want COORDINATION_STATE_LOST, got %v", err)
	}
	if is := r.Issuance(); !is.Paused || is.Losses != 1 {
		t.Fatalf("the loss was not found: %+v", is)
	}
	if got, _ := mem.Load(); got != saved {
		t.Errorf("the memory was overwritten: %+v, was %+v", got, saved)
	}
	if inc, _ := b.Incarnation(context.Background()); inc != restored {
		t.Errorf("the refused acquisition changed the backend: %+v, was %+v", inc, restored)
	}
}
