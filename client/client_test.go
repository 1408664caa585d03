package client

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/domain"
)

func TestGatewayProblemsAreFencegateErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeProblemErr(w, &domain.Error{Code: domain.CodeQuarantined, Message: "different payload", ReceiptID: "R9"})
	}))
	defer srv.Close()
	_, err := New(srv.URL, "tok").PutObject(context.Background(), "b", "k", Fence{Grant: "g", Segment: 1}, nil, "")
	var fe *domain.Error
	if !errors.As(err, &fe) || fe.Code != domain.CodeQuarantined || fe.Message != "different payload" || fe.ReceiptID != "R9" {
		t.Fatalf("err %#v", err)
	}
	if IsUncertain(err) {
		t.Fatal("a gateway answer is not uncertain")
	}
}

func TestTransportFailuresAndForeign5xxAreUncertain(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad gateway", http.StatusBadGateway) // a proxy, not Fencegate
	}))
	_, err := New(srv.URL, "tok").Renew(context.Background(), "L1", ttl)
	if !IsUncertain(err) {
		t.Fatalf("foreign 502: %v", err)
	}
	srv.Close()
	if _, err := New(srv.URL, "tok").Renew(context.Background(), "L1", ttl); !IsUncertain(err) {
		t.Fatalf("closed server: %v", err)
	}
}

func TestUpstreamAnswersAreNotGatewayErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/apis/payments/charges/1" || r.Header.Get("Fence-Segment") != "3" {
			t.Errorf("path %s segment %s", r.URL.Path, r.Header.Get("Fence-Segment"))
		}
		w.Header().Set("Fence-Receipt", "R3")
		w.Header().Set("Content-Type", "application/problem+json") // the upstream's own problem
		w.WriteHeader(http.StatusPaymentRequired)
		_, _ = io.WriteString(w, `{"type":"https://payments.example/declined","code":"DECLINED"}`)
	}))
	defer srv.Close()
	resp, err := New(srv.URL, "tok").CallAPI(context.Background(), "payments", "POST", "/charges/1", Fence{Grant: "g", Segment: 3}, nil, "")
	if err != nil || resp.Status != http.StatusPaymentRequired || resp.Receipt != "R3" {
		t.Fatalf("resp %+v err %v", resp, err)
	}
}

func TestObjectKeysKeepTheirSlashesAndAreEscaped(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.EscapedPath()
		w.Header().Set("Fence-Token", "7")
		_, _ = io.WriteString(w, "data")
	}))
	defer srv.Close()
	rc, info, err := New(srv.URL, "tok").GetObject(context.Background(), "b", "dir/a b#c")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if got != "/v1/objects/b/dir/a%20b%23c" || info.FenceToken != 7 {
		t.Fatalf("path %s info %+v", got, info)
	}
}

// TestADecodedAnswerIsReadToItsEndSoTheConnectionIsKept: an answer whose
// JSON ends exactly where the decoder's first read ends (the encoder's
// newline still unread) is drained, so consecutive calls share one
// connection instead of dialling each time.
func TestADecodedAnswerIsReadToItsEndSoTheConnectionIsKept(t *testing.T) {
	body := `{"receiptId":"` + strings.Repeat("r", 512-len(`{"receiptId":""}`)) + `"}` + "\n" // 512 bytes of JSON
	srv, conns := connCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = io.WriteString(w, body)
	})
	c := New(srv.URL, "tok")
	for i := range 5 {
		rc, err := c.PutObject(context.Background(), "b", "k", Fence{Grant: "g", Segment: uint64(i + 1)}, strings.NewReader("x"), "")
		if err != nil || len(rc.ID) != 512-len(`{"receiptId":""}`) {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("5 calls used %d connections, want 1", n)
	}
}

