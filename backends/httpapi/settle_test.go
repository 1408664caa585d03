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
	"github.com/fencegate/fencegate/e2e/upstream"
)

// admitted is a PENDING receipt of segment seg keeping the request the
// gateway would keep for it, as admission stores it.
func (h *harness) admitted(t *testing.T, seg uint64, body string) *fencegate.Receipt {
	t.Helper()
	r := h.receipt(1, seg)
	r.Target, r.Method, r.State = fencegate.APITarget("payouts", "/v1/accounts/acc_1/payouts"), "POST", fencegate.ReceiptPending
	c := h.api.Call("POST", "/v1/accounts/acc_1/payouts", http.Header{"Content-Type": {"application/json"}},
		bytes.NewReader([]byte(body)), int64(len(body)))
	kr, err := c.KeptRequest(r)
	if err != nil {
		t.Fatalf("KeptRequest: %v", err)
	}
	r.Request = kr
	return &r
}

// fold records o on r as the store's Settle does.
func fold(r *fencegate.Receipt, o fencegate.Outcome) {
	r.State, r.Response, r.Error = o.State, o.Response, o.Error
	r.Attempts += o.Attempts
	r.Resend = o.Resend && o.State == fencegate.ReceiptUnknown
}

// apply is the first send of r, folded into it.
func (h *harness) apply(t *testing.T, r *fencegate.Receipt) {
	t.Helper()
	c := h.api.Call("POST", "/v1/accounts/acc_1/payouts", nil, nil, 0)
	o, _ := c.Apply(context.Background(), *r, "")
	fold(r, o)
}

// resolve runs the reconciler's step on r, folded into it.
func (h *harness) resolve(t *testing.T, r *fencegate.Receipt) error {
	t.Helper()
	o, err := h.api.Resolve(context.Background(), *r)
	if err == nil {
		fold(r, o)
	}
	return err
}

// paidOnce checks the rule every test here ends with: exactly want payouts
// were made, and the receipt claims COMMITTED only if one was.
func (h *harness) paidOnce(t *testing.T, r *fencegate.Receipt, want int) {
	t.Helper()
	if n := h.pay.Effects(); n != want {
		t.Fatalf("upstream made %d payouts, want %d", n, want)
	}
	if r.State == fencegate.ReceiptCommitted && want == 0 {
		t.Fatal("COMMITTED without a payout")
	}
	if r.State.NotApplied() && want > 0 {
		t.Fatalf("%s although the payout was made", r.State)
	}
}

func TestDropAfterTheEffectIsSettledByAResendUnderTheSameKey(t *testing.T) {
	h := newHarness(t, upstream.Options{}, nil)
	h.pay.Inject(upstream.DropResponse)
	r := h.admitted(t, 1, payout)
	h.apply(t, r)
	if r.State != fencegate.ReceiptUnknown || !r.Resend {
		t.Fatalf("after a drop: %s resend=%v", r.State, r.Resend)
	}
	if err := h.resolve(t, r); err != nil || r.State != fencegate.ReceiptCommitted || r.Attempts != 2 || h.api.Resends() != 1 {
		t.Fatalf("resend: %s attempts %d resends %d err %v", r.State, r.Attempts, h.api.Resends(), err)
	}
	var po upstream.Payout
	if err := json.Unmarshal(r.Response.Body, &po); err != nil || po.IdempotencyKey != r.Request.Key {
		t.Fatalf("stored answer %q", r.Response.Body)
	}
	if k1, k2 := h.seen[0].Get("Idempotency-Key"), h.seen[1].Get("Idempotency-Key"); k1 != k2 || k1 != IdempotencyKey(*r) {
		t.Fatalf("the resend carried another key: %q then %q", k1, k2)
	}
	h.paidOnce(t, r, 1)
}

func TestInProgressAnswerIsNeverStoredAndIsRetriedUnderTheSameKey(t *testing.T) {
	h := newHarness(t, upstream.Options{}, nil)
	h.pay.Inject(upstream.InProgress, upstream.InProgress)
	r := h.admitted(t, 1, payout)
	h.apply(t, r)
	if r.State != fencegate.ReceiptUnknown || !r.Resend || r.Response != nil {
		t.Fatalf("an in-progress 409 was taken as %s (response %v)", r.State, r.Response)
	}
	_ = h.resolve(t, r)
	if r.State != fencegate.ReceiptUnknown || !r.Resend {
		t.Fatalf("a second in-progress answer: %s", r.State)
	}
	_ = h.resolve(t, r)
	if r.State != fencegate.ReceiptCommitted || r.Response.Status != http.StatusOK || r.Attempts != 3 {
		t.Fatalf("after in-progress: %s %+v attempts %d", r.State, r.Response, r.Attempts)
	}
	h.paidOnce(t, r, 1)
}

