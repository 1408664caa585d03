package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/e2e/upstream"
)

const secret = "Bearer sk_upstream"

// harness is an API in front of a Payments fake whose received headers are recorded.
type harness struct {
	pay  *upstream.Payments
	srv  *httptest.Server
	api  *API
	now  time.Time
	mu   sync.Mutex
	seen []http.Header
}

func newHarness(t *testing.T, opt upstream.Options, mod func(*APIConfig)) *harness {
	t.Helper()
	t.Setenv("FG_TEST_UPSTREAM_TOKEN", "sk_upstream")
	h := &harness{now: time.Unix(1_700_000_000, 0)}
	opt.Credential = secret
	if opt.Now == nil {
		opt.Now = h.clock
	}
	h.pay = upstream.New(opt)
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.seen = append(h.seen, r.Header.Clone())
		h.mu.Unlock()
		h.pay.ServeHTTP(w, r)
	}))
	t.Cleanup(h.srv.Close)
	c := validConfig(h.srv.URL)
	c.Credentials = &Credentials{Prefix: "Bearer ", Env: "FG_TEST_UPSTREAM_TOKEN"}
	c.KeepResponseHeaders = []string{"Request-Id"}
	if mod != nil {
		mod(&c)
	}
	// No keep-alive: Go's transport would itself resend (with the same key) a
	// request whose answer was lost on a reused connection, hiding the fault.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var err error
	h.api, err = New(c, client, WithClock(h.clock))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// clock is the harness time, shared by the API and the upstream.
func (h *harness) clock() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now
}

func (h *harness) advance(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.now = h.now.Add(d)
}

func (h *harness) receipt(fence, seg uint64) fencegate.Receipt {
	return fencegate.Receipt{ID: "rcpt_" + strconv.FormatUint(fence, 10) + "_" + strconv.FormatUint(seg, 10),
		Resource: "payouts/acc_1", OperationRoot: "root-1", FenceToken: fence, Segment: seg, CreatedAt: h.clock()}
}

func (h *harness) call(r fencegate.Receipt, header http.Header, body string) (fencegate.Outcome, error) {
	if header == nil {
		header = http.Header{"Content-Type": {"application/json"}}
	}
	c := h.api.Call("POST", "/v1/accounts/acc_1/payouts", header, bytes.NewReader([]byte(body)), int64(len(body)))
	return c.Apply(context.Background(), r, "")
}

const payout = `{"amount":500,"currency":"eur"}`

func TestAnsweredCallIsCommittedWithTheKeptAnswer(t *testing.T) {
	h := newHarness(t, upstream.Options{}, nil)
	r := h.receipt(1, 1)
	out, err := h.call(r, nil, payout)
	if err != nil || out.State != fencegate.ReceiptCommitted {
		t.Fatalf("outcome %+v, err %v", out, err)
	}
	var po upstream.Payout
	if err := json.Unmarshal(out.Response.Body, &po); err != nil || out.Response.Status != 200 {
		t.Fatalf("answer %d %q: %v", out.Response.Status, out.Response.Body, err)
	}
	if out.Response.Header["Request-Id"] != "req_"+po.ID || out.Response.Header["Content-Type"] != "application/json" {
		t.Fatalf("kept headers = %v", out.Response.Header)
	}
	if h.pay.Effects() != 1 || po.IdempotencyKey != IdempotencyKey(r) {
		t.Fatalf("effects %d, key %q", h.pay.Effects(), po.IdempotencyKey)
	}
}

func TestRetriesOfOneSegmentSendTheSameKeyAndPayOnce(t *testing.T) {
	h := newHarness(t, upstream.Options{}, nil)
	r := h.receipt(3, 1)
	first, _ := h.call(r, nil, payout)
	r.ID = "rcpt_retry" // a retried attempt of the same segment
	second, err := h.call(r, nil, payout)
	if err != nil || second.State != fencegate.ReceiptCommitted || !bytes.Equal(first.Response.Body, second.Response.Body) {
		t.Fatalf("second attempt: %+v %v", second, err)
	}
	if h.pay.Effects() != 1 {
		t.Fatalf("upstream effects = %d, want 1", h.pay.Effects())
	}
	if k1, k2 := h.seen[0].Get("Idempotency-Key"), h.seen[1].Get("Idempotency-Key"); k1 != k2 || k1 != IdempotencyKey(r) {
		t.Fatalf("keys differ across retries: %q %q", k1, k2)
	}
}

