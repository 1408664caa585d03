package gateway_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// collidingStore fails every Settle without a verdict, and loses the
// answer of every admission after the first without committing it.
type collidingStore struct {
	fencegate.FenceStore
	admits atomic.Int32
}

func (s *collidingStore) Settle(context.Context, string, fencegate.Outcome) (fencegate.Receipt, error) {
	return fencegate.Receipt{}, &fencegate.Error{Code: fencegate.CodeBackendUnavailable, Message: "down"}
}

func (s *collidingStore) Admit(ctx context.Context, req fencegate.AdmitRequest) (fencegate.Admission, error) {
	if s.admits.Add(1) == 1 {
		return s.FenceStore.Admit(ctx, req)
	}
	return fencegate.Admission{}, fencegate.Errorf(fencegate.CodeInternal, "connection lost during commit")
}

// TestLostAdmissionAckFindsOnlyItsOwnReceipt: recovering an admission whose
// answer was lost takes the receipt under its ID as its own only if it is
// this request's (resource, fence, segment, target, payload). A receipt ID
// made twice (NewOrderedID leaves 56 random bits per millisecond) must not
// forward this request's effect under another admission, nor queue
// NOT_APPLIED for that other receipt.
func TestLostAdmissionAckFindsOnlyItsOwnReceipt(t *testing.T) {
	f := newFixture(t)
	st := &collidingStore{FenceStore: f.store}
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: st, Now: f.kit.Now, After: never,
		Policy: gateway.StaticPolicy{Generation: 1}, NewID: func() string { return "rcpt_same" }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := gw.Apply(ctx, f.request(5, 1, "v1")); fencegate.ErrorCode(err) != fencegate.CodeMutationUnknown {
		t.Fatalf("first write with the store down at settle: %v", err)
	}
	queued := gw.UnsettledOutcomes()
	_, err = gw.Apply(ctx, f.request(5, 2, "v2"))
	if fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable || f.content() != "v1" {
		t.Fatalf("second write under the same receipt ID, its admission's answer lost: %v, object %q; want BACKEND_UNAVAILABLE, nothing forwarded", err, f.content())
	}
	if got := gw.UnsettledOutcomes(); got != queued {
		t.Fatalf("%d outcomes queued, was %d: the other receipt was queued NOT_APPLIED", got, queued)
	}
	if r, _ := f.store.Receipt(ctx, "rcpt_same"); r.State != fencegate.ReceiptPending || r.Segment != 1 {
		t.Fatalf("the first write's receipt: %s segment %d", r.State, r.Segment)
	}
}
