package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// Call is the effect of one admitted API call; it implements gateway.Effect
// and gateway.RequestKeeper.
type Call struct {
	api    *API
	method string
	path   string
	header http.Header
	body   io.ReadSeeker
	size   int64
	// delegate is the authenticated identity of a delegate calling under
	// the owner's delegation ("" for the owner).
	delegate string
}

var (
	_ gateway.Effect        = (*Call)(nil)
	_ gateway.RequestKeeper = (*Call)(nil)
)

// Call returns the effect forwarding method path (relative to the base URL,
// a path Match accepted) with the client's header (sanitised) and body of
// size bytes (nil or size 0 for none).
func (a *API) Call(method, path string, header http.Header, body io.ReadSeeker, size int64) *Call {
	return &Call{api: a, method: method, path: path, header: header, body: body, size: size}
}

// AsDelegate marks the call as made by the delegate identity under the
// owner's delegation: a native-fence API is told who (DelegateHeader). The
// gateway's verdict on the delegation precedes the request being kept.
func (c *Call) AsDelegate(identity string) *Call {
	c.delegate = identity
	return c
}

// KeptRequest is the exact upstream request of the receipt r (its resource,
// root, fence and segment set): the sanitised headers, the idempotency key
// in the declared header or JSON body field (idempotency contracts only),
// the native fence headers (native-fence contracts), and the body. It fails
// with INVALID_REQUEST when the key cannot be placed (the body is not a JSON
// object) or the body is over MaxBodyBytes.
func (c *Call) KeptRequest(r fencegate.Receipt) (*fencegate.EffectRequest, error) {
	a := c.api
	if c.size > a.cfg.MaxBodyBytes {
		return nil, fencegate.Errorf(fencegate.CodeInvalidRequest, "request body exceeds the limit of %d bytes", a.cfg.MaxBodyBytes)
	}
	var body []byte
	if c.body != nil && c.size > 0 {
		if _, err := c.body.Seek(0, io.SeekStart); err != nil {
			return nil, fencegate.Wrap(err, fencegate.CodeInternal, "cannot rewind the request body")
		}
		body = make([]byte, c.size)
		if _, err := io.ReadFull(c.body, body); err != nil {
			return nil, fencegate.Wrap(err, fencegate.CodeInternal, "cannot read the request body")
		}
	}
	h := a.keptHeader(c.header)
	kr := &fencegate.EffectRequest{Method: c.method, Path: c.path}
	if a.cfg.Contract.Idempotency != nil {
		k := a.cfg.Key
		kr.Key = k.For(r)
		if k.BodyField != "" {
			var err error
			if body, err = placeInBody(body, k.BodyField, kr.Key); err != nil {
				return nil, fencegate.Errorf(fencegate.CodeInvalidRequest, "api %q takes its idempotency key in the JSON body field %s: %v", a.cfg.Name, k.BodyField, err)
			}
		} else {
			h.Set(k.Header, kr.Key)
		}
	}
	if nf := a.cfg.Contract.NativeFence; nf != nil {
		h.Set(nf.Header, strconv.FormatUint(r.FenceToken, 10))
		h.Set(nf.SegmentHeader, strconv.FormatUint(r.Segment, 10))
		h.Set(nf.RootHeader, r.OperationRoot)
		if c.delegate != "" {
			h.Set(nf.DelegateHeader, c.delegate)
		}
	}
	kr.Header, kr.Body = h, body
	if err := kr.Validate(); err != nil {
		return nil, err
	}
	return kr, nil
}

// Apply sends the receipt's kept request (built from the call when the
// receipt keeps none) once. A final answer is COMMITTED with the stored
// response; a failure to connect is FAILED (BACKEND_UNAVAILABLE); anything
// after the request may have been sent without a final answer is UNKNOWN,
// marked for a same-key resend where the API's answer classes allow it.
func (c *Call) Apply(ctx context.Context, r fencegate.Receipt, _ string) (fencegate.Outcome, error) {
	kr := r.Request
	if kr == nil {
		var err error
		if kr, err = c.KeptRequest(r); err != nil {
			return fencegate.Outcome{State: fencegate.ReceiptFailed, Error: fencegate.ErrorMessage(err)}, err
		}
	}
	return c.api.attempt(ctx, r, kr, true)
}

