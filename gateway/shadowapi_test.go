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

// TestAcceptedAPICallKeepsItsRequestInShadowModeToo: an API call the
// acceptance point accepts on a resource in shadow mode is admitted and
// stored like any other, and keeps its request, so that when its answer is
// lost the replay of the segment resends it under the same key and answers
// COMMITTED, as in enforce mode (it kept none, and its UNKNOWN waited for an
// operator).
func TestAcceptedAPICallKeepsItsRequestInShadowModeToo(t *testing.T) {
	for _, mode := range []gateway.Mode{gateway.Enforce, gateway.Shadow} {
		t.Run(string(mode), func(t *testing.T) {
			kit := prooftest.New(t)
			st := openEmbedded(t)
			pay := upstream.New(upstream.Options{})
			srv := httptest.NewServer(pay)
			t.Cleanup(srv.Close)
			c := payoutsConfig(t, srv.URL, 0)
			api, err := httpapi.New(c, &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, httpapi.WithClock(kit.Now))
			if err != nil {
				t.Fatal(err)
			}
			modes, _ := gateway.NewModes(gateway.ModeRule{Pattern: "payouts/*", Mode: mode})
			rs := httpapi.Resolvers{"payouts": api}
			gw, err := gateway.New(gateway.Config{Verifier: kit.Verifier(), Store: st, Now: kit.Now,
				Policy: gateway.StaticPolicy{Generation: 1}, Modes: modes, Resolver: rs.For})
			if err != nil {
				t.Fatal(err)
			}
			tok, vg := payoutGrant(kit)
			req := func() gateway.Request {
				return payoutRequest(kit, tok, vg, payoutCall(api, http.Header{"Content-Type": {"application/json"}}, nil))
			}
			ctx := context.Background()
			pay.Inject(upstream.DropResponse)
			res, err := gw.Apply(ctx, req())
			if fencegate.ErrorCode(err) != fencegate.CodeMutationUnknown || res.Verdict != "" {
				t.Fatalf("first send: %v (verdict %q)", err, res.Verdict)
			}
			again, err := gw.Apply(ctx, req()) // the worker retries the segment
			got, _ := st.Receipt(ctx, again.Receipt.ID)
			if err != nil || got.State != fencegate.ReceiptCommitted || pay.Effects() != 1 {
				t.Fatalf("%s mode: the replay after a lost answer: %v; receipt %s (kept request: %v, resend %v, %q); payouts %d",
					mode, err, got.State, got.Request != nil, got.Resend, got.Error, pay.Effects())
			}
		})
	}
}