func TestRetryAfterOfAnInProgressAnswerIsPassedOn(t *testing.T) {
	h := newHarness(t, upstream.Options{}, nil)
	h.pay.Inject(upstream.InProgress)
	out, _ := h.call(h.receipt(1, 1), nil, payout)
	if out.State != fencegate.ReceiptUnknown || out.RetryAfter != 2*time.Second {
		t.Fatalf("in-progress with Retry-After: 2: %+v", out)
	}
	if d := retryAfter(h.clock().Add(90*time.Second).UTC().Format(http.TimeFormat), h.clock()); d != 90*time.Second {
		t.Fatalf("HTTP-date Retry-After = %s", d)
	}
}

func TestResendsAreBoundedThenManual(t *testing.T) {
	h := newHarness(t, upstream.Options{}, func(c *APIConfig) { c.Settle.MaxAttempts = 2 })
	h.pay.Inject(upstream.InProgress, upstream.InProgress, upstream.InProgress)
	r := h.admitted(t, 1, payout)
	h.apply(t, r)
	_ = h.resolve(t, r)
	_ = h.resolve(t, r)
	if r.State != fencegate.ReceiptUnknown || r.Resend || !strings.Contains(r.Error, "manual") || r.Attempts != 2 {
		t.Fatalf("after the bound: %s resend=%v attempts %d %q", r.State, r.Resend, r.Attempts, r.Error)
	}
	requests := h.pay.Requests()
	_ = h.resolve(t, r)
	if h.pay.Requests() != requests {
		t.Fatal("a receipt past its resend bound was resent")
	}
	h.paidOnce(t, r, 0)
}

func TestSavedServerErrorIsUnknownAndNeverGuessed(t *testing.T) {
	h := newHarness(t, upstream.Options{}, func(c *APIConfig) {
		// Stripe's hint: Stripe-Should-Retry: false means a resend cannot help.
		c.Answers.Unknown = []Match{{Header: "Stripe-Should-Retry: false"}}
		c.Answers.Resend = []Match{{Header: "Stripe-Should-Retry: true"}}
	})
	h.pay.Inject(upstream.SavedServerError)
	r := h.admitted(t, 1, payout)
	h.apply(t, r)
	if r.State != fencegate.ReceiptUnknown || r.Resend {
		t.Fatalf("a saved 500: %s resend=%v", r.State, r.Resend)
	}
	requests := h.pay.Requests()
	_ = h.resolve(t, r)
	if r.State != fencegate.ReceiptUnknown || h.pay.Requests() != requests {
		t.Fatalf("a saved 500 was resent or settled: %s", r.State)
	}
	h.paidOnce(t, r, 1) // it did pay: anything but UNKNOWN would be a lie
}

func TestRetryHintMakesA500Resendable(t *testing.T) {
	h := newHarness(t, upstream.Options{}, func(c *APIConfig) {
		c.Answers.Resend = []Match{{Header: "Stripe-Should-Retry: true"}}
	})
	h.pay.Inject(upstream.RetryableServerError)
	r := h.admitted(t, 1, payout)
	h.apply(t, r)
	if r.State != fencegate.ReceiptUnknown || !r.Resend {
		t.Fatalf("500 with Stripe-Should-Retry: true: %s resend=%v", r.State, r.Resend)
	}
	if err := h.resolve(t, r); err != nil || r.State != fencegate.ReceiptCommitted {
		t.Fatalf("resend: %s %v", r.State, err)
	}
	h.paidOnce(t, r, 1)
}

