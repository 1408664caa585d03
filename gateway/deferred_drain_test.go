package gateway_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate"
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
