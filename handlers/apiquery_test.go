package handlers_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/e2e/upstream"
)

// TestAPIQueryPathFormIsTheSameCall: POST /v1/apis/payouts?path=... (what a
// generated client sends, the path's slashes escaped) is the call of the
// path form: the same route, resource and fence rules, so the path form of
// the same segment is its replay; refusals of the path form hold for the
// query form and change nothing.
func TestAPIQueryPathFormIsTheSameCall(t *testing.T) {
	e := newAPIEnv(t, nil, nil, withReadRoute)
	a := e.grantFor(payerA, payerTokA, 1)
	hdr := map[string]string{"Fence-Grant": a.grant, "Fence-Status": e.kit.Status(a.vg, nil), "Fence-Segment": "1", "Content-Type": "application/json"}
	q := "/v1/apis/payouts?path=" + url.QueryEscape("/v1/accounts/acc_1/payouts")
	paid := wantPaid(t, e.send("POST", q, payerTokA, hdr, payoutBody))
	replay := e.send("POST", payoutPath, payerTokA, hdr, payoutBody)
	if replay.header.Get("Fence-Replay") != "true" || e.pay.Effects() != 1 {
		t.Fatalf("the path form of the same segment is not its replay: %v, %d effects", replay.header, e.pay.Effects())
	}
	before := e.state()
	hdr["Fence-Segment"] = "2"
	for _, c := range []struct {
		path   string
		status int
		code   fencegate.Code
	}{
		{"/v1/apis/payouts?path=v1%2Faccounts%2Facc_1%2F..%2Facc_2%2Fpayouts", 404, fencegate.CodeNotFound},
		{"/v1/apis/payouts?path=v1%2Faccounts%2Facc_1%252Fpayouts", 404, fencegate.CodeNotFound},
		{"/v1/apis/payouts?path=v1%2Faccounts%2Facc_2%2Fpayouts", 403, fencegate.CodeResourceMismatch},
		{"/v1/apis/payouts?path=v1%2Faccounts%2Facc_1%2Fpayouts&amount=1", 400, fencegate.CodeInvalidRequest},
		{"/v1/apis/payouts?path=a&path=b", 400, fencegate.CodeInvalidRequest},
		{"/v1/apis/payouts?path=", 400, fencegate.CodeInvalidRequest},
		{"/v1/apis/payouts", 400, fencegate.CodeInvalidRequest},
		{"/v1/apis/payouts?path=%zz", 400, fencegate.CodeInvalidRequest},
	} {
		wantCode(t, e.send("POST", c.path, payerTokA, hdr, payoutBody), c.status, c.code)
	}
	e.wantUnchanged(before)

	// A read in the query form forwards the other parameters.
	r := e.send("GET", "/v1/apis/payouts?path=%2Fv1%2Fpayouts&idempotency_key="+url.QueryEscape(paid.IdempotencyKey), payerTokB, nil, "")
	var got upstream.Payout
	if r.status != http.StatusOK || json.Unmarshal(r.body, &got) != nil || got.ID != paid.ID {
		t.Fatalf("query-form read = %d %s, want the payout %s", r.status, r.body, paid.ID)
	}
}
