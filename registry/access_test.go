package registry_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry"
	"github.com/fencegate/fencegate/registry/embedded"
)

// switchableAccess lets only allowed[owner] = resource, changeable mid-test.
type switchableAccess struct {
	mu      sync.Mutex
	allowed map[string]string
}

func (a *switchableAccess) CheckLease(identity, resource string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.allowed[identity] == resource {
		return nil
	}
	return fencegate.Errorf(fencegate.CodeForbidden, "%s may not lease %s", identity, resource)
}

func (a *switchableAccess) set(owner, resource string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.allowed[owner] = resource
}

func accessRegistry(t *testing.T, acc registry.Access) (*registry.Registry, *clock) {
	t.Helper()
	b, err := embedded.Open(filepath.Join(t.TempDir(), "registry.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	c := &clock{now: t0}
	r, err := registry.New(registry.Config{Backend: b, Signer: jsonSigner{}, Now: c.Now, IssuerEpoch: 1, PolicyGeneration: 1, Access: acc})
	if err != nil {
		t.Fatal(err)
	}
	return r, c
}

// TestAcquireOutsideThePolicyIsForbiddenAndHoldsNothing: the registry refuses
// an acquisition the policy does not grant, with FORBIDDEN, and acquires
// nothing: the rightful owner then gets the resource at once, at the first
// fence; the same request ID asked again is still refused.
func TestAcquireOutsideThePolicyIsForbiddenAndHoldsNothing(t *testing.T) {
	acc := &switchableAccess{allowed: map[string]string{"owner": "local/inv/7"}}
	r, _ := accessRegistry(t, acc)
	ctx := context.Background()
	for _, res := range []string{"local", "local/inv", "local/inv/7"} {
		_, err := r.Acquire(ctx, "intruder", params(res, "x-1"))
		wantCode(t, err, fencegate.CodeForbidden)
	}
	_, err := r.AcquireWait(ctx, "intruder", params("local/inv/7", "x-2"), time.Second)
	wantCode(t, err, fencegate.CodeForbidden)
	is := acquire(t, r, "owner", params("local/inv/7", "o-1"))
	if is.Lease.FenceToken != 1 || is.Lease.State != fencegate.StateHeld {
		t.Fatalf("owner got %+v after refusals", is.Lease)
	}
	_, err = r.Acquire(ctx, "intruder", params("local/inv/7", "x-1"))
	wantCode(t, err, fencegate.CodeForbidden)
}

// TestRenewIsReCheckedAgainstThePolicy: a lease the policy no longer grants
// is not renewed (FORBIDDEN) and keeps its old expiry.
func TestRenewIsReCheckedAgainstThePolicy(t *testing.T) {
	acc := &switchableAccess{allowed: map[string]string{"owner": "local/inv/7"}}
	r, _ := accessRegistry(t, acc)
	ctx := context.Background()
	is := acquire(t, r, "owner", params("local/inv/7", "o-1"))
	if _, err := r.Renew(ctx, "owner", is.Lease.ID, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	before, err := r.Status(ctx, is.Lease.ID)
	if err != nil {
		t.Fatal(err)
	}
	acc.set("owner", "local/other")
	_, err = r.Renew(ctx, "owner", is.Lease.ID, time.Hour)
	wantCode(t, err, fencegate.CodeForbidden)
	after, err := r.Status(ctx, is.Lease.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !after.Lease.ExpiresAt.Equal(before.Lease.ExpiresAt) {
		t.Fatalf("a refused renewal moved the expiry: %v -> %v", before.Lease.ExpiresAt, after.Lease.ExpiresAt)
	}
}
