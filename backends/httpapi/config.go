// Package httpapi is the third-party HTTP API backend: the client adapter that
// forwards fenced calls to payment-style APIs.
//
// Guarantees: an API is admitted only with a fencing contract (idempotency
// with a key retention, or a native fence header) and a declared way to
// settle unknown outcomes (Settle); every call of a receipt carries the same
// deterministic idempotency key derived from resource, operation root, fence
// and segment, placed and shaped as the API wants it (Key), so a retry can
// never create a second effect under another key; the exact request is kept
// with the receipt and every resend is that request under that key, made only
// where the API's answer classes (Answers) and key retention allow it, never
// by the HTTP transport; the worker's Authorization and fence headers never
// reach the upstream, which sees only the configured credential; an outcome
// is COMMITTED only with a final answer (or a lookup/fetch that proves the
// effect), FAILED only when nothing can have been sent, and UNKNOWN otherwise.
package httpapi

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/fencegate/fencegate"
)

// Defaults of an API's configuration.
const (
	DefaultCredentialHeader  = "Authorization"
	DefaultIdempotencyHeader = "Idempotency-Key"
	DefaultSegmentHeader     = "Fence-Segment"
	DefaultRootHeader        = "Fence-Root"
	DefaultDelegateHeader    = "Fence-Delegate"
	DefaultTimeout           = 30 * time.Second
	DefaultMaxBodyBytes      = 1 << 20
	DefaultMaxResponseBytes  = 64 << 10
)

// Config is the `apis:` section of the gateway's configuration file, decoded
// by package config (the one decoder of the file) and checked by Validate.
type Config struct {
	APIs []APIConfig `yaml:"apis"`
}

// APIConfig declares one upstream API: where it is, how the gateway
// authenticates to it, its fencing contract and the routes workers may call.
type APIConfig struct {
	Name string `yaml:"name"`
	// Preset names a payment API whose documented behaviour fills every
	// field left unset (presets.go, PRESETS.md): stripe, adyen, paypal,
	// square, gocardless, checkout.
	Preset      string       `yaml:"preset"`
	BaseURL     string       `yaml:"baseURL"`
	Credentials *Credentials `yaml:"credentials"`
	// Timeout bounds one upstream call (default 30 s).
	Timeout time.Duration `yaml:"timeout"`
	// Key is where the idempotency key goes and its shape (idempotency
	// contracts only: a native-fence-only API is sent no key).
	Key Key `yaml:"key"`
	// Answers classifies the API's answers (defaults: Answers).
	Answers Answers `yaml:"answers"`
	// Settle is how unknown outcomes are settled, unless a route overrides it.
	Settle Settle `yaml:"settle"`
	// MaxBodyBytes caps a forwarded request body (default 1 MiB).
	MaxBodyBytes int64 `yaml:"maxBodyBytes"`
	// MaxResponseBytes caps the upstream body kept in the receipt (default 64 KiB).
	MaxResponseBytes int64 `yaml:"maxResponseBytes"`
	// KeepResponseHeaders are stored with the answer (Content-Type always is).
	KeepResponseHeaders []string `yaml:"keepResponseHeaders"`
	// ForwardHeaders are the worker's request headers the upstream is sent,
	// besides content negotiation (see headers.go); all others are dropped.
	ForwardHeaders []string `yaml:"forwardHeaders"`
	Contract       Contract `yaml:"contract"`
	Routes         []Route  `yaml:"routes"`
}

// Credentials is the upstream credential the gateway injects: Prefix followed
// by the value of environment variable Env or the contents of File, which is
// read again whenever it changes (a token renewed outside the gateway is
// sent from the next request on).
type Credentials struct {
	Header string `yaml:"header"`
	Prefix string `yaml:"prefix"`
	Env    string `yaml:"env"`
	File   string `yaml:"file"`
}

// Contract is how the API meets the fencing contract; at least one is required.
type Contract struct {
	Idempotency *Idempotency `yaml:"idempotency"`
	NativeFence *NativeFence `yaml:"nativeFence"`
}

// Idempotency: the upstream deduplicates requests by key for KeyRetention
// (Stripe and Checkout.com 24 h, PayPal Orders 6 h, Adyen at least 31 days).
type Idempotency struct {
	KeyRetention time.Duration `yaml:"keyRetention"`
}

// NativeFence: the upstream itself (a cooperating internal service) rejects
// fences lower than the highest it has seen. The gateway sends every
// admitted call with the grant's fence in Header, its segment in
// SegmentHeader (default Fence-Segment), its operation root in RootHeader
// (default Fence-Root) and, for a call a delegate made under the owner's
// delegation, the delegate's authenticated identity in DelegateHeader
// (default Fence-Delegate; absent for the owner's own calls). A worker's
// own values of these headers are never forwarded. The contract is in the
// package README.
type NativeFence struct {
	Header         string `yaml:"header"`
	SegmentHeader  string `yaml:"segmentHeader"`
	RootHeader     string `yaml:"rootHeader"`
	DelegateHeader string `yaml:"delegateHeader"`
}

