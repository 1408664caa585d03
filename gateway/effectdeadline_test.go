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

// slowHead is an object store whose Head runs took (which moves the clock) after asking: the
// answer describes the object as it was when the HEAD was asked.
type slowHead struct {
	fencegate.ObjectStore
	took func()
}

func (s slowHead) Head(ctx context.Context, key string) (fencegate.ObjectInfo, error) {
	info, err := s.ObjectStore.Head(ctx, key)
	s.took()
	return info, err
}

// TestResolveJudgesTheObjectAtTheTimeItAsked: an object write is NOT_APPLIED
// only if the object did not carry its receipt at a moment when the write
// could no longer land. A HEAD asked just before that moment, answered just
// after it, shows the object as it was before: the write may land after the
// HEAD, so the receipt stays UNKNOWN; a HEAD asked after it decides.
func TestResolveJudgesTheObjectAtTheTimeItAsked(t *testing.T) {
	f := newFixture(t)
	created := f.kit.Now()
	r := fencegate.Receipt{ID: "rcpt_slowhead", Target: "objects/local/slow", Method: "PUT", State: fencegate.ReceiptPending, CreatedAt: created}
	res := gateway.ObjectResolver{Stores: map[string]fencegate.ObjectStore{"local": slowHead{f.obj, func() { f.kit.Advance(2 * time.Second) }}},
		Now: f.kit.Now, EffectTimeout: time.Minute, Grace: time.Minute}
	landsUntil := gateway.EffectExpiry(r, time.Minute).Add(fencegate.LandBySlack + time.Minute)
	f.kit.Advance(landsUntil.Sub(created) - time.Second) // asked 1 s before, answered 1 s after
	if o, err := res.Resolve(context.Background(), r); err != nil || o.State != fencegate.ReceiptUnknown {
		t.Fatalf("HEAD asked before the write's last moment to land: %s %v; want UNKNOWN", o.State, err)
	}
	if o, err := res.Resolve(context.Background(), r); err != nil || o.State != fencegate.ReceiptNotApplied {
		t.Fatalf("HEAD asked after it: %s %v; want NOT_APPLIED", o.State, err)
	}
}
