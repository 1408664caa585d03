package gateway_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/memory"
	"github.com/fencegate/fencegate/gateway"
)

// holders is a fixed table of live leases by resource.
type holders map[string]fencegate.Lease

func (h holders) Holder(_ context.Context, resource string) (fencegate.Lease, error) {
	if l, ok := h[resource]; ok {
		return l, nil
	}
	return fencegate.Lease{}, fencegate.Errorf(fencegate.CodeNotFound, "none")
}

// boundStore returns a memory store where key inv/7/a of store local is
// bound to resource local/inv, with nothing in flight.
func boundStore(t *testing.T, f *fixture) fencegate.FenceStore {
	t.Helper()
	st := memory.New()
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: st, Now: f.kit.Now, Policy: gateway.StaticPolicy{Generation: 1}})
	if err != nil {
		t.Fatal(err)
	}
	req := f.request(5, 1, "v1")
	tok, vg := f.kit.VerifiedGrant(func(g *fencegate.Grant) { g.Resource, g.FenceToken, g.Lease = "local/inv", 5, "lease-parent" })
	req.GrantToken, req.StatusToken = tok, f.kit.Status(vg, nil)
	req.Resource, req.Target = "local/inv/7/a", fencegate.ObjectTarget("local", "inv/7/a")
	req.Effect = gateway.EffectFunc(func(context.Context, fencegate.Receipt, string) (fencegate.Outcome, error) {
		return fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v1"}, nil
	})
	if _, err := gw.Apply(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestClearingABindingIsRefusedWhileALiveLeaseCoversTheKey: a live lease on
// the key's resource or any ancestor refuses the clearing (LEASE_HELD), as
// does a gateway without a registry to ask (UNSUPPORTED); the binding stays.
// With no live lease it is cleared.
func TestClearingABindingIsRefusedWhileALiveLeaseCoversTheKey(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	st := boundStore(t, f)
	for name, c := range map[string]struct {
		leases gateway.Holders
		code   fencegate.Code
	}{
		"the key's own resource is held": {holders{"local/inv/7/a": {ID: "l1"}}, fencegate.CodeLeaseHeld},
		"a resource between is held":     {holders{"local/inv/7": {ID: "l2"}}, fencegate.CodeLeaseHeld},
		"the whole store is held":        {holders{"local": {ID: "l3"}}, fencegate.CodeLeaseHeld},
		"no registry to ask":             {nil, fencegate.CodeUnsupported},
	} {
		b := &gateway.Bindings{Store: st, Leases: c.leases, Log: slog.Default()}
		if _, err := b.Clear(ctx, "local", "inv/7/a", "ops"); fencegate.ErrorCode(err) != c.code {
			t.Fatalf("%s: %v, want %s", name, err, c.code)
		}
		if bd, err := b.Get(ctx, "local", "inv/7/a"); err != nil || bd.Resource != "local/inv" {
			t.Fatalf("%s: binding after refusal = %+v, %v", name, bd, err)
		}
	}
	b := &gateway.Bindings{Store: st, Leases: holders{"local/other": {ID: "l4"}}, Log: slog.Default()}
	if bd, err := b.Clear(ctx, "local", "inv/7/a", "ops"); err != nil || bd.Resource != "local/inv" {
		t.Fatalf("clear: %+v, %v", bd, err)
	}
	if _, err := b.Get(ctx, "local", "inv/7/a"); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("binding after clear: %v", err)
	}
}
