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

// TestOrphanResendIsClaimedBeforeItIsSent: the reconciler resends a PENDING
// API receipt it took for an orphan (its gateway gone after admission)
// only after claiming it (UNKNOWN, SettledAt set), so that an admitting
// gateway's queued NOT_APPLIED (IfPending) reaching the store while the
// resend is open is refused (STILL_RECONCILING) instead of settling the
// receipt as if nothing had been sent; the resend's answer then settles it
// COMMITTED.
func TestOrphanResendIsClaimedBeforeItIsSent(t *testing.T) {
	kit := prooftest.New(t)
	st := openEmbedded(t)
	const id = "rcpt_orphan"
	var (
		mu        sync.Mutex
		duringErr error
		posts     int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		posts++
		mu.Unlock()
		// The admitting gateway's NOT_APPLIED arrives while the resend is open.
		_, err := st.Settle(context.Background(), id, fencegate.Outcome{State: fencegate.ReceiptNotApplied, IfPending: true, Now: kit.Now()})
		mu.Lock()
		duringErr = err
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"po_1"}`))
	}))
	defer srv.Close()
	c := payoutsConfig(t, srv.URL, 30*time.Second)
	api, err := httpapi.New(c, &http.Client{}, httpapi.WithClock(kit.Now))
	if err != nil {
		t.Fatal(err)
	}
	_, vg := payoutGrant(kit)
	// Admitted by a gateway that then vanished: nothing forwarded, nothing settled.
	admitOrphan(t, st, api, vg, id, kit.Now())
	kit.Advance(3 * time.Minute)
	rc := &gateway.Reconciler{Store: st, Now: kit.Now, Orphan: 2 * time.Minute, Resolver: httpapi.Resolvers{"payouts": api}.For}
	if _, err := rc.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	r, err := st.Receipt(context.Background(), id)
	mu.Lock()
	defer mu.Unlock()
	if posts != 1 || fencegate.ErrorCode(duringErr) != fencegate.CodeStillReconciling {
		t.Fatalf("%d resends; the NOT_APPLIED during the resend: %v, want STILL_RECONCILING", posts, duringErr)
	}
	if err != nil || r.State != fencegate.ReceiptCommitted {
		t.Fatalf("receipt %+v, %v; want COMMITTED from the resend's answer", r, err)
	}
}
