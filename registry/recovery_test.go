package registry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry"
	"github.com/fencegate/fencegate/registry/embedded"
)

// swappable is a lease backend whose state can be lost (replaced by an empty
// one) or rolled back (replaced by a copy taken earlier), as a Redis restart
// or a snapshot restore does behind a running registry.
type swappable struct {
	fencegate.LeaseBackend
	t   *testing.T
	dir string
	db  *bbolt.DB
	n   int
}

func newSwappable(t *testing.T) *swappable {
	s := &swappable{t: t, dir: t.TempDir()}
	s.open(filepath.Join(s.dir, "0.db"))
	return s
}

func (s *swappable) open(path string) {
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	b, err := embedded.New(db)
	if err != nil {
		s.t.Fatal(err)
	}
	s.db, s.LeaseBackend = db, b
	s.t.Cleanup(func() { _ = db.Close() })
}

// snapshot copies the current state aside and returns its path.
func (s *swappable) snapshot() string {
	s.n++
	path := filepath.Join(s.dir, fmt.Sprintf("snap-%d.db", s.n))
	if err := s.db.View(func(tx *bbolt.Tx) error { return tx.CopyFile(path, 0o600) }); err != nil {
		s.t.Fatal(err)
	}
	return path
}

func (s *swappable) wipe() { s.n++; s.open(filepath.Join(s.dir, fmt.Sprintf("%d.db", s.n))) }

func (s *swappable) restore(path string) { s.open(path) }

// memory is a registry.Memory in a variable.
type memory struct {
	mu  sync.Mutex
	inc fencegate.Incarnation
}

func (m *memory) Load() (fencegate.Incarnation, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inc, nil
}
func (m *memory) Save(i fencegate.Incarnation) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inc = i
	return nil
}

// highWater is the fence store's report.
type highWater struct{ v atomic.Uint64 }

func (h *highWater) HighestFence(context.Context) (uint64, error) { return h.v.Load(), nil }

// testAuthority is a registry.Authority whose retire moves to the next
// epoch and revokes the old one, as package authority's RetireEpoch does.
type testAuthority struct {
	mu sync.Mutex
	is registry.Issuing
}

func (a *testAuthority) Issuing() registry.Issuing { a.mu.Lock(); defer a.mu.Unlock(); return a.is }

func (a *testAuthority) retire() {
	a.mu.Lock()
	defer a.mu.Unlock()
	revoked := maps.Clone(a.is.Revoked)
	revoked[a.is.Epoch] = true
	a.is.Epoch, a.is.Revoked = a.is.Epoch+1, revoked
}

func (a *testAuthority) revoked(e uint64) bool { return a.Issuing().Revoked[e] }

type lossEnv struct {
	t       *testing.T
	r       *registry.Registry
	auth    *testAuthority
	clock   *clock
	backend *swappable
	retired atomic.Int32
	failOn  atomic.Bool
}

const statusLife = 5 * time.Second

// newLossEnv builds a registry over b with the given fence store (nil for
// none) and memory, whose loss hook rotates to the next epoch and revokes
// the old one, as the app's does; Check has run.
func newLossEnv(t *testing.T, b *swappable, hw fencegate.HighWater, mem registry.Memory) *lossEnv {
	t.Helper()
	e := &lossEnv{t: t, clock: &clock{now: t0}, backend: b,
		auth: &testAuthority{is: registry.Issuing{Signer: jsonSigner{}, Epoch: 3, PolicyGeneration: 7, Revoked: map[uint64]bool{}}}}
	n := 0
	cfg := registry.Config{
		Backend: b, Authority: e.auth, Now: e.clock.Now, StatusLife: statusLife,
		NewID:  func() string { n++; return fmt.Sprintf("lease-%p-%d", e, n) },
		Memory: mem,
		S3:     testDeriver(t),
		OnLoss: func(context.Context) error {
			if e.failOn.Load() {
				return fmt.Errorf("bundle write failed")
			}
			e.retired.Add(1)
			e.auth.retire()
			return nil
		},
	}
	if hw != nil {
		cfg.HighWater = hw
	}
	r, err := registry.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.r = r
	if err := r.Check(context.Background()); err != nil && fencegate.ErrorCode(err) != fencegate.CodeStateLost {
		t.Fatalf("check: %v", err)
	}
	return e
}

