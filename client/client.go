package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/domain"
)

// Client talks to one Fencegate gateway with one workload credential. It is
// safe for concurrent use.
type Client struct {
	base  string
	token string
	hc    *http.Client
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
	hook  func(ctx context.Context, h http.Header)
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client (timeouts, TLS, transport).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithClock sets the clock the lease state machine reads (default time.Now).
func WithClock(now func() time.Time) Option { return func(c *Client) { c.now = now } }

// WithSleep sets how the client waits between acquisition attempts (default:
// a timer honouring ctx). Tests inject a function that returns at once.
func WithSleep(sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(c *Client) { c.sleep = sleep }
}

// WithRequestHook sets a function that may add headers to every request
// this client sends, from the request's context, after the client's own
// (a gateway asking its registry passes on its request ID and trace
// context this way; the module itself imports no tracing library).
func WithRequestHook(hook func(ctx context.Context, h http.Header)) Option {
	return func(c *Client) { c.hook = hook }
}

// New returns a client for the gateway at baseURL (for example
// "http://127.0.0.1:8080") that authenticates with the bearer token.
// Without WithHTTPClient it times calls out after 60 s (a long-poll
// acquisition after its Wait plus 60 s: see httpClient) and shares one
// connection pool with every other such Client, keeping up to 256 idle
// connections per gateway (enough for that many goroutines writing at once).
func New(baseURL, token string, opts ...Option) *Client {
	c := &Client{
		base:  strings.TrimRight(baseURL, "/"),
		token: token,
		hc:    &http.Client{Timeout: 60 * time.Second, Transport: sharedTransport()},
		now:   time.Now,
		sleep: sleepCtx,
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// maxIdlePerGateway is how many idle connections to one gateway the
// shared transport keeps for reuse (net/http's default keeps 2, so a pool of
// goroutines writing through one Client dials and closes a connection for
// a good share of its calls as soon as more than a few are in flight).
const maxIdlePerGateway = 256

// sharedTransport carries every Client made without WithHTTPClient, as
// http.DefaultTransport would (one connection pool for all of them), with
// maxIdlePerGateway idle connections per host. It is a clone of
// http.DefaultTransport as that is when the first such Client is made, so a
// program that configures the default transport at start (proxy, TLS) still
// has it apply; one that replaced it with another RoundTripper gets that one.
var sharedTransport = sync.OnceValue(func() http.RoundTripper {
	t, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return http.DefaultTransport
	}
	t = t.Clone()
	t.MaxIdleConns = max(t.MaxIdleConns, maxIdlePerGateway)
	t.MaxIdleConnsPerHost = maxIdlePerGateway
	return t
})

// Now is the client's clock.
func (c *Client) Now() time.Time { return c.now() }

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// UncertainError is a call whose request may or may not have reached the
// gateway and been acted on: a transport error, a timeout, a cancelled
// context after sending, or an answer that is not the gateway's (a proxy 5xx,
// a truncated body). Retrying a mutation after it must use the same identity
// (request ID, fence and segment).
type UncertainError struct {
	Op  string
	Err error
}

// Error names the call whose outcome is unknown and why.
func (e *UncertainError) Error() string { return "uncertain outcome of " + e.Op + ": " + e.Err.Error() }

// Unwrap exposes the cause.
func (e *UncertainError) Unwrap() error { return e.Err }

// IsUncertain reports whether err means the outcome of the call is unknown
// because the gateway's answer was not received intact.
func IsUncertain(err error) bool {
	var u *UncertainError
	return errors.As(err, &u)
}

// problem is the problem+json document of a gateway error.
type problem struct {
	Type      string      `json:"type"`
	Status    int         `json:"status"`
	Detail    string      `json:"detail"`
	Code      domain.Code `json:"code"`
	ReceiptID string      `json:"receiptId"`
}

const problemTypePrefix = "urn:fencegate:problem:"

// gatewayProblem returns the *domain.Error of a Fencegate problem answer,
// or nil if body is not one (an upstream's own answer, or anything else).
func gatewayProblem(contentType string, body []byte) *domain.Error {
	if !strings.HasPrefix(strings.ToLower(contentType), "application/problem+json") {
		return nil
	}
	var p problem
	if json.Unmarshal(body, &p) != nil || !strings.HasPrefix(p.Type, problemTypePrefix) || !knownCode(p.Code) {
		return nil
	}
	return &domain.Error{Code: p.Code, Message: p.Detail, ReceiptID: p.ReceiptID}
}

func knownCode(c domain.Code) bool {
	for _, k := range domain.Codes {
		if k == c {
			return true
		}
	}
	return false
}

// request is one HTTP call to the gateway.
type request struct {
	op     string
	method string
	path   string // already escaped, starting with /
	query  url.Values
	// rawQuery is sent as it is when query is empty (an SDK's own query).
	rawQuery string
	header   http.Header
	body     io.Reader
	json     any // marshalled as the body when set
	// limit, when not 0, bounds the 2xx answer read: a longer one is
	// uncertain (not decoded from an unbounded read).
	limit int64
	// wait, when positive, is how long the gateway may hold the call
	// before it answers (a long-poll acquisition): it is added to the
	// call's time limit (httpClient).
	wait time.Duration
}

// httpClient is the HTTP client for a call the gateway may hold for wait
// before it answers: c's, with its time limit (Timeout, if it has one)
// lengthened by wait. A long poll of up to a minute under the default 60 s
// limit would otherwise always time out before the answer, and its
// uncertain error be retried until the attempts run out.
func (c *Client) httpClient(wait time.Duration) *http.Client {
	if wait <= 0 || c.hc.Timeout <= 0 {
		return c.hc
	}
	hc := *c.hc // same transport and connection pool
	hc.Timeout += wait
	return &hc
}

// send performs r and returns the response for any status; only a transport
// failure is an error (uncertain).
func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	u := c.base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	} else if r.rawQuery != "" {
		u += "?" + r.rawQuery
	}
	body := r.body
	if r.json != nil {
		b, err := json.Marshal(r.json)
		if err != nil {
			return nil, domain.Wrap(err, domain.CodeInvalidRequest, "encode request body")
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, body)
	if err != nil {
		return nil, domain.Wrap(err, domain.CodeInvalidRequest, "build request: "+err.Error())
	}
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	if r.json != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("Accept", "application/json, application/problem+json, */*")
	if c.hook != nil {
		c.hook(ctx, req.Header)
	}
	resp, err := c.httpClient(r.wait).Do(req)
	if err != nil {
		return nil, &UncertainError{Op: r.op, Err: err}
	}
	return resp, nil
}

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 1 << 20

// answerError turns a non-2xx answer into an error: *domain.Error for a
// Fencegate problem, *UncertainError for a foreign 5xx, INTERNAL otherwise.
// It consumes and closes the body.
func answerError(op string, resp *http.Response) error {
	defer resp.Body.Close()
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if fe := gatewayProblem(resp.Header.Get("Content-Type"), b); fe != nil {
		return fe
	}
	if rerr != nil || resp.StatusCode >= 500 {
		return &UncertainError{Op: op, Err: fmt.Errorf("HTTP %d without a Fencegate problem", resp.StatusCode)}
	}
	return domain.Errorf(domain.CodeInternal, "%s: unexpected HTTP %d", op, resp.StatusCode)
}

// do performs r and decodes a 2xx JSON answer into out (if not nil).
func (c *Client) do(ctx context.Context, r request, out any) error {
	resp, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return answerError(r.op, resp)
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if resp.StatusCode == http.StatusNoContent {
		return nil
	}
	if r.limit > 0 {
		raw, err := io.ReadAll(io.LimitReader(resp.Body, r.limit+1))
		if err == nil && int64(len(raw)) > r.limit {
			err = fmt.Errorf("answer larger than %d bytes", r.limit)
		}
		if err == nil {
			err = json.Unmarshal(raw, out)
		}
		if err != nil {
			return &UncertainError{Op: r.op, Err: fmt.Errorf("read answer: %w", err)}
		}
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		// The gateway acted but its answer was lost on the way.
		return &UncertainError{Op: r.op, Err: fmt.Errorf("decode answer: %w", err)}
	}
	// Read what is left (the encoder's newline) so that the transport sees
	// the body's end and keeps the connection: closing a body the decoder
	// stopped short of would close the connection, and the next call would
	// dial again.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxTrailer))
	return nil
}

// maxTrailer bounds what is drained after a decoded answer; past it the
// connection is closed instead.
const maxTrailer = 4 << 10

// escapeID escapes an ID (a lease's, a delegation's) as one path segment:
// a slash or a dot segment in it never reaches another route.
func escapeID(id string) string { return url.PathEscape(id) }

// escapePath escapes each slash-separated segment of p, keeping the slashes.
func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}