func TestPastKeyRetentionGoesToManualNeverAGuess(t *testing.T) {
	h := newHarness(t, upstream.Options{}, nil)
	h.pay.Inject(upstream.Reset)
	r := h.admitted(t, 1, payout)
	h.apply(t, r)
	h.advance(24 * time.Hour)
	requests := h.pay.Requests()
	if err := h.resolve(t, r); err != nil || r.State != fencegate.ReceiptUnknown || r.Resend || !strings.Contains(r.Error, "retention") {
		t.Fatalf("past retention: %s resend=%v %q %v", r.State, r.Resend, r.Error, err)
	}
	if h.pay.Requests() != requests {
		t.Fatal("resent after the key retention: the upstream may have forgotten the key")
	}
	h.paidOnce(t, r, 0)
}

func TestKeyInTheBodyIsPlacedAndKeptShort(t *testing.T) {
	h := newHarness(t, upstream.Options{KeyField: "idempotency_key", MaxKeyLength: 45}, func(c *APIConfig) {
		c.Key = Key{BodyField: "/idempotency_key", MaxLength: 45}
	})
	h.pay.Inject(upstream.DropResponse)
	r := h.admitted(t, 1, `{"amount":500,"currency":"eur","idempotency_key":"chosen-by-the-sdk"}`)
	if len(r.Request.Key) != 45 || !bytes.Contains(r.Request.Body, []byte(`"idempotency_key":"`+r.Request.Key+`"`)) {
		t.Fatalf("kept body %s, key %q", r.Request.Body, r.Request.Key)
	}
	if r.Request.Header["Idempotency-Key"] != nil {
		t.Fatal("a body-key API was also sent an Idempotency-Key header")
	}
	h.apply(t, r)
	if err := h.resolve(t, r); err != nil || r.State != fencegate.ReceiptCommitted {
		t.Fatalf("resend: %s %v", r.State, err)
	}
	if po := h.pay.Payouts()[0]; po.IdempotencyKey != r.Request.Key {
		t.Fatalf("upstream saw key %q, want %q", po.IdempotencyKey, r.Request.Key)
	}
	h.paidOnce(t, r, 1)
}

func TestAlphanumericKeyFitsAShortLimit(t *testing.T) {
	k := Key{Header: "Idempotency-Key", MaxLength: 40, Charset: CharsetAlphanumeric}
	if errs := k.validate(); len(errs) != 0 {
		t.Fatal(errs)
	}
	got := k.For(fencegate.Receipt{Resource: "r", OperationRoot: "o", FenceToken: 1, Segment: 1})
	if len(got) != 40 || strings.ContainsAny(got, "-_.") {
		t.Fatalf("key %q", got)
	}
	if errs := (Key{MaxLength: 20}).withDefaults().validate(); len(errs) == 0 {
		t.Fatal("a key too short for 128 bits of digest was accepted")
	}
}

func TestBodyKeyNeedsAJSONObject(t *testing.T) {
	h := newHarness(t, upstream.Options{}, func(c *APIConfig) { c.Key = Key{BodyField: "/idempotency_key"} })
	c := h.api.Call("POST", "/v1/accounts/acc_1/payouts", nil, bytes.NewReader([]byte(`[1]`)), 3)
	if _, err := c.KeptRequest(h.receipt(1, 1)); fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
		t.Fatalf("err = %v, want INVALID_REQUEST", err)
	}
}

func searchLookup(c *APIConfig) {
	c.Settle = Settle{Strategy: StrategyLookup, Lookup: &Lookup{
		URL: "/v1/payouts/search?key={key}", List: "/data", Field: "/idempotency_key", MinAge: time.Minute}}
}

func TestEventuallyConsistentSearchProvesNothingBeforeMinAge(t *testing.T) {
	h := newHarness(t, upstream.Options{SearchLag: 40 * time.Second}, searchLookup)
	h.pay.Inject(upstream.DropResponse)
	r := h.admitted(t, 1, payout)
	h.apply(t, r)
	if err := h.resolve(t, r); err != nil || r.State != fencegate.ReceiptUnknown {
		t.Fatalf("an empty search result right after the write settled %s (%v)", r.State, err)
	}
	h.advance(45 * time.Second) // the search caught up
	if err := h.resolve(t, r); err != nil || r.State != fencegate.ReceiptCommitted {
		t.Fatalf("after the lag: %s %v", r.State, err)
	}
	var po upstream.Payout
	if err := json.Unmarshal(r.Response.Body, &po); err != nil || po.ID != "po_1" || r.Response.Header[SettledByHeader] != "lookup" {
		t.Fatalf("stored %q %v: want the matched payout, not the list", r.Response.Body, r.Response.Header)
	}
	h.paidOnce(t, r, 1)
}

