package httpapi

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate"
)

// TruncatedHeader marks a stored answer whose body was cut at MaxResponseBytes.
const TruncatedHeader = "Fence-Response-Truncated"

// API is one configured upstream. It is safe for concurrent use.
type API struct {
	cfg       APIConfig // defaults applied
	base      *url.URL
	cred      *credential     // nil when the API takes none
	bound     map[string]bool // canonical names of the headers some route binds (Route.Headers)
	keep      []string        // canonical header names kept in receipts
	routes    []route
	client    *http.Client
	now       func() time.Time
	started   time.Time     // when this process built the API (its clock)
	effectTTL time.Duration // the gateway's effect timeout (WithEffectTimeout)
	onResend  func(api, reason string)
	resends   atomic.Int64
	log       *slog.Logger
}

// Option adjusts an API built by New.
type Option func(*API)

// WithClock sets the clock the reconciliation rules read (default time.Now).
func WithClock(now func() time.Time) Option { return func(a *API) { a.now = now } }

// DefaultEffectTimeout is the gateway's default effect timeout
// (gateway.Config.EffectTimeout), which WithEffectTimeout overrides.
const DefaultEffectTimeout = 60 * time.Second

// WithEffectTimeout tells the API the gateway's effect timeout: a receipt's
// first send starts, and its connection closes, no later than that long
// after the receipt's creation (gateway.EffectExpiry). A lookup counts its
// minAge from the last moment a send may have been open (see lastSendBound).
func WithEffectTimeout(d time.Duration) Option {
	return func(a *API) {
		if d > 0 {
			a.effectTTL = d
		}
	}
}

// WithLogger sets where resends and transport anomalies are logged
// (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(a *API) { a.log = l } }

// WithResendHook is told about every resend (the API's name and why), to
// count it; each is also logged by the caller of Resolve.
func WithResendHook(f func(api, reason string)) Option { return func(a *API) { a.onResend = f } }

// New builds the API from c, which Config.Validate has accepted (New checks
// nothing again: config validates every API once, up front), and reads its
// credential. client (nil for a default one) is copied so that redirects are
// never followed: a 3xx is the upstream's answer, and credentials never
// travel to another location.
func New(c APIConfig, client *http.Client, opts ...Option) (*API, error) {
	c = c.withDefaults()
	a := &API{cfg: c, now: time.Now, log: slog.Default(), effectTTL: DefaultEffectTimeout}
	var err error
	if a.base, err = url.Parse(c.BaseURL); err != nil {
		return nil, fencegate.Wrap(err, fencegate.CodeInvalidRequest, fmt.Sprintf("api %q: not validated: baseURL does not parse", c.Name))
	}
	for _, r := range c.Routes {
		cr, err := compileRoute(r)
		if err != nil {
			return nil, fencegate.Wrap(err, fencegate.CodeInvalidRequest, fmt.Sprintf("api %q: not validated: route %s %s", c.Name, r.Method, r.Path))
		}
		st := c.Settle
		if r.Settle != nil {
			st = r.Settle.over(c.Settle, c.Contract)
		}
		cr.settle = st
		a.routes = append(a.routes, cr)
		for h := range cr.headers {
			if a.bound == nil {
				a.bound = map[string]bool{}
			}
			a.bound[h] = true
		}
	}
	a.keep = []string{"Content-Type"}
	for _, h := range c.KeepResponseHeaders {
		a.keep = append(a.keep, http.CanonicalHeaderKey(h))
	}
	if client == nil {
		client = &http.Client{}
	}
	cp := *client
	cp.Transport = &noRetry{next: client.Transport}
	cp.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	a.client = &cp
	for _, o := range opts {
		o(a)
	}
	if cr := c.Credentials; cr != nil {
		if a.cred, err = newCredential(c.Name, cr, a.log); err != nil {
			return nil, fencegate.Wrap(err, fencegate.CodeInvalidRequest, fmt.Sprintf("api %q: cannot read credentials file", c.Name))
		}
	}
	a.started = a.now()
	return a, nil
}

// NewAll builds every API of a Config that Validate has accepted, by name.
func NewAll(c Config, client *http.Client, opts ...Option) (map[string]*API, error) {
	out := make(map[string]*API, len(c.APIs))
	for _, ac := range c.APIs {
		a, err := New(ac, client, opts...)
		if err != nil {
			return nil, err
		}
		out[ac.Name] = a
	}
	return out, nil
}

