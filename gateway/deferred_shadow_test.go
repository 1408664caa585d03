package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// TestShadowForwardIsNotBusyWithThisProcesssDeferredSettle: on a shadow-mode
// resource, a request refused before admission (another caller's) is
// forwarded as without the deferral: this process's own deferred settle of
// the resource is made durable first instead of answering RESOURCE_BUSY, and
// the forward chains on the deferred write's version.
func TestShadowForwardIsNotBusyWithThisProcesssDeferredSettle(t *testing.T) {
	f := newFixture(t)
	modes, err := gateway.NewModes(gateway.ModeRule{Pattern: "local/*", Mode: gateway.Shadow})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: f.store, Now: f.kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}, DeferSettle: time.Millisecond, After: never, Modes: modes,
		Resolver: func(string) gateway.Resolver { return f.objects() }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first, err := gw.Apply(ctx, f.request(5, 1, "v1"))
	if err != nil || gw.DeferredSettles() != 1 {
		t.Fatalf("first write: %v, %d deferred", err, gw.DeferredSettles())
	}
	other := f.request(5, 2, "shadowed")
	other.Caller = "someone-else"
	res, err := gw.Apply(ctx, other)
	if err != nil || res.Verdict != fencegate.CodeOwnerMismatch {
		t.Fatalf("shadow forward: %+v %v", res, err)
	}
	if got := f.content(); got != "shadowed" {
		t.Fatalf("object = %q", got)
	}
	if got, _ := f.store.Receipt(ctx, first.Receipt.ID); got.State != fencegate.ReceiptCommitted || got.Version != first.Receipt.Version {
		t.Fatalf("deferred receipt %s %q, answered %q", got.State, got.Version, first.Receipt.Version)
	}
}
