package handlers_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/fencegate/fencegate/e2e/upstream"
)

// withReadRoute declares the upstream's payout lookup as a read route.
func withReadRoute(c *httpapi.APIConfig) {
	c.Routes = append(c.Routes, httpapi.Route{Method: "GET", Path: "/v1/payouts", Resource: "payouts/acc_1"})
}

func TestReadRoutePassesThroughWithTheGatewayCredentialAndStoresNothing(t *testing.T) {
	e := newAPIEnv(t, nil, nil, withReadRoute)
	a := e.grantFor(payerA, payerTokA, 1)
	paid := wantPaid(t, e.payout(a, 1, payoutBody))
	before := e.state()

	// No grant needed; fence headers sent anyway are ignored and not forwarded.
	r := e.send("GET", "/v1/apis/payouts/v1/payouts?idempotency_key="+paid.IdempotencyKey, payerTokB,
		map[string]string{"Fence-Grant": "junk", "Fence-Segment": "9"}, "")
	var got upstream.Payout
	if r.status != http.StatusOK || json.Unmarshal(r.body, &got) != nil || got.ID != paid.ID {
		t.Fatalf("read = %d %s, want the payout %s", r.status, r.body, paid.ID)
	}
	if r.header.Get("Fence-Receipt") != "" {
		t.Fatal("a read answered with a receipt")
	}
	after := e.state()
	before.requests++ // the read itself reached the upstream, nothing else changed
	if after != before {
		t.Fatalf("a read changed state:\nbefore %+v\nafter  %+v", before, after)
	}
	if e.pay.LeakedAuthorization() != 0 || e.pay.Unauthorized() != 0 {
		t.Fatal("the upstream did not see exactly the gateway's credential")
	}
	e.mu.Lock()
	last := e.seen[len(e.seen)-1]
	e.mu.Unlock()
	for k := range last {
		if len(k) > 6 && k[:6] == "Fence-" || k == "Idempotency-Key" {
			t.Errorf("a read forwarded %s", k)
		}
	}
}

func TestReadAnswersOfAnyStatusAreTheUpstreams(t *testing.T) {
	e := newAPIEnv(t, nil, nil, withReadRoute)
	r := e.send("GET", "/v1/apis/payouts/v1/payouts?idempotency_key=nope", payerTokA, nil, "")
	if r.status != http.StatusNotFound || r.code != "" || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("read = %d %v %s, want the upstream's own 404", r.status, r.header, r.body)
	}
}

func TestReadRefusalsReachNoUpstreamAndChangeNothing(t *testing.T) {
	e := newAPIEnv(t, nil, nil, withReadRoute)
	e.mayRead = func(identity, resource string) bool { return identity == payerA && resource == payoutRes }
	before := e.state()
	cases := []struct {
		name, method, path, token, body string
		status                          int
		code                            fencegate.Code
	}{
		{"no credential", "GET", "/v1/apis/payouts/v1/payouts", "wrong", "", 401, fencegate.CodeUnauthenticated},
		{"policy says no", "GET", "/v1/apis/payouts/v1/payouts", payerTokB, "", 403, fencegate.CodeForbidden},
		{"undeclared read route", "GET", "/v1/apis/payouts/v1/accounts/acc_1/payouts", payerTokA, "", 404, fencegate.CodeNotFound},
		{"unknown API", "GET", "/v1/apis/other/v1/payouts", payerTokA, "", 404, fencegate.CodeNotFound},
		{"read route is no write route", "POST", "/v1/apis/payouts/v1/payouts", payerTokA, "{}", 404, fencegate.CodeNotFound},
		{"a read with a body", "GET", "/v1/apis/payouts/v1/payouts", payerTokA, "{}", 400, fencegate.CodeInvalidRequest},
		{"encoded slash", "GET", "/v1/apis/payouts/v1%2Fpayouts", payerTokA, "", 400, fencegate.CodeInvalidRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.send(c.method, c.path, c.token, nil, c.body)
			wantCode(t, r, c.status, c.code)
			e.wantUnchanged(before)
		})
	}
	if r := e.send("GET", "/v1/apis/payouts/v1/payouts?idempotency_key=x", payerTokA, nil, ""); r.status != http.StatusNotFound || r.code != "" {
		t.Fatalf("the allowed reader was refused: %d %s", r.status, r.body)
	}
}

func TestReadOfAnUnreachableUpstreamIsUnavailable(t *testing.T) {
	e := newAPIEnv(t, nil, nil, withReadRoute)
	e.up.Close()
	wantCode(t, e.send("GET", "/v1/apis/payouts/v1/payouts", payerTokA, nil, ""), http.StatusServiceUnavailable, fencegate.CodeBackendUnavailable)
}
