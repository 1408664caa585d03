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
	f.obj.timeOut()
	res, err := f.gw.Apply(ctx, f.request(5, 1, "v1"))
	if fencegate.ErrorCode(err) != fencegate.CodeMutationUnknown {
		t.Fatalf("want MUTATION_UNKNOWN, got %v", err)
	}
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