func (e *lossEnv) acquire(owner, resource, rid string) (registry.Issued, error) {
	return e.r.Acquire(context.Background(), owner, params(resource, rid))
}

func (e *lossEnv) mustAcquire(owner, resource, rid string) registry.Issued {
	e.t.Helper()
	is, err := e.acquire(owner, resource, rid)
	if err != nil {
		e.t.Fatalf("acquire %s by %s: %v", resource, owner, err)
	}
	return is
}

func (e *lossEnv) wantPaused(owner, resource, rid string) {
	e.t.Helper()
	_, err := e.acquire(owner, resource, rid)
	if fencegate.ErrorCode(err) != fencegate.CodeStateLost {
		e.t.Fatalf("acquire %s: want COORDINATION_STATE_LOST, got %v", resource, err)
	}
	if !e.r.Issuance().Paused {
		e.t.Fatalf("issuance not reported paused: %+v", e.r.Issuance())
	}
}

// proofState is the state a fresh status proof of the lease states.
func (e *lossEnv) proofState(lease string) fencegate.StatusState {
	e.t.Helper()
	is, err := e.r.Status(context.Background(), lease)
	if err != nil {
		e.t.Fatalf("status %s: %v", lease, err)
	}
	var st fencegate.Status
	if err := json.Unmarshal([]byte(is.StatusProof), &st); err != nil {
		e.t.Fatal(err)
	}
	return st.State
}

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
	e.clock.Advance(statusLife - time.Millisecond)
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
	e.clock.Advance(statusLife)
	d := e.mustAcquire("dave", "db/b", "d1")
	if d.Lease.FenceToken <= c.Lease.FenceToken {
		t.Fatalf("D's fence %d not above the lost C's %d", d.Lease.FenceToken, c.Lease.FenceToken)
	}
	if got := e.proofState(a.Lease.ID); got != fencegate.StateRevoked {
		t.Fatalf("a lease from before the claim must read REVOKED: %s", got)
	}
	if got := e.proofState(d.Lease.ID); got != fencegate.StateHeld {
		t.Fatalf("the new lease reads %s", got)
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
	again.clock.Advance(statusLife)
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
	e.clock.Advance(statusLife)
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
	e.clock.Advance(statusLife)
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
	e.clock.Advance(statusLife)
	e.wantPaused("bob", "db/a", "b1")
	e.failOn.Store(false)
	e.mustAcquire("bob", "db/a", "b1")
	if e.retired.Load() != 1 || !e.auth.revoked(3) {
		t.Fatalf("retired %d times", e.retired.Load())
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
	one.clock.Advance(statusLife)
	two.clock.Advance(statusLife)
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
	e.clock.Advance(statusLife)
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
	e := newLossEnv(t, b.swappable, hw, &memory{})
	// Rebuild over the wrapper so the periodic check goes through it.
	r, err := registry.New(registry.Config{Backend: b, Authority: e.auth, Now: e.clock.Now, StatusLife: statusLife,
		HighWater: hw, Memory: &memory{}, OnLoss: func(context.Context) error { e.retired.Add(1); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Check(context.Background()); err != nil {
		t.Fatalf("first check: %v", err)
	}
	e.r = r
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
	e := newLossEnv(t, b.swappable, hw, &memory{})
	r, err := registry.New(registry.Config{Backend: b, Authority: e.auth, Now: e.clock.Now, StatusLife: statusLife,
		HighWater: hw, Memory: &memory{}, OnLoss: func(context.Context) error { e.retired.Add(1); e.auth.retire(); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Check(context.Background()); err != nil {
		t.Fatalf("first check: %v", err)
	}
	e.r = r
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
			e.clock.Advance(statusLife)
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
	e.clock.Advance(statusLife)
	d := e.mustAcquire("dave", "db/c", "d1")
	if d.Lease.FenceToken <= 40 || d.Lease.FenceToken <= c.Lease.FenceToken {
		t.Fatalf("after the recovery: fence %d, want above the floor 40 and the lost %d", d.Lease.FenceToken, c.Lease.FenceToken)
	}
}