// TestManyGoroutinesOnOneClientKeepTheirConnections: c calls in flight at
// once through one Client, answered together, round after round, reuse
// their connections (net/http's default pool keeps 2 idle ones, so each
// round would close and dial again all but two).
func TestManyGoroutinesOnOneClientKeepTheirConnections(t *testing.T) {
	const c, rounds = 16, 8
	var (
		mu      sync.Mutex
		release = make(chan struct{})
		arrived = make(chan struct{}, c)
	)
	srv, conns := connCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		rel := release
		mu.Unlock()
		arrived <- struct{}{}
		<-rel // every call of the round is in flight
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"receiptId":"r1","state":"COMMITTED"}`+"\n")
	})
	cl := New(srv.URL, "tok")
	for round := range rounds {
		var wg sync.WaitGroup
		for w := range c {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := cl.PutObject(context.Background(), "b", "k", Fence{Grant: "g", Segment: uint64(round*c + w + 1)}, strings.NewReader("x"), ""); err != nil {
					t.Error(err)
				}
			}()
		}
		for range c {
			<-arrived
		}
		mu.Lock()
		close(release)
		release = make(chan struct{})
		mu.Unlock()
		wg.Wait()
	}
	if n := conns.Load(); n > 2*c {
		t.Fatalf("%d rounds of %d calls in flight used %d connections, want at most %d", rounds, c, n, 2*c)
	}
}

// connCountingServer serves h and counts the connections clients open to it.
func connCountingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	conns := new(atomic.Int64)
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, conns
}

// longPoll is a transport in front of the fake that models a gateway
// holding an acquisition for wait before it answers, without waiting: an
// acquisition whose time limit (the request's deadline, where http.Client
// puts its Timeout) ends before the wait is over fails as it would have
// (timed out), the rest goes on to the fake. It records the time left to
// each acquisition.
type longPoll struct {
	wait time.Duration
	mu   sync.Mutex
	left []time.Duration
}

func (p *longPoll) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path == "/v1/leases" {
		d, ok := r.Context().Deadline()
		left := time.Until(d)
		p.mu.Lock()
		p.left = append(p.left, left)
		wait := p.wait
		p.mu.Unlock()
		if ok && left < wait {
			return nil, context.DeadlineExceeded
		}
	}
	return http.DefaultTransport.RoundTrip(r)
}

// Rule: a long-poll acquisition's time limit is its Wait plus the client's
// usual one, not the limit every call has: a Wait longer than the client's
// Timeout (the default 60 s and the server's one-minute cap are such a pair)
// gets the gateway's answer, LEASE_HELD, sent once; it used to time out as
// uncertain and be retried until the attempts ran out. Calls without a
// Wait keep the usual limit.
func TestALongPollLongerThanTheClientTimeoutGetsItsAnswer(t *testing.T) {
	const base, wait = 10 * time.Second, 50 * time.Second
	lp := &longPoll{wait: wait}
	f, c := newFakeWith(t, WithSleep(noSleep), WithHTTPClient(&http.Client{Timeout: base, Transport: lp}))
	f.refuseNext("acquire", domain.CodeLeaseHeld)
	p := params("")
	p.Wait = wait
	_, err := c.AcquireLease(context.Background(), p)
	if IsUncertain(err) || domain.ErrorCode(err) != domain.CodeLeaseHeld || f.count("acquire") != 1 {
		t.Fatalf("long poll of %v under a %v client timeout: %v (uncertain %v), %d acquisitions sent; want LEASE_HELD once",
			wait, base, err, IsUncertain(err), f.count("acquire"))
	}
	lp.mu.Lock()
	lp.wait = 0 // answered at once
	lp.mu.Unlock()
	if _, err := c.AcquireLease(context.Background(), params("")); err != nil {
		t.Fatal(err)
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if last := lp.left[len(lp.left)-1]; last > base {
		t.Fatalf("an acquisition without a Wait had %v to run, more than the client's %v", last, base)
	}
}

// Rule: a fenced API call is POST, PUT, PATCH or DELETE (upper case, as the
// gateway routes them); CallAPI refuses any other method INVALID_REQUEST
// without sending anything.
func TestFencedCallsArePostPutPatchOrDelete(t *testing.T) {
	for _, m := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		if err := CheckFencedMethod(m); err != nil {
			t.Errorf("%s: %v", m, err)
		}
	}
	sent := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sent++ }))
	defer srv.Close()
	for _, m := range []string{"GET", "HEAD", "OPTIONS", "post", ""} {
		if err := CheckFencedMethod(m); domain.ErrorCode(err) != domain.CodeInvalidRequest {
			t.Errorf("CheckFencedMethod(%q) = %v, want INVALID_REQUEST", m, err)
		}
		if _, err := New(srv.URL, "tok").CallAPI(context.Background(), "payments", m, "/charges/1", Fence{Grant: "g", Segment: 1}, nil, ""); domain.ErrorCode(err) != domain.CodeInvalidRequest {
			t.Errorf("CallAPI %q: %v, want INVALID_REQUEST", m, err)
		}
	}
	if sent != 0 {
		t.Fatalf("%d refused calls were sent", sent)
	}
}
