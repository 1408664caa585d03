package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/fencegate/fencegate/e2e/upstream"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

// TestShadowModeRefusesAnAPICallWhoseRequestCannotBeKept: a shadow-mode API
// call whose request cannot be kept (the key goes in a JSON body field and
// the body is not JSON) is malformed, not a fence verdict: it is refused
// INVALID_REQUEST with nothing stored (no receipt, the fence unmoved) and
// nothing sent, as in enforce mode. (Admitted without it, it was settled
// FAILED and never sent, its fence moved.)
func TestShadowModeRefusesAnAPICallWhoseRequestCannotBeKept(t *testing.T) {
	kit := prooftest.New(t)
	st := openEmbedded(t)
	pay := upstream.New(upstream.Options{})
	srv := httptest.NewServer(pay)
	t.Cleanup(srv.Close)
	c := payoutsConfig(t, srv.URL, 0, func(c *httpapi.APIConfig) { c.Key = httpapi.Key{BodyField: "/idempotency_key"} })
	api, err := httpapi.New(c, &http.Client{}, httpapi.WithClock(kit.Now))
	if err != nil {
		t.Fatal(err)
	}
	modes, _ := gateway.NewModes(gateway.ModeRule{Pattern: "payouts/*", Mode: gateway.Shadow})
	gw, err := gateway.New(gateway.Config{Verifier: kit.Verifier(), Store: st, Now: kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}, Modes: modes})
	if err != nil {
		t.Fatal(err)
	}
	tok, vg := payoutGrant(kit)
	res, err := gw.Apply(context.Background(), payoutRequest(kit, tok, vg,
		payoutCall(api, http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, []byte(`amount=500`))))
	_, rerr := st.Resource(context.Background(), "payouts/acc_1")
	if fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest || res.Receipt.ID != "" || pay.Effects() != 0 || fencegate.ErrorCode(rerr) != fencegate.CodeNotFound {
		t.Fatalf("answer %v, receipt %q, %d upstream effects, resource state %v; want INVALID_REQUEST with nothing stored or sent",
			err, res.Receipt.ID, pay.Effects(), rerr)
	}
}