// attempt sends kr once and classifies what came back. first tells whether
// this is the receipt's first send: only then does "could not connect" prove
// that nothing was applied.
func (a *API) attempt(ctx context.Context, r fencegate.Receipt, kr *fencegate.EffectRequest, first bool) (fencegate.Outcome, error) {
	keyed := kr.Key != "" && a.cfg.Contract.Idempotency != nil
	resp, wrote, err := a.send(ctx, kr)
	if err != nil {
		if wrote == 0 && notSent(err) {
			if first {
				return fencegate.Outcome{State: fencegate.ReceiptFailed, Error: "upstream unreachable: " + err.Error()},
					fencegate.Wrap(err, fencegate.CodeBackendUnavailable, fmt.Sprintf("api %q is unreachable; nothing was sent", a.cfg.Name))
			}
			return fencegate.Outcome{State: fencegate.ReceiptUnknown, Resend: keyed, Error: "resend could not connect: " + err.Error()}, nil
		}
		return unknown(a, fencegate.Outcome{Resend: keyed, Attempts: 1}, "no answer from upstream: "+err.Error(), err)
	}
	defer resp.Body.Close()
	er, err := a.readAnswer(resp)
	if err != nil {
		return unknown(a, fencegate.Outcome{Resend: keyed, Attempts: 1}, "upstream answer broke off: "+err.Error(), err)
	}
	ans := &answer{status: resp.StatusCode, header: resp.Header, body: er.Body}
	if st := a.settleFor(r); st.Strategy == StrategyConflictFetch && st.Conflict.Match.matches(ans) {
		out := a.fetchConflict(ctx, st.Conflict, kr, er)
		out.Attempts = 1
		if out.State == fencegate.ReceiptUnknown {
			return unknown(a, out, out.Error, nil)
		}
		return out, nil
	}
	class := a.cfg.Answers.classify(ans)
	if class == classRefused && first {
		what := "refused the gateway's request"
		if er.Status < 400 {
			what = "redirected the gateway's request, which is never followed"
		}
		msg := fmt.Sprintf("upstream %s (%d): nothing was applied", what, er.Status)
		return fencegate.Outcome{State: fencegate.ReceiptFailed, Attempts: 1, Error: msg},
			fencegate.Errorf(fencegate.CodeBackendUnavailable, "api %q %s; the segment may be sent again", a.cfg.Name, msg)
	}
	out := outcomeOf(class, er, keyed)
	out.Attempts = 1
	out.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), a.now())
	if out.State == fencegate.ReceiptUnknown {
		return unknown(a, out, out.Error, nil)
	}
	return out, nil
}

