package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// TruncatedHeader marks a stored answer whose body was cut at MaxResponseBytes.
const TruncatedHeader = "Fence-Response-Truncated"

// API is one configured upstream. It is safe for concurrent use.
type API struct {
	cfg       APIConfig // defaults applied
	base      *url.URL
	credName  string
	credValue string
	keep      []string // canonical header names kept in receipts
	routes    []route
	client    *http.Client
	now       func() time.Time
}

// Option adjusts an API built by New.
type Option func(*API)

// WithClock sets the clock the reconciliation rules read (default time.Now).
func WithClock(now func() time.Time) Option { return func(a *API) { a.now = now } }

// New builds the API from c, which Config.Validate has accepted (New checks
// nothing again: config validates every API once, up front), and reads its
// credential. client (nil for a default one) is copied so that redirects are
// never followed: a 3xx is the upstream's answer, and credentials never
// travel to another location.
func New(c APIConfig, client *http.Client, opts ...Option) (*API, error) {
	c = c.withDefaults()
	a := &API{cfg: c, now: time.Now}
	var err error
	if a.base, err = url.Parse(c.BaseURL); err != nil {
		return nil, fencegate.Wrap(err, fencegate.CodeInvalidRequest, fmt.Sprintf("api %q: not validated: baseURL does not parse", c.Name))
	}
	for _, r := range c.Routes {
		cr, err := compileRoute(r)
		if err != nil {
			return nil, fencegate.Wrap(err, fencegate.CodeInvalidRequest, fmt.Sprintf("api %q: not validated: route %s %s", c.Name, r.Method, r.Path))
		}
		a.routes = append(a.routes, cr)
	}
	a.keep = []string{"Content-Type"}
	for _, h := range c.KeepResponseHeaders {
		a.keep = append(a.keep, http.CanonicalHeaderKey(h))
	}
	if cr := c.Credentials; cr != nil {
		v := os.Getenv(cr.Env)
		if cr.File != "" {
			b, err := os.ReadFile(cr.File)
			if err != nil {
				return nil, fencegate.Wrap(err, fencegate.CodeInvalidRequest, fmt.Sprintf("api %q: cannot read credentials file", c.Name))
			}
			v = strings.TrimRight(string(b), "\r\n")
		}
		a.credName, a.credValue = http.CanonicalHeaderKey(cr.Header), cr.Prefix+v
	}
	if client == nil {
		client = &http.Client{}
	}
	cp := *client
	cp.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	a.client = &cp
	for _, o := range opts {
		o(a)
	}
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

// IdempotencyKey is the deterministic key of a receipt's effect:
// "fg-" + hex(sha256(resource \x00 root \x00 fence \x00 segment)), fence and
// segment in decimal. Every attempt of the same segment sends the same key.
func IdempotencyKey(r fencegate.Receipt) string {
	h := sha256.New()
	h.Write([]byte(r.Resource))
	h.Write([]byte{0})
	h.Write([]byte(r.OperationRoot))
	h.Write([]byte{0})
	h.Write([]byte(strconv.FormatUint(r.FenceToken, 10)))
	h.Write([]byte{0})
	h.Write([]byte(strconv.FormatUint(r.Segment, 10)))
	return "fg-" + hex.EncodeToString(h.Sum(nil))
}

// Call is the effect of one admitted API call; it implements gateway.Effect.
type Call struct {
	api    *API
	method string
	path   string
	header http.Header
	body   io.ReadSeeker
	size   int64
}

var _ gateway.Effect = (*Call)(nil)

// Call returns the effect forwarding method path (relative to the base URL,
// a path Match accepted) with the client's header (sanitised when sent) and
// body of size bytes (nil or size 0 for none). The body is rewound per attempt.
func (a *API) Call(method, path string, header http.Header, body io.ReadSeeker, size int64) *Call {
	return &Call{api: a, method: method, path: path, header: header, body: body, size: size}
}

// Apply forwards the call with the receipt's idempotency key. An answer below
// 500 (except 429) is COMMITTED with the stored response; a failure to connect
// is FAILED (BACKEND_UNAVAILABLE), as is 429; anything after the request may
// have been sent without a complete answer, or a 5xx, is UNKNOWN.
func (c *Call) Apply(ctx context.Context, r fencegate.Receipt, _ string) (fencegate.Outcome, error) {
	a := c.api
	h := a.forwardHeader(c.header)
	h.Set(a.cfg.IdempotencyHeader, IdempotencyKey(r))
	if nf := a.cfg.Contract.NativeFence; nf != nil {
		h.Set(nf.Header, strconv.FormatUint(r.FenceToken, 10))
		h.Set(nf.SegmentHeader, strconv.FormatUint(r.Segment, 10))
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, c.method, a.endpoint(c.path, ""), http.NoBody)
	if err != nil {
		return fencegate.Outcome{State: fencegate.ReceiptFailed, Error: err.Error()},
			fencegate.Wrap(err, fencegate.CodeInvalidRequest, "cannot build the upstream request")
	}
	req.Header = h
	if c.body != nil && c.size > 0 {
		req.ContentLength = c.size
		req.GetBody = func() (io.ReadCloser, error) {
			if _, err := c.body.Seek(0, io.SeekStart); err != nil {
				return nil, err
			}
			return io.NopCloser(io.LimitReader(c.body, c.size)), nil
		}
		if req.Body, err = req.GetBody(); err != nil {
			return fencegate.Outcome{State: fencegate.ReceiptFailed, Error: err.Error()},
				fencegate.Wrap(err, fencegate.CodeInternal, "cannot rewind the request body")
		}
	}
	// net/http may resend a request carrying an Idempotency-Key on a fresh
	// connection; count the attempts that wrote headers, so that "nothing was
	// sent" is claimed only when none did.
	var wrote atomic.Int32
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteHeaders: func() { wrote.Add(1) },
	}))
	resp, err := a.client.Do(req)
	if err != nil {
		if wrote.Load() == 0 && notSent(err) {
			return fencegate.Outcome{State: fencegate.ReceiptFailed, Error: "upstream unreachable: " + err.Error()},
				fencegate.Wrap(err, fencegate.CodeBackendUnavailable, fmt.Sprintf("api %q is unreachable; nothing was sent", a.cfg.Name))
		}
		return unknown(a, "no answer from upstream: "+err.Error(), err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 500:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, a.cfg.MaxResponseBytes))
		return unknown(a, "upstream answered "+resp.Status, nil)
	case resp.StatusCode == http.StatusTooManyRequests && wrote.Load() <= 1:
		return fencegate.Outcome{State: fencegate.ReceiptFailed, Error: "upstream answered " + resp.Status},
			fencegate.Errorf(fencegate.CodeBackendUnavailable, "api %q is rate limiting; nothing was applied", a.cfg.Name)
	case resp.StatusCode == http.StatusTooManyRequests: // an earlier attempt may have been applied
		return unknown(a, "upstream answered "+resp.Status+" to a resent request", nil)
	}
	er, err := a.readAnswer(resp)
	if err != nil {
		return unknown(a, "upstream answer broke off: "+err.Error(), err)
	}
	return fencegate.Outcome{State: fencegate.ReceiptCommitted, Response: er}, nil
}

