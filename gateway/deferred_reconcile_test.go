package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// TestAnsweredWriteIsNotMadeUnknownWhileItsObjectCannotBeAsked: the process
// that answered a PUT COMMITTED died before its deferred settle was durable,
// and the object store cannot be asked. Past reconcile.orphan the reconciler
// leaves the receipt PENDING (it may be a write answered COMMITTED: it must
// never read UNKNOWN) until the object answers, and then settles it
// COMMITTED at the answered version; only past the deadline is a receipt
// whose object still cannot be asked raised as UNKNOWN.
func TestAnsweredWriteIsNotMadeUnknownWhileItsObjectCannotBeAsked(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	first, err := f.deferring(f.store, never).Apply(ctx, f.request(5, 1, "v1"))
	if err != nil {
		t.Fatal(err)
	}
	f.obj.timeOut()
	rc := &gateway.Reconciler{Store: f.store, Now: f.kit.Now, Orphan: time.Minute, Deadline: 15 * time.Minute,
		Resolver: func(string) gateway.Resolver { return f.objects() }}
	f.kit.Advance(2 * time.Minute)
	if _, err := rc.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.store.Receipt(ctx, first.Receipt.ID); got.State != fencegate.ReceiptPending {
		t.Fatalf("answered COMMITTED, its object unreachable: reconciled to %s", got.State)
	}
	f.obj.set(nil, nil)
	f.kit.Advance(time.Minute) // past the reconciler's back-off
	if _, err := rc.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.store.Receipt(ctx, first.Receipt.ID); got.State != fencegate.ReceiptCommitted || got.Version != first.Receipt.Version {
		t.Fatalf("once the object answers: %s %q, answered %q", got.State, got.Version, first.Receipt.Version)
	}

	second, err := f.deferring(f.store, never).Apply(ctx, f.request(5, 2, "v2"))
	if err != nil {
		t.Fatal(err)
	}
	f.obj.timeOut()
	f.kit.Advance(16 * time.Minute)
	if _, err := rc.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.store.Receipt(ctx, second.Receipt.ID); got.State != fencegate.ReceiptUnknown {
		t.Fatalf("past the deadline, its object still unreachable: %s, want UNKNOWN (raised)", got.State)
	}
}
