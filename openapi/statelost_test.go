package openapi_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/handlers"
	"github.com/fencegate/fencegate/proofs/prooftest"
	"github.com/fencegate/fencegate/registry"
	regembedded "github.com/fencegate/fencegate/registry/embedded"
)

// lostBackend is the embedded backend whose guard refuses renewals and
// releases once lost is set, as a backend restored from a snapshot does
// (fencegate.LeaseBackend: Renew and Release check their Guard first).
type lostBackend struct {
	fencegate.LeaseBackend
	lost atomic.Bool
}

func (b *lostBackend) Renew(ctx context.Context, id, owner string, ttl time.Duration, now time.Time, g fencegate.Guard) (fencegate.Lease, error) {
	if b.lost.Load() {
		return fencegate.Lease{}, fencegate.Errorf(fencegate.CodeStateLost, "guard refused")
	}
	return b.LeaseBackend.Renew(ctx, id, owner, ttl, now, g)
}

func (b *lostBackend) Release(ctx context.Context, id, owner string, now time.Time, g fencegate.Guard) (fencegate.Lease, bool, error) {
	if b.lost.Load() {
		return fencegate.Lease{}, false, fencegate.Errorf(fencegate.CodeStateLost, "guard refused")
	}
	return b.LeaseBackend.Release(ctx, id, owner, now, g)
}

// TestRenewAndReleaseAfterStateLossMatchTheSpec: a renew or release whose
// guard finds the coordination state lost answers 503
// COORDINATION_STATE_LOST, which the spec lists for those routes (e.call
// validates the answer), and leaves the lease as it was.
func TestRenewAndReleaseAfterStateLossMatchTheSpec(t *testing.T) {
	var lb *lostBackend
	kit := prooftest.New(t)
	e := newEnv(t, func(s *handlers.Server, _ *fakeAdmin) {
		inner, err := regembedded.Open(filepath.Join(t.TempDir(), "registry.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = inner.Close() })
		lb = &lostBackend{LeaseBackend: inner}
		reg, err := registry.New(registry.Config{Backend: lb, Signer: kit.Signer(), Now: kit.Now, IssuerEpoch: kit.Epoch(), PolicyGeneration: 1})
		if err != nil {
			t.Fatal(err)
		}
		s.Registry = reg
	})
	json := map[string]string{"Content-Type": "application/json"}
	_, lease := e.call("POST", "/v1/leases", tokA, json, `{"resource":"local/inv/9","requestId":"r9","ttlMs":30000,"operationId":"op"}`, 201)
	id := lease["lease"].(string)
	before, err := lb.LeaseBackend.Lease(context.Background(), id, kit.Now())
	if err != nil {
		t.Fatal(err)
	}
	lb.lost.Store(true)
	kit.Advance(time.Second)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/leases/" + id + "/renew", `{"ttlMs":30000}`},
		{"DELETE", "/v1/leases/" + id, ""},
	} {
		t.Run(c.method, func(t *testing.T) {
			e := *e
			e.t = t
			h, p := e.call(c.method, c.path, tokA, json, c.body, 503)
			wantCode(t, p, fencegate.CodeStateLost)
			if h.Get("Retry-After") == "" {
				t.Error("no Retry-After")
			}
		})
	}
	after, err := lb.LeaseBackend.Lease(context.Background(), id, kit.Now())
	if err != nil {
		t.Fatal(err)
	}
	if after.State != before.State || !after.ExpiresAt.Equal(before.ExpiresAt) {
		t.Errorf("lease after refused renew and release: %s until %s, was %s until %s", after.State, after.ExpiresAt, before.State, before.ExpiresAt)
	}
}