func TestEmptySearchResultIsNotFoundNeverFound(t *testing.T) {
	h := newHarness(t, upstream.Options{}, searchLookup)
	h.pay.Inject(upstream.Reset)
	r := h.admitted(t, 1, payout)
	h.apply(t, r)
	h.advance(DefaultEffectTimeout + time.Minute) // minAge after the effect expiry
	if err := h.resolve(t, r); err != nil || r.State != fencegate.ReceiptNotApplied {
		t.Fatalf("an empty list after minAge: %s %v", r.State, err)
	}
	h.paidOnce(t, r, 0)
}

// TestLookupNeverRecomputesTheKey: a receipt that keeps no request (one
// admitted before requests were kept, under another key shape) is not looked
// up by a key computed now: "not found" would settle a real payout
// NOT_APPLIED. It stays UNKNOWN for an operator.
func TestLookupNeverRecomputesTheKey(t *testing.T) {
	h := newHarness(t, upstream.Options{}, searchLookup)
	r := h.receipt(1, 1)
	r.Target, r.Method, r.State = fencegate.APITarget("payouts", "/v1/accounts/acc_1/payouts"), "POST", fencegate.ReceiptUnknown
	h.advance(time.Hour)
	requests := h.pay.Requests()
	if o, err := h.api.Resolve(context.Background(), r); err == nil || o.State != fencegate.ReceiptUnknown || h.pay.Requests() != requests {
		t.Fatalf("a receipt without a kept request was looked up: %+v %v", o, err)
	}
}

func TestConflictAnswerIsFetched(t *testing.T) {
	h := newHarness(t, upstream.Options{ConflictOnReplay: true}, func(c *APIConfig) {
		c.Settle = Settle{Strategy: StrategyConflictFetch, Conflict: &ConflictFetch{
			Match: Match{Status: "409", Field: "/error/errors/0/reason", Equals: "idempotent_creation_conflict"},
			ID:    "/error/errors/0/links/conflicting_resource_id",
			URL:   "/v1/payouts/{id}",
		}}
	})
	h.pay.Inject(upstream.DropResponse)
	r := h.admitted(t, 1, payout)
	h.apply(t, r)
	if err := h.resolve(t, r); err != nil || r.State != fencegate.ReceiptCommitted {
		t.Fatalf("conflict-fetch: %s %v", r.State, err)
	}
	var po upstream.Payout
	if err := json.Unmarshal(r.Response.Body, &po); err != nil || po.ID != "po_1" || r.Response.Header[SettledByHeader] != "conflict-fetch" {
		t.Fatalf("stored %q", r.Response.Body)
	}
	h.paidOnce(t, r, 1)
}

func TestConfigRefusesResendWithoutAKey(t *testing.T) {
	c := validConfig("http://up.example")
	c.Contract = Contract{NativeFence: &NativeFence{Header: "Fence-Token"}}
	c.Settle = Settle{Strategy: StrategyResend}
	err := Config{APIs: []APIConfig{c}}.Validate()
	if fencegate.ErrorCode(err) != fencegate.CodeUnsupported || !strings.Contains(err.Error(), "pay twice") {
		t.Fatalf("err = %v", err)
	}
	c.Settle = Settle{}
	if err := (Config{APIs: []APIConfig{c}}).Validate(); err != nil {
		t.Fatalf("native fence with manual settling: %v", err)
	}
}

