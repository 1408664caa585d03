package registry_test

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry"
)

func TestFirstStartClaimsAnEmptyBackendWithoutAPause(t *testing.T) {
	e := newLossEnv(t, newSwappable(t), &highWater{}, &memory{})
	is := e.r.Issuance()
	if is.Paused || is.Incarnation == "" || is.Losses != 0 {
		t.Fatalf("first start: %+v", is)
	}
	if l := e.mustAcquire("alice", "db/a", "r1"); l.Lease.FenceToken != 1 {
		t.Fatalf("first fence %d", l.Lease.FenceToken)
	}
	if e.retired.Load() != 0 {
		t.Fatal("a first start retired an epoch")
	}
}

func TestEmptiedBackendPausesGrantsRetiresTheEpochAndResumesAboveEveryKnownFence(t *testing.T) {
	hw := &highWater{}
	e := newLossEnv(t, newSwappable(t), hw, &memory{})
	first := e.mustAcquire("alice", "db/a", "r1")
	if _, err := e.r.Release(context.Background(), "alice", first.Lease.ID); err != nil {
		t.Fatal(err)
	}
	hw.v.Store(first.Lease.FenceToken)        // a gateway accepted fence 1
	a := e.mustAcquire("alice", "db/a", "r2") // A holds fence 2 and has not written
	e.backend.wipe()                          // Redis restarted without persistence

	e.wantPaused("bob", "db/a", "b1")
	if e.retired.Load() != 1 || !e.auth.revoked(3) {
		t.Fatalf("the pre-loss epoch was not retired: %d calls, epoch 3 revoked %v", e.retired.Load(), e.auth.revoked(3))
	}
	if _, err := e.r.Status(context.Background(), a.Lease.ID); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("A's lease is gone with the backend: %v", err)
	}
	e.clock.Advance(pause - time.Millisecond)
	e.wantPaused("bob", "db/a", "b1") // A's status proof may still be fresh
	e.clock.Advance(time.Millisecond)
	b := e.mustAcquire("bob", "db/a", "b1")
	if b.Lease.FenceToken <= a.Lease.FenceToken {
		t.Fatalf("B's fence %d not above A's %d", b.Lease.FenceToken, a.Lease.FenceToken)
	}
	if e.retired.Load() != 1 || e.r.IssuerEpoch() != 4 {
		t.Fatalf("one retirement per loss: %d, epoch %d", e.retired.Load(), e.r.IssuerEpoch())
	}
	if is := e.r.Issuance(); is.Paused || is.Losses != 1 {
		t.Fatalf("after resuming: %+v", is)
	}
}

func TestRolledBackBackendIsDetectedAndItsLeasesReadRevoked(t *testing.T) {
	b := newSwappable(t)
	e := newLossEnv(t, b, &highWater{}, &memory{})
	a := e.mustAcquire("alice", "db/a", "r1")
	snap := b.snapshot()
	if _, err := e.r.Release(context.Background(), "alice", a.Lease.ID); err != nil {
		t.Fatal(err)
	}
	c := e.mustAcquire("carol", "db/a", "c1")
	b.restore(snap) // A's lease is HELD again, C's is gone, the revision went back

	e.wantPaused("dave", "db/b", "d1")
	if got := e.proofState(a.Lease.ID); got != fencegate.StateRevoked {
		t.Fatalf("a restored lease must read REVOKED while paused: %s", got)
	}
	d := e.resumeAbove(c.Lease.FenceToken, "dave", "db/b", "d1", a.Lease.ID)
	if got := e.proofState(d.Lease.ID); got != fencegate.StateHeld {
		t.Fatalf("the new lease reads %s", got)
	}
}

