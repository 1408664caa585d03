// Package httpapi is the third-party HTTP API backend: the client adapter that
// forwards fenced calls to payment-style APIs.
//
// Guarantees: an API is admitted only with a fencing contract (idempotency
// with a key retention and an effect query, or a native fence header); every
// call of a receipt carries the same deterministic idempotency key derived
// from resource, operation root, fence and segment, so a retry can never
// create a second effect under another key; the worker's Authorization and
// fence headers never reach the upstream, which sees only the configured
// credential; an outcome is COMMITTED only when an answer was received,
// FAILED only when nothing can have been sent, and UNKNOWN otherwise.
package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/fencegate/fencegate"
	"gopkg.in/yaml.v3"
)

// Defaults of an API's configuration.
const (
	DefaultCredentialHeader  = "Authorization"
	DefaultIdempotencyHeader = "Idempotency-Key"
	DefaultSegmentHeader     = "Fence-Segment"
	DefaultTimeout           = 30 * time.Second
	DefaultMaxBodyBytes      = 1 << 20
	DefaultMaxResponseBytes  = 64 << 10
)

// Config is the `apis:` section of the gateway's configuration file.
type Config struct {
	APIs []APIConfig `yaml:"apis"`
}

// APIConfig declares one upstream API: where it is, how the gateway
// authenticates to it, its fencing contract and the routes workers may call.
type APIConfig struct {
	Name        string       `yaml:"name"`
	BaseURL     string       `yaml:"baseURL"`
	Credentials *Credentials `yaml:"credentials"`
	// Timeout bounds one upstream call (default 30 s).
	Timeout           time.Duration `yaml:"timeout"`
	IdempotencyHeader string        `yaml:"idempotencyHeader"`
	// MaxBodyBytes caps a forwarded request body (default 1 MiB).
	MaxBodyBytes int64 `yaml:"maxBodyBytes"`
	// MaxResponseBytes caps the upstream body kept in the receipt (default 64 KiB).
	MaxResponseBytes int64 `yaml:"maxResponseBytes"`
	// KeepResponseHeaders are stored with the answer (Content-Type always is).
	KeepResponseHeaders []string `yaml:"keepResponseHeaders"`
	Contract            Contract `yaml:"contract"`
	Routes              []Route  `yaml:"routes"`
}

// Credentials is the upstream credential the gateway injects: Prefix followed
// by the value of environment variable Env or the contents of File.
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

// Idempotency: the upstream deduplicates by key for KeyRetention, and
// EffectQuery finds an effect by key.
type Idempotency struct {
	KeyRetention time.Duration `yaml:"keyRetention"`
	EffectQuery  *EffectQuery  `yaml:"effectQuery"`
}

// NativeFence: the upstream itself rejects fences lower than the highest it
// has seen, read from Header (and the segment from SegmentHeader).
type NativeFence struct {
	Header        string `yaml:"header"`
	SegmentHeader string `yaml:"segmentHeader"`
	// EffectQuery, optional here, lets the reconciler settle unknown outcomes.
	EffectQuery *EffectQuery `yaml:"effectQuery"`
}

// EffectQuery finds an effect by its idempotency key: URL (relative to the
// base URL) contains {key}. 2xx means found; 404 means not applied.
type EffectQuery struct {
	Method string `yaml:"method"`
	URL    string `yaml:"url"`
	// NotAppliedAfter is the receipt age before a 404 counts as proof that the
	// effect did not happen (a late request may still land); default: Timeout.
	NotAppliedAfter time.Duration `yaml:"notAppliedAfter"`
}

// Route allows Method on the path template Path ("/v1/accounts/{account}/payouts");
// Resource ("payouts/{account}") derives the call's resource from its parameters.
type Route struct {
	Method   string `yaml:"method"`
	Path     string `yaml:"path"`
	Resource string `yaml:"resource"`
}

// Load reads a YAML file holding an `apis:` list, refusing unknown fields,
// and validates it.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fencegate.Wrap(err, fencegate.CodeInvalidRequest, "cannot read API config "+path)
	}
	return Parse(data)
}

// Parse decodes strict YAML (unknown fields are errors) and validates it.
func Parse(data []byte) (Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fencegate.Wrap(err, fencegate.CodeInvalidRequest, "API config is not valid YAML: "+err.Error())
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// ParseNode strictly decodes and validates an `apis:` value held as a YAML
// node inside a larger configuration file (a zero node means no APIs).
func ParseNode(n *yaml.Node) (Config, error) {
	if n == nil || n.Kind == 0 {
		return Config{}, nil
	}
	doc := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: "apis"}, n}}
	data, err := yaml.Marshal(doc)
	if err != nil {
		return Config{}, fencegate.Wrap(err, fencegate.CodeInvalidRequest, "API config cannot be re-encoded")
	}
	return Parse(data)
}

