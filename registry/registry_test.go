package registry_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry"
	"github.com/fencegate/fencegate/registry/embedded"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// jsonSigner "signs" by JSON-encoding; the digest is over those bytes.
type jsonSigner struct{}

func (jsonSigner) SignGrant(g fencegate.Grant) (string, string, error) {
	b, err := json.Marshal(g)
	sum := sha256.Sum256(b)
	return string(b), "sha256:" + hex.EncodeToString(sum[:]), err
}

func (jsonSigner) SignStatus(s fencegate.Status) (string, error) {
	b, err := json.Marshal(s)
	return string(b), err
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newRegistry(t *testing.T) (*registry.Registry, *clock) {
	t.Helper()
	b, err := embedded.Open(filepath.Join(t.TempDir(), "registry.db"))
	if err != nil {
		t.Fatalf("open backend: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	c := &clock{now: t0}
	n := 0
	r, err := registry.New(registry.Config{
		Backend: b, Signer: jsonSigner{}, Now: c.Now,
		NewID:       func() string { n++; return fmt.Sprintf("lease-%d", n) },
		IssuerEpoch: 3, PolicyGeneration: 7, StatusLife: 5 * time.Second,
	})
	if err != nil {
		t.Fatalf("new registry: %v", err)
	}
	return r, c
}

func params(resource, requestID string) registry.AcquireParams {
	return registry.AcquireParams{Resource: resource, RequestID: requestID, OperationID: "op-1",
		OperationCategory: "write", TTL: 30 * time.Second}
}

func acquire(t *testing.T, r *registry.Registry, owner string, p registry.AcquireParams) registry.Issued {
	t.Helper()
	is, err := r.Acquire(context.Background(), owner, p)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	return is
}

func decode[T any](t *testing.T, token string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(token), &v); err != nil {
		t.Fatalf("decode %q: %v", token, err)
	}
	return v
}

func wantCode(t *testing.T, err error, code fencegate.Code) {
	t.Helper()
	if got := fencegate.ErrorCode(err); got != code {
		t.Fatalf("want %s, got %v", code, err)
	}
}

func TestNewReportsEveryConfigProblem(t *testing.T) {
	_, err := registry.New(registry.Config{StatusLife: 2 * time.Minute, MinTTL: 2 * time.Hour, MaxTTL: time.Hour})
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != 4 {
		t.Fatalf("want 4 problems (backend, signer, status life, TTL bounds), got %v", err)
	}
	wantCode(t, err, fencegate.CodeInvalidRequest)
}

// Rule: a zero MinTTL or MaxTTL is DefaultMinTTL or DefaultMaxTTL, resolved
// by Config.TTLBounds alone (config's cross-field checks ask it too); a set
// bound is kept as given, even one New refuses.
func TestTTLBoundsAreTheDefaultsWhereZeroAndTheConfiguredValueElsewhere(t *testing.T) {
	for _, c := range []struct {
		cfg              registry.Config
		wantMin, wantMax time.Duration
	}{
		{registry.Config{}, registry.DefaultMinTTL, registry.DefaultMaxTTL},
		{registry.Config{MaxTTL: 3 * time.Hour}, registry.DefaultMinTTL, 3 * time.Hour},
		{registry.Config{MinTTL: time.Second}, time.Second, registry.DefaultMaxTTL},
		{registry.Config{MinTTL: 2 * time.Hour, MaxTTL: -time.Nanosecond}, 2 * time.Hour, -time.Nanosecond},
	} {
		if lo, hi := c.cfg.TTLBounds(); lo != c.wantMin || hi != c.wantMax {
			t.Errorf("MinTTL %s MaxTTL %s: bounds [%s, %s], want [%s, %s]", c.cfg.MinTTL, c.cfg.MaxTTL, lo, hi, c.wantMin, c.wantMax)
		}
	}
}

func TestGrantIsBuiltFromTheLease(t *testing.T) {
	r, _ := newRegistry(t)
	is := acquire(t, r, "alice", params("db/a", "req-1"))
	g := decode[fencegate.Grant](t, is.Grant)
	l := is.Lease
	want := fencegate.Grant{
		Schema: fencegate.GrantSchema, Resource: "db/a", Owner: "alice", RequestID: "req-1", Lease: l.ID,
		FenceToken: 1, BackendRevision: l.Revision, PolicyGeneration: 7, OperationID: "op-1",
		OperationRoot: registry.OperationRoot("op-1", "db/a", "req-1"), OperationCategory: "write",
		IssuerEpoch: 3, TTLMs: 30000, IssuedAt: t0.UnixMilli(), ExpiresAt: t0.Add(30 * time.Second).UnixMilli(),
	}
	if g != want {
		t.Fatalf("grant\n got %+v\nwant %+v", g, want)
	}
	if err := g.Validate(); err != nil {
		t.Fatalf("grant invalid: %v", err)
	}
}

func TestOperationRootIsDerivedOnlyWhenOmitted(t *testing.T) {
	r, _ := newRegistry(t)
	sum := sha256.Sum256([]byte("op-1\x00db/a\x00req-1"))
	if got := registry.OperationRoot("op-1", "db/a", "req-1"); got != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Fatalf("derived root %s", got)
	}
	p := params("db/b", "req-2")
	p.OperationRoot = "sha256:given"
	if got := acquire(t, r, "alice", p).Lease.OperationRoot; got != "sha256:given" {
		t.Fatalf("given root replaced by %s", got)
	}
}

func TestSameRequestIDReturnsIdenticalGrant(t *testing.T) {
	r, c := newRegistry(t)
	first := acquire(t, r, "alice", params("db/a", "req-1"))
	c.Advance(time.Second)
	if _, err := r.Renew(context.Background(), "alice", first.Lease.ID, time.Minute); err != nil {
		t.Fatalf("renew: %v", err)
	}
	again := acquire(t, r, "alice", params("db/a", "req-1"))
	if again.Grant != first.Grant || again.GrantDigest != first.GrantDigest {
		t.Fatalf("repeat gave another grant:\n%s\n%s", first.Grant, again.Grant)
	}
	if again.Lease.ID != first.Lease.ID || again.Lease.FenceToken != first.Lease.FenceToken {
		t.Fatalf("repeat gave another lease: %+v", again.Lease)
	}
}

func TestStatusProofBindsGrantDigest(t *testing.T) {
	r, c := newRegistry(t)
	is := acquire(t, r, "alice", params("db/a", "req-1"))
	c.Advance(time.Second)
	st, err := r.Status(context.Background(), is.Lease.ID)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	s := decode[fencegate.Status](t, st.StatusProof)
	want := fencegate.Status{
		Schema: fencegate.StatusSchema, GrantDigest: is.GrantDigest, Resource: "db/a", Lease: is.Lease.ID,
		FenceToken: 1, State: fencegate.StateHeld, Revision: is.Lease.Revision, IssuerEpoch: 3,
		IssuedAtMs: c.Now().UnixMilli(), ExpiresAtMs: c.Now().Add(5 * time.Second).UnixMilli(),
	}
	if s != want {
		t.Fatalf("status\n got %+v\nwant %+v", s, want)
	}
	if st.GrantDigest != is.GrantDigest || !st.StatusExpiresAt.Equal(c.Now().Add(5*time.Second)) {
		t.Fatalf("status issued for another grant or life: %+v", st)
	}
}

func TestHeldStatusProofNeverOutlivesLease(t *testing.T) {
	r, c := newRegistry(t)
	is := acquire(t, r, "alice", params("db/a", "req-1"))
	c.Advance(28 * time.Second) // 2s of the lease left, proof life is 5s
	st, err := r.Status(context.Background(), is.Lease.ID)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if s := decode[fencegate.Status](t, st.StatusProof); s.ExpiresAtMs != is.Lease.ExpiresAt.UnixMilli() {
		t.Fatalf("proof outlives lease: exp %d, lease ends %d", s.ExpiresAtMs, is.Lease.ExpiresAt.UnixMilli())
	}
}

func TestExpiredLeaseGivesExpiredStatusProof(t *testing.T) {
	r, c := newRegistry(t)
	is := acquire(t, r, "alice", params("db/a", "req-1"))
	c.Advance(31 * time.Second)
	st, err := r.Status(context.Background(), is.Lease.ID)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	s := decode[fencegate.Status](t, st.StatusProof)
	if s.State != fencegate.StateExpired || s.GrantDigest != is.GrantDigest || s.ExpiresAtMs != c.Now().Add(5*time.Second).UnixMilli() {
		t.Fatalf("want signed EXPIRED proof for the grant, got %+v", s)
	}
	_, err = r.Renew(context.Background(), "alice", is.Lease.ID, time.Minute)
	wantCode(t, err, fencegate.CodeLeaseNotHeld)
}

func TestRenewKeepsGrantAndProvesLiveness(t *testing.T) {
	r, c := newRegistry(t)
	is := acquire(t, r, "alice", params("db/a", "req-1"))
	c.Advance(25 * time.Second)
	rn, err := r.Renew(context.Background(), "alice", is.Lease.ID, time.Minute)
	if err != nil {
		t.Fatalf("renew: %v", err)
	}
	if rn.Grant != is.Grant || !rn.Lease.ExpiresAt.Equal(c.Now().Add(time.Minute)) {
		t.Fatalf("renew: grant changed or lease not extended: %+v", rn.Lease)
	}
	c.Advance(10 * time.Second) // past the grant's own expiresAt
	st, err := r.Status(context.Background(), is.Lease.ID)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if s := decode[fencegate.Status](t, st.StatusProof); s.State != fencegate.StateHeld {
		t.Fatalf("renewed lease: want HELD proof, got %s", s.State)
	}
}

func TestGrantStatusChecksGrantAgainstLease(t *testing.T) {
	r, _ := newRegistry(t)
	ctx := context.Background()
	is := acquire(t, r, "alice", params("db/a", "req-1"))
	vg := fencegate.VerifiedGrant{Grant: decode[fencegate.Grant](t, is.Grant), Digest: is.GrantDigest}
	st, err := r.GrantStatus(ctx, vg)
	if err != nil || st.State != fencegate.StateHeld || st.GrantDigest != is.GrantDigest || st.FenceToken != 1 {
		t.Fatalf("matching grant: got %+v, %v", st, err)
	}
	for name, mut := range map[string]func(*fencegate.VerifiedGrant){
		"fence":    func(g *fencegate.VerifiedGrant) { g.FenceToken++ },
		"resource": func(g *fencegate.VerifiedGrant) { g.Resource = "db/b" },
		"owner":    func(g *fencegate.VerifiedGrant) { g.Owner = "mallory" },
		"lease":    func(g *fencegate.VerifiedGrant) { g.Lease = "no-such-lease" },
		"digest":   func(g *fencegate.VerifiedGrant) { g.Digest = "" },
	} {
		g := vg
		mut(&g)
		if _, err := r.GrantStatus(ctx, g); fencegate.ErrorCode(err) != fencegate.CodeStatusInvalid {
			t.Errorf("%s mismatch: want STATUS_INVALID, got %v", name, err)
		}
	}
	if _, err := r.Release(ctx, "alice", is.Lease.ID); err != nil {
		t.Fatalf("release: %v", err)
	}
	if st, err := r.GrantStatus(ctx, vg); err != nil || st.State != fencegate.StateReleased {
		t.Fatalf("after release: got %+v, %v", st, err)
	}
}

func TestInvalidAcquireParamsAreRejected(t *testing.T) {
	r, _ := newRegistry(t)
	for name, mut := range map[string]func(*registry.AcquireParams, *string){
		"bad resource":      func(p *registry.AcquireParams, _ *string) { p.Resource = "db//a" },
		"no request id":     func(p *registry.AcquireParams, _ *string) { p.RequestID = "" },
		"no operation id":   func(p *registry.AcquireParams, _ *string) { p.OperationID = "" },
		"no owner":          func(_ *registry.AcquireParams, o *string) { *o = "" },
		"control character": func(p *registry.AcquireParams, _ *string) { p.RequestID = "a\x00b" },
		"ttl below min":     func(p *registry.AcquireParams, _ *string) { p.TTL = time.Millisecond },
		"ttl above max":     func(p *registry.AcquireParams, _ *string) { p.TTL = 2 * time.Hour },
	} {
		p, owner := params("db/a", "req-1"), "alice"
		mut(&p, &owner)
		if _, err := r.Acquire(context.Background(), owner, p); fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
			t.Errorf("%s: want INVALID_REQUEST, got %v", name, err)
		}
	}
	_, err := r.Renew(context.Background(), "alice", "lease-x", 2*time.Hour)
	wantCode(t, err, fencegate.CodeInvalidRequest)
}