// The rule: a backup taken before an earlier claim carries that claim's
// older marker. Restored, it is a loss like any other and is claimed anew
// (its marker's generation is below the one this registry issues under)
// instead of joined as another registry's claim, so the leases restored with
// it read REVOKED after grants resume, and fences continue above every one
// known.
func TestRestoreToAnOlderMarkerIsClaimedAnewAndItsLeasesReadRevoked(t *testing.T) {
	b, hw := newSwappable(t), &highWater{}
	e := newLossEnv(t, b, hw, &memory{})
	a := e.mustAcquire("alice", "db/a", "a1") // under the first marker
	backup := b.snapshot()
	first := e.r.Issuance().Incarnation
	b.wipe()
	e.wantPaused("bob", "db/b", "b1") // detects, claims a second marker
	e.clock.Advance(pause)
	c := e.mustAcquire("carol", "db/c", "c1")
	hw.v.Store(c.Lease.FenceToken) // a gateway accepted C's fence
	second := e.r.Issuance().Incarnation

	b.restore(backup) // the first marker again, A's lease HELD in it
	e.wantPaused("dave", "db/d", "d1")
	is := e.r.Issuance()
	if is.Incarnation == first || is.Incarnation == second || is.Losses != 2 {
		t.Fatalf("the restored older marker must be a second loss, claimed anew: %+v (first %q, second %q)", is, first, second)
	}
	if inc, _ := b.Incarnation(context.Background()); inc.ID != is.Incarnation {
		t.Fatalf("the backend carries %q, the registry issues under %q", inc.ID, is.Incarnation)
	}
	e.resumeAbove(c.Lease.FenceToken, "dave", "db/d", "d1", a.Lease.ID)
	if e.retired.Load() != 2 {
		t.Fatalf("each loss retires its epoch: %d retirements", e.retired.Load())
	}
}

func TestRollbackAcrossARestartIsDetectedFromMemory(t *testing.T) {
	b := newSwappable(t)
	mem := &memory{}
	e := newLossEnv(t, b, nil, mem)
	snap := b.snapshot()
	last := e.mustAcquire("alice", "db/a", "r1")
	if err := e.r.Remember(); err != nil {
		t.Fatal(err)
	}
	b.restore(snap)
	again := newLossEnv(t, b, nil, mem) // the registry restarts on the restored backend
	if is := again.r.Issuance(); !is.Paused || !is.NeedsFloor {
		t.Fatalf("restart on a rolled-back backend without a fence store: %+v", is)
	}
	again.clock.Advance(pause)
	again.wantPaused("bob", "db/a", "b1") // still: nobody said how high the gateways went
	if err := again.r.SetFloor(context.Background(), math.MaxUint64); fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
		t.Fatalf("floor 2^64-1: want INVALID_REQUEST, got %v", err)
	}
	if err := again.r.SetFloor(context.Background(), 40); err != nil {
		t.Fatal(err)
	}
	l := again.mustAcquire("bob", "db/a", "b1")
	if l.Lease.FenceToken != 41 || l.Lease.FenceToken <= last.Lease.FenceToken {
		t.Fatalf("after the operator floor 40: fence %d", l.Lease.FenceToken)
	}
}

func TestBackendSwitchResumesAboveTheFenceStoresHighWater(t *testing.T) {
	mem, hw := &memory{}, &highWater{}
	old := newLossEnv(t, newSwappable(t), hw, mem)
	for i := range 3 {
		l := old.mustAcquire("alice", "db/a", fmt.Sprint(i))
		if _, err := old.r.Release(context.Background(), "alice", l.Lease.ID); err != nil {
			t.Fatal(err)
		}
	}
	hw.v.Store(3)
	if err := old.r.Remember(); err != nil {
		t.Fatal(err)
	}
	e := newLossEnv(t, newSwappable(t), hw, mem) // same data directory, a new (empty) backend
	if !e.r.Issuance().Paused {
		t.Fatalf("a switch to an empty backend must pause: %+v", e.r.Issuance())
	}
	e.clock.Advance(pause)
	if l := e.mustAcquire("bob", "db/a", "b1"); l.Lease.FenceToken <= 3 {
		t.Fatalf("fence %d after the switch, not above the accepted 3", l.Lease.FenceToken)
	}
}