func unknown(a *API, msg string, cause error) (fencegate.Outcome, error) {
	return fencegate.Outcome{State: fencegate.ReceiptUnknown, Error: msg},
		fencegate.Wrap(cause, fencegate.CodeMutationUnknown, fmt.Sprintf("api %q: %s", a.cfg.Name, msg))
}

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

// endpoint joins the base URL and a path (and optional raw query).
func (a *API) endpoint(path, rawQuery string) string {
	u := *a.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawPath = ""
	u.RawQuery = rawQuery
	return u.String()
}

// hopByHop are connection-scoped headers (RFC 9110 §7.6.1) plus those the
// gateway owns or that must never be forwarded from a worker.
var hopByHop = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Authorization", "Cookie", "Host",
	"Content-Length", "Expect", "Accept-Encoding",
}

// forwardHeader is the client's header without hop-by-hop, credential, cookie
// and Fence-* headers, nor any header the gateway sets itself, plus the
// configured upstream credential.
func (a *API) forwardHeader(in http.Header) http.Header {
	out := in.Clone()
	if out == nil {
		out = http.Header{}
	}
	for _, v := range in.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			out.Del(strings.TrimSpace(name))
		}
	}
	for _, name := range hopByHop {
		out.Del(name)
	}
	for name := range out {
		if strings.HasPrefix(http.CanonicalHeaderKey(name), "Fence-") {
			delete(out, name)
		}
	}
	out.Del(a.cfg.IdempotencyHeader)
	if nf := a.cfg.Contract.NativeFence; nf != nil {
		out.Del(nf.Header)
		out.Del(nf.SegmentHeader)
	}
	if a.credName != "" {
		out.Del(a.credName)
		out.Set(a.credName, a.credValue)
	}
	return out
}