func TestWorkerCredentialAndFenceHeadersNeverReachUpstream(t *testing.T) {
	h := newHarness(t, upstream.Options{}, func(c *APIConfig) { c.ForwardHeaders = []string{"X-Trace"} })
	hd := http.Header{
		"Authorization":   {"Bearer worker-token"},
		"Cookie":          {"session=1"},
		"Fence-Grant":     {"grant"},
		"Fence-Status":    {"status"},
		"Fence-Segment":   {"1"},
		"Idempotency-Key": {"chosen-by-worker"},
		"Connection":      {"X-Hop"},
		"X-Hop":           {"1"},
		"Content-Type":    {"application/json"},
		"X-Trace":         {"abc"},
		"X-Undeclared":    {"x"},
	}
	r := h.receipt(1, 1)
	if out, err := h.call(r, hd, payout); err != nil || out.State != fencegate.ReceiptCommitted {
		t.Fatalf("outcome %+v, err %v", out, err)
	}
	got := h.seen[0]
	if got.Get("Authorization") != secret || h.pay.LeakedAuthorization() != 0 || h.pay.Unauthorized() != 0 {
		t.Fatalf("upstream saw Authorization %q (leaked %d)", got.Get("Authorization"), h.pay.LeakedAuthorization())
	}
	for _, name := range []string{"Cookie", "Fence-Grant", "Fence-Status", "Fence-Segment", "X-Hop", "X-Undeclared"} {
		if got.Get(name) != "" {
			t.Errorf("upstream saw %s: %q", name, got.Get(name))
		}
	}
	if got.Get("Idempotency-Key") != IdempotencyKey(r) || got.Get("X-Trace") != "abc" {
		t.Fatalf("upstream headers = %v", got)
	}
}

func TestServerErrorAndTimeoutAreUnknown(t *testing.T) {
	h := newHarness(t, upstream.Options{}, func(c *APIConfig) { c.Timeout = 200 * time.Millisecond })
	h.pay.Inject(upstream.ServerError, upstream.Hang)
	// A plain 500 is unknown and not resent (a 500 may follow partial work,
	// and Stripe replays saved 500s); a timeout is resent under the key.
	if out, err := h.call(h.receipt(1, 1), nil, payout); out.State != fencegate.ReceiptUnknown || out.Resend || fencegate.ErrorCode(err) != fencegate.CodeMutationUnknown {
		t.Fatalf("5xx: %+v %v", out, err)
	}
	if out, err := h.call(h.receipt(1, 2), nil, payout); out.State != fencegate.ReceiptUnknown || !out.Resend || fencegate.ErrorCode(err) != fencegate.CodeMutationUnknown {
		t.Fatalf("timeout: %+v %v", out, err)
	}
	if h.pay.Effects() != 1 {
		t.Fatalf("effects = %d, want 1 (the hung call paid)", h.pay.Effects())
	}
}

func TestUnreachableUpstreamIsFailedBackendUnavailable(t *testing.T) {
	h := newHarness(t, upstream.Options{}, nil)
	h.srv.Close()
	out, err := h.call(h.receipt(1, 1), nil, payout)
	if out.State != fencegate.ReceiptFailed || fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("outcome %+v, err %v", out, err)
	}
	if h.pay.Requests() != 0 {
		t.Fatalf("requests = %d", h.pay.Requests())
	}
}

func TestNativeFenceUpstreamRejectsLowerFence(t *testing.T) {
	h := newHarness(t, upstream.Options{FenceHeader: "Fence-Token"}, func(c *APIConfig) {
		c.Contract = Contract{NativeFence: &NativeFence{Header: "Fence-Token"}}
	})
	hd := http.Header{"Fence-Token": {"99"}, "Content-Type": {"application/json"}}
	if out, err := h.call(h.receipt(2, 1), hd, payout); err != nil || out.Response.Status != 200 {
		t.Fatalf("fence 2: %+v %v", out, err)
	}
	if got := h.seen[0]; got.Get("Fence-Token") != "2" || got.Get("Fence-Segment") != "1" {
		t.Fatalf("fence headers sent: %v", got)
	}
	// A native-fence-only API is sent no idempotency key: Go's transport
	// counts a request carrying one as safe to resend on its own.
	if k := h.seen[0].Get("Idempotency-Key"); k != "" {
		t.Fatalf("a native-fence-only API was sent Idempotency-Key %q", k)
	}
	out, err := h.call(h.receipt(1, 2), nil, payout)
	if err != nil || out.State != fencegate.ReceiptCommitted || out.Response.Status != http.StatusConflict {
		t.Fatalf("fence 1: %+v %v", out, err)
	}
	if h.pay.Effects() != 1 || h.pay.StaleFences() != 1 {
		t.Fatalf("effects %d, stale %d", h.pay.Effects(), h.pay.StaleFences())
	}
}

func TestAnswerBeyondLimitIsTruncatedAndMarked(t *testing.T) {
	h := newHarness(t, upstream.Options{}, func(c *APIConfig) { c.MaxResponseBytes = 10 })
	out, err := h.call(h.receipt(1, 1), nil, payout)
	if err != nil || len(out.Response.Body) != 10 || out.Response.Header[TruncatedHeader] != "true" {
		t.Fatalf("outcome %+v %v", out, err)
	}
}

func TestWorkerAuthorizationIsStrippedWhenCredentialUsesAnotherHeader(t *testing.T) {
	h := newHarness(t, upstream.Options{CredentialHeader: "X-Api-Key"}, func(c *APIConfig) {
		c.Credentials.Header = "X-Api-Key"
	})
	hd := http.Header{"Authorization": {"Bearer worker-token"}, "Content-Type": {"application/json"}}
	if out, err := h.call(h.receipt(1, 1), hd, payout); err != nil || out.Response.Status != 200 {
		t.Fatalf("outcome %+v %v", out, err)
	}
	if h.pay.LeakedAuthorization() != 0 || h.seen[0].Get("X-Api-Key") != secret {
		t.Fatalf("upstream headers %v", h.seen[0])
	}
}