// Route allows Method on the path template Path ("/v1/accounts/{account}/payouts");
// Resource ("payouts/{account}") derives the call's resource from its parameters.
// POST, PUT, PATCH and DELETE routes are fenced writes; a GET route is a read,
// passed through with the gateway's credential to a caller allowed to read
// the resource, without grant, fence or receipt.
type Route struct {
	Method   string `yaml:"method"`
	Path     string `yaml:"path"`
	Resource string `yaml:"resource"`
	// Headers binds resource parameters to headers of the worker's request
	// ({account: Stripe-Account}): the header, which the API must forward,
	// must carry one value that is one canonical segment, and that value is
	// part of the call's resource, so the grant and the access policy decide
	// it. A Stripe Connect platform picks the connected account a call acts
	// on with Stripe-Account (https://docs.stripe.com/connect/authentication):
	// unbound, the worker would pick it unseen by both. A call without the
	// header matches no route.
	Headers map[string]string `yaml:"headers"`
	// Settle overrides the API's Settle for this route.
	Settle *Settle `yaml:"settle"`
}

// FieldError is one problem of the configuration, at Field: the YAML path of
// the offending value below the file's root ("apis[0].contract.idempotency").
// The config package turns Field into a file line; Err carries the code.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// Validate reports every problem of every API at once, each a *FieldError
// naming its API and field. It is the only check: New and NewAll trust it.
func (c Config) Validate() error {
	var errs []error
	seen := map[string]bool{}
	for i, a := range c.APIs {
		if a.Name != "" && seen[a.Name] {
			errs = append(errs, &FieldError{Field: fmt.Sprintf("apis[%d].name", i),
				Err: fencegate.Errorf(fencegate.CodeInvalidRequest, "api %q is declared more than once", a.Name)})
		}
		seen[a.Name] = true
		errs = append(errs, a.validate(i)...)
	}
	return errors.Join(errs...)
}

