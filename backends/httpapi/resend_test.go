package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/e2e/upstream"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestResentRequestThatFailsToConnectIsUnknownNotUnsent: Go's transport
// resends a request carrying an Idempotency-Key when a reused connection drops
// after the request was written. If the resend cannot connect, the upstream
// may still have applied the first attempt: the outcome is UNKNOWN, never
// "nothing was sent" (which would free the segment for a second payment).
func TestResentRequestThatFailsToConnectIsUnknownNotUnsent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	applied := make(chan struct{}, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		br := bufio.NewReader(conn)
		// First request on the connection: answered, so the connection is reused.
		if req, err := http.ReadRequest(br); err == nil {
			_, _ = io.Copy(io.Discard, req.Body)
			_, _ = conn.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"))
		}
		// Second: read (the upstream applies it), then drop the connection and stop listening.
		if req, err := http.ReadRequest(br); err == nil {
			_, _ = io.Copy(io.Discard, req.Body)
			applied <- struct{}{}
		}
		_ = ln.Close()
		_ = conn.Close()
	}()
	c := validConfig("http://" + ln.Addr().String())
	api, err := New(c, &http.Client{})
	if err != nil {
		t.Fatal(err)
	}
	call := func(seg uint64) (fencegate.Outcome, error) {
		r := fencegate.Receipt{ID: "r", Resource: "payouts/acc_1", OperationRoot: "root", FenceToken: 1, Segment: seg}
		return api.Call("POST", "/v1/accounts/acc_1/payouts", http.Header{}, bytes.NewReader([]byte(payout)), int64(len(payout))).
			Apply(context.Background(), r, "")
	}
	if out, err := call(1); err != nil || out.State != fencegate.ReceiptCommitted {
		t.Fatalf("first call: %+v %v", out, err)
	}
	out, err := call(2)
	<-applied
	if out.State != fencegate.ReceiptUnknown || fencegate.ErrorCode(err) != fencegate.CodeMutationUnknown {
		t.Fatalf("a written-then-dropped request is %s (%v), want UNKNOWN", out.State, err)
	}
}

// TestTransportNeverResendsOnItsOwn: an upstream that reads the second
// request of a keep-alive connection (it applies it) and then drops the
// connection, still listening. Go's http.Transport would resend a request
// carrying Idempotency-Key on a new connection by itself; the gateway's
// transport must not: the upstream sees two requests, not three, and the
// second call is UNKNOWN. Both for a keyed API and a native-fence-only one,
// and for a call without a body (which goes on a connection of its own).
func TestTransportNeverResendsOnItsOwn(t *testing.T) {
	for name, mod := range map[string]func(*APIConfig){
		"idempotency": nil,
		"native fence": func(c *APIConfig) {
			c.Contract = Contract{NativeFence: &NativeFence{Header: "Fence-Token"}}
		},
		"idempotency, bodiless": nil,
	} {
		body := payout
		if strings.HasSuffix(name, "bodiless") { // a capture: POST without a body
			body = ""
		}
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			requests := 0
			upstream := testenv.ServeTCP(t, func(conn net.Conn) {
				br := bufio.NewReader(conn)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					mu.Lock()
					requests++
					n := requests
					mu.Unlock()
					if n == 2 {
						return // applied, then dropped without an answer
					}
					_, _ = conn.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"))
				}
			})
			c := validConfig("http://" + upstream)
			if mod != nil {
				mod(&c)
			}
			api, err := New(c, &http.Client{})
			if err != nil {
				t.Fatal(err)
			}
			call := func(seg uint64) (fencegate.Outcome, error) {
				r := fencegate.Receipt{ID: "r", Resource: "payouts/acc_1", OperationRoot: "root", FenceToken: 1, Segment: seg}
				return api.Call("POST", "/v1/accounts/acc_1/payouts", http.Header{}, bytes.NewReader([]byte(body)), int64(len(body))).
					Apply(context.Background(), r, "")
			}
			if out, err := call(1); err != nil || out.State != fencegate.ReceiptCommitted {
				t.Fatalf("first call: %+v %v", out, err)
			}
			out, err := call(2)
			if out.State != fencegate.ReceiptUnknown || fencegate.ErrorCode(err) != fencegate.CodeMutationUnknown {
				t.Fatalf("a written-then-dropped request is %s (%v), want UNKNOWN", out.State, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if requests != 2 {
				t.Fatalf("upstream received %d requests, want 2: the transport resent on its own", requests)
			}
		})
	}
}