func TestFenceStoreAboveTheBackendIsALoss(t *testing.T) {
	hw := &highWater{}
	b := newSwappable(t)
	newLossEnv(t, b, hw, nil)
	hw.v.Store(9) // a gateway accepted fence 9 this backend never issued
	e := newLossEnv(t, b, hw, nil)
	if !e.r.Issuance().Paused {
		t.Fatalf("gateways above the backend must pause: %+v", e.r.Issuance())
	}
	e.clock.Advance(pause)
	if l := e.mustAcquire("bob", "db/a", "b1"); l.Lease.FenceToken <= 9 {
		t.Fatalf("fence %d not above 9", l.Lease.FenceToken)
	}
}

func TestFailedRetirementKeepsGrantsPaused(t *testing.T) {
	e := newLossEnv(t, newSwappable(t), &highWater{}, nil)
	e.mustAcquire("alice", "db/a", "r1")
	e.failOn.Store(true)
	e.backend.wipe()
	e.wantPaused("bob", "db/a", "b1")
	e.clock.Advance(pause)
	e.wantPaused("bob", "db/a", "b1")
	e.failOn.Store(false)
	e.mustAcquire("bob", "db/a", "b1")
	if e.retired.Load() != 1 || !e.auth.revoked(3) {
		t.Fatalf("retired %d times", e.retired.Load())
	}
}

// The epoch a loss retires is the one signing when the loss was found, on
// every try: an operator's rotation between a failed try and the next does
// not move the retirement onto the new epoch, which would leave the
// pre-loss epoch trusted.
func TestARetriedRetirementRetiresTheEpochSigningAtTheLoss(t *testing.T) {
	e := newLossEnv(t, newSwappable(t), &highWater{}, nil)
	e.mustAcquire("alice", "db/a", "r1")
	e.failOn.Store(true)
	e.backend.wipe()
	e.wantPaused("bob", "db/a", "b1")
	e.auth.rotate() // epoch 4 signs; 3 signed before the loss
	e.failOn.Store(false)
	e.clock.Advance(pause)
	e.mustAcquire("bob", "db/a", "b1")
	if !e.auth.revoked(3) || e.auth.revoked(4) {
		t.Fatalf("after the retried retirement: 3 revoked %v, 4 revoked %v; want the pre-loss 3 only", e.auth.revoked(3), e.auth.revoked(4))
	}
}

