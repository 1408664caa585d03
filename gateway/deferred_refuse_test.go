package gateway_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/fencegate/fencegate"
)

// TestUnrecordedPriorRefusesTheNextWriteAndChangesNothing: a store that
// cannot fold the resource's deferred settle into an admission has it
// settled first; when that settle fails without a verdict the next write is
// BACKEND_UNAVAILABLE and nothing is stored: no receipt, the resource state
// and the object as before, the earlier settle still deferred (not lost).
func TestUnrecordedPriorRefusesTheNextWriteAndChangesNothing(t *testing.T) {
	f := newFixture(t)
	st := &ctxStore{FenceStore: f.store} // folds nothing
	gw := f.deferring(st, never)
	ctx := context.Background()
	first, err := gw.Apply(ctx, f.request(5, 1, "v1"))
	if err != nil || gw.DeferredSettles() != 1 {
		t.Fatalf("apply: %v, %d deferred", err, gw.DeferredSettles())
	}
	rsBefore, _ := f.store.Resource(ctx, resource)
	pageBefore, _ := f.store.ReceiptsByResource(ctx, resource, fencegate.Page{})
	st.down.Store(true)
	_, err = gw.Apply(ctx, f.request(5, 2, "v2"))
	if fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("next write with its prior unrecorded: %v, want BACKEND_UNAVAILABLE", err)
	}
	rsAfter, _ := f.store.Resource(ctx, resource)
	pageAfter, _ := f.store.ReceiptsByResource(ctx, resource, fencegate.Page{})
	if !reflect.DeepEqual(rsBefore, rsAfter) || !reflect.DeepEqual(pageBefore, pageAfter) {
		t.Fatalf("refused write changed the store: resource %+v -> %+v, receipts %d -> %d", rsBefore, rsAfter, len(pageBefore.Receipts), len(pageAfter.Receipts))
	}
	if f.content() != "v1" || gw.DeferredSettles() != 1 {
		t.Fatalf("after the refusal: object %q, %d deferred; want v1, 1", f.content(), gw.DeferredSettles())
	}
	st.down.Store(false)
	if _, err := gw.Apply(ctx, f.request(5, 2, "v2")); err != nil {
		t.Fatalf("next write once the store is back: %v", err)
	}
	if r, _ := f.store.Receipt(ctx, first.Receipt.ID); r.State != fencegate.ReceiptCommitted || r.Version != first.Receipt.Version {
		t.Fatalf("earlier receipt %s %q, answered %q", r.State, r.Version, first.Receipt.Version)
	}
}
