package httpapi

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

func TestNewReadsTheCredentialOfAValidatedConfig(t *testing.T) {
	t.Setenv("FG_TEST_PAYOUTS_TOKEN", "sk_test")
	a := validConfig("https://payments.example.com")
	a.Credentials = &Credentials{Prefix: "Bearer ", Env: "FG_TEST_PAYOUTS_TOKEN"}
	if err := (Config{APIs: []APIConfig{a}}).Validate(); err != nil {
		t.Fatal(err)
	}
	api, err := New(a, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if v := api.cred.header(); v != "Bearer sk_test" || api.cred.name != "Authorization" {
		t.Fatalf("credential = %q: %q", api.cred.name, v)
	}
}

func TestAPIWithoutContractIsRefusedNamingIt(t *testing.T) {
	a := validConfig("https://payments.example.com")
	a.Contract = Contract{}
	err := Config{APIs: []APIConfig{a}}.Validate()
	var fe *fencegate.Error
	if !errors.As(err, &fe) || fe.Code != fencegate.CodeUnsupported {
		t.Fatalf("err = %v, want UNSUPPORTED", err)
	}
	if !strings.Contains(err.Error(), `api "payouts"`) || !strings.Contains(err.Error(), "no fencing contract") {
		t.Fatalf("message does not name the API and the missing contract: %v", err)
	}
}

func TestEveryProblemNamesItsField(t *testing.T) {
	a := validConfig("ftp://nowhere")
	a.Timeout = -1
	a.Contract.Idempotency.KeyRetention = 0
	a.Routes = append(a.Routes, Route{Method: "TRACE", Path: "/v1/x", Resource: "x"})
	err := Config{APIs: []APIConfig{validConfig("http://ok.example"), a}}.Validate()
	var got []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("problem %v is not a *FieldError", e)
		}
		got = append(got, fe.Field)
	}
	want := []string{"apis[1].name", "apis[1].baseURL", "apis[1].timeout", "apis[1].contract.idempotency.keyRetention", "apis[1].routes[1]"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("fields = %v, want %v", got, want)
	}
}

func TestIdempotencyContractNeedsRetentionAboveTheTimeout(t *testing.T) {
	c := validConfig("http://up.example")
	c.Contract.Idempotency = &Idempotency{}
	err := Config{APIs: []APIConfig{c}}.Validate()
	var fe *fencegate.Error
	if !errors.As(err, &fe) || fe.Code != fencegate.CodeUnsupported {
		t.Fatalf("err = %v, want UNSUPPORTED", err)
	}
	if !strings.Contains(err.Error(), "keyRetention > 0") || !strings.Contains(err.Error(), "strategy resend needs keyRetention") {
		t.Fatalf("err = %v, want the retention and the resend strategy's need of it named", err)
	}
}

