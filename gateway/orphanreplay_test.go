package gateway_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

// TestNothingResendsBesideAnOrphanResend: the reconciler claims a PENDING
// API orphan (UNKNOWN, its resend allowed) and resends it; while that send
// is open, the worker retries the segment at a gateway, and another
// replica's reconciler runs a pass. The replay answers MUTATION_UNKNOWN,
// and neither sends a second request under the key beside the first; the
// orphan's resend is counted with reason "orphaned".
func TestNothingResendsBesideAnOrphanResend(t *testing.T) {
	kit := prooftest.New(t)
	st := openEmbedded(t)
	srv := newSlowUpstream(t)
	c := payoutsConfig(t, srv.URL, 30*time.Second)
	var (
		mu      sync.Mutex
		reasons []string
	)
	hook := httpapi.WithResendHook(func(_, reason string) { mu.Lock(); reasons = append(reasons, reason); mu.Unlock() })
	client := func() *http.Client { return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}} }
	apiR, _ := httpapi.New(c, client(), httpapi.WithClock(kit.Now), hook) // the reconciler's replica
	apiG, _ := httpapi.New(c, client(), httpapi.WithClock(kit.Now), hook) // the replaying replica
	tok, vg := payoutGrant(kit)
	const id = "rcpt_orphan"
	// Admitted by a gateway that then vanished.
	admitOrphan(t, st, apiR, vg, id, kit.Now())
	kit.Advance(3 * time.Minute)
	aerr := besideAResend(t, kit, st, srv, apiR, apiG, tok, vg)
	mu.Lock()
	defer mu.Unlock()
	if fencegate.ErrorCode(aerr) != fencegate.CodeMutationUnknown {
		t.Errorf("the replay during the orphan's resend: %v, want MUTATION_UNKNOWN", aerr)
	}
	if posts, maxOpen := srv.counts(); maxOpen > 1 {
		t.Errorf("a second request went under the orphan's key while the reconciler's resend was open: %d requests, %d at once", posts, maxOpen)
	}
	if len(reasons) == 0 || reasons[0] != "orphaned" {
		t.Errorf("the orphan's resend was counted with reason %v, want \"orphaned\" first", reasons)
	}
}

// TestNothingResendsBesideAnUnknownReceiptsResend: as for an orphan, a
// reconciler's resend of an UNKNOWN API receipt (its first send's answer
// lost, a resend allowed) is claimed first, and while it is open neither a
// replay of the segment nor another replica's reconciler sends a second
// request under the key beside it (each read the receipt after the claim,
// whose precondition they would have met).
func TestNothingResendsBesideAnUnknownReceiptsResend(t *testing.T) {
	kit := prooftest.New(t)
	st := openEmbedded(t)
	srv := newSlowUpstream(t)
	c := payoutsConfig(t, srv.URL, 30*time.Second)
	client := func() *http.Client { return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}} }
	apiR, _ := httpapi.New(c, client(), httpapi.WithClock(kit.Now)) // the reconciler's replica
	apiG, _ := httpapi.New(c, client(), httpapi.WithClock(kit.Now)) // the replaying replica
	tok, vg := payoutGrant(kit)
	const id = "rcpt_unknown"
	admitOrphan(t, st, apiR, vg, id, kit.Now())
	// Its first send got no answer: UNKNOWN, one attempt, resend allowed.
	if _, err := st.Settle(context.Background(), id, fencegate.Outcome{State: fencegate.ReceiptUnknown, Resend: true,
		Attempts: 1, Error: "no answer from upstream: timeout", Now: kit.Now()}); err != nil {
		t.Fatal(err)
	}
	kit.Advance(time.Minute) // the first send's timeout (30 s) is over
	aerr := besideAResend(t, kit, st, srv, apiR, apiG, tok, vg)
	if fencegate.ErrorCode(aerr) != fencegate.CodeMutationUnknown {
		t.Errorf("the replay during the resend: %v, want MUTATION_UNKNOWN", aerr)
	}
	if posts, maxOpen := srv.counts(); posts != 1 || maxOpen > 1 {
		t.Errorf("requests under the key while the reconciler's resend was open: %d, %d at once; want 1", posts, maxOpen)
	}
	if r, err := st.Receipt(context.Background(), id); err != nil || r.State != fencegate.ReceiptCommitted {
		t.Errorf("receipt after the resend's answer: %+v %v; want COMMITTED", r.State, err)
	}
}

// besideAResend runs a reconciler pass on replica R (apiR) that resends the
// payout receipt, and while that send is open upstream (srv holds it) a
// worker's replay of the segment through a gateway on replica G (apiG) and
// a reconciler pass there; then it lets the send finish. It returns the
// replay's error.
func besideAResend(t *testing.T, kit *prooftest.Kit, st fencegate.FenceStore, srv *slowUpstream, apiR, apiG *httpapi.API,
	tok string, vg fencegate.VerifiedGrant) error {
	t.Helper()
	rc := &gateway.Reconciler{Store: st, Now: kit.Now, Orphan: 2 * time.Minute, Resolver: httpapi.Resolvers{"payouts": apiR}.For}
	passDone := make(chan struct{})
	go func() { defer close(passDone); _, _ = rc.RunOnce(context.Background()) }()
	<-srv.first // the resend is open upstream
	gw, err := gateway.New(gateway.Config{Verifier: kit.Verifier(), Store: st, Now: kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}, Resolver: httpapi.Resolvers{"payouts": apiG}.For})
	if err != nil {
		t.Fatal(err)
	}
	_, aerr := gw.Apply(context.Background(), payoutRequest(kit, tok, vg, payoutCall(apiG, nil, nil)))
	// And another replica's reconciler pass meanwhile.
	rcB := &gateway.Reconciler{Store: st, Now: kit.Now, Orphan: 2 * time.Minute, Resolver: httpapi.Resolvers{"payouts": apiG}.For}
	if _, err := rcB.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(srv.release)
	<-passDone
	return aerr
}
