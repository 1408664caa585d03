package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

// TestQueuedFailedLeavesAClaimedOrphanResendAlone: the admitting gateway
// could not reach the upstream (FAILED, nothing sent) and then could not
// reach the store: its FAILED waits in the retry queue. Another replica's
// reconciler takes the receipt for an orphan, claims it and resends it;
// the upstream takes the payout but its answer is unknown (500). When the
// admitting gateway reaches the store again, its queued FAILED ("nothing
// was sent") no longer holds and changes nothing (IfPending): the receipt
// is not FAILED while a payout may have been made.
func TestQueuedFailedLeavesAClaimedOrphanResendAlone(t *testing.T) {
	kit := prooftest.New(t)
	emb := openEmbedded(t)
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close() // the admitting gateway's upstream is unreachable
	var mu sync.Mutex
	payouts := 0
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		payouts++ // taken, but the answer is an unknown 500
		mu.Unlock()
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer live.Close()
	cfg := func(base string) httpapi.APIConfig { return payoutsConfig(t, base, 30*time.Second) }
	apiA, _ := httpapi.New(cfg(deadURL), &http.Client{}, httpapi.WithClock(kit.Now))
	apiB, _ := httpapi.New(cfg(live.URL), &http.Client{}, httpapi.WithClock(kit.Now))
	st := &settleDownStore{FenceStore: emb}
	tick := make(chan time.Time)
	gwA, err := gateway.New(gateway.Config{Verifier: kit.Verifier(), Store: st, Now: kit.Now,
		After:  func(time.Duration) <-chan time.Time { return tick },
		Policy: gateway.StaticPolicy{Generation: 1}, Resolver: httpapi.Resolvers{"payouts": apiA}.For})
	if err != nil {
		t.Fatal(err)
	}
	tok, vg := payoutGrant(kit)
	ctx := context.Background()
	// The effect fails to connect; by then the store is cut off for Settle.
	apply := func() error {
		_, err := gwA.Apply(ctx, payoutRequest(kit, tok, vg, &rv5DownAfter{Call: payoutCall(apiA, nil, nil), st: st}))
		return err
	}
	if err := apply(); fencegate.ErrorCode(err) != fencegate.CodeMutationUnknown || gwA.UnsettledOutcomes() != 1 {
		t.Fatalf("first apply: %v, %d queued; want MUTATION_UNKNOWN with the FAILED queued", err, gwA.UnsettledOutcomes())
	}
	pg, _ := emb.ReceiptsByState(ctx, fencegate.ReceiptPending, fencegate.Page{Limit: 10})
	if len(pg.Receipts) != 1 {
		t.Fatalf("pending receipts: %d", len(pg.Receipts))
	}
	id := pg.Receipts[0].ID
	// Another replica, past the orphan time.
	kit.Advance(10 * time.Minute)
	rc := &gateway.Reconciler{Store: emb, Now: kit.Now, Orphan: 2 * time.Minute, Resolver: httpapi.Resolvers{"payouts": apiB}.For}
	if _, err := rc.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _ := emb.Receipt(ctx, id); r.State != fencegate.ReceiptUnknown || payouts != 1 {
		t.Fatalf("after the orphan resend: %s, %d payouts; %+v", r.State, payouts, r)
	}
	// The admitting gateway reaches the store again.
	st.down.Store(false)
	close(tick)
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_ = gwA.Drain(dctx)
	r, _ := emb.Receipt(ctx, id)
	if r.State == fencegate.ReceiptFailed {
		t.Fatalf("receipt %s is FAILED (%q) after its payout was resent (%d upstream payouts, answer unknown)", r.ID, r.Error, payouts)
	}
}

// rv5DownAfter cuts the store off (for Settle) once the effect has run.
type rv5DownAfter struct {
	*httpapi.Call
	st *settleDownStore
}

func (d *rv5DownAfter) Apply(ctx context.Context, r fencegate.Receipt, prev string) (fencegate.Outcome, error) {
	out, err := d.Call.Apply(ctx, r, prev)
	d.st.down.Store(true)
	return out, err
}

// slowSettleStore runs before once, ahead of the first Settle it is given:
// a settle that took long on its way to the store (a hung connection),
// while the world went on.
type slowSettleStore struct {
	fencegate.FenceStore
	before func()
	once   sync.Once
}

func (s *slowSettleStore) Settle(ctx context.Context, id string, o fencegate.Outcome) (fencegate.Receipt, error) {
	s.once.Do(s.before)
	return s.FenceStore.Settle(ctx, id, o)
}

