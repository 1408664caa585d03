package gateway_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// downStore is a fence store that can be taken down: while down, every call
// answers BACKEND_UNAVAILABLE, as the Postgres store does when its server is
// restarting. lose makes the next Admit commit and then fail the same way
// (the commit's acknowledgement lost with the connection). settled is told of
// every Settle that succeeded.
type downStore struct {
	fencegate.FenceStore
	down, lose atomic.Bool
	// afterEffect takes the store down when the effect has been applied.
	afterEffect atomic.Bool
	settled     chan string
}

func (s *downStore) fault() error {
	return fencegate.Errorf(fencegate.CodeBackendUnavailable, "fence store: the database is unavailable")
}

func (s *downStore) Admit(ctx context.Context, req fencegate.AdmitRequest) (fencegate.Admission, error) {
	if s.down.Load() {
		return fencegate.Admission{}, s.fault()
	}
	adm, err := s.FenceStore.Admit(ctx, req)
	if err == nil && s.lose.CompareAndSwap(true, false) {
		s.down.Store(true)
		return fencegate.Admission{}, s.fault()
	}
	return adm, err
}

func (s *downStore) Settle(ctx context.Context, id string, o fencegate.Outcome) (fencegate.Receipt, error) {
	if s.down.Load() {
		return fencegate.Receipt{}, s.fault()
	}
	r, err := s.FenceStore.Settle(ctx, id, o)
	if err == nil {
		s.settled <- id
	}
	return r, err
}

func (s *downStore) Receipt(ctx context.Context, id string) (fencegate.Receipt, error) {
	if s.down.Load() {
		return fencegate.Receipt{}, s.fault()
	}
	return s.FenceStore.Receipt(ctx, id)
}

func (s *downStore) Version(ctx context.Context, target string) (string, error) {
	if s.down.Load() {
		return "", s.fault()
	}
	return s.FenceStore.Version(ctx, target)
}

// retryClock hands the settle retry loop a channel the test ticks, and
// reports each wait the loop starts.
type retryClock struct {
	tick    chan time.Time
	waiting chan time.Duration
}

func newRetryClock() *retryClock {
	return &retryClock{tick: make(chan time.Time), waiting: make(chan time.Duration, 64)}
}

func (c *retryClock) after(d time.Duration) <-chan time.Time { c.waiting <- d; return c.tick }

// await fails the test if ch yields nothing in a minute (a hang, not a
// timing margin: the loop needs no time to run once ticked).
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("no %s", what)
		panic("unreachable")
	}
}

