package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/domain"
)

// fakeClock is the injected clock: it moves only when a test advances it.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *fakeClock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// fakeGateway answers like the gateway and registry for one lease (L1, fence
// 7), records what it saw, and can lose answers or answer problems on demand.
type fakeGateway struct {
	t     *testing.T
	clock *fakeClock

	mu         sync.Mutex
	calls      map[string]int           // route -> requests seen
	drop       map[string]int           // route -> answers still to lose (connection closed after acting)
	problems   map[string][]domain.Code // route -> problems to answer next, in order
	requestIDs []string
	writes     []http.Header // fence headers of every fenced mutation
	state      domain.StatusState
	expires    time.Time
	proofs     int
	receipts   []domain.Receipt
	// unlisted are receipts the listing leaves out that a lookup by ID
	// (GET /v1/receipts/{id}) finds, as one the answer named may be.
	unlisted []domain.Receipt
	// gate, if set for a route, holds its answer: the handler signals entered
	// and waits for release.
	gate map[string]*gate
}

type gate struct{ entered, release chan struct{} }

func (f *fakeGateway) hold(route string) *gate {
	g := &gate{entered: make(chan struct{}), release: make(chan struct{})}
	f.mu.Lock()
	f.gate = map[string]*gate{route: g}
	f.mu.Unlock()
	return g
}

const statusLife = 5 * time.Second

// deadlineCtx is a context whose deadline the test passes by hand (expire):
// Done closes and Err is context.DeadlineExceeded, as for a timeout, with no
// real time waited.
type deadlineCtx struct {
	context.Context
	done chan struct{}
	once sync.Once
}

func newDeadlineCtx() *deadlineCtx {
	return &deadlineCtx{Context: context.Background(), done: make(chan struct{})}
}

func (c *deadlineCtx) Done() <-chan struct{} { return c.done }

func (c *deadlineCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

func (c *deadlineCtx) expire() { c.once.Do(func() { close(c.done) }) }

func newFake(t *testing.T) (*fakeGateway, *Client) {
	return newFakeWith(t, WithSleep(noSleep))
}

// newFakeWith is newFake with the client's options (its clock is the
// fake's) given by opts.
func newFakeWith(t *testing.T, opts ...Option) (*fakeGateway, *Client) {
	f := newFakeGateway(t)
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c := New(srv.URL, "tok", append([]Option{WithClock(f.clock.Now)}, opts...)...)
	return f, c
}

func newFakeGateway(t *testing.T) *fakeGateway {
	return &fakeGateway{t: t, clock: &fakeClock{t: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)},
		calls: map[string]int{}, drop: map[string]int{}, problems: map[string][]domain.Code{}, state: domain.StateHeld}
}

// newInProcessFake is newFake without a network: the client's requests are
// served by the fake in the sending goroutine (inProcess), so that inside a
// synctest bubble a request the fake holds (hold) is durably blocked and
// synctest.Wait can tell when everything else has stopped. Answers cannot
// be lost (loseNext needs a connection).
func newInProcessFake(t *testing.T) (*fakeGateway, *Client) {
	f := newFakeGateway(t)
	c := New("http://fake.invalid", "tok", WithClock(f.clock.Now), WithSleep(noSleep),
		WithHTTPClient(&http.Client{Transport: inProcess{f}}))
	return f, c
}

// inProcess is a transport that serves each request with h in the calling
// goroutine.
type inProcess struct{ h http.Handler }

func (p inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	p.h.ServeHTTP(rec, r)
	if r.Body != nil {
		_ = r.Body.Close()
	}
	return rec.Result(), nil
}

func (f *fakeGateway) count(route string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[route]
}

func (f *fakeGateway) loseNext(route string) { f.mu.Lock(); f.drop[route]++; f.mu.Unlock() }

// shadowCode+CODE, queued by refuseNext for "write", answers the write as
// a gateway in shadow mode answers one it refused with CODE and forwarded.
const shadowCode = "shadow:"

func (f *fakeGateway) refuseNext(route string, code domain.Code) {
	f.mu.Lock()
	f.problems[route] = append(f.problems[route], code)
	f.mu.Unlock()
}

func route(r *http.Request) string {
	p := r.URL.Path
	switch {
	case p == "/v1/leases":
		return "acquire"
	case strings.HasSuffix(p, "/renew"):
		return "renew"
	case strings.HasPrefix(p, "/v1/leases/") && strings.HasSuffix(p, "/delegations") && r.Method == "POST":
		return "delegate"
	case strings.HasPrefix(p, "/v1/leases/") && r.Method == "GET":
		return "status"
	case strings.HasPrefix(p, "/v1/leases/"):
		return "release"
	case strings.HasPrefix(p, "/v1/objects/") && r.Method == "GET":
		return "get"
	case strings.HasPrefix(p, "/v1/apis/") && r.Method == "GET":
		return "read"
	case strings.HasPrefix(p, "/v1/objects/"), strings.HasPrefix(p, "/v1/apis/"):
		return "write"
	case strings.HasPrefix(p, "/v1/receipts"):
		return "receipts"
	case strings.HasPrefix(p, "/v1/delegations/") && strings.HasSuffix(p, "/status"):
		return "dstatus"
	}
	return r.Method + " " + p
}

