package httpapi

import (
	"slices"
	"sort"
	"time"
)

// Presets are plain values of an API's fields (key placement and shape,
// answer classes, settlement strategy, key retention, credential header,
// forwarded and kept headers) as each payment API documents them. An API
// that names one (`preset: stripe`) takes the preset's value for every field
// it leaves unset; every field it sets wins. baseURL, the credential's source
// (env or file) and the routes are always the API's own: a preset never
// points a gateway at a live endpoint. PRESETS.md tables what each preset
// assumes and where that is documented.
var presets = map[string]APIConfig{
	// https://docs.stripe.com/api/idempotent_requests, https://docs.stripe.com/idempotency,
	// https://docs.stripe.com/api/authentication, https://docs.stripe.com/api/versioning,
	// https://docs.stripe.com/connect/authentication, https://docs.stripe.com/api/request_ids
	"stripe": {
		Credentials: &Credentials{Header: "Authorization", Prefix: "Bearer "},
		Contract:    Contract{Idempotency: &Idempotency{KeyRetention: 24 * time.Hour}},
		Key:         Key{Header: "Idempotency-Key", MaxLength: 255, Charset: CharsetToken},
		Answers: Answers{
			InProgress: []Match{{Status: "409"}},
			Resend:     []Match{{Status: "429"}, {Status: "502"}, {Status: "503"}, {Status: "504"}, {Header: "Stripe-Should-Retry: true"}},
		},
		Settle: Settle{Strategy: StrategyResend},
		// Not Stripe-Context: it supersedes Stripe-Account
		// (https://docs.stripe.com/context), so forwarding it beside a
		// route that binds Stripe-Account would let a worker act on an
		// account the resource does not name. An organization that needs
		// it declares it, and binds it.
		ForwardHeaders:      []string{"Stripe-Version", "Stripe-Account"},
		KeepResponseHeaders: []string{"Request-Id"},
	},
	// https://docs.adyen.com/development-resources/api-idempotency,
	// https://docs.adyen.com/development-resources/api-credentials
	"adyen": {
		Credentials: &Credentials{Header: "X-API-Key"},
		Contract:    Contract{Idempotency: &Idempotency{KeyRetention: 31 * 24 * time.Hour}},
		Key:         Key{Header: "Idempotency-Key", MaxLength: 64, Charset: CharsetToken},
		Answers: Answers{
			InProgress: []Match{{Status: "409"}, {Header: "Transient-Error: true"}},
			Resend:     []Match{{Status: "429"}, {Status: "502"}, {Status: "503"}, {Status: "504"}},
		},
		Settle: Settle{Strategy: StrategyResend},
	},
	// https://developer.paypal.com/reference/guidelines/idempotency,
	// https://developer.paypal.com/api/rest/requests/#paypal-request-id,
	// https://developer.paypal.com/sdk/orders/v2/orders-create (PayPal-Request-Id: 1..108
	// characters, stored 6 hours unless the account manager extends it to 72)
	"paypal": {
		Credentials: &Credentials{Header: "Authorization", Prefix: "Bearer "},
		Contract:    Contract{Idempotency: &Idempotency{KeyRetention: 6 * time.Hour}},
		Key:         Key{Header: "PayPal-Request-Id", MaxLength: 108, Charset: CharsetToken},
		Answers: Answers{
			// PayPal names no answer to a second simultaneous request with
			// the ID ("might fail"): 409 is assumed (PRESETS.md, paypal).
			InProgress: []Match{{Status: "409"}},
			Resend:     []Match{{Status: "429"}, {Status: "5xx"}},
		},
		Settle:              Settle{Strategy: StrategyResend},
		ForwardHeaders:      []string{"Prefer", "PayPal-Partner-Attribution-Id", "PayPal-Client-Metadata-Id"},
		KeepResponseHeaders: []string{"Paypal-Debug-Id"},
	},
	// https://developer.squareup.com/docs/working-with-apis/idempotency,
	// https://developer.squareup.com/reference/square/payments-api/create-payment,
	// https://developer.squareup.com/docs/build-basics/access-tokens,
	// https://developer.squareup.com/docs/build-basics/versioning-overview
	"square": {
		Credentials: &Credentials{Header: "Authorization", Prefix: "Bearer "},
		// Square publishes no retention (its forum, 2026: "We do not publish a
		// retention period"): one hour is assumed, far shorter than any
		// retention Square's advice to retry implies; past it a receipt goes
		// to manual reconciliation instead of a resend that could pay twice.
		Contract: Contract{Idempotency: &Idempotency{KeyRetention: time.Hour}},
		Key:      Key{BodyField: "/idempotency_key", MaxLength: 45, Charset: CharsetToken},
		Answers: Answers{
			InProgress: []Match{{Status: "409"}},
			Resend:     []Match{{Status: "429"}, {Status: "502"}, {Status: "503"}, {Status: "504"}},
		},
		Settle:         Settle{Strategy: StrategyResend},
		ForwardHeaders: []string{"Square-Version"},
	},
	// https://developer.gocardless.com/api-reference/#making-requests-idempotency-keys,
	// https://gocardless.com/blog/idempotency-keys (409 idempotent_creation_conflict
	// naming links.conflicting_resource_id), https://developer.gocardless.com/api-reference/#api-usage-versions
	"gocardless": {
		Credentials: &Credentials{Header: "Authorization", Prefix: "Bearer "},
		// No retention found in GoCardless' published docs: one hour is assumed (see square).
		Contract: Contract{Idempotency: &Idempotency{KeyRetention: time.Hour}},
		Key:      Key{Header: "Idempotency-Key", MaxLength: 45, Charset: CharsetToken},
		Answers: Answers{
			InProgress: []Match{{Status: "409"}},
			Resend:     []Match{{Status: "429"}, {Status: "502"}, {Status: "503"}, {Status: "504"}},
		},
		Settle: Settle{Strategy: StrategyConflictFetch, Conflict: &ConflictFetch{
			Match: Match{Status: "409", Field: "/error/errors/0/reason", Equals: "idempotent_creation_conflict"},
			ID:    "/error/errors/0/links/conflicting_resource_id",
			URL:   "/payments/{id}",
		}},
		ForwardHeaders: []string{"GoCardless-Version"},
	},
	// https://www.checkout.com/docs/payments/manage-payments/idempotency,
	// https://www.checkout.com/docs/developer-resources/api/api-authentication
	"checkout": {
		Credentials: &Credentials{Header: "Authorization", Prefix: "Bearer "},
		Contract:    Contract{Idempotency: &Idempotency{KeyRetention: 24 * time.Hour}},
		Key:         Key{Header: "Cko-Idempotency-Key", MaxLength: 45, Charset: CharsetToken},
		Answers: Answers{
			// Concurrent requests with one key: only one is processed, the
			// others are answered 409 (429 before): never "nothing applied".
			InProgress: []Match{{Status: "409"}, {Status: "429"}},
			// A 4xx or 5xx saves no idempotent result and a resend is
			// processed anew, as Checkout.com documents.
			Resend: []Match{{Status: "5xx"}},
		},
		Settle: Settle{Strategy: StrategyResend},
	},
}

