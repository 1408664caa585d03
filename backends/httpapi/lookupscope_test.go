package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// lostCall admits and sends one POST of api whose answer the upstream drops,
// with the worker's header h, and returns the receipt as the store keeps it.
func lostCall(t *testing.T, api *API, now time.Time, path string, h http.Header, body string) fencegate.Receipt {
	t.Helper()
	r := fencegate.Receipt{ID: "r1", Resource: "res", OperationRoot: "o", FenceToken: 1, Segment: 1, CreatedAt: now,
		Target: fencegate.APITarget(api.cfg.Name, path), Method: "POST", State: fencegate.ReceiptPending}
	kr, err := api.Call("POST", path, h, strings.NewReader(body), int64(len(body))).KeptRequest(r)
	if err != nil {
		t.Fatal(err)
	}
	r.Request = kr
	o, _ := api.Call("POST", path, h, nil, 0).Apply(context.Background(), r, "")
	fold(&r, o)
	if r.State != fencegate.ReceiptUnknown {
		t.Fatalf("a dropped answer left %s", r.State)
	}
	return r
}

// connectUpstream keeps payment intents per connected account, as Stripe
// Connect scopes every request to the account its Stripe-Account header
// names (https://docs.stripe.com/connect/authentication); the POST's answer
// is lost. GET /v1/payment_intents/search?key=K lists the account's intents
// with that key in their metadata.
type connectUpstream struct {
	mu      sync.Mutex
	intents map[string][]string // account -> keys
	gets    []http.Header
}

func (u *connectUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	defer u.mu.Unlock()
	acct := r.Header.Get("Stripe-Account")
	if r.Method == http.MethodPost {
		u.intents[acct] = append(u.intents[acct], r.Header.Get("Idempotency-Key"))
		panic(http.ErrAbortHandler)
	}
	u.gets = append(u.gets, r.Header.Clone())
	items := []any{}
	for _, k := range u.intents[acct] {
		if k == r.URL.Query().Get("key") {
			items = append(items, map[string]any{"id": "pi_1", "metadata": map[string]any{"fg_key": k}})
		}
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "search_result", "data": items, "has_more": false})
}

// TestLookupIsScopedByTheHeadersTheCallWasSentWith: a lookup asks with the
// forwarded headers its call was sent with (less the body's type and the
// gateway's own headers): a payment made on a connected account is found
// there and COMMITTED. Asked without Stripe-Account it searched the
// platform's account, found nothing and settled NOT_APPLIED: a payment
// that was made.
func TestLookupIsScopedByTheHeadersTheCallWasSentWith(t *testing.T) {
	t.Setenv("FG_TEST_STRIPE", "sk_test")
	u := &connectUpstream{intents: map[string][]string{}}
	srv := httptest.NewServer(u)
	defer srv.Close()
	now := time.Unix(1_700_000_000, 0)
	api, err := New(APIConfig{Name: "stripe", Preset: "stripe", BaseURL: srv.URL, Credentials: &Credentials{Env: "FG_TEST_STRIPE"},
		Settle: Settle{Strategy: StrategyLookup, Lookup: &Lookup{URL: "/v1/payment_intents/search?key={key}",
			List: "/data", Field: "/metadata/fg_key", More: "/has_more"}},
		Routes: []Route{{Method: "POST", Path: "/v1/payment_intents", Resource: "res"}}},
		&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	r := lostCall(t, api, now, "/v1/payment_intents", http.Header{"Content-Type": {"application/x-www-form-urlencoded"},
		"Stripe-Account": {"acct_123"}, "Stripe-Version": {"2024-06-20"}}, "amount=100&currency=usd")
	now = now.Add(DefaultEffectTimeout + DefaultTimeout + time.Second)
	o, err := api.Resolve(context.Background(), r)
	if err != nil || o.State != fencegate.ReceiptCommitted {
		t.Fatalf("the intent exists on acct_123; the lookup settled %s (%q, err %v)", o.State, o.Error, err)
	}
	g := u.gets[0]
	if g.Get("Stripe-Account") != "acct_123" || g.Get("Stripe-Version") != "2024-06-20" || g.Get("Authorization") != "Bearer sk_test" {
		t.Errorf("lookup header %v: want the call's Stripe-Account and Stripe-Version and the credential", g)
	}
	if g.Get("Content-Type") != "" || g.Get("Idempotency-Key") != "" {
		t.Errorf("lookup header %v carries the body's type or the key", g)
	}
}

// TestConflictFetchCarriesTheCallsForwardedHeaders: GoCardless refuses a
// request without GoCardless-Version (400 missing_version_header,
// https://developer.gocardless.com/api-reference/#making-requests-versioning),
// so the conflict fetch of an idempotent_creation_conflict must carry the
// version the call was sent with; without it the fetch answered 400 and the
// payment, which exists, was never settled.
func TestConflictFetchCarriesTheCallsForwardedHeaders(t *testing.T) {
	t.Setenv("FG_TEST_GC", "gc_token")
	var mu sync.Mutex
	made := map[string]string{} // key -> payment ID
	drop := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Header.Get("GoCardless-Version") == "" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":{"code":400,"type":"invalid_api_usage","errors":[{"reason":"missing_version_header"}]}}`))
			return
		}
		if r.Method == http.MethodGet {
			_ = json.NewEncoder(w).Encode(map[string]any{"payments": map[string]any{"id": strings.TrimPrefix(r.URL.Path, "/payments/")}})
			return
		}
		k := r.Header.Get("Idempotency-Key")
		if id, ok := made[k]; ok {
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": 409, "type": "invalid_state",
				"errors": []any{map[string]any{"reason": "idempotent_creation_conflict", "links": map[string]any{"conflicting_resource_id": id}}}}})
			return
		}
		made[k] = "PM0001"
		if drop {
			drop = false
			panic(http.ErrAbortHandler)
		}
	}))
	defer srv.Close()
	now := time.Unix(1_700_000_000, 0)
	api, err := New(APIConfig{Name: "gc", Preset: "gocardless", BaseURL: srv.URL, Credentials: &Credentials{Env: "FG_TEST_GC"},
		Routes: []Route{{Method: "POST", Path: "/payments", Resource: "res"}}},
		&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	r := lostCall(t, api, now, "/payments", http.Header{"Content-Type": {"application/json"}, "Gocardless-Version": {"2015-07-06"}},
		`{"payments":{"amount":100,"currency":"GBP","links":{"mandate":"MD1"}}}`)
	o, err := api.Resolve(context.Background(), r)
	if err != nil || o.State != fencegate.ReceiptCommitted || !strings.Contains(string(o.Response.Body), "PM0001") {
		t.Fatalf("the payment exists; the resend and conflict fetch settled %s (%q, err %v)", o.State, o.Error, err)
	}
}

