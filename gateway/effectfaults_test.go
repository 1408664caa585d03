package gateway_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// hangingSettles is a fence store whose Settle answers only when its
// context ends (a connection whose packets are dropped: no reset, no answer).
type hangingSettles struct {
	fencegate.FenceStore
	hang       atomic.Bool
	noDeadline atomic.Int32
}

func (h *hangingSettles) Settle(ctx context.Context, id string, o fencegate.Outcome) (fencegate.Receipt, error) {
	if _, ok := ctx.Deadline(); !ok {
		h.noDeadline.Add(1)
	}
	if h.hang.Load() {
		<-ctx.Done()
		return fencegate.Receipt{}, fencegate.Wrap(ctx.Err(), fencegate.CodeBackendUnavailable, "settle")
	}
	return h.FenceStore.Settle(ctx, id, o)
}

// Rule: the settle after an effect is bounded like every other store call
// of a write (settleTimeout), so a store that stops answering does not hold
// the resource's lock: the write answers MUTATION_UNKNOWN with its receipt,
// the outcome goes to the retry queue, and it is recorded once the store
// answers again. The settle used to wait without a deadline.
func TestTheSettleAfterAnEffectIsBounded(t *testing.T) {
	defer gateway.SetSettleTimeout(50 * time.Millisecond)()
	f := newFixture(t)
	hs := &hangingSettles{FenceStore: f.store}
	gw := f.gatewayOver(hs)
	hs.hang.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := gw.Apply(context.Background(), f.request(5, 1, "v1"))
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second): // a hang, not a timing bound
		t.Fatalf("Apply still waits for its settle; Settle calls without a deadline: %d", hs.noDeadline.Load())
	}
	var fe *fencegate.Error
	if fencegate.ErrorCode(err) != fencegate.CodeMutationUnknown || !asError(err, &fe) || fe.ReceiptID == "" {
		t.Fatalf("a write whose settle timed out answered %v, want MUTATION_UNKNOWN with its receipt", err)
	}
	if n := gateway.LockHolders(gw, resource); n != 0 {
		t.Fatalf("%d requests still hold the resource's lock", n)
	}
	hs.hang.Store(false)
	if err := gw.Drain(context.Background()); err != nil {
		t.Fatalf("drain: %v", err)
	}
	r, rerr := f.store.Receipt(context.Background(), fe.ReceiptID)
	if rerr != nil || r.State != fencegate.ReceiptCommitted {
		t.Fatalf("after the store answers again the receipt is %s (%v), want COMMITTED from the retry queue", r.State, rerr)
	}
}

// Rule: an effect that panics (after it may have sent its request) is
// settled UNKNOWN at once and answered MUTATION_UNKNOWN with its receipt;
// it used to unwind past the settle, leaving the receipt PENDING and the
// resource RESOURCE_BUSY for every fence until the orphan pass.
func TestAPanickingEffectIsSettledUnknownAtOnce(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	req := f.request(5, 1, "v1")
	req.Effect = gateway.EffectFunc(func(context.Context, fencegate.Receipt, string) (fencegate.Outcome, error) {
		panic("parsing the upstream answer")
	})
	_, err := f.gw.Apply(ctx, req)
	var fe *fencegate.Error
	if fencegate.ErrorCode(err) != fencegate.CodeMutationUnknown || !asError(err, &fe) || fe.ReceiptID == "" {
		t.Fatalf("a panicking effect answered %v, want MUTATION_UNKNOWN with its receipt", err)
	}
	r, err := f.store.Receipt(ctx, fe.ReceiptID)
	if err != nil || r.State != fencegate.ReceiptUnknown || r.Resend {
		t.Fatalf("the receipt is %s resend=%v (%v), want UNKNOWN without a resend allowed", r.State, r.Resend, err)
	}
	if n := gateway.LockHolders(f.gw, resource); n != 0 {
		t.Fatalf("%d requests still hold the resource's lock", n)
	}
}

// Rule: only the grant's owner (or its verified delegate) learns that its
// fence was superseded. A caller that is neither, presenting a superseded
// grant with a proof that does not hold, is refused for the proof
// (STATUS_INVALID), never told STALE_OWNER, and nothing changes.
func TestOnlyTheOwnerLearnsItsFenceWasSuperseded(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, r := range []gateway.Request{f.request(5, 1, "v1"), f.request(6, 1, "v2")} {
		if _, err := f.gw.Apply(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	stale := f.request(5, 2, "v3")
	tok, vg := f.kit.VerifiedGrant(func(g *fencegate.Grant) {
		g.Resource, g.FenceToken, g.Lease, g.OperationRoot = resource, 5, "lease-5", "root-5"
	})
	stale.GrantToken = tok
	stale.StatusToken = f.kit.Status(vg, func(s *fencegate.Status) { s.State = fencegate.StateExpired })
	before := f.storedState()
	stale.Caller = "spiffe://test/someone-else"
	if _, err := f.gw.Apply(ctx, stale); fencegate.ErrorCode(err) != fencegate.CodeStatusInvalid {
		t.Fatalf("an impostor with a superseded grant was answered %v, want STATUS_INVALID", err)
	}
	stale.Caller = owner
	if _, err := f.gw.Apply(ctx, stale); fencegate.ErrorCode(err) != fencegate.CodeStaleOwner {
		t.Fatalf("the owner with a superseded grant was answered %v, want STALE_OWNER", err)
	}
	if after := f.storedState(); after != before {
		t.Fatalf("refusals changed the store:\nbefore %s\nafter  %s", before, after)
	}
}
