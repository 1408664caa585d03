package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/httpapi"
)

// A route may bind a resource parameter to a forwarded header (a Stripe
// Connect platform's Stripe-Account): the account is then part of the
// call's resource, so the grant decides it. Another account is
// RESOURCE_MISMATCH with nothing sent upstream; a call without the header,
// or with a value that is no single segment, matches no route.
func TestAHeaderBoundAccountIsPartOfTheResource(t *testing.T) {
	e := newAPIEnv(t, nil, nil, func(c *httpapi.APIConfig) {
		c.ForwardHeaders = []string{"Stripe-Account"}
		c.Routes = []httpapi.Route{{Method: "POST", Path: "/v1/accounts/{account}/payouts", Resource: "payouts/{connected}",
			Headers: map[string]string{"connected": "Stripe-Account"}}}
	})
	a := e.grantFor(payerA, payerTokA, 1) // payouts/acc_1
	call := func(seg int, account string) apiReply {
		h := map[string]string{"Fence-Grant": a.grant, "Fence-Status": e.kit.Status(a.vg, nil),
			"Fence-Segment": strconv.Itoa(seg), "Content-Type": "application/json"}
		if account != "" {
			h["Stripe-Account"] = account
		}
		return e.send("POST", payoutPath, a.token, h, payoutBody)
	}
	before := e.state()
	wantCode(t, call(1, "acc_2"), http.StatusForbidden, fencegate.CodeResourceMismatch)
	wantCode(t, call(1, ""), http.StatusNotFound, fencegate.CodeNotFound)
	wantCode(t, call(1, "acc_1/x"), http.StatusNotFound, fencegate.CodeNotFound)
	// The resource is derived from the headers the upstream is sent: one a
	// Connection header drops names no account.
	dropped := e.send("POST", payoutPath, a.token, map[string]string{"Fence-Grant": a.grant, "Fence-Status": e.kit.Status(a.vg, nil),
		"Fence-Segment": "1", "Content-Type": "application/json", "Stripe-Account": "acc_1", "Connection": "Stripe-Account"}, payoutBody)
	wantCode(t, dropped, http.StatusNotFound, fencegate.CodeNotFound)
	e.wantUnchanged(before)
	wantPaid(t, call(1, "acc_1"))
	if got := e.seen[len(e.seen)-1].Get("Stripe-Account"); got != "acc_1" || len(e.seen) != 1 {
		t.Fatalf("upstream saw %d calls, the last with Stripe-Account %q", len(e.seen), got)
	}
}

// A header a route binds reaches the upstream only inside the resource: not
// through a route on the same path that does not bind it (a platform's own
// route beside its Connect route), not as a second value, not with a value
// that is no plain segment. Each is refused before anything is sent.
func TestABoundHeaderNeverReachesTheUpstreamOutsideTheResource(t *testing.T) {
	e := newAPIEnv(t, nil, nil, func(c *httpapi.APIConfig) {
		c.ForwardHeaders = []string{"Stripe-Account"}
		c.Routes = []httpapi.Route{
			{Method: "POST", Path: "/v1/accounts/{account}/payouts", Resource: "connect/{connected}",
				Headers: map[string]string{"connected": "Stripe-Account"}},
			{Method: "POST", Path: "/v1/accounts/{account}/payouts", Resource: "payouts/{account}"}, // the platform's own
		}
	})
	a := e.grantFor(payerA, payerTokA, 1) // payouts/acc_1: the platform's route
	send := func(extra http.Header) apiReply {
		req := httptest.NewRequest("POST", "http://gw"+payoutPath, strings.NewReader(payoutBody))
		req.Header.Set("Authorization", "Bearer "+a.token)
		for k, v := range map[string]string{"Fence-Grant": a.grant, "Fence-Status": e.kit.Status(a.vg, nil),
			"Fence-Segment": "1", "Content-Type": "application/json"} {
			req.Header.Set(k, v)
		}
		for k, vs := range extra {
			req.Header[k] = vs
		}
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, req)
		var p struct{ Code string }
		_ = json.Unmarshal(w.Body.Bytes(), &p)
		return apiReply{status: w.Code, header: w.Header(), body: w.Body.Bytes(), code: p.Code}
	}
	before := e.state()
	for name, h := range map[string]http.Header{
		"another account":   {"Stripe-Account": {"acct_victim"}},
		"two values":        {"Stripe-Account": {"acc_1", "acct_victim"}},
		"not a plain value": {"Stripe-Account": {"acct_victim, acc_1"}},
	} {
		if r := send(h); r.status < 400 {
			t.Errorf("%s: %d %s, want a refusal", name, r.status, r.body)
		}
	}
	e.wantUnchanged(before)
	if len(e.seen) != 0 {
		t.Fatalf("the upstream was called %d times", len(e.seen))
	}
	// Without the header the platform's own route takes it.
	wantPaid(t, send(nil))
	if got := e.seen[0].Values("Stripe-Account"); len(got) != 0 {
		t.Fatalf("the platform's call carried Stripe-Account %q", got)
	}
}

// Rule: each account a bound header selects on one path is a target of its
// own (the header's value follows '#' in the receipt's target), so the
// accounts' calls are fenced each under its own resource. The target was
// the path alone, which a target's one resource (CheckTarget) gave to the
// first account for good: every other account's call was RESOURCE_MISMATCH.
func TestEachHeaderBoundAccountIsATargetOfItsOwn(t *testing.T) {
	e := newAPIEnv(t, nil, nil, func(c *httpapi.APIConfig) {
		c.ForwardHeaders = []string{"Stripe-Account"}
		c.Routes = []httpapi.Route{{Method: "POST", Path: "/v1/accounts/{account}/payouts", Resource: "connect/{connected}",
			Headers: map[string]string{"connected": "Stripe-Account"}}}
	})
	for i, account := range []string{"acct_A", "acct_B"} {
		tok, vg := e.kit.VerifiedGrant(func(g *fencegate.Grant) {
			g.Resource, g.Owner, g.FenceToken = "connect/"+account, payerA, 1
			g.Lease, g.OperationRoot = "lease-"+account, "root-"+account
		})
		r := e.send("POST", payoutPath, payerTokA, map[string]string{"Fence-Grant": tok, "Fence-Status": e.kit.Status(vg, nil),
			"Fence-Segment": "1", "Content-Type": "application/json", "Stripe-Account": account}, payoutBody)
		wantPaid(t, r)
		rc, err := e.store.Receipt(context.Background(), r.header.Get("Fence-Receipt"))
		if want := "apis/payouts/v1/accounts/acc_1/payouts#stripe-account=" + account; err != nil || rc.Target != want || rc.Resource != "connect/"+account {
			t.Fatalf("%s: receipt target %q under %q (%v), want %q under connect/%s", account, rc.Target, rc.Resource, err, want, account)
		}
		if got := e.seen[i].Get("Stripe-Account"); got != account || len(e.seen) != i+1 {
			t.Fatalf("upstream saw %d calls, the last with Stripe-Account %q", len(e.seen), got)
		}
	}
}