func TestSetFloorRaisesNextFence(t *testing.T) {
	r, _ := newRegistry(t)
	if err := r.SetFloor(context.Background(), 500); err != nil {
		t.Fatalf("set floor: %v", err)
	}
	if f := acquire(t, r, "alice", params("db/a", "req-1")).Lease.FenceToken; f <= 500 {
		t.Fatalf("fence %d not above floor", f)
	}
	if r.IssuerEpoch() != 3 || r.PolicyGeneration() != 7 {
		t.Fatalf("epoch/policy: %d/%d", r.IssuerEpoch(), r.PolicyGeneration())
	}
}

func TestOtherOwnerIsRefusedWhileHeld(t *testing.T) {
	r, c := newRegistry(t)
	is := acquire(t, r, "alice", params("db/a", "req-1"))
	_, err := r.Acquire(context.Background(), "bob", params("db/a", "req-2"))
	wantCode(t, err, fencegate.CodeLeaseHeld)
	_, err = r.Release(context.Background(), "bob", is.Lease.ID)
	wantCode(t, err, fencegate.CodeOwnerMismatch)
	c.Advance(30 * time.Second)
	if f := acquire(t, r, "bob", params("db/a", "req-2")).Lease.FenceToken; f != 2 {
		t.Fatalf("after expiry want fence 2, got %d", f)
	}
}
