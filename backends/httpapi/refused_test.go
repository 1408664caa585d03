package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// TestARefusedCredentialAppliesNothing: an upstream's 401 or 403 turns away
// the gateway's own credential or permissions, and a 408 a request it did
// not receive in time: nothing ran. On a first
// send the receipt is FAILED and the caller is told BACKEND_UNAVAILABLE
// (the segment may be sent again), not COMMITTED with the 401 stored for
// every replay; on a resend of a call whose first answer was lost it says
// nothing of that first attempt: the receipt stays UNKNOWN, to be resent.
// A class the API declares for the status still wins.
func TestARefusedCredentialAppliesNothing(t *testing.T) {
	for _, status := range []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestTimeout} {
		var mu sync.Mutex
		n := 0
		drop := false
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			n++
			if drop && n == 1 {
				panic(http.ErrAbortHandler) // the payout is made, its answer lost
			}
			w.WriteHeader(status)
			_, _ = w.Write([]byte(`{"error":{"type":"invalid_request_error","message":"Invalid API Key provided"}}`))
		}))
		now := time.Unix(1_700_000_000, 0)
		api, err := New(validConfig(srv.URL), &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, WithClock(func() time.Time { return now }))
		if err != nil {
			t.Fatal(err)
		}
		r := fencegate.Receipt{ID: "r1", Resource: "payouts/acc_1", OperationRoot: "o", FenceToken: 1, Segment: 1, CreatedAt: now,
			Target: Target("payouts", "/v1/accounts/acc_1/payouts"), Method: "POST", State: fencegate.ReceiptPending}
		c := api.Call("POST", "/v1/accounts/acc_1/payouts", nil, strings.NewReader(payout), int64(len(payout)))
		if r.Request, err = c.KeptRequest(r); err != nil {
			t.Fatal(err)
		}
		o, err := c.Apply(context.Background(), r, "")
		if o.State != fencegate.ReceiptFailed || o.Response != nil || fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
			t.Errorf("%d on the first send: %s (%+v), %v; want FAILED and BACKEND_UNAVAILABLE", status, o.State, o.Response, err)
		}
		mu.Lock()
		n, drop = 0, true
		mu.Unlock()
		lost := lostCall(t, api, now, "/v1/accounts/acc_1/payouts", nil, payout)
		o, err = api.Resolve(context.Background(), lost)
		if err != nil || o.State != fencegate.ReceiptUnknown || !o.Resend || o.Response != nil {
			t.Errorf("%d on a resend: %s resend %v (%q), %v; want UNKNOWN, to be resent", status, o.State, o.Resend, o.Error, err)
		}
		srv.Close()
	}
	// Declared final, a 403 is stored as the call's answer.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusForbidden) }))
	defer srv.Close()
	cfg := validConfig(srv.URL)
	cfg.Answers.Final = []Match{{Status: "403"}}
	api, err := New(cfg, &http.Client{}, WithClock(time.Now))
	if err != nil {
		t.Fatal(err)
	}
	r := fencegate.Receipt{ID: "r2", Resource: "payouts/acc_1", OperationRoot: "o", FenceToken: 1, Segment: 1, CreatedAt: time.Now(),
		Target: Target("payouts", "/v1/accounts/acc_1/payouts"), Method: "POST", State: fencegate.ReceiptPending}
	c := api.Call("POST", "/v1/accounts/acc_1/payouts", nil, strings.NewReader(payout), int64(len(payout)))
	if r.Request, err = c.KeptRequest(r); err != nil {
		t.Fatal(err)
	}
	if o, err := c.Apply(context.Background(), r, ""); o.State != fencegate.ReceiptCommitted || o.Response == nil || o.Response.Status != 403 || err != nil {
		t.Fatalf("declared final: %s %+v %v", o.State, o.Response, err)
	}
}