// payWithASlowSettle sends one payout through a gateway over emb and api
// whose first settle is slow: meanwhile is run with the admitted (PENDING)
// receipt's ID before that settle reaches the store.
func payWithASlowSettle(t *testing.T, kit *prooftest.Kit, emb fencegate.FenceStore, api *httpapi.API, meanwhile func(id string)) (gateway.Result, error) {
	t.Helper()
	ctx := context.Background()
	st := &slowSettleStore{FenceStore: emb, before: func() {
		pg, _ := emb.ReceiptsByState(ctx, fencegate.ReceiptPending, fencegate.Page{Limit: 10})
		if len(pg.Receipts) != 1 {
			t.Errorf("pending receipts: %d", len(pg.Receipts))
			return
		}
		meanwhile(pg.Receipts[0].ID)
	}}
	gw, err := gateway.New(gateway.Config{Verifier: kit.Verifier(), Store: st, Now: kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}, Resolver: httpapi.Resolvers{"payouts": api}.For})
	if err != nil {
		t.Fatal(err)
	}
	tok, vg := payoutGrant(kit)
	return gw.Apply(ctx, payoutRequest(kit, tok, vg, payoutCall(api, nil, nil)))
}

// TestFirstFailedSettleLeavesAClaimedOrphanResendAlone: the admitting
// gateway could not reach the upstream (FAILED, nothing sent); its first
// settle is slow to reach the store, and meanwhile another replica's
// reconciler takes the receipt for an orphan, claims it and resends it (the
// payout is made, its answer unknown). When the FAILED arrives it no longer
// holds and changes nothing (IfPending on the first settle as on the
// queued one): the receipt is not FAILED, and the caller is told
// MUTATION_UNKNOWN.
func TestFirstFailedSettleLeavesAClaimedOrphanResendAlone(t *testing.T) {
	kit := prooftest.New(t)
	emb := openEmbedded(t)
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	var mu sync.Mutex
	payouts := 0
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		payouts++
		mu.Unlock()
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer live.Close()
	cfg := func(base string) httpapi.APIConfig { return payoutsConfig(t, base, 30*time.Second) }
	apiA, _ := httpapi.New(cfg(deadURL), &http.Client{}, httpapi.WithClock(kit.Now))
	apiB, _ := httpapi.New(cfg(live.URL), &http.Client{}, httpapi.WithClock(kit.Now))
	ctx := context.Background()
	var id string
	_, err := payWithASlowSettle(t, kit, emb, apiA, func(pending string) {
		id = pending
		kit.Advance(10 * time.Minute)
		rc := &gateway.Reconciler{Store: emb, Now: kit.Now, Orphan: 2 * time.Minute, Resolver: httpapi.Resolvers{"payouts": apiB}.For}
		if _, err := rc.RunOnce(ctx); err != nil {
			t.Error(err)
		}
	})
	r, _ := emb.Receipt(ctx, id)
	if r.State == fencegate.ReceiptFailed || payouts != 1 {
		t.Fatalf("receipt %s is %s (%q) after its payout was resent (%d upstream payouts, answer unknown)", r.ID, r.State, r.Error, payouts)
	}
	if fencegate.ErrorCode(err) != fencegate.CodeMutationUnknown {
		t.Fatalf("apply: %v, want MUTATION_UNKNOWN", err)
	}
}

// TestOwnAdmissionSettledElsewhereIsNotAReplay: the gateway's settle finds
// its receipt already settled by another process (here COMMITTED, while
// its own answer was an unknown 500). The request is answered with the
// stored state, as its own effect: not marked a replay, which tells a
// client that this request did nothing.
func TestOwnAdmissionSettledElsewhereIsNotAReplay(t *testing.T) {
	kit := prooftest.New(t)
	emb := openEmbedded(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	api, _ := httpapi.New(payoutsConfig(t, srv.URL, 30*time.Second), &http.Client{}, httpapi.WithClock(kit.Now))
	res, err := payWithASlowSettle(t, kit, emb, api, func(id string) {
		if _, err := emb.Settle(context.Background(), id, fencegate.Outcome{State: fencegate.ReceiptCommitted, Attempts: 1,
			Response: &fencegate.EffectResponse{Status: 200, Body: []byte(`{"id":"po_1"}`)}, Now: kit.Now()}); err != nil {
			t.Error(err)
		}
	})
	if err != nil || res.Replay || res.Receipt.State != fencegate.ReceiptCommitted {
		t.Fatalf("apply: replay %v, %s, %v; want this write's own COMMITTED", res.Replay, res.Receipt.State, err)
	}
}