// PresetNames lists the presets, sorted.
func PresetNames() []string {
	out := make([]string, 0, len(presets))
	for n := range presets {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// withPreset fills every field a leaves unset from its preset (a itself
// when it names none, or an unknown one, which validate reports).
func (a APIConfig) withPreset() APIConfig {
	p, ok := presets[a.Preset]
	if !ok {
		return a
	}
	if a.Credentials == nil && p.Credentials != nil {
		cp := *p.Credentials
		a.Credentials = &cp
	} else if a.Credentials != nil && p.Credentials != nil {
		cp := *a.Credentials
		if cp.Header == "" {
			cp.Header, cp.Prefix = p.Credentials.Header, first(cp.Prefix, p.Credentials.Prefix)
		}
		a.Credentials = &cp
	}
	if a.Contract.Idempotency == nil && a.Contract.NativeFence == nil && p.Contract.Idempotency != nil {
		cp := *p.Contract.Idempotency
		a.Contract.Idempotency = &cp
	} else if id := a.Contract.Idempotency; id != nil && id.KeyRetention == 0 && p.Contract.Idempotency != nil {
		cp := *id
		cp.KeyRetention = p.Contract.Idempotency.KeyRetention
		a.Contract.Idempotency = &cp
	}
	if a.Key.Header == "" && a.Key.BodyField == "" {
		a.Key.Header, a.Key.BodyField = p.Key.Header, p.Key.BodyField
	}
	if a.Key.MaxLength == 0 {
		a.Key.MaxLength = p.Key.MaxLength
	}
	if a.Key.Charset == "" {
		a.Key.Charset = p.Key.Charset
	}
	a.Answers.InProgress = orPreset(a.Answers.InProgress, p.Answers.InProgress)
	a.Answers.Resend = orPreset(a.Answers.Resend, p.Answers.Resend)
	a.Answers.Unknown = orPreset(a.Answers.Unknown, p.Answers.Unknown)
	a.Answers.Final = orPreset(a.Answers.Final, p.Answers.Final)
	if a.Settle.Strategy == "" { // a strategy of its own brings its own lookup or conflict
		a.Settle.Strategy = p.Settle.Strategy
		if a.Settle.Lookup == nil && p.Settle.Lookup != nil {
			cp := *p.Settle.Lookup
			a.Settle.Lookup = &cp
		}
		if a.Settle.Conflict == nil && p.Settle.Conflict != nil {
			cp := *p.Settle.Conflict
			a.Settle.Conflict = &cp
		}
	}
	if a.Settle.MaxAttempts == 0 {
		a.Settle.MaxAttempts = p.Settle.MaxAttempts
	}
	a.ForwardHeaders = orPreset(a.ForwardHeaders, p.ForwardHeaders)
	a.KeepResponseHeaders = orPreset(a.KeepResponseHeaders, p.KeepResponseHeaders)
	if a.Timeout == 0 {
		a.Timeout = p.Timeout
	}
	return a
}

// orPreset is own when the API declared it (even empty), else a copy of the preset's.
func orPreset[T any](own, preset []T) []T {
	if own != nil || preset == nil {
		return own
	}
	return slices.Clone(preset)
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
