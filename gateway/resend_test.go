package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// TestReconcilerRecordsEachAttemptAndWaitsForRetryAfter: a resolver that
// resends and is told "in progress, retry after 30 s" gets its attempt
// recorded on the still UNKNOWN receipt, and is not asked again before the
// upstream's Retry-After, however short the reconciler's own backoff.
func TestReconcilerRecordsEachAttemptAndWaitsForRetryAfter(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	res := f.unknownWrite(t)
	asked := 0
	rc := &gateway.Reconciler{Store: f.store, Now: f.kit.Now, Resolver: func(string) gateway.Resolver {
		return gateway.ResolverFunc(func(context.Context, fencegate.Receipt) (fencegate.Outcome, error) {
			asked++
			return fencegate.Outcome{State: fencegate.ReceiptUnknown, Attempts: 1, Resend: true,
				Error: "upstream answered 409 (in-progress)", RetryAfter: 30 * time.Second}, nil
		})
	}}
	if n, err := rc.RunOnce(ctx); err != nil || n != 0 || asked != 1 {
		t.Fatalf("first pass: settled %d, asked %d, %v", n, asked, err)
	}
	got, _ := f.store.Receipt(ctx, res.Receipt.ID)
	if got.State != fencegate.ReceiptUnknown || got.Attempts != 1 || !got.Resend || got.Error != "upstream answered 409 (in-progress)" {
		t.Fatalf("the attempt was not recorded: %+v", got)
	}
	f.kit.Advance(10 * time.Second) // past the reconciler's 1 s backoff, inside Retry-After
	if _, _ = rc.RunOnce(ctx); asked != 1 {
		t.Fatalf("asked again %d times before the upstream's Retry-After", asked-1)
	}
	f.kit.Advance(21 * time.Second)
	if _, _ = rc.RunOnce(ctx); asked != 2 {
		t.Fatalf("not asked after Retry-After (asked %d)", asked)
	}
	if got, _ := f.store.Receipt(ctx, res.Receipt.ID); got.Attempts != 2 {
		t.Fatalf("attempts = %d, want 2", got.Attempts)
	}
}

// Rule: a resolver that panics does not take the reconciler down (it runs
// in the process's background loop, which would die, and again after every
// restart while the receipt is there). The pass ends normally and the
// receipt stays UNKNOWN, with no resend allowed: what the panicking attempt
// sent is not known, as for an effect that panics. Later passes go on.
func TestAPanickingResolverLeavesTheReceiptUnknownWithoutAResend(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	res := f.unknownWrite(t)
	asked := 0
	rc := &gateway.Reconciler{Store: f.store, Now: f.kit.Now, Resolver: func(string) gateway.Resolver {
		return gateway.ResolverFunc(func(context.Context, fencegate.Receipt) (fencegate.Outcome, error) {
			switch asked++; asked {
			case 1:
				return fencegate.Outcome{State: fencegate.ReceiptUnknown, Attempts: 1, Resend: true, Error: "timeout"}, nil
			case 2:
				panic("reading the kept request")
			}
			return fencegate.Outcome{State: fencegate.ReceiptCommitted}, nil
		})
	}}
	if _, err := rc.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	f.kit.Advance(time.Minute)
	func() {
		defer func() {
			if v := recover(); v != nil {
				t.Fatalf("the resolver's panic ended the reconciler's pass: %v", v)
			}
		}()
		if n, err := rc.RunOnce(ctx); err != nil || n != 0 || asked != 2 {
			t.Fatalf("the pass that panicked: settled %d, asked %d, %v", n, asked, err)
		}
	}()
	if got, _ := f.store.Receipt(ctx, res.Receipt.ID); got.State != fencegate.ReceiptUnknown || got.Resend {
		t.Fatalf("after the panic: %s resend=%v, want UNKNOWN without a resend allowed", got.State, got.Resend)
	}
	f.kit.Advance(time.Minute)
	if n, err := rc.RunOnce(ctx); err != nil || n != 1 || asked != 3 {
		t.Fatalf("the pass after the panic: settled %d, asked %d, %v", n, asked, err)
	}
}

// Rule: so does a replay of an UNKNOWN segment, which asks the resolver
// first: it is answered MUTATION_UNKNOWN and the resource's lock is released.
func TestAPanickingResolverOnAReplayIsAnsweredMutationUnknown(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.unknownWrite(t)
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: f.store, Now: f.kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}, Resolver: func(string) gateway.Resolver {
			return gateway.ResolverFunc(func(context.Context, fencegate.Receipt) (fencegate.Outcome, error) {
				panic("reading the kept request")
			})
		}})
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if v := recover(); v != nil {
				t.Fatalf("the resolver's panic reached the replay's caller: %v", v)
			}
		}()
		_, err = gw.Apply(ctx, f.request(5, 1, "v1"))
	}()
	if fencegate.ErrorCode(err) != fencegate.CodeMutationUnknown {
		t.Fatalf("the replay answered %v, want MUTATION_UNKNOWN", err)
	}
	if n := gateway.LockHolders(gw, resource); n != 0 {
		t.Fatalf("%d requests still hold the resource's lock", n)
	}
}

// unknownWrite makes segment 1 of fence 5 an UNKNOWN write (its effect
// times out) and returns its answer.
func (f *fixture) unknownWrite(t *testing.T) gateway.Result {
	t.Helper()
	f.obj.timeOut()
	res, err := f.gw.Apply(context.Background(), f.request(5, 1, "v1"))
	if fencegate.ErrorCode(err) != fencegate.CodeMutationUnknown {
		t.Fatalf("want MUTATION_UNKNOWN, got %v", err)
	}
	return res
}
