package gateway_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/embedded"
)

// swapFailStore is the embedded store whose SwapVersion can be made to fail
// (a store timeout on that one call).
type swapFailStore struct {
	*embedded.Store
	fail atomic.Bool
}

func (s *swapFailStore) SwapVersion(ctx context.Context, target, from, to string) error {
	if s.fail.Load() {
		return fencegate.Errorf(fencegate.CodeBackendUnavailable, "store timeout")
	}
	return s.Store.SwapVersion(ctx, target, from, to)
}

func swapFailShadowFixture(t *testing.T) (*fixture, *swapFailStore) {
	t.Helper()
	var st *swapFailStore
	f := shadowFixture(t, nil, func(emb *embedded.Store) fencegate.FenceStore {
		st = &swapFailStore{Store: emb}
		return st
	})
	return f, st
}

// TestShadowForwardWhoseVersionWasNotRecordedDoesNotWedgeTheKey: a shadow
// forward answered COMMITTED whose version the fence store fails to record
// is remembered like one of unknown outcome, so the owner's next writes meet
// its object, adopt its version, and go on (not BACKEND_CONFLICT for good).
func TestShadowForwardWhoseVersionWasNotRecordedDoesNotWedgeTheKey(t *testing.T) {
	f, st := swapFailShadowFixture(t)
	ctx := context.Background()
	if _, err := f.gw.Apply(ctx, f.request(6, 1, "new")); err != nil {
		t.Fatal(err)
	}
	st.fail.Store(true)
	res, err := f.gw.Apply(ctx, f.request(5, 1, "stale"))
	if err != nil || res.Receipt.State != fencegate.ReceiptCommitted || f.content() != "stale" {
		t.Fatalf("shadow forward: %s %v %q", res.Receipt.State, err, f.content())
	}
	st.fail.Store(false)
	for try := 1; try <= 3; try++ {
		r, err := f.gw.Apply(ctx, f.request(6, 2, "new2"))
		if err == nil && r.Receipt.State == fencegate.ReceiptCommitted {
			return // recovered
		}
	}
	t.Fatalf("the owner's key is wedged after a COMMITTED shadow forward whose version was not recorded; object %q", f.content())
}

// TestFailedAdoptionIsTriedAgainByTheNextWrite: when recording a lost shadow
// forward's version fails (a store timeout), the forward stays remembered,
// and a later write adopts it and goes on (it was forgotten, and the key
// stayed BACKEND_CONFLICT for good).
func TestFailedAdoptionIsTriedAgainByTheNextWrite(t *testing.T) {
	f, st := swapFailShadowFixture(t)
	ctx := context.Background()
	if _, err := f.gw.Apply(ctx, f.request(6, 1, "new")); err != nil {
		t.Fatal(err)
	}
	var lose atomic.Bool
	lose.Store(true)
	f.loseAnswers(&lose)
	if res, _ := f.gw.Apply(ctx, f.request(5, 1, "stale")); res.Receipt.State != fencegate.ReceiptUnknown || f.content() != "stale" {
		t.Fatalf("shadow forward: %s, object %q", res.Receipt.State, f.content())
	}
	lose.Store(false)
	f.obj.set(nil, nil)
	st.fail.Store(true) // the adoption's SwapVersion times out once
	if _, err := f.gw.Apply(ctx, f.request(6, 2, "new2")); fencegate.ErrorCode(err) != fencegate.CodeBackendConflict {
		t.Fatalf("first owner write: %v", err)
	}
	st.fail.Store(false)
	for try := 1; try <= 3; try++ {
		r, err := f.gw.Apply(ctx, f.request(6, 2, "new2"))
		if err == nil && r.Receipt.State == fencegate.ReceiptCommitted {
			return
		}
	}
	t.Fatalf("key wedged after one failed SwapVersion during adoption; object %q", f.content())
}
