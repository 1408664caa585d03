package gateway_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// partitionedStore is lateCommitStore whose Settle fails without a
// verdict while down (this replica cut off from the store).
type partitionedStore struct {
	*lateCommitStore
	down  atomic.Bool
	tried atomic.Int32
}

func (s *partitionedStore) Settle(ctx context.Context, id string, o fencegate.Outcome) (fencegate.Receipt, error) {
	if s.down.Load() {
		s.tried.Add(1)
		return fencegate.Receipt{}, fencegate.Errorf(fencegate.CodeBackendUnavailable, "store unreachable")
	}
	return s.lateCommitStore.Settle(ctx, id, o)
}

// TestQueuedNotAppliedLeavesAnOrphanResendAlone: the NOT_APPLIED that admit
// queues after an uncertain attempt cannot reach the store before the
// receipt's orphan time; another replica's reconciler takes the (late
// visible) PENDING receipt for an orphan and resends its effect (an API
// call under its key), whose answer is lost: the receipt is UNKNOWN. When
// the queued NOT_APPLIED reaches the store it changes nothing (IfPending:
// the receipt is no longer as admitted), so a receipt whose effect may
// have been applied upstream is not read NOT_APPLIED (the worker would pay
// again).
func TestQueuedNotAppliedLeavesAnOrphanResendAlone(t *testing.T) {
	f := newFixture(t)
	lc := &lateCommitStore{FenceStore: f.store, lose: true, hidden: map[string]bool{},
		lost: func() { f.kit.Advance(time.Minute) }} // the status proof expires meanwhile
	st := &partitionedStore{lateCommitStore: lc}
	st.down.Store(true)
	tick := make(chan time.Time)
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: st, Now: f.kit.Now,
		After:  func(time.Duration) <-chan time.Time { return tick },
		Policy: gateway.StaticPolicy{Generation: 1}, NewID: func() string { return "rcpt_late" }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := gw.Apply(ctx, f.request(5, 1, "v1")); err == nil {
		t.Fatal("want a refusal")
	}
	if gw.UnsettledOutcomes() != 1 {
		t.Fatalf("queued outcomes: %d; want the deferred NOT_APPLIED", gw.UnsettledOutcomes())
	}
	// Another replica, which reaches the store, after the orphan time.
	f.kit.Advance(10 * time.Minute)
	var sends atomic.Int32
	rc := &gateway.Reconciler{Store: f.store, Now: f.kit.Now,
		Resolver: func(string) gateway.Resolver {
			return gateway.ResolverFunc(func(ctx context.Context, r fencegate.Receipt) (fencegate.Outcome, error) {
				sends.Add(1) // the orphan resend: sent, answer lost
				return fencegate.Outcome{State: fencegate.ReceiptUnknown, Resend: true, Error: "timeout"}, nil
			})
		}}
	if _, err := rc.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _ := f.store.Receipt(ctx, "rcpt_late"); r.State != fencegate.ReceiptUnknown || sends.Load() != 1 {
		t.Fatalf("after the orphan pass: %s, %d sends", r.State, sends.Load())
	}
	// This replica reaches the store again.
	st.down.Store(false)
	close(tick)
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_ = gw.Drain(dctx)
	r, _ := f.store.Receipt(ctx, "rcpt_late")
	if r.State == fencegate.ReceiptNotApplied {
		t.Fatalf("receipt %s is NOT_APPLIED (%q) after its effect was resent (%d sends) with an unknown answer", r.ID, r.Error, sends.Load())
	}
}
