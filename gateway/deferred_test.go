package gateway_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// never is an After whose waits never end: a deferred settle is then made
// durable only by a fold, a read or Drain.
func never(time.Duration) <-chan time.Time { return make(chan time.Time) }

// atOnce is an After whose waits end at once.
func atOnce(time.Duration) <-chan time.Time {
	c := make(chan time.Time, 1)
	c <- time.Time{}
	return c
}

// deferring is a gateway over st that defers object settles, with the
// fixture's objects as its Prover.
func (f *fixture) deferring(st fencegate.FenceStore, after func(time.Duration) <-chan time.Time) *gateway.Gateway {
	f.t.Helper()
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: st, Now: f.kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}, DeferSettle: time.Millisecond, After: after,
		Resolver: func(string) gateway.Resolver { return f.objects() }})
	if err != nil {
		f.t.Fatal(err)
	}
	return gw
}

func (f *fixture) objects() gateway.ObjectResolver {
	return gateway.ObjectResolver{Stores: map[string]fencegate.ObjectStore{"local": f.obj}, Now: f.kit.Now,
		EffectTimeout: time.Minute, Grace: time.Minute}
}

// TestDeferredSettleAnswersExactlyWhatTheStoreRecords: a COMMITTED object
// PUT is answered before its settle is durable (the store still holds it
// PENDING, the resource marked), and a read through the gateway flushes it
// first: the stored receipt is the one answered (state, version, time).
func TestDeferredSettleAnswersExactlyWhatTheStoreRecords(t *testing.T) {
	f := newFixture(t)
	gw := f.deferring(f.store, never)
	ctx := context.Background()
	res, err := gw.Apply(ctx, f.request(5, 1, "v1"))
	if err != nil || res.Receipt.State != fencegate.ReceiptCommitted || res.Receipt.Version == "" {
		t.Fatalf("answer %+v %v", res.Receipt, err)
	}
	raw, _ := f.store.Receipt(ctx, res.Receipt.ID)
	rs, _ := f.store.Resource(ctx, resource)
	if raw.State != fencegate.ReceiptPending || rs.PendingReceipt != res.Receipt.ID || gw.DeferredSettles() != 1 {
		t.Fatalf("before the flush: stored %s, pending mark %q, deferred %d", raw.State, rs.PendingReceipt, gw.DeferredSettles())
	}
	got, err := gw.Store().Receipt(ctx, res.Receipt.ID)
	if err != nil || got.State != res.Receipt.State || got.Version != res.Receipt.Version || !got.SettledAt.Equal(*res.Receipt.SettledAt) {
		t.Fatalf("read %+v %v, answered %+v", got, err, res.Receipt)
	}
	if stored, _ := f.store.Receipt(ctx, res.Receipt.ID); stored.State != fencegate.ReceiptCommitted || gw.DeferredSettles() != 0 {
		t.Fatalf("the read did not make the settle durable: %s, %d deferred", stored.State, gw.DeferredSettles())
	}
}

// priorStore is a PriorSettling stand-in: it applies the prior, then the
// admission (not atomically: the gateway's side is what is tested), and
// counts the folds.
type priorStore struct {
	fencegate.FenceStore
	folds atomic.Int32
}

func (s *priorStore) SettlesPrior() bool { return true }

func (s *priorStore) Admit(ctx context.Context, req fencegate.AdmitRequest) (fencegate.Admission, error) {
	var adm fencegate.Admission
	if p := req.Prior; p != nil {
		s.folds.Add(1)
		r, err := s.FenceStore.Settle(ctx, p.ReceiptID, p.Outcome)
		if err != nil {
			adm.PriorErr = err
		} else {
			adm.Prior = &r
		}
	}
	a, err := s.FenceStore.Admit(ctx, req)
	a.Prior, a.PriorErr = adm.Prior, adm.PriorErr
	return a, err
}

