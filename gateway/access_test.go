package gateway_test

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authz"
	"github.com/fencegate/fencegate/gateway"
)

// TestWriteOutsideThePolicyIsForbiddenWithoutStateChange: the acceptance
// point re-checks the access policy at write time (a grant issued before the
// policy changed, or by a registry without it, is not enough). The refusal is
// FORBIDDEN in enforce and shadow mode alike, nothing is admitted, stored or
// forwarded, and the owner writes once the policy lets it.
func TestWriteOutsideThePolicyIsForbiddenWithoutStateChange(t *testing.T) {
	f := newFixture(t)
	modes, err := gateway.NewModes(gateway.ModeRule{Pattern: resource, Mode: gateway.Shadow})
	if err != nil {
		t.Fatal(err)
	}
	deny, err := authz.New([]authz.Rule{{Identity: owner, Lease: []string{resource + "-other"}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for name, m := range map[string]*gateway.Modes{"enforce": nil, "shadow": modes} {
		gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: f.store, Now: f.kit.Now,
			Policy: gateway.StaticPolicy{Generation: 1}, Access: deny, Modes: m})
		if err != nil {
			t.Fatal(err)
		}
		req := f.request(5, 1, "v1")
		if err := gw.Precheck(ctx, req); fencegate.ErrorCode(err) != fencegate.CodeForbidden {
			t.Fatalf("%s precheck: %v", name, err)
		}
		if _, err := gw.Apply(ctx, req); fencegate.ErrorCode(err) != fencegate.CodeForbidden {
			t.Fatalf("%s apply: %v", name, err)
		}
		if _, err := f.store.Resource(ctx, resource); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
			t.Fatalf("%s: a forbidden write touched the resource: %v", name, err)
		}
		if got := f.content(); got != "" {
			t.Fatalf("%s: a forbidden write was forwarded: %q", name, got)
		}
	}
	allow, _ := authz.New([]authz.Rule{{Identity: owner, Lease: []string{resource}}})
	gw, _ := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: f.store, Now: f.kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}, Access: allow})
	if _, err := gw.Apply(ctx, f.request(5, 1, "v1")); err != nil {
		t.Fatalf("allowed write: %v", err)
	}
}

// TestShadowModeNeverForwardsAWriteOutsideThePolicy: shadow mode lets a
// refused grant through for rollout, but never past the access policy. A
// caller the policy does not let write the resource is FORBIDDEN even when
// its grant is garbage or another owner's (verdicts shadow mode would
// otherwise forward), and nothing is stored or forwarded.
func TestShadowModeNeverForwardsAWriteOutsideThePolicy(t *testing.T) {
	f := newFixture(t)
	modes, err := gateway.NewModes(gateway.ModeRule{Pattern: resource, Mode: gateway.Shadow})
	if err != nil {
		t.Fatal(err)
	}
	policy, err := authz.New([]authz.Rule{{Identity: owner, Lease: []string{resource}}})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: f.store, Now: f.kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}, Access: policy, Modes: modes})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	garbage := f.request(5, 1, "evil")
	garbage.Caller, garbage.GrantToken = "intruder", "garbage"
	othersGrant := f.request(5, 1, "evil")
	othersGrant.Caller = "intruder"
	for name, req := range map[string]gateway.Request{"garbage grant": garbage, "another owner's grant": othersGrant} {
		if _, err := gw.Apply(ctx, req); fencegate.ErrorCode(err) != fencegate.CodeForbidden {
			t.Fatalf("%s: apply = %v, want FORBIDDEN", name, err)
		}
		if got := f.content(); got != "" {
			t.Fatalf("%s: a write outside the policy was forwarded: %q", name, got)
		}
		if _, err := f.store.Resource(ctx, resource); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
			t.Fatalf("%s: a forbidden write touched the resource: %v", name, err)
		}
	}
	// The policy's own owner is still shadowed as before.
	own := f.request(5, 1, "v1")
	own.GrantToken = "garbage"
	if _, err := gw.Apply(ctx, own); err != nil {
		t.Fatalf("owner's shadowed write: %v", err)
	}
	if got := f.content(); got != "v1" {
		t.Fatalf("owner's shadowed write not forwarded: %q", got)
	}
}
