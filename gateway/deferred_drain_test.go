package gateway_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// ctxStore fails every Settle while down, counting the ones made with a ctx
// that had not ended (the settle was not bounded by the caller's ctx).
type ctxStore struct {
	fencegate.FenceStore
	down atomic.Bool
	live atomic.Int32
}

func (s *ctxStore) Settle(ctx context.Context, id string, o fencegate.Outcome) (fencegate.Receipt, error) {
	if s.down.Load() {
		if ctx.Err() == nil {
			s.live.Add(1)
		}
		return fencegate.Receipt{}, &fencegate.Error{Code: fencegate.CodeBackendUnavailable, Message: "down"}
	}
	return s.FenceStore.Settle(ctx, id, o)
}

// TestDrainBoundsTheDeferredSettlesByItsCtx: Drain's ctx bounds the deferred
// settles it makes (a store that hangs cannot hold a stopping process for
// settleTimeout per entry); what is left stays deferred, and a later Drain
// makes it durable.
func TestDrainBoundsTheDeferredSettlesByItsCtx(t *testing.T) {
	f := newFixture(t)
	st := &ctxStore{FenceStore: f.store}
	gw := f.deferring(st, never)
	ctx := context.Background()
	w, err := gw.Apply(ctx, f.request(5, 1, "v1"))
	if err != nil || gw.DeferredSettles() != 1 {
		t.Fatalf("apply: %v, %d deferred", err, gw.DeferredSettles())
	}
	st.down.Store(true)
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := gw.Drain(done); err == nil || st.live.Load() != 0 || gw.DeferredSettles() != 1 {
		t.Fatalf("drain with its ctx ended: %v, %d settles outside its ctx, %d deferred", err, st.live.Load(), gw.DeferredSettles())
	}
	st.down.Store(false)
	if err := gw.Drain(ctx); err != nil || gw.DeferredSettles() != 0 {
		t.Fatalf("drain: %v, %d left", err, gw.DeferredSettles())
	}
	if r, _ := f.store.Receipt(ctx, w.Receipt.ID); r.State != fencegate.ReceiptCommitted {
		t.Fatalf("after drain: %s", r.State)
	}
}