// retryAfter reads a Retry-After value (delay-seconds or an HTTP date,
// RFC 9110 §10.2.3); 0 when absent or malformed.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s := strings.TrimSpace(v); s != "" && strings.Trim(s, "0123456789") == "" {
		// delay-seconds is 1*DIGIT: a value past what a Duration holds is
		// the longest wait, never one wrapped negative (the reconciler caps it).
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n > uint64(math.MaxInt64/int64(time.Second)) {
			return time.Duration(math.MaxInt64)
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

func unknown(a *API, o fencegate.Outcome, msg string, cause error) (fencegate.Outcome, error) {
	o.State, o.Error = fencegate.ReceiptUnknown, msg
	return o, fencegate.Wrap(cause, fencegate.CodeMutationUnknown, fmt.Sprintf("api %q: %s", a.cfg.Name, msg))
}

// send makes one HTTP exchange of kr with the upstream credential. wrote
// counts the attempts that wrote headers (the transport never resends: see
// noRetry; more than one is logged as a broken promise).
func (a *API) send(ctx context.Context, kr *fencegate.EffectRequest) (*http.Response, int32, error) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	path, rawQuery, _ := strings.Cut(kr.Path, "?")
	req, err := http.NewRequestWithContext(ctx, kr.Method, a.endpoint(path, rawQuery), http.NoBody)
	if err != nil {
		cancel()
		return nil, 0, err
	}
	req.Header = a.sentHeader(kr)
	if len(kr.Body) > 0 {
		req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(kr.Body)), int64(len(kr.Body))
	}
	var wrote atomic.Int32
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteHeaders: func() { wrote.Add(1) },
	}))
	resp, err := a.client.Do(req)
	if n := wrote.Load(); n > 1 {
		a.log.Error("the HTTP transport sent one upstream request twice", "api", a.cfg.Name, "times", n)
	}
	if err != nil {
		cancel()
		return nil, wrote.Load(), err
	}
	resp.Body = cancelOnClose{resp.Body, cancel}
	return resp, wrote.Load(), nil
}

// sentHeader is the header kr is sent with: a copy of its kept header plus
// the credential. The copy is always a header of its own: a kept request
// read back from a store that keeps none (JSON `header,omitempty`) has a
// nil Header, whose Clone is nil too.
func (a *API) sentHeader(kr *fencegate.EffectRequest) http.Header {
	h := make(http.Header, len(kr.Header)+1)
	for k, v := range kr.Header {
		h[k] = slices.Clone(v)
	}
	return a.withCredential(h)
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error { err := c.ReadCloser.Close(); c.cancel(); return err }

// noRetry is the transport of every upstream call. Go's http.Transport
// silently resends a request whose answer was lost on a reused keep-alive
// connection when it counts the request as replayable: a GET, or any method
// carrying an Idempotency-Key or X-Idempotency-Key header, with no body or
// a body it can rewind (net/http, Request.isReplayable). A resend is the
// reconciler's decision alone, so noRetry hands the transport a body it
// cannot rewind (a non-nil Body and no GetBody), which makes no request
// replayable. HTTP/2 then retries only streams the server provably never
// processed.
//
// That does not do for an empty POST, PUT or PATCH (a capture, a confirm):
// a non-nil body of length 0 is one of unknown length to the transport,
// which sends those methods' bodies chunked, without a Content-Length, and
// some front ends refuse that (411) — an answer that would be kept as the
// call's. Such a request goes with http.NoBody (Content-Length: 0) on a
// connection of its own (fresh: keep-alives off), which the transport never
// resends on (it resends only on a reused connection) — when the transport
// is an *http.Transport; through any other it stays as above.
type noRetry struct {
	next  http.RoundTripper
	once  sync.Once
	fresh http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *noRetry) RoundTrip(req *http.Request) (*http.Response, error) {
	next := t.next
	if next == nil {
		next = http.DefaultTransport
	}
	cp := req.Clone(req.Context())
	cp.GetBody = nil
	if cp.Body == nil || cp.Body == http.NoBody {
		switch cp.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch:
			if fresh := t.freshConn(next); fresh != nil {
				cp.Body, cp.ContentLength = http.NoBody, 0
				return fresh.RoundTrip(cp)
			}
		}
		cp.Body, cp.ContentLength = io.NopCloser(strings.NewReader("")), 0
	}
	return next.RoundTrip(cp)
}

// freshConn is next with keep-alives off: a clone of next when it is an
// *http.Transport, nil for any other RoundTripper (a wrapper whose
// connections it cannot keep from being reused: the request then keeps the
// body no transport resends, chunked).
func (t *noRetry) freshConn(next http.RoundTripper) http.RoundTripper {
	t.once.Do(func() {
		if tr, ok := next.(*http.Transport); ok {
			c := tr.Clone()
			c.DisableKeepAlives = true
			t.fresh = c
		}
	})
	return t.fresh
}
