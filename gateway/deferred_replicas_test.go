package gateway_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// TestNextSegmentThroughAnotherReplicaDoesNotWaitOutTheDeferral: one lease's
// segments alternate between two live replicas (a load balancer). The next
// segment meets the first replica's deferred settle (RESOURCE_BUSY, its
// receipt PENDING for up to the window) and proves it from the object on
// that first busy answer instead of polling first (which cost each such
// write about 70 ms with a 150 ms window, ten times the write).
func TestNextSegmentThroughAnotherReplicaDoesNotWaitOutTheDeferral(t *testing.T) {
	f := newFixture(t)
	first, err := f.deferring(f.store, never).Apply(context.Background(), f.request(5, 1, "v1"))
	if err != nil {
		t.Fatal(err)
	}
	var polls atomic.Int32
	after := func(d time.Duration) <-chan time.Time {
		if d >= time.Second {
			return never(d) // its own window: the flush is not what is tested
		}
		polls.Add(1) // a busy admission's poll
		return atOnce(d)
	}
	other, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: f.store, Now: f.kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}, DeferSettle: time.Second, After: after,
		Resolver: func(string) gateway.Resolver { return f.objects() }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Apply(context.Background(), f.request(5, 2, "v2")); err != nil {
		t.Fatalf("next segment through the other replica: %v", err)
	}
	if n := polls.Load(); n != 0 {
		t.Fatalf("the admission polled %d times before proving the deferred receipt", n)
	}
	if got, _ := f.store.Receipt(context.Background(), first.Receipt.ID); got.State != fencegate.ReceiptCommitted || got.Version != first.Receipt.Version {
		t.Fatalf("first receipt %s %q, answered %q", got.State, got.Version, first.Receipt.Version)
	}
}