func TestValidateReportsEveryProblemAtOnce(t *testing.T) {
	a := validConfig("ftp://nowhere")                                  // bad URL
	a.Credentials = &Credentials{Env: "FG_TEST_SURELY_UNSET_VARIABLE"} // missing env var
	a.Routes = append(a.Routes, Route{Method: "POST", Path: "/v1/x/{id}", Resource: "x/{account}"})
	b := validConfig("http://ok.example") // duplicate name
	c := validConfig("http://ok.example")
	c.Name = "nocontract"
	c.Contract = Contract{}
	err := Config{APIs: []APIConfig{a, b, c}}.Validate()
	msg := err.Error()
	for _, want := range []string{"ftp://nowhere", "FG_TEST_SURELY_UNSET_VARIABLE", "{account}", "declared more than once", `api "nocontract"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not report %q:\n%v", want, msg)
		}
	}
}

func TestRoutesMatchOnlyDeclaredCanonicalPaths(t *testing.T) {
	c := validConfig("http://up.example")
	c.Routes = append(c.Routes, Route{Method: "DELETE", Path: "/v1/fixed", Resource: "fixed/thing"})
	api, err := New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, res, ok := api.Match("POST", "/v1/accounts/acc_1/payouts")
	if !ok || tmpl != "/v1/accounts/{account}/payouts" || res != "payouts/acc_1" {
		t.Fatalf("Match = %q %q %v", tmpl, res, ok)
	}
	if _, res, ok := api.Match("DELETE", "/v1/fixed"); !ok || res != "fixed/thing" {
		t.Fatalf("fixed resource = %q %v", res, ok)
	}
	for _, p := range []string{
		"/v1/accounts/acc_1/payouts/extra", "/v1/accounts/a/b/payouts", "/v1/accounts/../payouts",
		"/v1/accounts//payouts", "v1/accounts/acc_1/payouts", "/v1/accounts/acc_1/payouts/", "/v1/accounts/a%2fb/payouts",
	} {
		if _, _, ok := api.Match("POST", p); ok {
			t.Errorf("Match(POST, %q) accepted an undeclared or non-canonical path", p)
		}
	}
	if _, _, ok := api.Match("PUT", "/v1/accounts/acc_1/payouts"); ok {
		t.Error("Match accepted an undeclared method")
	}
}

func TestIdempotencyKeyDependsOnResourceRootFenceSegmentOnly(t *testing.T) {
	r := fencegate.Receipt{ID: "a", Resource: "payouts/acc_1", OperationRoot: "root-1", FenceToken: 7, Segment: 2, PayloadDigest: "x"}
	same := r
	same.ID, same.PayloadDigest, same.CreatedAt = "b", "y", time.Now()
	if IdempotencyKey(r) != IdempotencyKey(same) {
		t.Fatal("the key changed with fields outside resource, root, fence, segment")
	}
	if k := IdempotencyKey(r); !strings.HasPrefix(k, "fg-") || len(k) != DefaultKeyMaxLength {
		t.Fatalf("key %q is not fg-<sha256 hex>", k)
	}
	for _, mod := range []func(*fencegate.Receipt){
		func(x *fencegate.Receipt) { x.Resource = "payouts/acc_2" },
		func(x *fencegate.Receipt) { x.OperationRoot = "root-2" },
		func(x *fencegate.Receipt) { x.FenceToken = 8 },
		func(x *fencegate.Receipt) { x.Segment = 3 },
		func(x *fencegate.Receipt) { x.Resource, x.OperationRoot = "payouts/acc_1\x00root-1", "" },
	} {
		o := r
		mod(&o)
		if IdempotencyKey(o) == IdempotencyKey(r) {
			t.Errorf("key collision for %+v", o)
		}
	}
}

func TestTargetRoundTrips(t *testing.T) {
	tg := fencegate.APITarget("payouts", "/v1/accounts/acc_1/payouts")
	if tg != "apis/payouts/v1/accounts/acc_1/payouts" {
		t.Fatalf("Target = %q", tg)
	}
	api, path, ok := fencegate.SplitAPITarget(tg)
	if !ok || api != "payouts" || path != "/v1/accounts/acc_1/payouts" {
		t.Fatalf("SplitTarget = %q %q %v", api, path, ok)
	}
	a, _ := New(validConfig("http://up.example"), nil)
	rs := Resolvers{"payouts": a}
	if rs.For(tg) == nil || rs.For("apis/other/x") != nil || rs.For("objects/s/k") != nil {
		t.Fatal("Resolvers picks the wrong API")
	}
}

// validConfig is a minimal valid payouts API at base.
func validConfig(base string) APIConfig {
	return APIConfig{
		Name: "payouts", BaseURL: base,
		Contract: Contract{Idempotency: &Idempotency{KeyRetention: 24 * time.Hour}},
		Routes:   []Route{{Method: "POST", Path: "/v1/accounts/{account}/payouts", Resource: "payouts/{account}"}},
	}
}