// withDefaults fills in the documented defaults.
func (a APIConfig) withDefaults() APIConfig {
	a = a.withPreset()
	if a.Timeout == 0 {
		a.Timeout = DefaultTimeout
	}
	a.Key = a.Key.withDefaults()
	a.Answers = a.Answers.withDefaults(a.Contract)
	a.Settle = a.Settle.withDefaults(a.Contract)
	if a.MaxBodyBytes == 0 {
		a.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if a.MaxResponseBytes == 0 {
		a.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if a.Credentials != nil && a.Credentials.Header == "" {
		cp := *a.Credentials
		cp.Header = DefaultCredentialHeader
		a.Credentials = &cp
	}
	if nf := a.Contract.NativeFence; nf != nil {
		cp := *nf
		cp.SegmentHeader = cmp.Or(cp.SegmentHeader, DefaultSegmentHeader)
		cp.RootHeader = cmp.Or(cp.RootHeader, DefaultRootHeader)
		cp.DelegateHeader = cmp.Or(cp.DelegateHeader, DefaultDelegateHeader)
		a.Contract.NativeFence = &cp
	}
	return a
}

// validate checks apis[i]; its problems name the API (or its index).
func (a APIConfig) validate(i int) []error {
	a = a.withDefaults()
	root := fmt.Sprintf("apis[%d]", i)
	label := root
	if a.Name != "" {
		label = fmt.Sprintf("api %q", a.Name)
	}
	var errs []error
	at := func(field string, code fencegate.Code, format string, args ...any) {
		if field != "" {
			field = "." + field
		}
		errs = append(errs, &FieldError{Field: root + field, Err: fencegate.Errorf(code, "%s: %s", label, fmt.Sprintf(format, args...))})
	}
	if _, ok := presets[a.Preset]; a.Preset != "" && !ok {
		at("preset", fencegate.CodeInvalidRequest, "preset %q is none of %s", a.Preset, strings.Join(PresetNames(), ", "))
	}
	if a.Name == "" {
		at("name", fencegate.CodeInvalidRequest, "name is required")
	} else if fencegate.CheckName(a.Name) != nil || strings.Contains(a.Name, "/") {
		at("name", fencegate.CodeInvalidRequest, "name must be a single canonical path segment")
	}
	if u, err := url.Parse(a.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		at("baseURL", fencegate.CodeInvalidRequest, "baseURL %q must be an absolute http(s) URL without user info, query or fragment", a.BaseURL)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"timeout", int64(a.Timeout)}, {"maxBodyBytes", a.MaxBodyBytes}, {"maxResponseBytes", a.MaxResponseBytes}} {
		if f.v < 0 {
			at(f.name, fencegate.CodeInvalidRequest, "%s must not be negative", f.name)
		}
	}
	if a.MaxBodyBytes > fencegate.MaxEffectRequestBody {
		at("maxBodyBytes", fencegate.CodeInvalidRequest, "maxBodyBytes %d is over the %d bytes a receipt keeps to resend the request", a.MaxBodyBytes, fencegate.MaxEffectRequestBody)
	}
	if a.Contract.Idempotency != nil {
		for _, e := range a.Key.validate() {
			at("key", fencegate.CodeInvalidRequest, "%s", e)
		}
	}
	for _, e := range a.Answers.validate() {
		at("answers", fencegate.CodeInvalidRequest, "%s", e)
	}
	for _, e := range a.Settle.validate(a) {
		at("settle", e.code, "settle: %s", e.msg)
	}
	for _, e := range a.checkForwardHeaders() {
		at("forwardHeaders", fencegate.CodeInvalidRequest, "forwardHeaders: %s", e)
	}
	for _, h := range a.KeepResponseHeaders {
		if !validHeaderName(h) {
			at("keepResponseHeaders", fencegate.CodeInvalidRequest, "keepResponseHeaders: %q is not a valid header name", h)
		}
	}
	if cr := a.Credentials; cr != nil {
		if !validHeaderName(cr.Header) {
			at("credentials.header", fencegate.CodeInvalidRequest, "credentials.header %q is not a valid header name", cr.Header)
		}
		switch {
		case (cr.Env == "") == (cr.File == ""):
			at("credentials", fencegate.CodeInvalidRequest, "credentials need exactly one of env or file")
		case cr.Env != "" && os.Getenv(cr.Env) == "":
			at("credentials.env", fencegate.CodeInvalidRequest, "credentials: environment variable %s is not set", cr.Env)
		case cr.File != "":
			if _, err := os.Stat(cr.File); err != nil {
				at("credentials.file", fencegate.CodeInvalidRequest, "credentials: cannot read file %s", cr.File)
			}
		}
	}
	a.Contract.validate(at)
	if len(a.Routes) == 0 {
		at("routes", fencegate.CodeInvalidRequest, "at least one route is required")
	}
	for j, r := range a.Routes {
		if _, err := compileRoute(r); err != nil {
			at(fmt.Sprintf("routes[%d]", j), fencegate.CodeInvalidRequest, "routes[%d]: %s", j, fencegate.ErrorMessage(err))
		}
		for param, h := range r.Headers {
			if !slices.ContainsFunc(append(slices.Clone(negotiated), a.ForwardHeaders...), func(f string) bool { return strings.EqualFold(f, h) }) {
				at(fmt.Sprintf("routes[%d].headers.%s", j, param), fencegate.CodeInvalidRequest,
					"routes[%d].headers: %s is not forwarded (forwardHeaders): binding it would name a resource the upstream never sees", j, h)
			}
		}
		if r.Settle != nil {
			for _, e := range r.Settle.over(a.Settle, a.Contract).validate(a) {
				at(fmt.Sprintf("routes[%d].settle", j), e.code, "routes[%d].settle: %s", j, e.msg)
			}
		}
	}
	return errs
}

// validate reports the contract's problems through at (field, code, message).
func (c Contract) validate(at func(field string, code fencegate.Code, format string, args ...any)) {
	if c.Idempotency == nil && c.NativeFence == nil {
		at("contract", fencegate.CodeUnsupported, "declares no fencing contract: it needs contract.idempotency (keyRetention) or contract.nativeFence (header)")
		return
	}
	if id := c.Idempotency; id != nil {
		if id.KeyRetention <= 0 {
			at("contract.idempotency.keyRetention", fencegate.CodeUnsupported, "contract.idempotency needs keyRetention > 0")
		}
	}
	if nf := c.NativeFence; nf != nil {
		if nf.Header == "" || !validHeaderName(nf.Header) {
			at("contract.nativeFence.header", fencegate.CodeUnsupported, "contract.nativeFence needs a valid header name")
		}
		for field, h := range map[string]string{"segmentHeader": nf.SegmentHeader, "rootHeader": nf.RootHeader, "delegateHeader": nf.DelegateHeader} {
			if h != "" && !validHeaderName(h) {
				at("contract.nativeFence."+field, fencegate.CodeInvalidRequest, "contract.nativeFence.%s %q is not a valid header name", field, h)
			}
		}
	}
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
		if !ok {
			return false
		}
	}
	return true
}
