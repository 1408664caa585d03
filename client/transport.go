package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/domain"
)

// Transport is an http.RoundTripper that lets an unmodified SDK of a fronted
// API (stripe-go, for example) call that API through the gateway under a
// lease. Put it in the SDK's *http.Client; the SDK's base URL may stay the
// API's own, since only the path and query are used:
//
//   - Base URL rewrite: METHOD https://api.example.com/PATH?Q goes to the
//     gateway as METHOD /v1/apis/{API}/PATH (the query only on reads). The
//     SDK's Authorization (its secret, if any) is replaced by the workload
//     credential: the gateway injects the real upstream credential.
//   - Reads (GET) go to the API's declared read routes, unfenced; the
//     upstream's answer is returned as it is.
//   - Writes carry the lease's grant, a fresh status proof and a segment. The
//     SDK's idempotency key (KeyHeader) is sent as Fence-Effect-Key and kept in
//     the receipt, and one key always maps to one segment: a retry by the SDK
//     under the same key replays that segment (the gateway answers the stored
//     answer, or settles the segment, and never makes a second effect). After
//     a restart the mapping is recovered from the receipt ledger by operation
//     ID: a key an earlier process (or an earlier owner of the operation)
//     committed answers its stored upstream answer without any send; one still
//     unsettled under an earlier fence is MUTATION_UNKNOWN, never resent under
//     a new fence and key.
//   - Refusals of the gateway (any problem with a Fencegate code, lease not
//     HELD, ...) are returned as errors, *domain.Error with its code (or
//     *UncertainError), which the SDK reports as the call's error; errors.As
//     finds them through the SDK's and net/http's wrapping. An SDK that
//     retries errors retries under the same key: a replay, never a new effect.
type Transport struct {
	// Lease fences the writes; its client (base URL, workload credential,
	// HTTP client) carries every request.
	Lease *Lease
	// API is the fronted API's name in the gateway's configuration.
	API string
	// KeyHeader is where the SDK puts its idempotency key (default
	// Idempotency-Key). Writes without one are identified by method, path and
	// body digest instead, like APIWriter.Call.
	KeyHeader string
}

var _ http.RoundTripper = (*Transport)(nil)

// maxSDKBody bounds a write body the transport buffers (it is rewound for
// replays and digested for identity).
const maxSDKBody = 16 << 20

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		defer req.Body.Close()
	}
	if t.Lease == nil || t.API == "" {
		return nil, domain.Errorf(domain.CodeInvalidRequest, "client.Transport needs a Lease and an API name")
	}
	switch {
	case req.Method == http.MethodGet:
		return t.read(req)
	case domain.IsFencedAPIMethod(req.Method):
		return t.write(req)
	}
	return nil, domain.Errorf(domain.CodeInvalidRequest, "%s is neither a read (GET) nor a fenced write", req.Method)
}

// sdkHeader is the SDK's header without what the gateway or the transport
// owns: its credential, the fence headers, the key (sent as Fence-Effect-Key).
func (t *Transport) sdkHeader(req *http.Request) http.Header {
	h := req.Header.Clone()
	for name := range h {
		if strings.HasPrefix(http.CanonicalHeaderKey(name), "Fence-") {
			delete(h, name)
		}
	}
	h.Del("Authorization")
	h.Del(t.keyHeader())
	return h
}

func (t *Transport) keyHeader() string {
	if t.KeyHeader == "" {
		return "Idempotency-Key"
	}
	return t.KeyHeader
}

// read passes a GET to the gateway's read route and returns its answer;
// a Fencegate problem is an error.
func (t *Transport) read(req *http.Request) (*http.Response, error) {
	c := t.Lease.c
	resp, err := c.send(req.Context(), request{op: "read " + t.API, method: http.MethodGet,
		path: apiPath(t.API, req.URL.Path), rawQuery: req.URL.RawQuery, header: t.sdkHeader(req)})
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(strings.ToLower(resp.Header.Get("Content-Type")), "application/problem+json") {
		b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		resp.Body.Close()
		if fe := gatewayProblem(resp.Header.Get("Content-Type"), b); fe != nil {
			return nil, fe
		}
		if rerr != nil {
			return nil, &UncertainError{Op: "read " + t.API, Err: rerr}
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
	}
	resp.Request = req
	return resp, nil
}

// write sends a fenced write under the SDK's key and answers the upstream's
// answer as the receipt keeps it.
func (t *Transport) write(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(io.LimitReader(req.Body, maxSDKBody+1))
		if err != nil {
			return nil, domain.Wrap(err, domain.CodeInvalidRequest, "read the SDK's request body")
		}
		if len(b) > maxSDKBody {
			return nil, domain.Errorf(domain.CodeInvalidRequest, "request body over %d bytes", maxSDKBody)
		}
		body = b
	}
	path := req.URL.Path
	if req.URL.RawQuery != "" {
		return nil, domain.Errorf(domain.CodeInvalidRequest, "fenced writes carry no query string; the SDK sent %q", req.URL.RawQuery)
	}
	key := strings.TrimSpace(req.Header.Get(t.keyHeader()))
	if err := domain.CheckEffectKey(key); err != nil {
		return nil, err
	}
	header := t.sdkHeader(req)
	sum := sha256.Sum256(body)
	send := func(ctx context.Context, f Fence) (outcome, error) {
		f.EffectKey = key
		r, err := t.Lease.c.callAPI(ctx, t.API, req.Method, path, f, header, body)
		return outcome{api: r}, err
	}
	e := newEffect(req.Method, domain.APITarget(t.API, path), hex.EncodeToString(sum[:]), send)
	var (
		o   outcome
		err error
	)
	if key == "" {
		o, err = t.Lease.commit(req.Context(), e)
	} else {
		o, err = t.Lease.commitKeyed(req.Context(), key, &e)
	}
	if err != nil {
		return nil, err
	}
	return httpResponse(req, o.api), nil
}

// httpResponse is the SDK's view of an upstream answer kept by the gateway.
func httpResponse(req *http.Request, a *APIResponse) *http.Response {
	h := a.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Set("Fence-Receipt", a.Receipt)
	if a.Replay {
		h.Set("Fence-Replay", "true")
	}
	h.Set("Content-Length", strconv.Itoa(len(a.Body)))
	status := a.Status
	if status == 0 { // resolved by an operator without an upstream answer
		status = http.StatusOK
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h,
		Body: io.NopCloser(bytes.NewReader(a.Body)), ContentLength: int64(len(a.Body)), Request: req,
	}
}