// TestLookupByReferenceSettlesANativeFenceAPI: an API sent no key (native
// fence) is looked up by a reference the worker put in the body: found is
// COMMITTED with the matched item, a list holding only other references is
// not found (NOT_APPLIED once minAge has passed).
func TestLookupByReferenceSettlesANativeFenceAPI(t *testing.T) {
	var mu sync.Mutex
	made := map[string]bool{}
	resetBeforeApply := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			var in struct{ Reference string }
			_ = json.NewDecoder(r.Body).Decode(&in)
			mu.Lock()
			if !resetBeforeApply {
				made[in.Reference] = true
			}
			mu.Unlock()
			panic(http.ErrAbortHandler) // the answer is lost
		}
		mu.Lock()
		defer mu.Unlock()
		items := []map[string]string{{"reference": "someone-else", "id": "p_0"}}
		if ref := r.URL.Query().Get("reference"); made[ref] {
			items = append(items, map[string]string{"reference": ref, "id": "p_1"})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"items": items})
	}))
	defer srv.Close()
	c := validConfig(srv.URL)
	c.Contract = Contract{NativeFence: &NativeFence{Header: "Fence-Token"}}
	c.Settle = Settle{Strategy: StrategyLookup, Lookup: &Lookup{URL: "/v1/payments?reference={ref}", List: "/items", Field: "/reference", Ref: "/reference"}}
	if err := (Config{APIs: []APIConfig{c}}).Validate(); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	api, err := New(c, nil, WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	keep := func(seg uint64, ref string) *fencegate.Receipt {
		r := fencegate.Receipt{ID: "r", Resource: "payouts/acc_1", OperationRoot: "o", FenceToken: 1, Segment: seg, CreatedAt: now,
			Target: fencegate.APITarget("payouts", "/v1/accounts/acc_1/payouts"), Method: "POST", State: fencegate.ReceiptPending}
		body := `{"amount":1,"reference":"` + ref + `"}`
		kr, err := api.Call("POST", "/v1/accounts/acc_1/payouts", nil, bytes.NewReader([]byte(body)), int64(len(body))).KeptRequest(r)
		if err != nil {
			t.Fatal(err)
		}
		r.Request = kr
		o, _ := api.Call("POST", "/v1/accounts/acc_1/payouts", nil, nil, 0).Apply(context.Background(), r, "")
		fold(&r, o)
		return &r
	}
	paid := keep(1, "order-7")
	if paid.State != fencegate.ReceiptUnknown || paid.Resend || paid.Request.Key != "" {
		t.Fatalf("a dropped native-fence call: %s resend=%v key=%q", paid.State, paid.Resend, paid.Request.Key)
	}
	o, err := api.Resolve(context.Background(), *paid)
	if err != nil || o.State != fencegate.ReceiptCommitted || !strings.Contains(string(o.Response.Body), `"p_1"`) {
		t.Fatalf("lookup by reference: %+v %v", o, err)
	}
	// A reset before the call reached the upstream: only other references listed.
	mu.Lock()
	resetBeforeApply = true
	mu.Unlock()
	lost := keep(2, "order-8")
	if o, err := api.Resolve(context.Background(), *lost); err != nil || o.State != fencegate.ReceiptUnknown {
		t.Fatalf("not found before minAge: %+v %v", o, err)
	}
	now = now.Add(DefaultEffectTimeout + DefaultTimeout) // minAge after the effect expiry
	if o, err := api.Resolve(context.Background(), *lost); err != nil || o.State != fencegate.ReceiptNotApplied {
		t.Fatalf("not found after minAge: %+v %v", o, err)
	}
}

// A Retry-After of more delay-seconds than a Duration holds is a long wait
// (the reconciler caps it), never wrapped into a negative or short one.
func TestRetryAfterBeyondADurationIsALongWaitNotAWrappedOne(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, v := range []string{"10000000000", "99999999999999999999", " 9223372037 "} {
		if d := retryAfter(v, now); d < 10*time.Minute {
			t.Errorf("Retry-After: %q read as %s", v, d)
		}
	}
	if d := retryAfter(" 120 ", now); d != 2*time.Minute {
		t.Errorf("Retry-After: 120 read as %s", d)
	}
}

// TestLookupCountsMinAgeFromALateFirstSend: a first send that started late
// (just before the effect expiry) may still land minAge after the receipt
// was created; "not found" then proves nothing until minAge after the last
// moment the send could have been open.
func TestLookupCountsMinAgeFromALateFirstSend(t *testing.T) {
	h := newHarness(t, upstream.Options{}, searchLookup)
	h.pay.Inject(upstream.Reset)
	r := h.admitted(t, 1, payout)
	h.advance(DefaultEffectTimeout - time.Second) // a slow admission: the send starts late
	h.apply(t, r)
	h.advance(time.Minute - DefaultEffectTimeout + 2*time.Second) // creation + minAge + 1 s
	if err := h.resolve(t, r); err != nil || r.State != fencegate.ReceiptUnknown {
		t.Fatalf("not found minAge after creation but 2 s after a late send: %s %v", r.State, err)
	}
	h.advance(DefaultEffectTimeout) // minAge after the effect expiry
	if err := h.resolve(t, r); err != nil || r.State != fencegate.ReceiptNotApplied {
		t.Fatalf("not found minAge after the effect expiry: %s %v", r.State, err)
	}
	h.paidOnce(t, r, 0)
}

