package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/fencegate/fencegate"
)

// Settlement strategies.
const (
	// StrategyResend settles an unknown outcome by resending the kept request
	// under the same key while the key is retained: what Stripe, Adyen,
	// PayPal, Square and Checkout.com document for a request whose answer
	// was lost. The default for idempotency contracts.
	StrategyResend = "resend"
	// StrategyLookup queries the effect and matches the answer by a rule.
	StrategyLookup = "lookup"
	// StrategyConflictFetch resends; a declared conflict answer names the
	// resource the first request created, which is fetched (GoCardless:
	// 409 idempotent_creation_conflict, links.conflicting_resource_id).
	StrategyConflictFetch = "conflict-fetch"
	// StrategyManual leaves unknown outcomes to an operator (the default for
	// native-fence-only APIs, which take no key and so can never be resent).
	StrategyManual = "manual"
)

// DefaultMaxAttempts bounds the upstream sends of one receipt.
const DefaultMaxAttempts = 10

// Settle is how an API (or one route) settles unknown outcomes. Past the key
// retention, or after MaxAttempts sends, with no proof either way, a receipt
// stays UNKNOWN for manual reconciliation: never COMMITTED or NOT_APPLIED by
// guess.
type Settle struct {
	// Strategy is StrategyResend, StrategyLookup, StrategyConflictFetch or
	// StrategyManual.
	Strategy string `yaml:"strategy"`
	// MaxAttempts bounds the sends of one receipt, the first included
	// (default DefaultMaxAttempts).
	MaxAttempts int            `yaml:"maxAttempts"`
	Lookup      *Lookup        `yaml:"lookup"`
	Conflict    *ConflictFetch `yaml:"conflict"`
	// KeyRetention, when set (on a route's settle), is how long the upstream
	// keeps keys for this route, where it keeps them shorter (or longer)
	// than contract.idempotency.keyRetention says for the API: PayPal keeps
	// a payment token's PayPal-Request-Id 3 hours, an order's 6
	// (https://developer.paypal.com/sdk/vault/v2/payment-tokens-create).
	// No resend is made past it.
	KeyRetention time.Duration `yaml:"keyRetention"`
}

// over is a route's settle s over its API's (defaults applied): a route
// that names no strategy keeps the API's strategy, lookup and conflict
// fetch, and a route that sets no maxAttempts keeps the API's, so that a
// route's `settle: {keyRetention: 3h}` changes the retention alone. A
// route that names a strategy brings its own lookup or conflict fetch.
func (s Settle) over(api Settle, c Contract) Settle {
	if s.Strategy == "" {
		s.Strategy = api.Strategy
		if s.Lookup == nil {
			s.Lookup = api.Lookup
		}
		if s.Conflict == nil {
			s.Conflict = api.Conflict
		}
	}
	if s.MaxAttempts == 0 {
		s.MaxAttempts = api.MaxAttempts
	}
	if s.KeyRetention == 0 {
		s.KeyRetention = api.KeyRetention
	}
	return s.withDefaults(c)
}

// retention is how long the upstream keeps a key sent under st: st's own
// KeyRetention, else the API's contract.idempotency.keyRetention.
func (s Settle) retention(c Contract) time.Duration {
	if s.KeyRetention > 0 {
		return s.KeyRetention
	}
	if c.Idempotency == nil {
		return 0
	}
	return c.Idempotency.KeyRetention
}