// A lease from before a loss reads REVOKED and is not renewed: its owner
// cannot keep the resource by renewing, and the refusal changes nothing.
func TestALeaseFromBeforeALossIsNotRenewed(t *testing.T) {
	b := newSwappable(t)
	e := newLossEnv(t, b, &highWater{}, &memory{})
	a := e.mustAcquire("alice", "db/a", "a1")
	snap := b.snapshot()
	e.mustAcquire("carol", "db/c", "c1")
	b.restore(snap)
	e.wantPaused("bob", "db/b", "b0")
	e.clock.Advance(pause)
	e.mustAcquire("bob", "db/b", "b0")
	before, err := b.Lease(context.Background(), a.Lease.ID, e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.r.Renew(context.Background(), "alice", a.Lease.ID, time.Minute)
	if fencegate.ErrorCode(err) != fencegate.CodeLeaseNotHeld {
		t.Fatalf("renewal of a lease from before the loss: %v; want LEASE_NOT_HELD", err)
	}
	if after, _ := b.Lease(context.Background(), a.Lease.ID, e.clock.Now()); after != before {
		t.Fatalf("a refused renewal changed the lease: %+v -> %+v", before, after)
	}
	e.clock.Advance(a.Lease.ExpiresAt.Sub(e.clock.Now()))
	if l := e.mustAcquire("bob", "db/a", "b1"); l.Lease.FenceToken <= a.Lease.FenceToken {
		t.Fatalf("fence %d not above the revoked lease's %d", l.Lease.FenceToken, a.Lease.FenceToken)
	}
}

func TestRegistriesSharingABackendJoinOneClaimInsteadOfTakingTurns(t *testing.T) {
	b, hw := newSwappable(t), &highWater{}
	one := newLossEnv(t, b, hw, &memory{})
	two := newLossEnv(t, b, hw, &memory{})
	if one.r.Issuance().Incarnation != two.r.Issuance().Incarnation || two.r.Issuance().Paused {
		t.Fatalf("the second registry must adopt the first's claim: %+v vs %+v", one.r.Issuance(), two.r.Issuance())
	}
	high := two.mustAcquire("bob", "db/b", "b1") // fence 1 of db/b, issued by two
	one.mustAcquire("alice", "db/a", "a1")
	b.wipe()
	one.wantPaused("alice", "db/a", "a2") // one detects and claims a new marker
	two.wantPaused("bob", "db/c", "c1")   // two finds another marker: it joins
	claimed := one.r.Issuance().Incarnation
	if two.r.Issuance().Incarnation != claimed {
		t.Fatalf("two did not join one's claim: %q vs %q", two.r.Issuance().Incarnation, claimed)
	}
	one.clock.Advance(pause)
	two.clock.Advance(pause)
	for _, e := range []*lossEnv{one, two, one} {
		l := e.mustAcquire("carol", "db/b", fmt.Sprintf("c-%p-%d", e, e.retired.Load()))
		if l.Lease.FenceToken <= high.Lease.FenceToken {
			t.Fatalf("fence %d not above %d", l.Lease.FenceToken, high.Lease.FenceToken)
		}
		if _, err := e.r.Release(context.Background(), "carol", l.Lease.ID); err != nil {
			t.Fatal(err)
		}
	}
	if one.r.Issuance().Losses != 1 || two.r.Issuance().Losses != 1 || one.r.Issuance().Incarnation != claimed {
		t.Fatalf("one loss each, one claim: %+v %+v", one.r.Issuance(), two.r.Issuance())
	}
}

func TestWatchFindsALossWithoutAnAcquire(t *testing.T) {
	e := newLossEnv(t, newSwappable(t), &highWater{}, nil)
	a := e.mustAcquire("alice", "db/a", "r1")
	if err := e.r.Watch(context.Background()); err != nil || e.r.Issuance().Paused {
		t.Fatalf("watch without a loss: %v %+v", err, e.r.Issuance())
	}
	e.backend.wipe()
	if err := e.r.Watch(context.Background()); fencegate.ErrorCode(err) != fencegate.CodeStateLost {
		t.Fatalf("watch after the loss: want COORDINATION_STATE_LOST, got %v", err)
	}
	if !e.r.Issuance().Paused || e.retired.Load() != 1 {
		t.Fatalf("the loss was not acted on: %+v, %d retirements", e.r.Issuance(), e.retired.Load())
	}
	e.clock.Advance(pause)
	if l := e.mustAcquire("bob", "db/a", "b1"); l.Lease.FenceToken <= a.Lease.FenceToken {
		t.Fatalf("fence %d not above %d", l.Lease.FenceToken, a.Lease.FenceToken)
	}
}

// overtaken reads the backend's incarnation, then lets an acquire (and a
// gateway's acceptance of its fence) land before the read is answered, as a
// periodic check racing live traffic does.
type overtaken struct {
	*swappable
	during func()
}

func (o *overtaken) Incarnation(ctx context.Context) (fencegate.Incarnation, error) {
	inc, err := o.swappable.Incarnation(ctx)
	if f := o.during; f != nil {
		o.during = nil
		f()
	}
	return inc, err
}

func TestCheckOvertakenByLiveTrafficIsNotALoss(t *testing.T) {
	b := &overtaken{swappable: newSwappable(t)}
	hw := &highWater{}
	e := newLossEnv(t, b.swappable, hw, &memory{}, through(b)) // the periodic check goes through the wrapper
	r := e.r
	e.mustAcquire("alice", "db/a", "r1")
	b.during = func() {
		l := e.mustAcquire("bob", "db/b", "r2")
		hw.v.Store(l.Lease.FenceToken)
	}
	if err := r.Check(context.Background()); err != nil {
		t.Fatalf("check overtaken by an acquire: %v", err)
	}
	if is := r.Issuance(); is.Paused || is.Losses != 0 || e.retired.Load() != 0 {
		t.Fatalf("live traffic during a check was taken for a loss: %+v, retired %d", is, e.retired.Load())
	}
	e.mustAcquire("carol", "db/c", "r3")
}

// acquiringHighWater is a fence store whose high-water read, when armed,
// lets an acquire commit before it answers: a slow Postgres (restarting,
// say) behind a registry that keeps issuing.
type acquiringHighWater struct {
	armed  atomic.Bool
	during func()
}

func (h *acquiringHighWater) HighestFence(context.Context) (uint64, error) {
	if h.armed.CompareAndSwap(true, false) {
		h.during()
	}
	return 0, nil
}

// TestAnAcquireDuringTheHighWaterReadIsNotALoss: an acquire that commits
// while Check waits for the fence store's high-water mark is the registry's
// own progress, not a rollback: no loss, no pause, no retired epoch. (What
// e2e/chaos saw after each Postgres restart: "the backend's revision went
// back from 89 to 88".)
func TestAnAcquireDuringTheHighWaterReadIsNotALoss(t *testing.T) {
	hw := &acquiringHighWater{}
	e := newLossEnv(t, newSwappable(t), hw, &memory{})
	e.mustAcquire("alice", "db/a", "r1")
	hw.during = func() { e.mustAcquire("bob", "db/b", "r2") }
	hw.armed.Store(true)
	if err := e.r.Check(context.Background()); err != nil {
		t.Fatalf("check with an acquire during the high-water read: %v", err)
	}
	if is := e.r.Issuance(); is.Paused || is.Losses != 0 || e.retired.Load() != 0 {
		t.Fatalf("an acquire during the check was taken for a loss: %+v, retired %d", is, e.retired.Load())
	}
	e.mustAcquire("carol", "db/c", "r3")
}

// A check overtaken by an acquire must not forget what that acquire showed:
// if the backend then goes back to the copy the check read (a failover to a
// replica without the acquire), that is a rollback, detected before the
// acquire's fence can be handed out again.
func TestCheckOvertakenByAnAcquireStillDetectsItsRollback(t *testing.T) {
	b := &overtaken{swappable: newSwappable(t)}
	hw := &highWater{}
	e := newLossEnv(t, b.swappable, hw, &memory{}, through(b))
	r := e.r
	a := e.mustAcquire("alice", "db/a", "r1")
	if _, err := r.Release(context.Background(), "alice", a.Lease.ID); err != nil {
		t.Fatal(err)
	}
	var before string
	var bob registry.Issued
	b.during = func() {
		before = b.snapshot() // the copy the check just read
		bob = e.mustAcquire("bob", "db/a", "r2")
	}
	if err := r.Watch(context.Background()); err != nil {
		t.Fatalf("watch overtaken by an acquire: %v", err)
	}
	if hwm := r.Issuance().HighWater; hwm < bob.Lease.FenceToken {
		t.Fatalf("the registry forgot fence %d it issued during the check (high water %d)", bob.Lease.FenceToken, hwm)
	}
	b.restore(before)
	if err := r.Watch(context.Background()); fencegate.ErrorCode(err) != fencegate.CodeStateLost {
		t.Fatalf("a backend rolled back behind an acquire: want COORDINATION_STATE_LOST, got %v", err)
	}
	if _, err := r.Acquire(context.Background(), "carol", params("db/a", "c1")); fencegate.ErrorCode(err) != fencegate.CodeStateLost {
		t.Fatalf("acquire after the rollback: want COORDINATION_STATE_LOST, got %v", err)
	}
}

// stallAcquire holds each Acquire for d of the registry's clock before it
// reaches the backend, as a slow network or a busy backend does.
type stallAcquire struct {
	*swappable
	clock *clock
	d     atomic.Int64
}

func (s *stallAcquire) Acquire(ctx context.Context, req fencegate.AcquireRequest) (fencegate.Lease, error) {
	if d := time.Duration(s.d.Load()); d > 0 {
		s.clock.Advance(d)
	}
	return s.swappable.Acquire(ctx, req)
}

// The rule: grants stay paused for one status proof life and the clock
// skew a gateway tolerates from when the loss was found, also when the
// request that found it stalled before reaching the backend: a HELD proof
// signed before the loss may have been signed up to the moment of the
// detection, not only up to the stalled request's start.
func TestPauseRunsFromTheDetectionNotFromTheStalledRequest(t *testing.T) {
	sw := newSwappable(t)
	b := &stallAcquire{swappable: sw}
	e := newLossEnv(t, sw, &highWater{}, &memory{}, through(b))
	b.clock = e.clock
	e.mustAcquire("alice", "db/a", "r1")
	sw.wipe()
	start := e.clock.Now()
	b.d.Store(int64(3 * time.Second))
	if _, err := e.acquire("bob", "db/a", "b1"); fencegate.ErrorCode(err) != fencegate.CodeStateLost {
		t.Fatalf("the stalled acquire after the wipe: %v, want COORDINATION_STATE_LOST", err)
	}
	b.d.Store(0)
	detected := start.Add(3 * time.Second)
	if is := e.r.Issuance(); !is.DetectedAt.Equal(detected) || !is.ResumeAt.Equal(detected.Add(pause)) {
		t.Fatalf("detected at %v, resuming at %v; want %v and %v", is.DetectedAt, is.ResumeAt, detected, detected.Add(pause))
	}
	e.clock.Advance(pause - time.Millisecond)
	e.wantPaused("bob", "db/a", "b1")
	e.clock.Advance(time.Millisecond)
	e.mustAcquire("bob", "db/a", "b1")
}

// TestARestartDuringThePauseWaitsItOut: a registry restarted during the
// pause after a loss it found, claimed and retired (a crash, a deploy)
// keeps grants paused until the pause ends, since a HELD proof signed
// before the loss may still be fresh; its memory carries when grants
// resume. It used to find its memory and the backend agreeing and grant at
// once. Once the pause is over, a restart grants at once.
func TestARestartDuringThePauseWaitsItOut(t *testing.T) {
	hw, mem, b := &highWater{}, &memory{}, newSwappable(t)
	e := newLossEnv(t, b, hw, mem)
	a := e.mustAcquire("alice", "db/a", "r1")
	hw.v.Store(a.Lease.FenceToken)
	b.wipe()
	e.wantPaused("bob", "db/a", "b1") // found, retired, claimed above fence 1
	resume := e.r.Issuance().ResumeAt
	if resume == nil {
		t.Fatalf("paused without a resume time: %+v", e.r.Issuance())
	}
	again := newLossEnv(t, b, hw, mem) // restarted on the same backend and memory
	again.clock.Advance(time.Second)
	again.wantPaused("bob", "db/a", "b1")
	if is := again.r.Issuance(); is.ResumeAt == nil || !is.ResumeAt.Equal(*resume) {
		t.Fatalf("after the restart: %+v, want grants to resume at %s", is, resume)
	}
	again.clock.Advance(pause)
	if l := again.mustAcquire("bob", "db/a", "b1"); l.Lease.FenceToken <= a.Lease.FenceToken {
		t.Fatalf("after the pause: fence %d, not above %d", l.Lease.FenceToken, a.Lease.FenceToken)
	}
	third := newLossEnv(t, b, hw, mem)
	third.clock.Advance(pause + time.Second)
	third.mustAcquire("carol", "db/b", "c1")
}