func retryFixture(t *testing.T) (*fixture, *downStore, *retryClock, *gateway.Gateway) {
	t.Helper()
	f := newFixture(t)
	st := &downStore{FenceStore: f.store, settled: make(chan string, 64)}
	clk := newRetryClock()
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: st, Now: f.kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}, After: clk.after,
		Failpoint: func(name string) {
			if name == "after-effect" && st.afterEffect.Load() {
				st.down.Store(true)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	return f, st, clk, gw
}

func asError(err error, fe **fencegate.Error) bool { return errors.As(err, fe) }

// TestSettleThatFailedIsRetriedUntilTheStoreIsBack: the effect was applied but
// the store went down before its receipt was settled. The caller is answered
// MUTATION_UNKNOWN naming the receipt; the outcome is retried in the
// background, with growing waits while the store is down, and recorded as soon
// as it is back: the receipt is COMMITTED with the object's version, a replay
// answers it without a second write, and the resource takes the next segment.
func TestSettleThatFailedIsRetriedUntilTheStoreIsBack(t *testing.T) {
	f, st, clk, gw := retryFixture(t)
	st.afterEffect.Store(true)
	ctx := context.Background()

	_, err := gw.Apply(ctx, f.request(5, 1, "v1"))
	var fe *fencegate.Error
	if fencegate.ErrorCode(err) != fencegate.CodeMutationUnknown || !asError(err, &fe) || fe.ReceiptID == "" {
		t.Fatalf("Apply with the store down at settle: %v, want MUTATION_UNKNOWN naming the receipt", err)
	}
	if f.content() != "v1" {
		t.Fatalf("the effect was not applied: object %q", f.content())
	}
	st.afterEffect.Store(false)
	first := await(t, clk.waiting, "retry wait")
	if r, _ := f.store.Receipt(ctx, fe.ReceiptID); r.State != fencegate.ReceiptPending || gw.UnsettledOutcomes() != 1 {
		t.Fatalf("while the store is down: receipt %s, %d outcomes waiting", r.State, gw.UnsettledOutcomes())
	}
	clk.tick <- time.Time{} // still down: the loop waits longer
	if second := await(t, clk.waiting, "second retry wait"); second <= first {
		t.Fatalf("retry waits %s then %s: want them growing while the store is down", first, second)
	}

	st.down.Store(false)
	clk.tick <- time.Time{}
	if id := await(t, st.settled, "settle"); id != fe.ReceiptID {
		t.Fatalf("settled %s, want %s", id, fe.ReceiptID)
	}
	r, err := f.store.Receipt(ctx, fe.ReceiptID)
	if err != nil || r.State != fencegate.ReceiptCommitted || r.Version == "" {
		t.Fatalf("after the store came back: %+v %v, want COMMITTED with a version", r, err)
	}
	res, err := gw.Apply(ctx, f.request(5, 1, "v1"))
	if err != nil || !res.Replay || res.Receipt.ID != fe.ReceiptID {
		t.Fatalf("replay after recovery: %+v %v", res, err)
	}
	if _, err := gw.Apply(ctx, f.request(5, 2, "v2")); err != nil || f.content() != "v2" {
		t.Fatalf("next segment after recovery: %v (object %q)", err, f.content())
	}
}

// TestAdmissionLostWithTheStoreIsSettledNotApplied: an admission committed but
// its acknowledgement was lost and the store stayed down, so the gateway could
// not tell and forwarded nothing (BACKEND_UNAVAILABLE). Once the store is
// back the receipt is settled NOT_APPLIED at once (not after the orphan
// window), which gives the segment number back: the same segment is admitted
// again and written once.
func TestAdmissionLostWithTheStoreIsSettledNotApplied(t *testing.T) {
	f, st, clk, gw := retryFixture(t)
	ctx := context.Background()
	st.lose.Store(true)
	_, err := gw.Apply(ctx, f.request(5, 1, "v1"))
	if fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable || f.content() != "" {
		t.Fatalf("Apply with the admission ack lost: %v (object %q), want BACKEND_UNAVAILABLE and nothing written", err, f.content())
	}
	var fe *fencegate.Error
	asError(err, &fe)
	await(t, clk.waiting, "retry wait")
	st.down.Store(false)
	clk.tick <- time.Time{}
	if id := await(t, st.settled, "settle"); id != fe.ReceiptID {
		t.Fatalf("settled %s, want %s", id, fe.ReceiptID)
	}
	if r, _ := f.store.Receipt(ctx, fe.ReceiptID); r.State != fencegate.ReceiptNotApplied {
		t.Fatalf("orphaned admission is %s, want NOT_APPLIED", r.State)
	}
	res, err := gw.Apply(ctx, f.request(5, 1, "v1"))
	if err != nil || res.Replay || f.content() != "v1" {
		t.Fatalf("segment 1 again after recovery: %+v %v (object %q)", res, err, f.content())
	}
}

// TestSettleThatFindsAFinalStateAnswersTheStoredOne: while the effect ran,
// another replica settled the receipt COMMITTED (it took it as orphaned and
// resent it). Our own FAILED outcome is refused by the store
// (RECEIPT_SETTLED): the receipt stays COMMITTED, and the caller is answered
// with the stored receipt, re-read, not with our outcome.
func TestSettleThatFindsAFinalStateAnswersTheStoredOne(t *testing.T) {
	f := newFixture(t)
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: f.store, Now: f.kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := f.request(5, 1, "v1")
	req.Effect = gateway.EffectFunc(func(ctx context.Context, r fencegate.Receipt, _ string) (fencegate.Outcome, error) {
		if _, err := f.store.Settle(ctx, r.ID, fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "etag-other", Now: f.kit.Now()}); err != nil {
			t.Fatalf("the other replica's settle: %v", err)
		}
		return fencegate.Outcome{State: fencegate.ReceiptFailed, Error: "upstream refused"},
			fencegate.Errorf(fencegate.CodeBackendUnavailable, "upstream refused")
	})
	res, err := gw.Apply(ctx, req)
	if err != nil || res.Receipt.State != fencegate.ReceiptCommitted || res.Receipt.Version != "etag-other" {
		t.Fatalf("Apply: %+v %v, want the stored COMMITTED receipt", res.Receipt, err)
	}
	if r, _ := f.store.Receipt(ctx, res.Receipt.ID); r.State != fencegate.ReceiptCommitted {
		t.Fatalf("stored receipt %s, want COMMITTED kept", r.State)
	}
}

// TestDrainWaitsForSettlesQueuedForRetry: stopping the process also records
// the outcomes whose settle failed (the retry queue), not only the deferred
// settles; while the store is down Drain ends with its ctx, saying so.
func TestDrainWaitsForSettlesQueuedForRetry(t *testing.T) {
	f, st, clk, gw := retryFixture(t)
	st.afterEffect.Store(true)
	ctx := context.Background()
	_, err := gw.Apply(ctx, f.request(5, 1, "v1"))
	var fe *fencegate.Error
	if fencegate.ErrorCode(err) != fencegate.CodeMutationUnknown || !asError(err, &fe) {
		t.Fatalf("Apply with the store down at settle: %v", err)
	}
	// The background retry's first pass has failed and it waits on the
	// test's clock, which never ticks here: Drain alone settles from now on.
	// (Without this, a Drain meeting that pass in progress found the queue
	// busy and waited on the same clock forever: a hang on a loaded machine.)
	await(t, clk.waiting, "the background retry's wait")
	st.afterEffect.Store(false)
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := gw.Drain(done); err == nil || gw.UnsettledOutcomes() != 1 {
		t.Fatalf("drain with the store down: %v, %d waiting; want the ctx's end with 1 waiting", err, gw.UnsettledOutcomes())
	}
	st.down.Store(false)
	if err := gw.Drain(ctx); err != nil || gw.UnsettledOutcomes() != 0 {
		t.Fatalf("drain: %v, %d waiting", err, gw.UnsettledOutcomes())
	}
	if r, _ := f.store.Receipt(ctx, fe.ReceiptID); r.State != fencegate.ReceiptCommitted {
		t.Fatalf("after drain: %s", r.State)
	}
}
