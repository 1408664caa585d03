package gateway_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate"
)

// silentPriorStore breaks the PriorSettling contract once: it applies the
// folded prior and admits, but answers neither Admission.Prior nor PriorErr.
type silentPriorStore struct {
	priorStore
	breaches atomic.Int32
}

func (s *silentPriorStore) Admit(ctx context.Context, req fencegate.AdmitRequest) (fencegate.Admission, error) {
	a, err := s.priorStore.Admit(ctx, req)
	if req.Prior != nil && err == nil && s.breaches.Add(1) == 1 {
		a.Prior, a.PriorErr = nil, nil
	}
	return a, err
}

// TestPriorOfUnknownFateStaysTheResourcesEntry: an admission whose store said
// nothing about the folded prior leaves the prior's fate unknown, so the
// prior stays the resource's deferred entry (the next write on the resource
// settles synchronously instead of replacing it), and the write after that
// carries the prior again until the store rules on it.
func TestPriorOfUnknownFateStaysTheResourcesEntry(t *testing.T) {
	f := newFixture(t)
	st := &silentPriorStore{priorStore: priorStore{FenceStore: f.store}}
	gw := f.deferring(st, never)
	ctx := context.Background()
	first, err := gw.Apply(ctx, f.request(5, 1, "v1"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := gw.Apply(ctx, f.request(5, 2, "v2"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := f.store.Receipt(ctx, second.Receipt.ID); got.State != fencegate.ReceiptCommitted || gw.DeferredSettles() != 1 {
		t.Fatalf("second write stored %s with %d deferred: it replaced the prior of unknown fate", got.State, gw.DeferredSettles())
	}
	if _, err := gw.Apply(ctx, f.request(5, 3, "v3")); err != nil {
		t.Fatal(err)
	}
	if st.folds.Load() != 2 {
		t.Fatalf("%d folds: the prior of unknown fate was not carried again", st.folds.Load())
	}
	if got, _ := f.store.Receipt(ctx, first.Receipt.ID); got.State != fencegate.ReceiptCommitted || got.Version != first.Receipt.Version {
		t.Fatalf("first receipt %s %q, answered %q", got.State, got.Version, first.Receipt.Version)
	}
	if err := gw.Drain(ctx); err != nil || gw.DeferredSettles() != 0 {
		t.Fatalf("drain: %v, %d left", err, gw.DeferredSettles())
	}
}
