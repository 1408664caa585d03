package gateway_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// switchFixture is a gateway with local/* in shadow mode, and its Modes.
func switchFixture(t *testing.T) (*fixture, *gateway.Modes) {
	t.Helper()
	f := shadowFixture(t, nil)
	return f, f.modes
}

// until waits, yielding, for cond (a bounded wait, not a measure).
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

// Rule: a stale write that read "shadow" and then waited for the resource
// while the owner's write was in flight is refused, not forwarded, when
// the operator switched the resource to enforce meanwhile: the owner's
// object stands.
func TestASwitchToEnforceWhileAStaleWriteWaitsRefusesIt(t *testing.T) {
	f, modes := switchFixture(t)
	ctx := context.Background()
	entered, release := make(chan struct{}), make(chan struct{})
	f.obj.set(func(ctx context.Context, req fencegate.PutRequest) (string, error) {
		if req.Meta.FenceToken == 6 {
			close(entered)
			<-release
		}
		return f.obj.ObjectStore.Put(ctx, req)
	}, nil)
	owner := make(chan error, 1)
	go func() { _, err := f.gw.Apply(ctx, f.request(6, 1, "new")); owner <- err }()
	<-entered
	stale := make(chan error, 1)
	go func() { _, err := f.gw.Apply(ctx, f.request(5, 1, "stale")); stale <- err }()
	until(t, "the stale write waits for the resource", func() bool { return gateway.LockHolders(f.gw, resource) == 2 })
	if err := modes.Set("local/*", gateway.Enforce, false); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-owner; err != nil {
		t.Fatal(err)
	}
	if err := <-stale; fencegate.ErrorCode(err) != fencegate.CodeStaleOwner {
		t.Fatalf("the stale write after the switch to enforce: %v, want STALE_OWNER", err)
	}
	if got := f.content(); got != "new" {
		t.Fatalf("object %q after the switch, want the owner's", got)
	}
}

// Rule: a switch to enforce returns only once the shadow forwards decided
// before it have ended, so when the operator is told "enforce" no refused
// write is still on its way; refused writes after it are refused.
func TestASwitchToEnforceWaitsForShadowForwardsInFlight(t *testing.T) {
	f, modes := switchFixture(t)
	ctx := context.Background()
	if _, err := f.gw.Apply(ctx, f.request(6, 1, "new")); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	f.obj.set(func(ctx context.Context, req fencegate.PutRequest) (string, error) {
		if strings.HasPrefix(req.Meta.ReceiptID, "shadow_") {
			close(entered)
			<-release
		}
		return f.obj.ObjectStore.Put(ctx, req)
	}, nil)
	forwarded := make(chan error, 1)
	go func() { _, err := f.gw.Apply(ctx, f.request(5, 1, "stale")); forwarded <- err }()
	<-entered
	switched := make(chan error, 1)
	go func() { switched <- modes.Set("local/*", gateway.Enforce, false) }()
	until(t, "the switch waits for the forward", func() bool { return gateway.ModeChangeWaiting(modes) })
	select {
	case err := <-switched:
		t.Fatalf("the switch returned (%v) while a shadow forward was still sending", err)
	default:
	}
	close(release)
	if err := <-forwarded; err != nil {
		t.Fatalf("the shadow forward decided before the switch: %v", err)
	}
	if err := <-switched; err != nil {
		t.Fatal(err)
	}
	f.obj.set(nil, nil)
	if _, err := f.gw.Apply(ctx, f.request(5, 1, "stale again")); fencegate.ErrorCode(err) != fencegate.CodeStaleOwner {
		t.Fatalf("a stale write after the switch: %v, want STALE_OWNER", err)
	}
}

// Rule: a shadow forward whose effect panics is an unknown outcome, like
// forward's (applyEffect): the request is answered MUTATION_UNKNOWN instead
// of unwinding, and the shadow hold is released, so a switch to enforce
// does not wait for it.
func TestAPanickingShadowForwardIsAnUnknownOutcome(t *testing.T) {
	f, modes := switchFixture(t)
	ctx := context.Background()
	if _, err := f.gw.Apply(ctx, f.request(6, 1, "new")); err != nil {
		t.Fatal(err)
	}
	stale := f.request(5, 1, "stale")
	stale.Effect = gateway.EffectFunc(func(context.Context, fencegate.Receipt, string) (fencegate.Outcome, error) {
		panic("a bug in the effect")
	})
	if _, err := f.gw.Apply(ctx, stale); fencegate.ErrorCode(err) != fencegate.CodeMutationUnknown {
		t.Fatalf("a shadow forward whose effect panicked: %v, want MUTATION_UNKNOWN", err)
	}
	if err := modes.Set("local/*", gateway.Enforce, false); err != nil {
		t.Fatalf("the switch to enforce after it: %v", err)
	}
}