// Lookup finds an effect by a query whose answer is matched by a rule: URL
// (relative to the base URL, with {key} and/or {ref}) is asked with GET;
// List points at the array of candidates in the answer ("" when the answer
// is the one candidate, and a 404 is "not found"); a candidate is the effect
// when its Field equals the key, or, with Ref, the value at Ref in the kept
// request. An empty list is "not found", never "found"; an answer that is
// not what the rule reads (no list, a candidate without Field, a page that
// says more follow) proves nothing either way; "not found" proves
// NOT_APPLIED only MinAge after the last moment a send of the receipt may
// have been open (its effect expiry, its last recorded resend).
type Lookup struct {
	URL   string `yaml:"url"`
	List  string `yaml:"list"`
	Field string `yaml:"field"`
	// Ref is a JSON pointer into the kept JSON request body ("/reference"),
	// or "form:NAME" for a form field of a form-encoded body.
	Ref string `yaml:"ref"`
	// MinAge is how long after the last moment a send may have been open
	// (API.lastSendBound: never counted from the receipt's creation alone)
	// "not found" waits before it counts as proof (default: the API's timeout). Eventually consistent searches need more: Stripe
	// Search lags writes by up to a minute, more during outages
	// (docs.stripe.com/search, "Data freshness").
	MinAge time.Duration `yaml:"minAge"`
	// Status is the status a found effect is stored with (default 200).
	Status int `yaml:"status"`
	// More, with List, is a JSON pointer to the answer's "more results
	// follow" flag (Stripe's list and search answers carry has_more,
	// https://docs.stripe.com/api/pagination): a page that says more follow
	// and holds no match proves nothing.
	More string `yaml:"more"`
	// Fence and Segment, when set, are JSON pointers to where a candidate
	// records the fence and segment it was made under (a native-fence
	// service records the headers it was sent): a candidate found by Ref
	// is the effect only if they equal the receipt's, since a reference the
	// worker sent in two segments finds the first one's effect for both.
	// Without them a reference must be unique to one effect.
	Fence   string `yaml:"fence"`
	Segment string `yaml:"segment"`
}

// ConflictFetch recognises the conflict answer of a resend (Match), reads the
// existing resource's ID at the JSON pointer ID, and fetches URL ({id}
// replaced) with GET: a 2xx answer is stored as the call's result.
type ConflictFetch struct {
	Match Match  `yaml:"match"`
	ID    string `yaml:"id"`
	URL   string `yaml:"url"`
}

func (s Settle) withDefaults(c Contract) Settle {
	if s.Strategy == "" {
		s.Strategy = StrategyResend
		if c.Idempotency == nil {
			s.Strategy = StrategyManual
		}
	}
	if s.MaxAttempts == 0 {
		s.MaxAttempts = DefaultMaxAttempts
	}
	if s.Lookup != nil && s.Lookup.Status == 0 {
		cp := *s.Lookup
		cp.Status = http.StatusOK
		s.Lookup = &cp
	}
	return s
}

type settleError struct {
	code fencegate.Code
	msg  string
}