// Name returns the API's configured name.
func (a *API) Name() string { return a.cfg.Name }

// MaxBodyBytes is the largest request body the API forwards.
func (a *API) MaxBodyBytes() int64 { return a.cfg.MaxBodyBytes }

// readAnswer keeps status, the kept headers and at most MaxResponseBytes of
// the body; the rest is drained (bounded) and the answer marked truncated.
func (a *API) readAnswer(resp *http.Response) (*fencegate.EffectResponse, error) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, a.cfg.MaxResponseBytes+1))
	if err != nil {
		return nil, err
	}
	er := &fencegate.EffectResponse{Status: resp.StatusCode, Header: map[string]string{}}
	for _, k := range a.keep {
		if v := resp.Header.Values(k); len(v) > 0 {
			er.Header[k] = strings.Join(v, ", ")
		}
	}
	if int64(len(body)) > a.cfg.MaxResponseBytes {
		body = body[:a.cfg.MaxResponseBytes]
		er.Header[TruncatedHeader] = "true"
	}
	er.Body = body
	return er, nil
}

// notSent reports whether err proves that no byte of the request left: a
// failed dial, name resolution or TLS certificate check.
func notSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	var cert *tls.CertificateVerificationError
	return errors.As(err, &dns) || errors.As(err, &cert)
}

// templateURL is the upstream URL of a lookup or conflict-fetch template
// (its path written escaped: checkURL) with each placeholder replaced by
// its value (pairs: placeholder, value), escaped once for where it stands:
// path-escaped in the path ("INV/7" is one segment, INV%2F7), query-escaped
// in the query.
//
// A value placed in the path must stand for one segment as every server
// reads it: "." or ".." (which front ends resolve as dot segments), or one
// holding "/" or "\" (which some servers refuse or split even escaped:
// Apache answers 404 to %2F by default), would ask another URL, whose 404
// a lookup would take for "no such effect". Such a value is UNSUPPORTED:
// the receipt waits for a person, never settled from another URL's answer.
func (a *API) templateURL(tmpl string, pairs ...string) (string, error) {
	path, query, _ := strings.Cut(tmpl, "?")
	for i := 0; i+1 < len(pairs); i += 2 {
		if v := pairs[i+1]; strings.Contains(path, pairs[i]) && (v == "." || v == ".." || strings.ContainsAny(v, `/\`)) {
			return "", fencegate.Errorf(fencegate.CodeUnsupported, "api %q: %q cannot stand for %s in the URL path %s", a.cfg.Name, v, pairs[i], tmpl)
		}
		path = strings.ReplaceAll(path, pairs[i], url.PathEscape(pairs[i+1]))
		query = strings.ReplaceAll(query, pairs[i], url.QueryEscape(pairs[i+1]))
	}
	return a.escapedEndpoint(path, query)
}

// escapedEndpoint joins the base URL and an already escaped path (and
// optional raw query), keeping the path's escapes as they are.
func (a *API) escapedEndpoint(escPath, rawQuery string) (string, error) {
	p, err := url.PathUnescape(escPath)
	if err != nil {
		return "", err
	}
	u := *a.base
	u.RawPath = strings.TrimSuffix(u.EscapedPath(), "/") + escPath
	u.Path = strings.TrimSuffix(u.Path, "/") + p
	u.RawQuery = rawQuery
	return u.String(), nil
}

// endpoint joins the base URL and a path (and optional raw query).
func (a *API) endpoint(path, rawQuery string) string {
	u := *a.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawPath = ""
	u.RawQuery = rawQuery
	return u.String()
}

// forwardHeader is keptHeader plus the configured upstream credential.
func (a *API) forwardHeader(in http.Header) http.Header {
	return a.withCredential(a.keptHeader(in))
}

// withCredential sets the upstream credential on h (in place) and returns
// it; a nil h gets a header of its own.
func (a *API) withCredential(h http.Header) http.Header {
	if h == nil {
		h = http.Header{}
	}
	if a.cred != nil {
		h.Del(a.cred.name)
		h.Set(a.cred.name, a.cred.header())
	}
	return h
}

// keptHeader is the client's header as allowedHeader (headers.go) lets it
// through: what a receipt keeps and what the upstream is sent.
func (a *API) keptHeader(in http.Header) http.Header { return a.allowedHeader(in) }