// TestReadOfAnAnsweredWriteWhoseSettleTheStoreRefusesReadsItCommitted: read
// your writes holds in the answering process even while the fence store
// takes no settle (its writes fail, its reads work) and the object cannot
// be asked to prove the write: a receipt read answers the write as it was
// answered (COMMITTED at its version and settle time), not PENDING, and
// once the store takes settles again the stored receipt is the same.
func TestReadOfAnAnsweredWriteWhoseSettleTheStoreRefusesReadsItCommitted(t *testing.T) {
	f := newFixture(t)
	st := &ctxStore{FenceStore: f.store}
	gw := f.deferring(st, never)
	ctx := context.Background()
	w, err := gw.Apply(ctx, f.request(5, 1, "v1"))
	if err != nil || w.Receipt.State != fencegate.ReceiptCommitted {
		t.Fatalf("apply: %v, %s", err, w.Receipt.State)
	}
	st.down.Store(true)
	f.obj.timeOut()
	got, err := gw.Store().Receipt(ctx, w.Receipt.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != fencegate.ReceiptCommitted || got.Version != w.Receipt.Version || got.SettledAt == nil ||
		!got.SettledAt.Equal(*w.Receipt.SettledAt) {
		t.Fatalf("read while the store takes no settle: %s %q %v, answered %s %q %v",
			got.State, got.Version, got.SettledAt, w.Receipt.State, w.Receipt.Version, w.Receipt.SettledAt)
	}
	if stored, _ := f.store.Receipt(ctx, w.Receipt.ID); stored.State != fencegate.ReceiptPending || gw.DeferredSettles() != 1 {
		t.Fatalf("the store holds %s with %d deferred; want PENDING, the entry kept", stored.State, gw.DeferredSettles())
	}
	st.down.Store(false)
	f.obj.set(nil, nil)
	if err := gw.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	stored, _ := f.store.Receipt(ctx, w.Receipt.ID)
	if stored.State != fencegate.ReceiptCommitted || stored.Version != w.Receipt.Version || !stored.SettledAt.Equal(*w.Receipt.SettledAt) {
		t.Fatalf("stored after the store came back: %s %q %v, answered %q %v", stored.State, stored.Version, stored.SettledAt,
			w.Receipt.Version, w.Receipt.SettledAt)
	}
}

// TestEndOfBackgroundStopsTheFlushersAndRetries: the gateway's background
// settles (a deferred settle's flusher, the settle retry queue) keep trying
// a store that takes no settle only while the gateway's Background lasts;
// once it ends (the app ends it after Drain, before the store closes) they
// return, so none outlives the store, and the entry is kept for Drain.
func TestEndOfBackgroundStopsTheFlushersAndRetries(t *testing.T) {
	f := newFixture(t)
	st := &ctxStore{FenceStore: f.store}
	st.down.Store(true)
	background, end := context.WithCancel(context.Background())
	defer end()
	var (
		running sync.WaitGroup
		spawned atomic.Int32
	)
	spawn := func(fn func()) {
		spawned.Add(1)
		running.Add(1)
		go func() { defer running.Done(); fn() }()
	}
	gateways := map[time.Duration]*gateway.Gateway{}
	for _, window := range []time.Duration{time.Millisecond, 0} { // deferred; settled at once, retried
		gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: st, Now: f.kit.Now,
			Policy: gateway.StaticPolicy{Generation: 1}, DeferSettle: window, After: atOnce, Go: spawn,
			Background: background, Resolver: func(string) gateway.Resolver { return f.objects() }})
		if err != nil {
			t.Fatal(err)
		}
		gateways[window] = gw
	}
	ctx := context.Background()
	if _, err := gateways[time.Millisecond].Apply(ctx, f.request(5, 1, "v1")); err != nil {
		t.Fatal(err)
	}
	_, _ = gateways[0].Apply(ctx, f.request(5, 2, "v2")) // its settle fails: queued for retry
	if n := spawned.Load(); n != 2 {
		t.Fatalf("%d background loops started, want 2 (a flusher, the retry queue)", n)
	}
	end()
	stopped := make(chan struct{})
	go func() { running.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(20 * time.Second): // a liveness guard, not a measurement
		t.Fatal("a flusher or the retry loop still runs after the gateway's Background ended")
	}
	if n := gateways[time.Millisecond].DeferredSettles(); n != 1 {
		t.Fatalf("%d deferred settles after the flusher stopped, want 1 (left for Drain)", n)
	}
}

// Rule: a resource read while the store takes no settle leaves a settle
// deferred here to its entry, which records the answered SettledAt: no
// proof of its receipt queues a second settle of another SettledAt, which
// could land first.
func TestAResourceReadLeavesADeferredSettleToItsEntry(t *testing.T) {
	f := newFixture(t)
	st := &ctxStore{FenceStore: f.store}
	after := func(d time.Duration) <-chan time.Time {
		if d == time.Millisecond { // the deferral window: never
			return make(chan time.Time)
		}
		return atOnce(d)
	}
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: st, Now: f.kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}, DeferSettle: time.Millisecond, After: after,
		Resolver: func(string) gateway.Resolver { return f.objects() }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	w, err := gw.Apply(ctx, f.request(5, 1, "v1"))
	if err != nil {
		t.Fatal(err)
	}
	st.down.Store(true)
	f.kit.Advance(3 * time.Second)
	if _, err := gw.Store().Resource(ctx, resource); err != nil {
		t.Fatal(err)
	}
	if n := gw.UnsettledOutcomes(); n != 0 {
		t.Fatalf("the resource read queued %d settles beside the deferred entry", n)
	}
	st.down.Store(false)
	if err := gw.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	stored, _ := f.store.Receipt(ctx, w.Receipt.ID)
	if stored.State != fencegate.ReceiptCommitted || !stored.SettledAt.Equal(*w.Receipt.SettledAt) {
		t.Fatalf("stored %s at %v, answered %s at %v", stored.State, stored.SettledAt, w.Receipt.State, w.Receipt.SettledAt)
	}
}
