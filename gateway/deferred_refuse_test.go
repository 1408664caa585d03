package gateway_test

import (
	"bytes"
	"context"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
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
	before := f.stored()
	st.down.Store(true)
	_, err = gw.Apply(ctx, f.request(5, 2, "v2"))
	if fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("next write with its prior unrecorded: %v, want BACKEND_UNAVAILABLE", err)
	}
	if after := f.stored(); !reflect.DeepEqual(before, after) {
		t.Fatalf("refused write changed the store: %+v -> %+v", before, after)
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

// storedState is what the store holds of the fixture's resource.
type storedState struct {
	Resource fencegate.ResourceState
	Receipts []fencegate.Receipt
}

// stored reads the resource's row and receipts, to compare before and
// after a refusal.
func (f *fixture) stored() storedState {
	f.t.Helper()
	ctx := context.Background()
	rs, err := f.store.Resource(ctx, resource)
	if err != nil {
		f.t.Fatal(err)
	}
	page, err := f.store.ReceiptsByResource(ctx, resource, fencegate.Page{})
	if err != nil {
		f.t.Fatal(err)
	}
	return storedState{rs, page.Receipts}
}

// TestMalformedWriteDoesNotCarryTheDeferredSettle: a write refused as
// malformed (its effect key has a space) on a resource with a deferred
// settle is INVALID_REQUEST before the settle is folded into it: nothing
// stored, the settle still deferred and no store breach reported (before,
// the store refused the request with the settle on it, answering neither
// way, and the gateway logged a broken PriorSettling contract); the next
// valid write folds it.
func TestMalformedWriteDoesNotCarryTheDeferredSettle(t *testing.T) {
	f := newFixture(t)
	var logged bytes.Buffer // slog's handler writes each record whole, under its own lock
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: f.store, Now: f.kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}, DeferSettle: time.Millisecond, After: never,
		Log: slog.New(slog.NewJSONHandler(&logged, nil)), Resolver: func(string) gateway.Resolver { return f.objects() }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first, err := gw.Apply(ctx, f.request(5, 1, "v1"))
	if err != nil || gw.DeferredSettles() != 1 {
		t.Fatalf("apply: %v, %d deferred", err, gw.DeferredSettles())
	}
	before := f.stored()
	bad := f.request(5, 2, "v2")
	bad.EffectKey = "has a space"
	if _, err := gw.Apply(ctx, bad); fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
		t.Fatalf("malformed write: %v, want INVALID_REQUEST", err)
	}
	if after := f.stored(); !reflect.DeepEqual(before, after) {
		t.Fatalf("refused write changed the store: %+v -> %+v", before, after)
	}
	if errs := strings.Count(logged.String(), `"level":"ERROR"`); f.content() != "v1" || gw.DeferredSettles() != 1 || errs != 0 {
		t.Fatalf("after the refusal: object %q, %d deferred, %d error logs; want v1, 1, 0", f.content(), gw.DeferredSettles(), errs)
	}
	if _, err := gw.Apply(ctx, f.request(5, 2, "v2")); err != nil {
		t.Fatalf("next valid write: %v", err)
	}
	if r, _ := f.store.Receipt(ctx, first.Receipt.ID); r.State != fencegate.ReceiptCommitted || r.Version != first.Receipt.Version {
		t.Fatalf("earlier receipt %s %q, answered %q", r.State, r.Version, first.Receipt.Version)
	}
}
