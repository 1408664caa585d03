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

// refusalAppliesNothing checks the refusal rule for one status, which the
// upstream answers with answer: on a first send the receipt is FAILED and
// the caller is told BACKEND_UNAVAILABLE (the segment may be sent again),
// not COMMITTED with the answer stored for every replay; on a resend of a
// call whose first answer was lost it says nothing of that first attempt:
// the receipt stays UNKNOWN, to be resent.
func refusalAppliesNothing(t *testing.T, status int, answer http.HandlerFunc) {
	t.Helper()
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
		answer(w, r)
	}))
	defer srv.Close()
	now := time.Unix(1_700_000_000, 0)
	api, err := New(validConfig(srv.URL), &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	r := fencegate.Receipt{ID: "r1", Resource: "payouts/acc_1", OperationRoot: "o", FenceToken: 1, Segment: 1, CreatedAt: now,
		Target: fencegate.APITarget("payouts", "/v1/accounts/acc_1/payouts"), Method: "POST", State: fencegate.ReceiptPending}
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
}

// TestARefusedCredentialAppliesNothing: an upstream's 401 or 403 turns away
// the gateway's own credential or permissions, and a 408 a request it did
// not receive in time: nothing ran (refusalAppliesNothing). A class the API
// declares for the status still wins.
func TestARefusedCredentialAppliesNothing(t *testing.T) {
	for _, status := range []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestTimeout} {
		refusalAppliesNothing(t, status, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(status)
			_, _ = w.Write([]byte(`{"error":{"type":"invalid_request_error","message":"Invalid API Key provided"}}`))
		})
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
		Target: fencegate.APITarget("payouts", "/v1/accounts/acc_1/payouts"), Method: "POST", State: fencegate.ReceiptPending}
	c := api.Call("POST", "/v1/accounts/acc_1/payouts", nil, strings.NewReader(payout), int64(len(payout)))
	if r.Request, err = c.KeptRequest(r); err != nil {
		t.Fatal(err)
	}
	if o, err := c.Apply(context.Background(), r, ""); o.State != fencegate.ReceiptCommitted || o.Response == nil || o.Response.Status != 403 || err != nil {
		t.Fatalf("declared final: %s %+v %v", o.State, o.Response, err)
	}
}

// TestARedirectOrAProxyRefusalAppliesNothing: a redirect, which the gateway
// never follows, says the user agent must take further action to fulfil the
// request (RFC 9110 §15.4), and a proxy's 407 that it lacked the proxy's
// credentials (§15.5.8): nothing ran, as for a refused credential
// (refusalAppliesNothing). Neither is stored as the call's answer: a
// payment never made read COMMITTED, and a redirected resend after a lost
// answer settled the receipt with the redirect instead of the payout.
func TestARedirectOrAProxyRefusalAppliesNothing(t *testing.T) {
	for _, status := range []int{http.StatusNotModified, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		refusalAppliesNothing(t, status, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://elsewhere.example"+r.URL.Path, status)
		})
	}
	refusalAppliesNothing(t, http.StatusProxyAuthRequired, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Proxy-Authenticate", `Basic realm="egress"`)
		w.WriteHeader(http.StatusProxyAuthRequired)
	})
}

// TestARedirectThatMayFollowTheActionIsUnknownAndNeverResent: a 301, 302
// or 303 may point at the result of an action the server performed (RFC
// 9110 §15.4.4: the POST/redirect/GET pattern, often answered 302), which
// the gateway does not follow: the receipt is UNKNOWN and not resent (a
// person or a lookup settles it), neither FAILED (the worker would pay
// again) nor COMMITTED with the redirect.
func TestARedirectThatMayFollowTheActionIsUnknownAndNeverResent(t *testing.T) {
	for _, status := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther} {
		redirectIsUnknown(t, status)
	}
}

func redirectIsUnknown(t *testing.T, status int) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/v1/payouts/po_1", status)
	}))
	defer srv.Close()
	api, err := New(validConfig(srv.URL), &http.Client{}, WithClock(time.Now))
	if err != nil {
		t.Fatal(err)
	}
	r := fencegate.Receipt{ID: "r1", Resource: "payouts/acc_1", OperationRoot: "o", FenceToken: 1, Segment: 1, CreatedAt: time.Now(),
		Target: fencegate.APITarget("payouts", "/v1/accounts/acc_1/payouts"), Method: "POST", State: fencegate.ReceiptPending}
	c := api.Call("POST", "/v1/accounts/acc_1/payouts", nil, strings.NewReader(payout), int64(len(payout)))
	o, err := c.Apply(context.Background(), r, "")
	if o.State != fencegate.ReceiptUnknown || o.Resend || o.Response != nil || fencegate.ErrorCode(err) != fencegate.CodeMutationUnknown {
		t.Fatalf("%d: %s resend %v (%+v), %v; want UNKNOWN, not resent", status, o.State, o.Resend, o.Response, err)
	}
}
