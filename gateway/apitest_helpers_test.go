package gateway_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/fencegate/fencegate/fencestore/embedded"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

// openEmbedded is an embedded fence store in t's temporary directory,
// closed when t ends.
func openEmbedded(t *testing.T) *embedded.Store {
	t.Helper()
	st, err := embedded.Open(filepath.Join(t.TempDir(), "fence.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// payoutsConfig is the payouts API the API tests call at base: POST
// /v1/accounts/{account}/payouts under resource payouts/{account}, keys
// kept 24 h, the send timeout (0: the default); edit, if given, changes it
// first. t fails if the result does not validate.
func payoutsConfig(t *testing.T, base string, timeout time.Duration, edit ...func(*httpapi.APIConfig)) httpapi.APIConfig {
	t.Helper()
	c := httpapi.APIConfig{Name: "payouts", BaseURL: base, Timeout: timeout,
		Contract: httpapi.Contract{Idempotency: &httpapi.Idempotency{KeyRetention: 24 * time.Hour}},
		Routes:   []httpapi.Route{{Method: "POST", Path: "/v1/accounts/{account}/payouts", Resource: "payouts/{account}"}}}
	for _, e := range edit {
		e(&c)
	}
	if err := (httpapi.Config{APIs: []httpapi.APIConfig{c}}).Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

// slowUpstream is a payouts upstream that holds its first request until
// release is closed (a slow upstream: that send stays open) and answers
// every request with a payout, counting the requests and the most open at
// once. It closes when t ends.
type slowUpstream struct {
	*httptest.Server
	first, release       chan struct{} // first is closed once the first request is open
	mu                   sync.Mutex
	posts, open, maxOpen int
}

func newSlowUpstream(t *testing.T) *slowUpstream {
	u := &slowUpstream{first: make(chan struct{}), release: make(chan struct{})}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.posts++
		n := u.posts
		u.open++
		u.maxOpen = max(u.maxOpen, u.open)
		u.mu.Unlock()
		defer func() { u.mu.Lock(); u.open--; u.mu.Unlock() }()
		if n == 1 {
			close(u.first)
			select { // bounded, so that a failing test does not hang
			case <-u.release:
			case <-time.After(5 * time.Second):
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"po_1"}`))
	}))
	t.Cleanup(u.Close)
	return u
}

// counts are the requests so far and the most open at once.
func (u *slowUpstream) counts() (posts, maxOpen int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.posts, u.maxOpen
}

// payoutGrant is the grant (token and verified) of the payouts tests' lease
// on payouts/acc_1, fence 1.
func payoutGrant(kit *prooftest.Kit) (string, fencegate.VerifiedGrant) {
	return kit.VerifiedGrant(func(g *fencegate.Grant) {
		g.Resource, g.FenceToken, g.Lease, g.OperationRoot = "payouts/acc_1", 1, "lease-1", "root-1"
	})
}

// payoutBody is the payout the API tests send to acc_1.
var payoutBody = []byte(`{"amount":500,"currency":"eur"}`)

// payoutTarget is the API target of a payout to acc_1.
var payoutTarget = fencegate.APITarget("payouts", "/v1/accounts/acc_1/payouts")

// payoutCall is api's payout call to acc_1 with body (payoutBody for nil)
// under header h.
func payoutCall(api *httpapi.API, h http.Header, body []byte) *httpapi.Call {
	if body == nil {
		body = payoutBody
	}
	return api.Call("POST", "/v1/accounts/acc_1/payouts", h, bytes.NewReader(body), int64(len(body)))
}

// payoutRequest is the worker's segment 1 of the payout to acc_1 under the
// grant tok (vg), with effect e.
func payoutRequest(kit *prooftest.Kit, tok string, vg fencegate.VerifiedGrant, e gateway.Effect) gateway.Request {
	return gateway.Request{Caller: owner, GrantToken: tok, StatusToken: kit.Status(vg, nil), Segment: 1,
		Resource: "payouts/acc_1", Target: payoutTarget, Method: "POST", PayloadDigest: "sha256:payout", Effect: e}
}

// admitOrphan admits segment 1 of vg's payout to acc_1 under receipt id,
// with the request api keeps, as a gateway that then vanished would leave
// it: PENDING, nothing forwarded, nothing settled (its effect timeout one
// minute).
func admitOrphan(t *testing.T, st fencegate.FenceStore, api *httpapi.API, vg fencegate.VerifiedGrant, id string, now time.Time) {
	t.Helper()
	kept, err := payoutCall(api, nil, nil).KeptRequest(
		fencegate.Receipt{ID: id, Resource: vg.Resource, OperationRoot: vg.OperationRoot, FenceToken: 1, Segment: 1, Target: payoutTarget, Method: "POST"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Admit(context.Background(), fencegate.AdmitRequest{Grant: vg, Segment: 1, Target: payoutTarget, Method: "POST",
		PayloadDigest: "sha256:payout", ReceiptID: id, Request: kept, Now: now, EffectTimeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
}