// TestNextAdmissionMakesTheDeferredSettleDurableFirst: the next write on the
// resource in this process carries the deferred settle, folded into its
// admission by a PriorSettling store, or settled before it otherwise; the
// earlier receipt is COMMITTED before the next one is admitted.
func TestNextAdmissionMakesTheDeferredSettleDurableFirst(t *testing.T) {
	for _, fold := range []bool{false, true} {
		f := newFixture(t)
		ps := &priorStore{FenceStore: f.store}
		var st fencegate.FenceStore = struct{ fencegate.FenceStore }{f.store} // folds nothing
		if fold {
			st = ps
		}
		gw := f.deferring(st, never)
		ctx := context.Background()
		first, err := gw.Apply(ctx, f.request(5, 1, "v1"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := gw.Apply(ctx, f.request(5, 2, "v2")); err != nil {
			t.Fatalf("fold %v: next write: %v", fold, err)
		}
		got, _ := f.store.Receipt(ctx, first.Receipt.ID)
		if got.State != fencegate.ReceiptCommitted || got.Version != first.Receipt.Version {
			t.Fatalf("fold %v: first receipt %s %q, answered %q", fold, got.State, got.Version, first.Receipt.Version)
		}
		if fold != (ps.folds.Load() == 1) {
			t.Fatalf("fold %v: %d folds", fold, ps.folds.Load())
		}
		if gw.DeferredSettles() != 1 { // the second write's own
			t.Fatalf("fold %v: %d deferred", fold, gw.DeferredSettles())
		}
	}
}

// TestCrashedProcessesDeferredSettleIsProvenCommitted: the answering process
// died before its settle was durable. Another gateway reading the receipt,
// or the resource, sees it COMMITTED at the answered version (the object
// names it), and its admission of the next segment does not wait for the
// orphan age; neither does the reconciler.
func TestCrashedProcessesDeferredSettleIsProvenCommitted(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	dead := f.deferring(f.store, never)
	first, err := dead.Apply(ctx, f.request(5, 1, "v1"))
	if err != nil {
		t.Fatal(err)
	}
	other := f.deferring(f.store, atOnce)
	rs, err := other.Store().Resource(ctx, resource)
	if err != nil || rs.PendingReceipt != "" {
		t.Fatalf("resource read: %+v %v", rs, err)
	}
	got, err := other.Store().Receipt(ctx, first.Receipt.ID)
	if err != nil || got.State != fencegate.ReceiptCommitted || got.Version != first.Receipt.Version {
		t.Fatalf("read %+v %v, answered %+v", got, err, first.Receipt)
	}

	// Again, proven by the next admission elsewhere.
	second, err := f.deferring(f.store, never).Apply(ctx, f.request(5, 2, "v2"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Apply(ctx, f.request(5, 3, "v3")); err != nil {
		t.Fatalf("admission behind a crashed deferral: %v", err)
	}
	if err := other.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.store.Receipt(ctx, second.Receipt.ID); got.State != fencegate.ReceiptCommitted || got.Version != second.Receipt.Version {
		t.Fatalf("second receipt %s %q, answered %q", got.State, got.Version, second.Receipt.Version)
	}

	// And by the reconciler, a second old (younger than Orphan).
	third, err := f.deferring(f.store, never).Apply(ctx, f.request(5, 4, "v4"))
	if err != nil {
		t.Fatal(err)
	}
	rc := &gateway.Reconciler{Store: f.store, Now: f.kit.Now, Orphan: time.Minute,
		Resolver: func(string) gateway.Resolver { return f.objects() }}
	f.kit.Advance(2 * time.Second)
	if n, err := rc.RunOnce(ctx); n != 1 || err != nil {
		t.Fatalf("reconciler settled %d: %v", n, err)
	}
	if got, _ := f.store.Receipt(ctx, third.Receipt.ID); got.State != fencegate.ReceiptCommitted || got.Version != third.Receipt.Version {
		t.Fatalf("third receipt %s %q, answered %q", got.State, got.Version, third.Receipt.Version)
	}
}

// TestOnlyACommittedObjectPutIsDeferred: an uncertain write is settled
// UNKNOWN before it is answered, with the window on.
func TestOnlyACommittedObjectPutIsDeferred(t *testing.T) {
	f := newFixture(t)
	gw := f.deferring(f.store, never)
	f.obj.timeOut()
	_, err := gw.Apply(context.Background(), f.request(5, 1, "v1"))
	if fencegate.ErrorCode(err) != fencegate.CodeMutationUnknown || gw.DeferredSettles() != 0 {
		t.Fatalf("uncertain write: %v, %d deferred", err, gw.DeferredSettles())
	}
	page, _ := f.store.ReceiptsByState(context.Background(), fencegate.ReceiptUnknown, fencegate.Page{})
	if len(page.Receipts) != 1 {
		t.Fatalf("%d UNKNOWN receipts stored", len(page.Receipts))
	}
}

// TestDrainMakesEveryDeferredSettleDurable: stopping the process flushes
// what is deferred before the store closes.
func TestDrainMakesEveryDeferredSettleDurable(t *testing.T) {
	f := newFixture(t)
	gw := f.deferring(f.store, never)
	ctx := context.Background()
	res, err := gw.Apply(ctx, f.request(5, 1, "v1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Drain(ctx); err != nil || gw.DeferredSettles() != 0 {
		t.Fatalf("drain: %v, %d left", err, gw.DeferredSettles())
	}
	if got, _ := f.store.Receipt(ctx, res.Receipt.ID); got.State != fencegate.ReceiptCommitted {
		t.Fatalf("after drain: %s", got.State)
	}
}

// TestDeferredSettleIsFlushedAfterItsWindow: with no next write, the
// window's end flushes it.
func TestDeferredSettleIsFlushedAfterItsWindow(t *testing.T) {
	f := newFixture(t)
	clk := newRetryClock()
	st := &signalStore{FenceStore: f.store, settled: make(chan fencegate.Receipt, 1)}
	gw := f.deferring(st, clk.after)
	ctx := context.Background()
	res, err := gw.Apply(ctx, f.request(5, 1, "v1"))
	if err != nil {
		t.Fatal(err)
	}
	if d := await(t, clk.waiting, "window"); d != time.Millisecond {
		t.Fatalf("window %v", d)
	}
	clk.tick <- time.Time{}
	if got := await(t, st.settled, "flush"); got.ID != res.Receipt.ID || got.State != fencegate.ReceiptCommitted {
		t.Fatalf("flushed %+v", got)
	}
}

// signalStore reports every settle it recorded.
type signalStore struct {
	fencegate.FenceStore
	settled chan fencegate.Receipt
}

func (s *signalStore) Settle(ctx context.Context, id string, o fencegate.Outcome) (fencegate.Receipt, error) {
	r, err := s.FenceStore.Settle(ctx, id, o)
	if err == nil {
		s.settled <- r
	}
	return r, err
}
