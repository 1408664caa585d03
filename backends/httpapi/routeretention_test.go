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

// TestARouteKeepsItsOwnKeyRetention: PayPal keeps a vault payment token's
// PayPal-Request-Id 3 hours, an order's 6
// (https://developer.paypal.com/sdk/vault/v2/payment-tokens-create), so a
// route declares its own settle.keyRetention. Past it, a lost answer is not
// resent (a resend under an expired key makes a second token) and waits for
// a person; within it, it is resent and settled. The API's 6 hours used to
// apply to every route.
func TestARouteKeepsItsOwnKeyRetention(t *testing.T) {
	t.Setenv("FG_TEST_PAYPAL", "tok")
	for _, c := range []struct {
		after  time.Duration
		posts  int
		state  fencegate.ReceiptState
		resend bool
	}{
		{2 * time.Hour, 2, fencegate.ReceiptCommitted, false},
		{4 * time.Hour, 1, fencegate.ReceiptUnknown, false},
	} {
		var mu sync.Mutex
		posts := 0
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			posts++
			n := posts
			mu.Unlock()
			if n == 1 {
				panic(http.ErrAbortHandler) // the token is made, its answer lost
			}
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"id":"tok_1"}`))
		}))
		now := time.Unix(1_700_000_000, 0)
		cfg := APIConfig{Name: "paypal", Preset: "paypal", BaseURL: srv.URL, Credentials: &Credentials{Env: "FG_TEST_PAYPAL"},
			Routes: []Route{{Method: "POST", Path: "/v3/vault/payment-tokens", Resource: "res", Settle: &Settle{KeyRetention: 3 * time.Hour}}}}
		if err := (Config{APIs: []APIConfig{cfg}}).Validate(); err != nil {
			t.Fatal(err)
		}
		api, err := New(cfg, &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, WithClock(func() time.Time { return now }))
		if err != nil {
			t.Fatal(err)
		}
		r := lostCall(t, api, now, "/v3/vault/payment-tokens", http.Header{"Content-Type": {"application/json"}},
			`{"payment_source":{"token":{"id":"st_1","type":"SETUP_TOKEN"}}}`)
		now = now.Add(c.after)
		o, _ := api.Resolve(context.Background(), r)
		srv.Close()
		if posts != c.posts || o.State != c.state || o.Resend != c.resend {
			t.Errorf("%s after the call: %d POSTs, %s (resend %v, %q), want %d POSTs and %s", c.after, posts, o.State, o.Resend, o.Error, c.posts, c.state)
		}
		if c.state == fencegate.ReceiptUnknown && !strings.Contains(o.Error, "3h0m0s") {
			t.Errorf("past the route's retention: %q, want it named", o.Error)
		}
	}
}

// TestRouteKeyRetentionNeedsAKey: a route's keyRetention is refused where
// the API sends no key (a native fence only), and when it is negative.
func TestRouteKeyRetentionNeedsAKey(t *testing.T) {
	for name, mut := range map[string]func(*APIConfig){
		"no key": func(c *APIConfig) {
			c.Contract = Contract{NativeFence: &NativeFence{Header: "Fence-Token"}}
			c.Settle = Settle{Strategy: StrategyManual}
			c.Routes[0].Settle = &Settle{Strategy: StrategyManual, KeyRetention: time.Hour}
		},
		"negative": func(c *APIConfig) { c.Routes[0].Settle = &Settle{KeyRetention: -time.Hour} },
	} {
		c := validConfig("http://127.0.0.1:1")
		mut(&c)
		if err := (Config{APIs: []APIConfig{c}}).Validate(); err == nil || !strings.Contains(err.Error(), "keyRetention") {
			t.Errorf("%s: %v, want keyRetention refused", name, err)
		}
	}
}

// TestAHeaderBindingIsCheckedUpFront: a route's header binding names a
// header the API forwards, a parameter its resource uses and no path
// parameter, and a header a worker may send upstream at all.
func TestAHeaderBindingIsCheckedUpFront(t *testing.T) {
	for name, c := range map[string]struct {
		forward  []string
		resource string
		headers  map[string]string
		want     string
	}{
		"not forwarded":              {nil, "payouts/{acct}", map[string]string{"acct": "Stripe-Account"}, "not forwarded"},
		"unused":                     {[]string{"Stripe-Account"}, "payouts/{account}", map[string]string{"acct": "Stripe-Account"}, "does not use"},
		"a path parameter":           {[]string{"Stripe-Account"}, "payouts/{account}", map[string]string{"account": "Stripe-Account"}, "path parameter"},
		"never forwarded":            {nil, "payouts/{acct}", map[string]string{"acct": "Authorization"}, "may send upstream"},
		"not a parameter name":       {[]string{"Stripe-Account"}, "payouts/{account}", map[string]string{"a-b": "Stripe-Account"}, "letters"},
		"one header, two parameters": {[]string{"Stripe-Account"}, "payouts/{a}/{b}", map[string]string{"a": "Stripe-Account", "b": "stripe-account"}, "binds two"},
	} {
		cfg := validConfig("http://127.0.0.1:1")
		cfg.ForwardHeaders = c.forward
		cfg.Routes[0].Resource, cfg.Routes[0].Headers = c.resource, c.headers
		if err := (Config{APIs: []APIConfig{cfg}}).Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
	ok := validConfig("http://127.0.0.1:1")
	ok.ForwardHeaders = []string{"Stripe-Account"}
	ok.Routes[0].Resource, ok.Routes[0].Headers = "payouts/{acct}", map[string]string{"acct": "stripe-account"}
	if err := (Config{APIs: []APIConfig{ok}}).Validate(); err != nil {
		t.Fatal(err)
	}
	api, err := New(ok, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, res, found := api.MatchHeader("POST", "/v1/accounts/acc_1/payouts", http.Header{"Stripe-Account": {"acct_9"}}); !found || res != "payouts/acct_9" {
		t.Fatalf("MatchHeader: %q %v", res, found)
	}
	for _, h := range []http.Header{nil, {"Stripe-Account": {"a", "b"}}, {"Stripe-Account": {".."}},
		{"Stripe-Account": {"acc_1, acc_2"}}, {"Stripe-Account": {"acc_1\u200b"}}, {"Stripe-Account": {"acc 1"}}} {
		if _, res, found := api.MatchHeader("POST", "/v1/accounts/acc_1/payouts", h); found {
			t.Errorf("header %v matched, resource %q", h, res)
		}
	}
}

// TestARouteSettleWithoutAStrategyKeepsTheAPIs: a route's settle that names
// no strategy changes only what it sets (its keyRetention here), keeping
// the API's strategy and lookup; one that names a strategy is its own. It
// used to replace the API's lookup with the default resend.
func TestARouteSettleWithoutAStrategyKeepsTheAPIs(t *testing.T) {
	c := validConfig("http://127.0.0.1:1")
	c.Settle = Settle{Strategy: StrategyLookup, MaxAttempts: 3, Lookup: &Lookup{URL: "/v1/payouts?key={key}", List: "/data", Field: "/key"}}
	c.Routes = append(c.Routes,
		Route{Method: "POST", Path: "/v1/short/{account}", Resource: "payouts/{account}", Settle: &Settle{KeyRetention: time.Hour}},
		Route{Method: "POST", Path: "/v1/manual/{account}", Resource: "payouts/{account}", Settle: &Settle{Strategy: StrategyManual}})
	if err := (Config{APIs: []APIConfig{c}}).Validate(); err != nil {
		t.Fatal(err)
	}
	api, err := New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	short := api.settleFor(fencegate.Receipt{Method: "POST", Target: fencegate.APITarget("payouts", "/v1/short/acc_1")})
	if short.Strategy != StrategyLookup || short.Lookup == nil || short.MaxAttempts != 3 || short.retention(api.cfg.Contract) != time.Hour {
		t.Fatalf("route with keyRetention only: %+v", short)
	}
	if m := api.settleFor(fencegate.Receipt{Method: "POST", Target: fencegate.APITarget("payouts", "/v1/manual/acc_1")}); m.Strategy != StrategyManual || m.Lookup != nil {
		t.Fatalf("route with its own strategy: %+v", m)
	}
}

// TestSettleForFindsTheRouteTheCallWasAdmittedOn: two routes on one path,
// one binding Stripe-Account (settled by hand), one not (resent): a
// receipt is settled by the route its kept request matches, headers and
// all, not by the first route of its path. An API-level keyRetention
// reaches a route whose settle does not set one.
func TestSettleForFindsTheRouteTheCallWasAdmittedOn(t *testing.T) {
	c := validConfig("http://127.0.0.1:1")
	c.ForwardHeaders = []string{"Stripe-Account"}
	c.Settle = Settle{KeyRetention: 3 * time.Hour}
	c.Routes = []Route{
		{Method: "POST", Path: "/v1/accounts/{account}/payouts", Resource: "connect/{acct}",
			Headers: map[string]string{"acct": "Stripe-Account"}, Settle: &Settle{Strategy: StrategyManual}},
		{Method: "POST", Path: "/v1/accounts/{account}/payouts", Resource: "payouts/{account}", Settle: &Settle{MaxAttempts: 3}},
	}
	if err := (Config{APIs: []APIConfig{c}}).Validate(); err != nil {
		t.Fatal(err)
	}
	api, err := New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	receipt := func(h map[string][]string) fencegate.Receipt {
		return fencegate.Receipt{Method: "POST", Target: fencegate.APITarget("payouts", "/v1/accounts/acc_1/payouts"),
			Request: &fencegate.EffectRequest{Method: "POST", Path: "/v1/accounts/acc_1/payouts", Header: h}}
	}
	if st := api.settleFor(receipt(map[string][]string{"Stripe-Account": {"acct_1"}})); st.Strategy != StrategyManual {
		t.Errorf("a Connect call: %+v, want its route's manual settle", st)
	}
	st := api.settleFor(receipt(nil))
	if st.Strategy != StrategyResend || st.MaxAttempts != 3 || st.retention(api.cfg.Contract) != 3*time.Hour {
		t.Errorf("a platform call: %+v, want the platform route's resend, 3 attempts, the API's 3 h retention", st)
	}
}

// TestTheStripePresetDoesNotForwardStripeContext: Stripe-Context supersedes
// Stripe-Account (https://docs.stripe.com/context), so the preset does not
// forward it: a route binding Stripe-Account would otherwise let a worker
// act on another account through it.
func TestTheStripePresetDoesNotForwardStripeContext(t *testing.T) {
	t.Setenv("FG_TEST_STRIPE", "sk_test")
	api, err := New(APIConfig{Name: "stripe", Preset: "stripe", BaseURL: "http://127.0.0.1:1", Credentials: &Credentials{Env: "FG_TEST_STRIPE"},
		Routes: []Route{{Method: "POST", Path: "/v1/payment_intents", Resource: "stripe/{account}/pi", Headers: map[string]string{"account": "Stripe-Account"}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	fwd := api.allowedHeader(http.Header{"Stripe-Account": {"acct_1"}, "Stripe-Context": {"acct_victim"}, "Stripe-Version": {"2024-06-20"}})
	if fwd.Get("Stripe-Context") != "" || fwd.Get("Stripe-Account") != "acct_1" || fwd.Get("Stripe-Version") == "" {
		t.Fatalf("forwarded %v", fwd)
	}
}
