package gateway_test

import (
	"bytes"
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
	_, vg := kit.VerifiedGrant(func(g *fencegate.Grant) {
		g.Resource, g.FenceToken, g.Lease, g.OperationRoot = "payouts/acc_1", 1, "lease-1", "root-1"
	})
	target := httpapi.Target("payouts", "/v1/accounts/acc_1/payouts")
	body := []byte(`{"amount":500,"currency":"eur"}`)
	kept, err := api.Call("POST", "/v1/accounts/acc_1/payouts", nil, bytes.NewReader(body), int64(len(body))).KeptRequest(
		fencegate.Receipt{Resource: vg.Resource, OperationRoot: vg.OperationRoot, FenceToken: 1, Segment: 1, Target: target, Method: "POST"})
	if err != nil {
		t.Fatal(err)
	}
	// Admitted by a gateway that then vanished: nothing forwarded, nothing settled.
	if _, err := st.Admit(context.Background(), fencegate.AdmitRequest{Grant: vg, Segment: 1, Target: target, Method: "POST",
		PayloadDigest: "sha256:payout", ReceiptID: id, Request: kept, Now: kit.Now(), EffectTimeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
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