// Validate reports every problem of every API at once, each naming its API.
func (c Config) Validate() error {
	var errs []error
	seen := map[string]bool{}
	for i, a := range c.APIs {
		if a.Name != "" && seen[a.Name] {
			errs = append(errs, fencegate.Errorf(fencegate.CodeInvalidRequest, "api %q is declared more than once", a.Name))
		}
		seen[a.Name] = true
		if err := a.validate(i); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// withDefaults fills in the documented defaults.
func (a APIConfig) withDefaults() APIConfig {
	if a.Timeout == 0 {
		a.Timeout = DefaultTimeout
	}
	if a.IdempotencyHeader == "" {
		a.IdempotencyHeader = DefaultIdempotencyHeader
	}
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
	if nf := a.Contract.NativeFence; nf != nil && nf.SegmentHeader == "" {
		cp := *nf
		cp.SegmentHeader = DefaultSegmentHeader
		a.Contract.NativeFence = &cp
	}
	return a
}

// validate checks one API (index i names it when it has no name).
func (a APIConfig) validate(i int) error {
	a = a.withDefaults()
	label := fmt.Sprintf("apis[%d]", i)
	if a.Name != "" {
		label = fmt.Sprintf("api %q", a.Name)
	}
	var errs []error
	bad := func(code fencegate.Code, format string, args ...any) {
		errs = append(errs, fencegate.Errorf(code, "%s: %s", label, fmt.Sprintf(format, args...)))
	}
	if a.Name == "" {
		bad(fencegate.CodeInvalidRequest, "name is required")
	} else if fencegate.CheckName(a.Name) != nil || strings.Contains(a.Name, "/") {
		bad(fencegate.CodeInvalidRequest, "name must be a single canonical path segment")
	}
	if u, err := url.Parse(a.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		bad(fencegate.CodeInvalidRequest, "baseURL %q must be an absolute http(s) URL without user info, query or fragment", a.BaseURL)
	}
	if a.Timeout < 0 || a.MaxBodyBytes < 0 || a.MaxResponseBytes < 0 {
		bad(fencegate.CodeInvalidRequest, "timeout, maxBodyBytes and maxResponseBytes must not be negative")
	}
	if !validHeaderName(a.IdempotencyHeader) {
		bad(fencegate.CodeInvalidRequest, "idempotencyHeader %q is not a valid header name", a.IdempotencyHeader)
	}
	for _, h := range a.KeepResponseHeaders {
		if !validHeaderName(h) {
			bad(fencegate.CodeInvalidRequest, "keepResponseHeaders: %q is not a valid header name", h)
		}
	}
	if cr := a.Credentials; cr != nil {
		if !validHeaderName(cr.Header) {
			bad(fencegate.CodeInvalidRequest, "credentials.header %q is not a valid header name", cr.Header)
		}
		switch {
		case (cr.Env == "") == (cr.File == ""):
			bad(fencegate.CodeInvalidRequest, "credentials need exactly one of env or file")
		case cr.Env != "" && os.Getenv(cr.Env) == "":
			bad(fencegate.CodeInvalidRequest, "credentials: environment variable %s is not set", cr.Env)
		case cr.File != "":
			if _, err := os.Stat(cr.File); err != nil {
				bad(fencegate.CodeInvalidRequest, "credentials: cannot read file %s", cr.File)
			}
		}
	}
	errs = append(errs, a.Contract.validate(label)...)
	if len(a.Routes) == 0 {
		bad(fencegate.CodeInvalidRequest, "at least one route is required")
	}
	for j, r := range a.Routes {
		if _, err := compileRoute(r); err != nil {
			bad(fencegate.CodeInvalidRequest, "routes[%d]: %s", j, fencegate.ErrorMessage(err))
		}
	}
	return errors.Join(errs...)
}

func (c Contract) validate(label string) []error {
	var errs []error
	bad := func(code fencegate.Code, format string, args ...any) {
		errs = append(errs, fencegate.Errorf(code, "%s: %s", label, fmt.Sprintf(format, args...)))
	}
	if c.Idempotency == nil && c.NativeFence == nil {
		bad(fencegate.CodeUnsupported, "declares no fencing contract: it needs contract.idempotency (keyRetention and effectQuery) or contract.nativeFence (header)")
		return errs
	}
	if id := c.Idempotency; id != nil {
		if id.KeyRetention <= 0 {
			bad(fencegate.CodeUnsupported, "contract.idempotency needs keyRetention > 0")
		}
		if id.EffectQuery == nil {
			bad(fencegate.CodeUnsupported, "contract.idempotency needs an effectQuery to settle unknown outcomes")
		} else if err := id.EffectQuery.validate(); err != nil {
			bad(fencegate.CodeInvalidRequest, "contract.idempotency.effectQuery: %s", err)
		}
	}
	if nf := c.NativeFence; nf != nil {
		if nf.Header == "" || !validHeaderName(nf.Header) {
			bad(fencegate.CodeUnsupported, "contract.nativeFence needs a valid header name")
		}
		if nf.SegmentHeader != "" && !validHeaderName(nf.SegmentHeader) {
			bad(fencegate.CodeInvalidRequest, "contract.nativeFence.segmentHeader %q is not a valid header name", nf.SegmentHeader)
		}
		if nf.EffectQuery != nil {
			if err := nf.EffectQuery.validate(); err != nil {
				bad(fencegate.CodeInvalidRequest, "contract.nativeFence.effectQuery: %s", err)
			}
		}
	}
	return errs
}

func (q *EffectQuery) validate() error {
	switch strings.ToUpper(q.Method) {
	case http.MethodGet, http.MethodHead, http.MethodPost:
	default:
		return fmt.Errorf("method %q must be GET, HEAD or POST", q.Method)
	}
	if !strings.HasPrefix(q.URL, "/") || !strings.Contains(q.URL, "{key}") {
		return fmt.Errorf("url %q must start with / and contain {key}", q.URL)
	}
	if _, err := url.Parse(strings.ReplaceAll(q.URL, "{key}", "k")); err != nil {
		return fmt.Errorf("url %q does not parse", q.URL)
	}
	if q.NotAppliedAfter < 0 {
		return fmt.Errorf("notAppliedAfter must not be negative")
	}
	return nil
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
