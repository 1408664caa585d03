package registry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
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
	// reads counts Incarnation calls: the recovery's reads of the backend.
	reads atomic.Int64
	// claimLimit, when set, is the highest floor Claim takes (as Redis's
	// MaxFence narrows it): above it INVALID_REQUEST.
	claimLimit atomic.Uint64
}

func (s *swappable) Claim(ctx context.Context, prev, id string, floor uint64) (fencegate.Incarnation, error) {
	if l := s.claimLimit.Load(); l != 0 && floor > l {
		return fencegate.Incarnation{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "floor %d above this backend's limit %d", floor, l)
	}
	return s.LeaseBackend.Claim(ctx, prev, id, floor)
}

func (s *swappable) Incarnation(ctx context.Context) (fencegate.Incarnation, error) {
	s.reads.Add(1)
	return s.LeaseBackend.Incarnation(ctx)
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
	inc registry.Remembered
}

func (m *memory) Load() (registry.Remembered, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inc, nil
}
func (m *memory) Save(i registry.Remembered) error {
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

// retire revokes epoch, moving the signer on first if it signs for it.
func (a *testAuthority) retire(epoch uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	revoked := maps.Clone(a.is.Revoked)
	revoked[epoch] = true
	if epoch == a.is.Epoch {
		a.is.Epoch++
	}
	a.is.Revoked = revoked
}

// rotate moves the signer to the next epoch, revoking nothing.
func (a *testAuthority) rotate() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.is.Epoch++
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

// pause is how long grants stay paused after a loss is detected: one status
// proof life and the clock skew a gateway tolerates.
const pause = statusLife + fencegate.MaxClockSkew

// lossOpt changes how newLossEnv builds its registry.
type lossOpt func(*lossSetup)

type lossSetup struct {
	backend fencegate.LeaseBackend
	check   bool
}

// through makes the registry call its backend through w, a wrapper of the
// env's swappable that stalls or interleaves calls.
func through(w fencegate.LeaseBackend) lossOpt { return func(s *lossSetup) { s.backend = w } }

// unchecked leaves Check to the test (a library caller that mutates first).
func unchecked() lossOpt { return func(s *lossSetup) { s.check = false } }

// newLossEnv builds a registry over b with the given fence store (nil for
// none) and memory, whose loss hook rotates to the next epoch and revokes
// the old one, as the app's does; Check has run unless unchecked().
func newLossEnv(t *testing.T, b *swappable, hw fencegate.HighWater, mem registry.Memory, opts ...lossOpt) *lossEnv {
	t.Helper()
	setup := lossSetup{backend: b, check: true}
	for _, o := range opts {
		o(&setup)
	}
	e := &lossEnv{t: t, clock: &clock{now: t0}, backend: b,
		auth: &testAuthority{is: registry.Issuing{Signer: jsonSigner{}, Epoch: 3, PolicyGeneration: 7, Revoked: map[uint64]bool{}}}}
	n := 0
	cfg := registry.Config{
		Backend: setup.backend, Authority: e.auth, Now: e.clock.Now, StatusLife: statusLife,
		NewID:  func() string { n++; return fmt.Sprintf("lease-%p-%d", e, n) },
		Memory: mem,
		S3:     testDeriver(t),
		OnLoss: func(_ context.Context, epoch uint64) error {
			if e.failOn.Load() {
				return fmt.Errorf("bundle write failed")
			}
			e.retired.Add(1)
			e.auth.retire(epoch)
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
	if !setup.check {
		return e
	}
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

// resumeAbove waits out the pause (one status life and the skew), acquires resource for
// owner, which must be issued a fence above fence, and checks that every
// lease of revoked (from before the loss) reads REVOKED once grants resume.
func (e *lossEnv) resumeAbove(fence uint64, owner, resource, rid string, revoked ...string) registry.Issued {
	e.t.Helper()
	e.clock.Advance(pause)
	is := e.mustAcquire(owner, resource, rid)
	if is.Lease.FenceToken <= fence {
		e.t.Fatalf("after the pause: fence %d, not above %d", is.Lease.FenceToken, fence)
	}
	for _, id := range revoked {
		if got := e.proofState(id); got != fencegate.StateRevoked {
			e.t.Fatalf("lease %s from before the loss reads %s after grants resumed, want REVOKED", id, got)
		}
	}
	return is
}
