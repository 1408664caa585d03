package domain_test

import (
	"testing"

	"github.com/fencegate/fencegate/domain"
)

// Rule: a call on a route that binds headers records their values in its
// target after '#' (sorted, names in lower case), so each value is a target
// of its own; SplitAPITarget gives the API and path back without them.
func TestAnAPITargetCarriesItsBoundHeaders(t *testing.T) {
	plain := domain.APITarget("stripe", "/v1/payment_intents")
	bound := domain.BoundAPITarget("stripe", "/v1/payment_intents", map[string]string{"Stripe-Account": "acct_A", "Idempotency-Scope": "x"})
	if plain != "apis/stripe/v1/payment_intents" || bound != plain+"#idempotency-scope=x&stripe-account=acct_A" ||
		domain.BoundAPITarget("stripe", "/v1/payment_intents", nil) != plain {
		t.Fatalf("targets %q and %q", plain, bound)
	}
	if other := domain.BoundAPITarget("stripe", "/v1/payment_intents", map[string]string{"Stripe-Account": "acct_B"}); other == bound {
		t.Fatal("two accounts share a target")
	}
	for _, target := range []string{plain, bound} {
		if api, path, ok := domain.SplitAPITarget(target); !ok || api != "stripe" || path != "/v1/payment_intents" {
			t.Fatalf("SplitAPITarget(%q) = %q %q %v", target, api, path, ok)
		}
	}
}

// Rule: a client finds its call's receipt by the target it computed, which
// names no bound header: a receipt of that path with bound headers is its
// call's, one of another path or API is not, and an object target matches
// only itself ('#' may be part of an object key).
func TestAClientMatchesACallWhateverHeadersItsRouteBinds(t *testing.T) {
	base := domain.APITarget("stripe", "/v1/payment_intents")
	for target, want := range map[string]bool{
		base:                             true,
		base + "#stripe-account=acct_A":  true,
		base + "x#stripe-account=acct_A": false,
		base + "/more":                   false,
		domain.APITarget("other", "/v1/payment_intents"): false,
	} {
		if got := domain.SameCallTarget(target, base); got != want {
			t.Errorf("SameCallTarget(%q, %q) = %v, want %v", target, base, got, want)
		}
	}
	obj := domain.ObjectTarget("local", "a")
	if domain.SameCallTarget(domain.ObjectTarget("local", "a#b"), obj) {
		t.Error("an object key with '#' matched another object's target")
	}
}