// TestListLookupProvesAbsenceOnlyFromAnAnswerItReads: a list lookup whose
// answer holds a candidate without the field (another API version's
// shape), or a page that says more results follow, proves nothing: the
// receipt stays UNKNOWN. Both were taken for "none matching" and a payment
// that was made was settled NOT_APPLIED. A complete list without a match
// does prove it.
func TestListLookupProvesAbsenceOnlyFromAnAnswerItReads(t *testing.T) {
	for _, c := range []struct {
		name, answer string
		want         fencegate.ReceiptState
	}{
		{"candidate without the field", `{"data":[{"id":"po_1","idempotency":{"key":"x"}}],"has_more":false}`, fencegate.ReceiptUnknown},
		{"more results follow", `{"data":[{"id":"po_2","idempotency_key":"other"}],"has_more":true}`, fencegate.ReceiptUnknown},
		{"no more flag", `{"data":[{"id":"po_2","idempotency_key":"other"}]}`, fencegate.ReceiptUnknown},
		{"complete, none matching", `{"data":[{"id":"po_2","idempotency_key":"other"}],"has_more":false}`, fencegate.ReceiptNotApplied},
		{"a match after a candidate without the field", `{"data":[{"id":"po_0","idempotency_key":null},{"id":"po_1","idempotency_key":"KEY"}],"has_more":false}`, fencegate.ReceiptCommitted},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost {
					panic(http.ErrAbortHandler)
				}
				_, _ = w.Write([]byte(strings.ReplaceAll(c.answer, "KEY", r.URL.Query().Get("key"))))
			}))
			defer srv.Close()
			cfg := validConfig(srv.URL)
			cfg.Settle = Settle{Strategy: StrategyLookup, Lookup: &Lookup{URL: "/v1/payouts?key={key}", List: "/data",
				Field: "/idempotency_key", More: "/has_more"}}
			if err := (Config{APIs: []APIConfig{cfg}}).Validate(); err != nil {
				t.Fatal(err)
			}
			now := time.Unix(1_700_000_000, 0)
			api, err := New(cfg, &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, WithClock(func() time.Time { return now }))
			if err != nil {
				t.Fatal(err)
			}
			r := lostCall(t, api, now, "/v1/accounts/acc_1/payouts", nil, payout)
			now = now.Add(DefaultEffectTimeout + DefaultTimeout + time.Second)
			o, err := api.Resolve(context.Background(), r)
			if o.State != c.want || (c.want == fencegate.ReceiptUnknown) != (err != nil) ||
				(c.want == fencegate.ReceiptCommitted && !strings.Contains(string(o.Response.Body), "po_1")) {
				t.Fatalf("answer %s settled %s (%q, err %v), want %s", c.answer, o.State, o.Error, err, c.want)
			}
		})
	}
}
