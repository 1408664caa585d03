package httpapi

import (
	"bytes"
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

// refUpstream is a native-fence payments service: POST /v1/accounts/{a}/payouts
// with {"amount":N,"reference":R} makes a payout (its answer can be dropped,
// or the connection reset before anything is applied); GET
// /v1/payouts/by-ref/{ref} answers the payout with that reference (404 when
// none); GET /v1/payouts?reference=R lists payouts with that reference.
type refUpstream struct {
	mu      sync.Mutex
	payouts []map[string]any
	reset   bool // the next POST is reset before it is applied
	seen    []string
}

func (u *refUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.seen = append(u.seen, r.Method+" "+r.URL.RequestURI())
	u.mu.Unlock()
	switch {
	case r.Method == http.MethodPost:
		var in struct {
			Amount    int64
			Reference string
		}
		_ = json.NewDecoder(r.Body).Decode(&in)
		u.mu.Lock()
		reset := u.reset
		u.reset = false
		if !reset {
			u.payouts = append(u.payouts, map[string]any{"id": "p_" + in.Reference + "_" + string(rune('0'+len(u.payouts))),
				"reference": in.Reference, "amount": in.Amount, "fence": r.Header.Get("Fence-Token"), "segment": r.Header.Get("Fence-Segment")})
		}
		u.mu.Unlock()
		panic(http.ErrAbortHandler) // the answer is lost (or nothing was applied)
	case strings.HasPrefix(r.URL.Path, "/v1/payouts/by-ref/"):
		ref := strings.TrimPrefix(r.URL.Path, "/v1/payouts/by-ref/") // decoded, as any router gives it
		u.mu.Lock()
		defer u.mu.Unlock()
		for _, p := range u.payouts {
			if p["reference"] == ref {
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(p)
				return
			}
		}
		http.Error(w, `{"error":"no_such_payout"}`, http.StatusNotFound)
	case r.URL.Path == "/v1/payouts":
		ref := r.URL.Query().Get("reference")
		u.mu.Lock()
		defer u.mu.Unlock()
		items := []map[string]any{}
		for _, p := range u.payouts {
			if p["reference"] == ref {
				items = append(items, p)
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"items": items})
	default:
		http.NotFound(w, r)
	}
}

func (u *refUpstream) made(ref string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, p := range u.payouts {
		if p["reference"] == ref {
			return true
		}
	}
	return false
}

// refAPI is a native-fence API in front of u, settled by the lookup l.
func refAPI(t *testing.T, u *refUpstream, l *Lookup, now *time.Time) *API {
	t.Helper()
	srv := httptest.NewServer(u)
	t.Cleanup(srv.Close)
	c := validConfig(srv.URL)
	c.Contract = Contract{NativeFence: &NativeFence{Header: "Fence-Token"}}
	c.Settle = Settle{Strategy: StrategyLookup, Lookup: l}
	if err := (Config{APIs: []APIConfig{c}}).Validate(); err != nil {
		t.Fatal(err)
	}
	api, err := New(c, &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, WithClock(func() time.Time { return *now }))
	if err != nil {
		t.Fatal(err)
	}
	return api
}

// sendRef admits and sends segment seg of a payout with reference ref, folded
// into its receipt as the store would.
func sendRef(t *testing.T, api *API, now time.Time, seg uint64, ref string) *fencegate.Receipt {
	t.Helper()
	r := fencegate.Receipt{ID: "r" + string(rune('0'+seg)), Resource: "payouts/acc_1", OperationRoot: "o", FenceToken: 1, Segment: seg, CreatedAt: now,
		Target: fencegate.APITarget("payouts", "/v1/accounts/acc_1/payouts"), Method: "POST", State: fencegate.ReceiptPending}
	body, _ := json.Marshal(map[string]any{"amount": 100, "reference": ref})
	kr, err := api.Call("POST", "/v1/accounts/acc_1/payouts", nil, bytes.NewReader(body), int64(len(body))).KeptRequest(r)
	if err != nil {
		t.Fatal(err)
	}
	r.Request = kr
	o, _ := api.Call("POST", "/v1/accounts/acc_1/payouts", nil, nil, 0).Apply(context.Background(), r, "")
	fold(&r, o)
	if r.State != fencegate.ReceiptUnknown {
		t.Fatalf("a dropped call: %s", r.State)
	}
	return &r
}

// TestRefInTheLookupPathIsEscapedOnce: a lookup whose {ref} is a path
// segment (GET /v1/payouts/by-ref/{ref}) sends the reference path-escaped
// once ("order 7" as order%207, "50%" as 50%25), so the upstream finds the
// payout it made and the receipt is COMMITTED. Escaped twice or
// query-escaped (order+7), the upstream answered 404 and the receipt was
// settled NOT_APPLIED: the worker would pay again.
func TestRefInTheLookupPathIsEscapedOnce(t *testing.T) {
	for _, ref := range []string{"order 7", "50%"} {
		t.Run(ref, func(t *testing.T) {
			u := &refUpstream{}
			now := time.Unix(1_700_000_000, 0)
			api := refAPI(t, u, &Lookup{URL: "/v1/payouts/by-ref/{ref}", Field: "/reference", Ref: "/reference"}, &now)
			r := sendRef(t, api, now, 1, ref)
			if !u.made(ref) {
				t.Fatal("the upstream made no payout")
			}
			now = now.Add(DefaultEffectTimeout + DefaultTimeout + time.Second) // minAge after the effect expiry
			o, err := api.Resolve(context.Background(), *r)
			if err != nil || o.State != fencegate.ReceiptCommitted {
				u.mu.Lock()
				defer u.mu.Unlock()
				t.Fatalf("the payout with reference %q was made, the lookup settled %s (%q, err %v); upstream saw %q",
					ref, o.State, o.Error, err, u.seen)
			}
		})
	}
}

// TestSingleObjectAnswerWithoutTheFieldIsNoProof: a single-object lookup
// (list "") whose 2xx answer does not carry the field (an error envelope
// served with 200, {"data":null,"errors":[...]}, a proxy's JSON page) is
// not the effect's object: the receipt stays UNKNOWN, as for a list lookup
// whose answer lacks the list; only a 404 is "not found". It was taken for
// "1 candidate, none matching" and settled a payout that was made
// NOT_APPLIED.
func TestSingleObjectAnswerWithoutTheFieldIsNoProof(t *testing.T) {
	var mu sync.Mutex
	paid := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			mu.Lock()
			paid++
			mu.Unlock()
			panic(http.ErrAbortHandler) // paid, answer lost
		}
		// The lookup endpoint is degraded: 200 with an error envelope.
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"data":null,"errors":[{"message":"upstream timeout"}]}`))
	}))
	defer srv.Close()
	c := validConfig(srv.URL)
	c.Settle = Settle{Strategy: StrategyLookup, Lookup: &Lookup{URL: "/v1/payouts/by-key/{key}", Field: "/idempotency_key"}}
	if err := (Config{APIs: []APIConfig{c}}).Validate(); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	api, err := New(c, &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	r := fencegate.Receipt{ID: "r1", Resource: "payouts/acc_1", OperationRoot: "o", FenceToken: 1, Segment: 1, CreatedAt: now,
		Target: fencegate.APITarget("payouts", "/v1/accounts/acc_1/payouts"), Method: "POST", State: fencegate.ReceiptPending}
	kr, err := api.Call("POST", "/v1/accounts/acc_1/payouts", nil, strings.NewReader(payout), int64(len(payout))).KeptRequest(r)
	if err != nil {
		t.Fatal(err)
	}
	r.Request = kr
	o, _ := api.Call("POST", "/v1/accounts/acc_1/payouts", nil, nil, 0).Apply(context.Background(), r, "")
	fold(&r, o)
	now = now.Add(DefaultEffectTimeout + DefaultTimeout + time.Second)
	o, err = api.Resolve(context.Background(), r)
	if paid != 1 || o.State != fencegate.ReceiptUnknown || err == nil {
		t.Fatalf("%d payouts made; a 200 answer without /idempotency_key settled it %s (%q, err %v), want UNKNOWN with an error", paid, o.State, o.Error, err)
	}
}

// TestARefLookupTellsSegmentsApartByTheirFence: a worker sends reference
// INV-7 in two segments; the first is made (its answer lost), the second is
// reset before anything is applied. With lookup.fence and lookup.segment
// (where the native-fence service records them), the second's lookup finds
// the first's payout under the same reference and skips it: NOT_APPLIED,
// not COMMITTED with another segment's payout. The first is still found.
func TestARefLookupTellsSegmentsApartByTheirFence(t *testing.T) {
	u := &refUpstream{}
	now := time.Unix(1_700_000_000, 0)
	api := refAPI(t, u, &Lookup{URL: "/v1/payouts?reference={ref}", List: "/items", Field: "/reference", Ref: "/reference",
		Fence: "/fence", Segment: "/segment"}, &now)
	r1 := sendRef(t, api, now, 1, "INV-7")
	now = now.Add(DefaultEffectTimeout + DefaultTimeout + time.Second)
	if o, err := api.Resolve(context.Background(), *r1); err != nil || o.State != fencegate.ReceiptCommitted {
		t.Fatalf("segment 1, made: %s (%q) %v", o.State, o.Error, err)
	}
	u.mu.Lock()
	u.reset = true
	u.mu.Unlock()
	r2 := sendRef(t, api, now, 2, "INV-7")
	now = now.Add(DefaultEffectTimeout + DefaultTimeout + time.Second)
	o, err := api.Resolve(context.Background(), *r2)
	if err != nil || o.State != fencegate.ReceiptNotApplied {
		t.Fatalf("segment 2, never applied: %s (%q) %v; want NOT_APPLIED", o.State, o.Error, err)
	}
}

// TestARefNoPathCanCarryIsNeverLookedUpInAPath: a reference that cannot
// stand for one path segment on every server ("..", which front ends
// resolve as a dot segment; "INV/7", whose %2F some refuse or split) is not
// put in a lookup's path: the 404 of the URL it would really ask settled a
// payout that was made NOT_APPLIED. The receipt stays UNKNOWN (UNSUPPORTED:
// a person decides) however long it waits, and nothing is asked.
func TestARefNoPathCanCarryIsNeverLookedUpInAPath(t *testing.T) {
	for _, ref := range []string{"..", ".", "INV/7", `INV\7`} {
		t.Run(ref, func(t *testing.T) {
			u := &refUpstream{}
			now := time.Unix(1_700_000_000, 0)
			api := refAPI(t, u, &Lookup{URL: "/v1/payouts/by-ref/{ref}", Field: "/reference", Ref: "/reference"}, &now)
			r := sendRef(t, api, now, 1, ref)
			if !u.made(ref) {
				t.Fatal("the upstream made no payout")
			}
			now = now.Add(DefaultEffectTimeout + DefaultTimeout + time.Hour)
			o, err := api.Resolve(context.Background(), *r)
			if o.State != fencegate.ReceiptUnknown || fencegate.ErrorCode(err) != fencegate.CodeUnsupported {
				t.Fatalf("a payout with reference %q was made; the lookup settled %s (%q, err %v), want UNKNOWN and UNSUPPORTED", ref, o.State, o.Error, err)
			}
			u.mu.Lock()
			defer u.mu.Unlock()
			if len(u.seen) != 1 {
				t.Fatalf("the upstream was asked %q, want the payout alone", u.seen)
			}
		})
	}
}

// TestARepeatedFormRefIsNeverLookedUp: a form body that gives the ref field
// twice (reference=ord-1&reference=ord-2) is read by servers differently
// (Rack and PHP keep the last, Go the first), so a lookup of either could
// miss the payout made under the other and settle it NOT_APPLIED. The
// receipt stays UNKNOWN (UNSUPPORTED) and nothing is asked.
func TestARepeatedFormRefIsNeverLookedUp(t *testing.T) {
	u := &refUpstream{}
	now := time.Unix(1_700_000_000, 0)
	api := refAPI(t, u, &Lookup{URL: "/v1/payouts?reference={ref}", List: "/items", Field: "/reference", Ref: "form:reference"}, &now)
	r := fencegate.Receipt{ID: "r1", Resource: "payouts/acc_1", OperationRoot: "o", FenceToken: 1, Segment: 1, CreatedAt: now,
		Target: fencegate.APITarget("payouts", "/v1/accounts/acc_1/payouts"), Method: "POST", State: fencegate.ReceiptUnknown, Attempts: 1,
		Request: &fencegate.EffectRequest{Method: "POST", Path: "/v1/accounts/acc_1/payouts",
			Header: map[string][]string{"Content-Type": {"application/x-www-form-urlencoded"}},
			Body:   []byte("amount=100&reference=ord-1&reference=ord-2")}}
	now = now.Add(DefaultEffectTimeout + DefaultTimeout + time.Hour)
	o, err := api.Resolve(context.Background(), r)
	if o.State != fencegate.ReceiptUnknown || fencegate.ErrorCode(err) != fencegate.CodeUnsupported {
		t.Fatalf("a form body with the ref field twice: %s (%q, err %v), want UNKNOWN and UNSUPPORTED", o.State, o.Error, err)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.seen) != 0 {
		t.Fatalf("the upstream was asked %q, want nothing", u.seen)
	}
}