// TestLookupCountsMinAgeFromTheLastRecordedSend: a receipt resent long after
// its creation (its last settle recorded at SettledAt) is not called
// NOT_APPLIED by a lookup until minAge after that send.
func TestLookupCountsMinAgeFromTheLastRecordedSend(t *testing.T) {
	h := newHarness(t, upstream.Options{}, searchLookup)
	h.pay.Inject(upstream.Reset)
	r := h.admitted(t, 1, payout)
	h.apply(t, r)
	h.advance(5 * time.Minute)
	resent := h.clock()
	r.State, r.Attempts, r.SettledAt = fencegate.ReceiptUnknown, 2, &resent
	h.advance(30 * time.Second)
	if err := h.resolve(t, r); err != nil || r.State != fencegate.ReceiptUnknown {
		t.Fatalf("not found 30 s after a resend: %s %v", r.State, err)
	}
	h.advance(30 * time.Second)
	if err := h.resolve(t, r); err != nil || r.State != fencegate.ReceiptNotApplied {
		t.Fatalf("not found minAge after the resend: %s %v", r.State, err)
	}
}

// TestLookupAfterARestartWaitsMinAgeFromTheStart: a receipt older than the
// process may have been resent by the process before it, which died before
// recording the send; not found counts only minAge after this start.
func TestLookupAfterARestartWaitsMinAgeFromTheStart(t *testing.T) {
	h := newHarness(t, upstream.Options{}, searchLookup)
	h.pay.Inject(upstream.Reset)
	r := h.admitted(t, 1, payout)
	h.apply(t, r)
	h.advance(10 * time.Minute)
	restarted, err := New(h.api.cfg, nil, WithClock(h.clock))
	if err != nil {
		t.Fatal(err)
	}
	h.api = restarted
	h.advance(30 * time.Second)
	if err := h.resolve(t, r); err != nil || r.State != fencegate.ReceiptUnknown {
		t.Fatalf("not found 30 s after a restart: %s %v", r.State, err)
	}
	h.advance(30 * time.Second)
	if err := h.resolve(t, r); err != nil || r.State != fencegate.ReceiptNotApplied {
		t.Fatalf("not found minAge after the restart: %s %v", r.State, err)
	}
}

// TestResendWaitsForTheStoredRetryAfter: an in-progress answer with
// Retry-After: 2 is kept as the receipt's RetryAt (the store does it; fold
// here). Until then a Resolve (a replay, the reconciler, another replica)
// sends nothing under the key and learns nothing; after it, it resends.
func TestResendWaitsForTheStoredRetryAfter(t *testing.T) {
	h := newHarness(t, upstream.Options{}, nil)
	h.pay.Inject(upstream.InProgress)
	r := h.admitted(t, 1, payout)
	c := h.api.Call("POST", "/v1/accounts/acc_1/payouts", nil, nil, 0)
	o, _ := c.Apply(context.Background(), *r, "")
	fold(r, o)
	if r.State != fencegate.ReceiptUnknown || o.RetryAfter != 2*time.Second {
		t.Fatalf("in-progress answer: %s, RetryAfter %s", r.State, o.RetryAfter)
	}
	at := h.clock().Add(o.RetryAfter)
	r.RetryAt = &at
	sent := h.pay.Requests()
	h.advance(time.Second)
	out, err := h.api.Resolve(context.Background(), *r)
	if err != nil || out.State != fencegate.ReceiptUnknown || out.Attempts != 0 {
		t.Fatalf("resolve before Retry-After: %+v %v", out, err)
	}
	if n := h.pay.Requests(); n != sent {
		t.Fatalf("resolve before Retry-After sent %d requests upstream", n-sent)
	}
	h.advance(time.Second)
	_ = h.resolve(t, r)
	if r.State != fencegate.ReceiptCommitted || h.pay.Requests() != sent+1 {
		t.Fatalf("resolve after Retry-After: %s, %d requests", r.State, h.pay.Requests()-sent)
	}
	h.paidOnce(t, r, 1)
}