// TestBodilessCallIsSentWithItsLength: a POST, PUT or PATCH without a body
// (a capture, a confirm) goes with Content-Length: 0, not chunked: some
// front ends refuse a body of unknown length (411), and that refusal would
// be kept as the call's answer though the call never ran.
func TestBodilessCallIsSentWithItsLength(t *testing.T) {
	type seen struct {
		length int64
		te     []string
	}
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, seen{r.ContentLength, r.TransferEncoding})
		mu.Unlock()
		if r.ContentLength < 0 {
			w.WriteHeader(http.StatusLengthRequired)
			return
		}
		_, _ = io.WriteString(w, "{}")
	}))
	defer srv.Close()
	c := validConfig(srv.URL)
	for _, m := range []string{"PUT", "PATCH"} {
		c.Routes = append(c.Routes, Route{Method: m, Path: "/v1/accounts/{account}/payouts", Resource: "payouts/{account}"})
	}
	api, err := New(c, &http.Client{})
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range []string{"POST", "PUT", "PATCH"} {
		r := fencegate.Receipt{ID: "r", Resource: "payouts/acc_1", OperationRoot: "root", FenceToken: 1, Segment: uint64(i + 1)}
		out, err := api.Call(m, "/v1/accounts/acc_1/payouts", http.Header{}, nil, 0).Apply(context.Background(), r, "")
		if err != nil || out.State != fencegate.ReceiptCommitted || out.Response == nil || out.Response.Status != http.StatusOK {
			t.Fatalf("bodiless %s: %+v %v", m, out, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, s := range got {
		if s.length != 0 || len(s.te) != 0 {
			t.Fatalf("request %d went with Content-Length %d, Transfer-Encoding %v; want a length of 0", i, s.length, s.te)
		}
	}
}

// wrapped is a RoundTripper over another (a tracing or mTLS wrapper), which
// noRetry cannot open fresh connections through.
type wrapped struct{ next http.RoundTripper }

func (w wrapped) RoundTrip(r *http.Request) (*http.Response, error) { return w.next.RoundTrip(r) }

// TestBodilessCallThroughAWrappedTransportIsNotResentEither: through a
// transport that is not an *http.Transport, a bodiless POST carrying an
// Idempotency-Key keeps a body no transport resends (it cannot be given a
// connection of its own there): an upstream that applies it and drops the
// reused connection sees it once, and the call is UNKNOWN.
func TestBodilessCallThroughAWrappedTransportIsNotResentEither(t *testing.T) {
	var mu sync.Mutex
	posts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		posts++
		n := posts
		mu.Unlock()
		if n == 2 { // the capture: applied, its answer lost with the connection
			c, _, _ := http.NewResponseController(w).Hijack()
			c.Close()
			return
		}
		_, _ = io.WriteString(w, "{}")
	}))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	api, err := New(validConfig(srv.URL), &http.Client{Transport: wrapped{tr}})
	if err != nil {
		t.Fatal(err)
	}
	call := func(seg uint64, body string) (fencegate.Outcome, error) {
		r := fencegate.Receipt{ID: "r", Resource: "payouts/acc_1", OperationRoot: "root", FenceToken: 1, Segment: seg}
		return api.Call("POST", "/v1/accounts/acc_1/payouts", http.Header{}, bytes.NewReader([]byte(body)), int64(len(body))).
			Apply(context.Background(), r, "")
	}
	if out, err := call(1, payout); err != nil || out.State != fencegate.ReceiptCommitted {
		t.Fatalf("first call (warms the connection): %+v %v", out, err)
	}
	out, err := call(2, "")
	if out.State != fencegate.ReceiptUnknown {
		t.Fatalf("a bodiless call applied and dropped: %s (%v), want UNKNOWN", out.State, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if posts != 2 {
		t.Fatalf("the upstream got %d requests, want 2: the transport resent the bodiless call on its own", posts)
	}
}

// TestAStoredRequestWithoutHeadersIsResentWithTheCredential: an API taking
// its key in a body field (the Square preset) keeps no header for a worker
// that sends no Content-Type, and the stores keep the request as JSON
// (`header,omitempty`), so the receipt read back for a resend has a nil
// Header. The resend goes out with the credential and settles the receipt;
// it never panics (in the reconciler that took the process down, and again
// after every restart).
func TestAStoredRequestWithoutHeadersIsResentWithTheCredential(t *testing.T) {
	h := newHarness(t, upstream.Options{KeyField: "idempotency_key", MaxKeyLength: 45}, func(c *APIConfig) {
		c.Key = Key{BodyField: "/idempotency_key", MaxLength: 45}
	})
	h.pay.Inject(upstream.DropResponse)
	r := lostCall(t, h.api, h.clock(), "/v1/accounts/acc_1/payouts", http.Header{}, payout)
	b, err := json.Marshal(r.Request)
	if err != nil {
		t.Fatal(err)
	}
	r.Request = new(fencegate.EffectRequest)
	if err := json.Unmarshal(b, r.Request); err != nil || r.Request.Header != nil {
		t.Fatalf("read back from the store: header %v, %v", r.Request.Header, err)
	}
	defer func() {
		if v := recover(); v != nil {
			t.Fatalf("the resend of a request kept without headers panicked: %v", v)
		}
	}()
	if err := h.resolve(t, &r); err != nil || r.State != fencegate.ReceiptCommitted {
		t.Fatalf("resend: %s (%s), %v", r.State, r.Error, err)
	}
	h.paidOnce(t, &r, 1)
	if n := h.pay.Unauthorized(); n != 0 {
		t.Fatalf("%d requests went without the credential", n)
	}
}

// Rule: a claimed resend counts as open for as long as its attempt may
// run, beside the replicas' clock skew: the send timeout, and twice it on a
// conflict-fetch route, whose conflict answer is followed by a fetch of its
// own timeout. An operator's verdict (gateway.Reconciler.MayBeResending)
// and another replica's claim wait for it; one beside the fetch could
// record NOT_APPLIED for a payment the fetch then proves.
func TestAResendIsOpenForAsLongAsItsAttemptMayRun(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, conflictFetch := range []bool{false, true} {
		c := validConfig("http://127.0.0.1:9")
		c.Timeout = 10 * time.Second
		open := c.Timeout
		if conflictFetch {
			c.Settle = Settle{Strategy: StrategyConflictFetch, Conflict: &ConflictFetch{
				Match: Match{Status: "409"}, ID: "/id", URL: "/v1/payouts/{id}"}}
			open *= 2
		}
		at := now
		api, err := New(c, &http.Client{}, WithClock(func() time.Time { return at }))
		if err != nil {
			t.Fatal(err)
		}
		claimed := now.Add(-time.Minute)
		r := fencegate.Receipt{ID: "r1", Target: fencegate.APITarget("payouts", "/v1/accounts/acc_1/payouts"), Method: "POST",
			State: fencegate.ReceiptUnknown, CreatedAt: claimed.Add(-time.Second), SettledAt: &claimed, Resend: true, Attempts: 1,
			Request: &fencegate.EffectRequest{Method: "POST", Path: "/v1/accounts/acc_1/payouts"}}
		for _, c := range []struct {
			after time.Duration
			want  bool
		}{{open - time.Millisecond, true}, {open + fencegate.MaxClockSkew - time.Millisecond, true}, {open + fencegate.MaxClockSkew, false}} {
			at = claimed.Add(c.after)
			if got := api.MayBeSending(r); got != c.want {
				t.Errorf("conflict-fetch %v, %s after the claim: open %v, want %v", conflictFetch, c.after, got, c.want)
			}
		}
	}
}