// validate checks s (defaults applied) against the API a (defaults applied).
func (s Settle) validate(a APIConfig) []settleError {
	var errs []settleError
	bad := func(code fencegate.Code, format string, args ...any) {
		errs = append(errs, settleError{code, fmt.Sprintf(format, args...)})
	}
	id := a.Contract.Idempotency
	if s.KeyRetention < 0 || (s.KeyRetention > 0 && id == nil) {
		bad(fencegate.CodeInvalidRequest, "keyRetention must be positive, and only where contract.idempotency sends a key")
	}
	switch s.Strategy {
	case StrategyResend, StrategyConflictFetch:
		if id == nil {
			bad(fencegate.CodeUnsupported, "strategy %s needs contract.idempotency: without a key a resend could pay twice", s.Strategy)
		} else if r := s.retention(a.Contract); r <= a.Timeout {
			bad(fencegate.CodeUnsupported, "strategy %s needs keyRetention (%s) above the timeout (%s)", s.Strategy, r, a.Timeout)
		}
	case StrategyLookup, StrategyManual:
	default:
		bad(fencegate.CodeInvalidRequest, "strategy %q must be %s, %s, %s or %s", s.Strategy, StrategyResend, StrategyLookup, StrategyConflictFetch, StrategyManual)
	}
	if s.MaxAttempts < 1 {
		bad(fencegate.CodeInvalidRequest, "maxAttempts must be at least 1")
	}
	if (s.Strategy == StrategyLookup) != (s.Lookup != nil) {
		bad(fencegate.CodeInvalidRequest, "lookup is required with strategy lookup, and only there")
	}
	if (s.Strategy == StrategyConflictFetch) != (s.Conflict != nil) {
		bad(fencegate.CodeInvalidRequest, "conflict is required with strategy conflict-fetch, and only there")
	}
	if l := s.Lookup; l != nil {
		if err := checkURL(l.URL, "{key}", "{ref}"); err != nil {
			bad(fencegate.CodeInvalidRequest, "lookup.url: %s", err)
		}
		if strings.Contains(l.URL, "{ref}") && l.Ref == "" {
			bad(fencegate.CodeInvalidRequest, "lookup.url uses {ref} but lookup.ref is not declared")
		}
		if id == nil && l.Ref == "" {
			bad(fencegate.CodeUnsupported, "a native-fence-only API is sent no key: lookup needs a ref")
		}
		if _, err := parsePointer(l.List); err != nil {
			bad(fencegate.CodeInvalidRequest, "lookup.list: %s", err)
		}
		if _, err := parsePointer(l.More); err != nil || (l.More != "" && l.List == "") {
			bad(fencegate.CodeInvalidRequest, "lookup.more must be a JSON pointer, and only with lookup.list")
		}
		for name, ptr := range map[string]string{"fence": l.Fence, "segment": l.Segment} {
			if _, err := parsePointer(ptr); err != nil {
				bad(fencegate.CodeInvalidRequest, "lookup.%s: %s", name, err)
			}
		}
		if _, err := parsePointer(l.Field); err != nil || l.Field == "" {
			bad(fencegate.CodeInvalidRequest, "lookup.field must be a JSON pointer into a candidate")
		}
		if ref, ok := strings.CutPrefix(l.Ref, "form:"); ok {
			if ref == "" {
				bad(fencegate.CodeInvalidRequest, "lookup.ref form: needs a field name")
			}
		} else if _, err := parsePointer(l.Ref); err != nil {
			bad(fencegate.CodeInvalidRequest, "lookup.ref: %s", err)
		}
		if l.MinAge != 0 && l.MinAge < a.Timeout {
			bad(fencegate.CodeInvalidRequest, "lookup.minAge (%s) must not be below the timeout (%s): a late request may still land", l.MinAge, a.Timeout)
		}
		if l.Status < 200 || l.Status > 299 {
			bad(fencegate.CodeInvalidRequest, "lookup.status must be a 2xx status")
		}
	}
	if c := s.Conflict; c != nil {
		if err := c.Match.validate(); err != nil {
			bad(fencegate.CodeInvalidRequest, "conflict.match: %s", err)
		}
		if toks, err := parsePointer(c.ID); err != nil || len(toks) == 0 {
			bad(fencegate.CodeInvalidRequest, "conflict.id must be a JSON pointer into the conflict answer")
		}
		if err := checkURL(c.URL, "{id}"); err != nil || !strings.Contains(c.URL, "{id}") {
			bad(fencegate.CodeInvalidRequest, "conflict.url %q must start with / and contain {id}", c.URL)
		}
	}
	return errs
}

// checkURL requires a path (and query) relative to the base URL holding at
// least one of the placeholders.
func checkURL(u string, placeholders ...string) error {
	if !strings.HasPrefix(u, "/") {
		return fmt.Errorf("%q must start with /", u)
	}
	found := false
	probe := u
	for _, p := range placeholders {
		found = found || strings.Contains(u, p)
		probe = strings.ReplaceAll(probe, p, "x")
	}
	if !found {
		return fmt.Errorf("%q must contain %s", u, strings.Join(placeholders, " or "))
	}
	pu, err := url.Parse(probe)
	if err != nil {
		return fmt.Errorf("%q does not parse", u)
	}
	// The path must be written escaped: the gateway puts each value into it
	// escaped and keeps the rest as written (a literal space or '|' would
	// make the whole path be escaped again, a value's %2F with it).
	if path, _, _ := strings.Cut(probe, "?"); pu.EscapedPath() != path {
		return fmt.Errorf("%q: write the path escaped (as %q)", u, pu.EscapedPath())
	}
	return nil
}
