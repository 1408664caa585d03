package httpapi

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/e2e/upstream"
)

// presetAPI is the least an API naming a preset must declare itself: where
// it is, where its secret comes from, and its routes.
func presetAPI(t *testing.T, preset string) APIConfig {
	t.Setenv("FG_TEST_PRESET_SECRET", "sk_test")
	return APIConfig{
		Name: preset, Preset: preset, BaseURL: "https://sandbox.example.com",
		Credentials: &Credentials{Env: "FG_TEST_PRESET_SECRET"},
		Routes:      []Route{{Method: "POST", Path: "/v1/payments", Resource: "payments"}},
	}
}

func TestEveryPresetValidatesAndFillsItsFields(t *testing.T) {
	if got := PresetNames(); strings.Join(got, " ") != "adyen checkout gocardless paypal square stripe" {
		t.Fatalf("presets = %v", got)
	}
	for _, name := range PresetNames() {
		t.Run(name, func(t *testing.T) {
			a := presetAPI(t, name)
			if err := (Config{APIs: []APIConfig{a}}).Validate(); err != nil {
				t.Fatalf("preset %s does not validate: %v", name, err)
			}
			p, r := presets[name], a.withDefaults()
			if r.Key.Header != p.Key.Header || r.Key.BodyField != p.Key.BodyField || r.Key.MaxLength != p.Key.MaxLength {
				t.Errorf("key = %+v, want the preset's %+v", r.Key, p.Key)
			}
			if r.Contract.Idempotency == nil || r.Contract.Idempotency.KeyRetention != p.Contract.Idempotency.KeyRetention {
				t.Errorf("contract = %+v, want retention %s", r.Contract, p.Contract.Idempotency.KeyRetention)
			}
			if r.Settle.Strategy != p.Settle.Strategy || !reflect.DeepEqual(r.Answers.InProgress, p.Answers.InProgress) ||
				!reflect.DeepEqual(r.Answers.Resend, p.Answers.Resend) {
				t.Errorf("settle %q answers %+v: not the preset's", r.Settle.Strategy, r.Answers)
			}
			if r.Credentials.Header != p.Credentials.Header || r.Credentials.Prefix != p.Credentials.Prefix || r.Credentials.Env != "FG_TEST_PRESET_SECRET" {
				t.Errorf("credentials = %+v", r.Credentials)
			}
			if _, err := New(a, nil); err != nil {
				t.Fatalf("New: %v", err)
			}
			rc := fencegate.Receipt{Resource: "payments", OperationRoot: "root", FenceToken: 1 << 40, Segment: 99}
			if k := r.Key.For(rc); len(k) > p.Key.MaxLength || len(k) < 32 {
				t.Errorf("key %q is over the preset's %d characters", k, p.Key.MaxLength)
			}
		})
	}
}

func TestEveryPresetFieldTheAPISetsWins(t *testing.T) {
	a := presetAPI(t, "stripe")
	a.Credentials = &Credentials{Header: "X-Secret", Env: "FG_TEST_PRESET_SECRET"}
	a.Contract = Contract{Idempotency: &Idempotency{KeyRetention: time.Hour}}
	a.Key = Key{MaxLength: 64}
	a.Answers = Answers{InProgress: []Match{{Status: "423"}}, Resend: []Match{}}
	a.ForwardHeaders = []string{"Stripe-Version"}
	a.Timeout = 3 * time.Second
	a.Settle = Settle{Strategy: StrategyLookup, Lookup: &Lookup{URL: "/v1/payment_intents/search?query={key}", List: "/data", Field: "/metadata/key", MinAge: time.Minute}}
	if err := (Config{APIs: []APIConfig{a}}).Validate(); err != nil {
		t.Fatal(err)
	}
	r := a.withDefaults()
	switch {
	case r.Credentials.Header != "X-Secret" || r.Credentials.Prefix != "":
		t.Errorf("credentials = %+v: the API's header comes without the preset's prefix", r.Credentials)
	case r.Contract.Idempotency.KeyRetention != time.Hour:
		t.Errorf("retention = %s", r.Contract.Idempotency.KeyRetention)
	case r.Key.MaxLength != 64 || r.Key.Header != "Idempotency-Key":
		t.Errorf("key = %+v: the length is the API's, the header the preset's", r.Key)
	case len(r.Answers.InProgress) != 1 || r.Answers.InProgress[0].Status != "423" || len(r.Answers.Resend) != 0:
		t.Errorf("answers = %+v: a declared class (even empty) replaces the preset's", r.Answers)
	case r.Settle.Strategy != StrategyLookup || r.Settle.Lookup == nil:
		t.Errorf("settle = %+v", r.Settle)
	case !reflect.DeepEqual(r.ForwardHeaders, []string{"Stripe-Version"}) || r.Timeout != 3*time.Second:
		t.Errorf("forward %v timeout %s", r.ForwardHeaders, r.Timeout)
	case !reflect.DeepEqual(r.KeepResponseHeaders, []string{"Request-Id"}):
		t.Errorf("unset keepResponseHeaders = %v, want the preset's", r.KeepResponseHeaders)
	}

	// A strategy of its own drops the preset's conflict rule.
	g := presetAPI(t, "gocardless")
	g.Settle = Settle{Strategy: StrategyResend}
	if err := (Config{APIs: []APIConfig{g}}).Validate(); err != nil {
		t.Fatalf("gocardless with resend: %v", err)
	}
	if r := g.withDefaults(); r.Settle.Conflict != nil {
		t.Fatalf("the preset's conflict rule survived another strategy: %+v", r.Settle)
	}
}