func (f *fakeGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer tok" {
		writeProblem(w, domain.CodeUnauthenticated, "")
		return
	}
	rt := route(r)
	f.mu.Lock()
	f.calls[rt]++
	if g := f.gate[rt]; g != nil {
		delete(f.gate, rt)
		f.mu.Unlock()
		close(g.entered)
		<-g.release
		f.mu.Lock()
	}
	var code domain.Code
	if q := f.problems[rt]; len(q) > 0 {
		code, f.problems[rt] = q[0], q[1:]
	}
	lose := f.drop[rt] > 0
	if lose {
		f.drop[rt]--
	}
	status, body := f.act(rt, r, code)
	rc, isReceipt := body.(domain.Receipt)
	shadow := isReceipt && strings.HasPrefix(rc.ID, "shadow_")
	replay := isReceipt && rt == "write" && rc.ID != fmt.Sprintf("R%d", len(f.writes)) && !shadow
	f.mu.Unlock()
	if lose { // acted, but the answer never arrives
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	if p, ok := body.(*domain.Error); ok {
		writeProblemErr(w, p)
		return
	}
	if rid, ok := body.(domain.Receipt); ok {
		w.Header().Set("Fence-Receipt", rid.ID)
		if replay {
			w.Header().Set("Fence-Replay", "true")
		}
		if shadow {
			w.Header().Set("Fence-Mode", "shadow")
			w.Header().Set("Fence-Verdict", rc.Error)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// act performs the route on the fake's state; f.mu is held.
func (f *fakeGateway) act(rt string, r *http.Request, code domain.Code) (int, any) {
	now := f.clock.Now()
	switch rt {
	case "acquire":
		var b domain.LeaseRequest
		_ = json.NewDecoder(r.Body).Decode(&b)
		f.requestIDs = append(f.requestIDs, b.RequestID)
		if code != "" {
			return 0, &domain.Error{Code: code, Message: "refused"}
		}
		if f.expires.IsZero() {
			f.expires = now.Add(time.Duration(b.TTLMs) * time.Millisecond)
		}
		info := f.info(now, b.RequestID)
		if b.S3Credentials {
			info.S3Credentials = &domain.S3AccessKeys{AccessKeyID: "FGLL1", SecretAccessKey: "secret-L1"}
		}
		return http.StatusCreated, info
	case "renew":
		var b domain.RenewRequest
		_ = json.NewDecoder(r.Body).Decode(&b)
		if code != "" {
			return 0, &domain.Error{Code: code, Message: "refused"}
		}
		f.expires = now.Add(time.Duration(b.TTLMs) * time.Millisecond)
		return http.StatusOK, f.info(now, "")
	case "status":
		if code != "" {
			return 0, &domain.Error{Code: code, Message: "refused"}
		}
		return http.StatusOK, f.info(now, "")
	case "release":
		f.state = domain.StateReleased
		return http.StatusOK, f.info(now, "")
	case "receipts": // refuseNext("receipts") fails the next listing or lookup, refuseNext("receipt") the next lookup
		if id, ok := strings.CutPrefix(r.URL.Path, "/v1/receipts/"); ok { // one receipt, as GET /v1/receipts/{id}
			if q := f.problems["receipt"]; code == "" && len(q) > 0 {
				code, f.problems["receipt"] = q[0], q[1:]
			}
			if code != "" {
				return 0, &domain.Error{Code: code, Message: "refused"}
			}
			for _, rc := range slices.Concat(f.receipts, f.unlisted) {
				if rc.ID == id {
					return http.StatusOK, rc
				}
			}
			return 0, &domain.Error{Code: domain.CodeNotFound, Message: "no such receipt"}
		}
		if code != "" {
			return 0, &domain.Error{Code: code, Message: "refused"}
		}
		return http.StatusOK, map[string]any{"receipts": f.receipts}
	case "delegate": // mints what was asked, as the registry does for the lease's owner
		var b domain.DelegationRequest
		_ = json.NewDecoder(r.Body).Decode(&b)
		return http.StatusOK, domain.DelegationAnswer{ID: "dlg-1", Delegation: "delegation-token",
			Claims: domain.Delegation{Delegate: b.Delegate, SegmentFrom: b.SegmentFrom, SegmentTo: b.SegmentTo, Segments: b.Segments}}
	case "dstatus":
		if code != "" {
			return 0, &domain.Error{Code: code, Message: "refused"}
		}
		f.proofs++
		return http.StatusOK, domain.DelegationStatusAnswer{StatusProof: fmt.Sprintf("dproof-%d", f.proofs),
			State: f.state, StatusExpiresAt: now.Add(statusLife)}
	case "read":
		return http.StatusOK, map[string]string{"query": r.URL.RawQuery, "auth": r.Header.Get("Authorization")}
	case "write":
		f.writes = append(f.writes, r.Header.Clone())
		seg, _ := strconv.ParseUint(r.Header.Get("Fence-Segment"), 10, 64)
		key := r.Header.Get("Fence-Effect-Key")
		for _, old := range f.receipts { // a replay of a committed segment answers its receipt
			if old.Lease == "L1" && old.FenceToken == 7 && old.Segment == seg && old.State == domain.ReceiptCommitted && code == "" {
				if old.EffectKey != key {
					return 0, &domain.Error{Code: domain.CodeQuarantined, Message: "another effect key", ReceiptID: old.ID}
				}
				return http.StatusOK, old
			}
		}
		rc := domain.Receipt{ID: fmt.Sprintf("R%d", len(f.writes)), Lease: "L1", FenceToken: 7, Segment: seg, EffectKey: key,
			OperationID: "op-1", State: domain.ReceiptCommitted, Method: r.Method,
			Target: strings.TrimPrefix(r.URL.Path, "/v1/"), PayloadDigest: payloadDigest(r)} // as the gateway records them
		if verdict, ok := strings.CutPrefix(string(code), shadowCode); ok {
			// Shadow mode: refused, forwarded anyway, answered with an
			// unstored receipt (gateway/shadow.go); nothing admitted.
			rc.ID = fmt.Sprintf("shadow_%d", len(f.writes))
			rc.Error = verdict
			return http.StatusOK, rc
		}
		switch code {
		case "":
		case domain.CodeMutationUnknown:
			rc.State = domain.ReceiptUnknown
			f.receipts = append(f.receipts, rc)
			return 0, &domain.Error{Code: code, Message: "outcome unknown", ReceiptID: rc.ID}
		case domain.CodeInternal: // a fault after the effect was forwarded and settled
			f.receipts = append(f.receipts, rc)
			return 0, &domain.Error{Code: code, Message: "panic after the effect"}
		default:
			return 0, &domain.Error{Code: code, Message: "refused"}
		}
		f.receipts = append(f.receipts, rc)
		return http.StatusOK, rc
	}
	return 0, &domain.Error{Code: domain.CodeNotFound, Message: "no route " + rt}
}

// settle moves receipt id to state, as the reconciler would.
func (f *fakeGateway) settle(id string, state domain.ReceiptState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.receipts {
		if f.receipts[i].ID == id {
			f.receipts[i].State = state
		}
	}
}

func (f *fakeGateway) info(now time.Time, requestID string) LeaseInfo {
	f.proofs++
	st := f.state
	if st == domain.StateHeld && !now.Before(f.expires) {
		st = domain.StateExpired
	}
	exp := now.Add(statusLife)
	return LeaseInfo{Lease: "L1", Resource: "bucket/jobs", Owner: "worker", RequestID: requestID, FenceToken: 7,
		OperationID: "op-1", State: st, ExpiresAt: f.expires, Grant: "grant-7", GrantDigest: "sha256:g7",
		StatusProof: fmt.Sprintf("proof-%d", f.proofs), StatusExpiresAt: &exp}
}

func writeProblem(w http.ResponseWriter, code domain.Code, receipt string) {
	writeProblemErr(w, &domain.Error{Code: code, Message: "refused", ReceiptID: receipt})
}

func writeProblemErr(w http.ResponseWriter, e *domain.Error) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(statusOf(e.Code))
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type": problemTypePrefix + strings.ToLower(string(e.Code)), "title": "x", "status": statusOf(e.Code),
		"detail": e.Message, "code": e.Code, "receiptId": e.ReceiptID,
	})
}

func statusOf(c domain.Code) int {
	switch c {
	case domain.CodeMutationUnknown:
		return http.StatusBadGateway
	case domain.CodeUnauthenticated, domain.CodeEpochRevoked, domain.CodeStatusInvalid:
		return http.StatusUnauthorized
	case domain.CodeNotFound:
		return http.StatusNotFound
	case domain.CodeInternal:
		return http.StatusInternalServerError
	case domain.CodeBackendUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusConflict
}

// payloadDigest is the gateway's payload digest of r's body: "sha256:<hex>".
func payloadDigest(r *http.Request) string {
	b, _ := io.ReadAll(r.Body)
	return "sha256:" + hexDigest(string(b))
}

// hexDigest is the hex SHA-256 of s.
func hexDigest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
