package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// TestOtherReplicasReconcileByTheDeadlineTheWriteWasSentWith: replica A
// (effectTimeout 10 min) sends a write whose land-by deadline is 10 min
// after admission, and the receipt keeps that deadline (LandBy); replica
// B, whose own effectTimeout is 1 min (orphan 2 min, valid on its own, as
// during a rolling restart that raises effectTimeout), reconciles it 3 min
// after admission, while A's write is held in the network. B must not call
// it NOT_APPLIED before A's deadline (plus its grace): the write then lands
// and the receipt ends COMMITTED, the answer A gives.
func TestOtherReplicasReconcileByTheDeadlineTheWriteWasSentWith(t *testing.T) {
	f := newFixture(t)
	gwA, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: f.store, Now: f.kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}, EffectTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	sent, release := make(chan time.Time, 1), make(chan struct{})
	f.obj.set(func(ctx context.Context, req fencegate.PutRequest) (string, error) {
		lb, _ := fencegate.LandBy(ctx)
		sent <- lb
		<-release // held in the network
		return f.obj.ObjectStore.Put(ctx, req)
	}, nil)
	ctx := context.Background()
	type answer struct {
		res gateway.Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := gwA.Apply(ctx, f.request(5, 1, "v1"))
		done <- answer{res, err}
	}()
	landBy := <-sent
	f.kit.Advance(3*time.Minute + 2*time.Second)
	rcB := &gateway.Reconciler{Store: f.store, Now: f.kit.Now, Orphan: 2 * time.Minute, Resolver: func(string) gateway.Resolver {
		return gateway.ObjectResolver{Stores: map[string]fencegate.ObjectStore{"local": f.obj.ObjectStore}, Now: f.kit.Now,
			EffectTimeout: time.Minute, Grace: 2 * time.Minute}
	}}
	for range 2 { // PENDING -> (UNKNOWN) -> NOT_APPLIED
		if _, err := rcB.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	p, _ := f.store.ReceiptsByResource(ctx, resource, fencegate.Page{})
	if len(p.Receipts) != 1 {
		t.Fatalf("%d receipts", len(p.Receipts))
	}
	id := p.Receipts[0].ID
	if st := p.Receipts[0].State; st.Terminal() {
		t.Fatalf("B settled %s %s 3 min after admission, before A's land-by deadline %s", id, st, landBy.Format(time.TimeOnly))
	}
	close(release)
	a := <-done
	got, _ := f.store.Receipt(ctx, id)
	if a.err != nil || got.State != fencegate.ReceiptCommitted || f.content() != "v1" {
		t.Fatalf("A answered %v; receipt %s, object %q; want COMMITTED with v1", a.err, got.State, f.content())
	}
	if !got.LandBy.Equal(landBy) {
		t.Fatalf("receipt's LandBy %v, want the deadline the write was sent with, %v", got.LandBy, landBy)
	}
}