func TestPresetChangesNothingBesideTheAPIThatNamesIt(t *testing.T) {
	a := presetAPI(t, "adyen")
	_ = a.withDefaults()
	if p := presets["adyen"]; p.Credentials.Env != "" || len(p.Answers.InProgress) != 2 || p.Routes != nil {
		t.Fatalf("resolving an API changed the preset: %+v", p)
	}
	b := presetAPI(t, "adyen")
	r := b.withDefaults()
	r.Answers.InProgress[0].Status = "499"
	if presets["adyen"].Answers.InProgress[0].Status != "409" {
		t.Fatal("an API shares its answer classes with the preset")
	}
}

func TestAPresetNeverSuppliesBaseURLOrTheSecretsSource(t *testing.T) {
	a := presetAPI(t, "stripe")
	a.BaseURL, a.Credentials = "", nil
	err := (Config{APIs: []APIConfig{a}}).Validate()
	if err == nil || !strings.Contains(err.Error(), "baseURL") || !strings.Contains(err.Error(), "exactly one of env or file") {
		t.Fatalf("err = %v, want baseURL and the credential's source required", err)
	}
}

func TestUnknownPresetIsRefusedNamingTheKnownOnes(t *testing.T) {
	a := presetAPI(t, "strpie")
	err := (Config{APIs: []APIConfig{a}}).Validate()
	if err == nil || !strings.Contains(err.Error(), `preset "strpie" is none of adyen, checkout, gocardless, paypal, square, stripe`) {
		t.Fatalf("err = %v", err)
	}
}

// TestEachPresetPaysOnceAcrossADropAfterTheEffect runs every preset against
// the payments upstream shaped like that API (its key header or body field,
// its key length limit, its credential header; GoCardless' conflict answer
// to a replay): the payout's answer is lost after the effect, and the
// preset's settlement makes it COMMITTED with exactly one payout.
func TestEachPresetPaysOnceAcrossADropAfterTheEffect(t *testing.T) {
	for _, name := range PresetNames() {
		t.Run(name, func(t *testing.T) {
			p := presets[name]
			opt := upstream.Options{KeyHeader: p.Key.Header, MaxKeyLength: p.Key.MaxLength, CredentialHeader: p.Credentials.Header,
				KeyField: strings.TrimPrefix(p.Key.BodyField, "/"), ConflictOnReplay: name == "gocardless"}
			h := newHarness(t, opt, func(c *APIConfig) {
				c.Preset, c.Contract, c.Key, c.Settle, c.KeepResponseHeaders = name, Contract{}, Key{}, Settle{}, nil
				c.Credentials = &Credentials{Prefix: "Bearer ", Env: "FG_TEST_UPSTREAM_TOKEN"}
				if name == "gocardless" { // the fake's payouts live under /v1/payouts, not /payments
					c.Settle = Settle{Strategy: StrategyConflictFetch, Conflict: &ConflictFetch{
						Match: p.Settle.Conflict.Match, ID: p.Settle.Conflict.ID, URL: "/v1/payouts/{id}"}}
				}
			})
			h.pay.Inject(upstream.DropResponse)
			r := h.admitted(t, 1, payout)
			h.apply(t, r)
			if r.State != fencegate.ReceiptUnknown {
				t.Fatalf("after a drop: %s", r.State)
			}
			if err := h.resolve(t, r); err != nil || r.State != fencegate.ReceiptCommitted {
				t.Fatalf("settled %s: %v", r.State, err)
			}
			h.paidOnce(t, r, 1)
			if n := h.pay.Unauthorized(); n != 0 {
				t.Fatalf("%d requests without the credential in %s", n, p.Credentials.Header)
			}
		})
	}
}
