package handlers_test

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/fencegate/fencegate/e2e/upstream"
	"github.com/fencegate/fencegate/internal/testenv"
)

// withReadRoute declares the upstream's payout lookup as a read route.
func withReadRoute(c *httpapi.APIConfig) {
	c.Routes = append(c.Routes, httpapi.Route{Method: "GET", Path: "/v1/payouts", Resource: "payouts/acc_1"})
}

func TestReadRoutePassesThroughWithTheGatewayCredentialAndStoresNothing(t *testing.T) {
	e := newAPIEnv(t, nil, nil, withReadRoute)
	a := e.grantFor(payerA, payerTokA, 1)
	paid := wantPaid(t, e.payout(a, 1, payoutBody))
	before := e.state()

	// No grant needed; fence headers sent anyway are ignored and not forwarded.
	r := e.send("GET", "/v1/apis/payouts/v1/payouts?idempotency_key="+paid.IdempotencyKey, payerTokB,
		map[string]string{"Fence-Grant": "junk", "Fence-Segment": "9"}, "")
	var got upstream.Payout
	if r.status != http.StatusOK || json.Unmarshal(r.body, &got) != nil || got.ID != paid.ID {
		t.Fatalf("read = %d %s, want the payout %s", r.status, r.body, paid.ID)
	}
	if r.header.Get("Fence-Receipt") != "" {
		t.Fatal("a read answered with a receipt")
	}
	after := e.state()
	before.requests++ // the read itself reached the upstream, nothing else changed
	if after != before {
		t.Fatalf("a read changed state:\nbefore %+v\nafter  %+v", before, after)
	}
	if e.pay.LeakedAuthorization() != 0 || e.pay.Unauthorized() != 0 {
		t.Fatal("the upstream did not see exactly the gateway's credential")
	}
	e.mu.Lock()
	last := e.seen[len(e.seen)-1]
	e.mu.Unlock()
	for k := range last {
		if len(k) > 6 && k[:6] == "Fence-" || k == "Idempotency-Key" {
			t.Errorf("a read forwarded %s", k)
		}
	}
}

func TestReadAnswersOfAnyStatusAreTheUpstreams(t *testing.T) {
	e := newAPIEnv(t, nil, nil, withReadRoute)
	r := e.send("GET", "/v1/apis/payouts/v1/payouts?idempotency_key=nope", payerTokA, nil, "")
	if r.status != http.StatusNotFound || r.code != "" || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("read = %d %v %s, want the upstream's own 404", r.status, r.header, r.body)
	}
}

func TestReadRefusalsReachNoUpstreamAndChangeNothing(t *testing.T) {
	e := newAPIEnv(t, nil, nil, withReadRoute)
	e.mayRead = func(identity, resource string) bool { return identity == payerA && resource == payoutRes }
	before := e.state()
	cases := []struct {
		name, method, path, token, body string
		status                          int
		code                            fencegate.Code
	}{
		{"no credential", "GET", "/v1/apis/payouts/v1/payouts", "wrong", "", 401, fencegate.CodeUnauthenticated},
		{"policy says no", "GET", "/v1/apis/payouts/v1/payouts", payerTokB, "", 403, fencegate.CodeForbidden},
		{"undeclared read route", "GET", "/v1/apis/payouts/v1/accounts/acc_1/payouts", payerTokA, "", 404, fencegate.CodeNotFound},
		{"unknown API", "GET", "/v1/apis/other/v1/payouts", payerTokA, "", 404, fencegate.CodeNotFound},
		{"read route is no write route", "POST", "/v1/apis/payouts/v1/payouts", payerTokA, "{}", 404, fencegate.CodeNotFound},
		{"a read with a body", "GET", "/v1/apis/payouts/v1/payouts", payerTokA, "{}", 400, fencegate.CodeInvalidRequest},
		{"encoded slash", "GET", "/v1/apis/payouts/v1%2Fpayouts", payerTokA, "", 400, fencegate.CodeInvalidRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.send(c.method, c.path, c.token, nil, c.body)
			wantCode(t, r, c.status, c.code)
			e.wantUnchanged(before)
		})
	}
	if r := e.send("GET", "/v1/apis/payouts/v1/payouts?idempotency_key=x", payerTokA, nil, ""); r.status != http.StatusNotFound || r.code != "" {
		t.Fatalf("the allowed reader was refused: %d %s", r.status, r.body)
	}
}

func TestReadOfAnUnreachableUpstreamIsUnavailable(t *testing.T) {
	e := newAPIEnv(t, nil, nil, withReadRoute)
	e.up.Close()
	wantCode(t, e.send("GET", "/v1/apis/payouts/v1/payouts", payerTokA, nil, ""), http.StatusServiceUnavailable, fencegate.CodeBackendUnavailable)
}

// TestReadAnswersDropTheHeadersTheUpstreamsConnectionNames: headers an
// upstream answer's Connection field names are hop-by-hop (RFC 9110 §7.6.1)
// and a proxy removes them with Connection itself before passing the answer
// on. The upstream is a raw HTTP/1.1 answer, as net/http's server would
// rewrite a handler's Connection field.
func TestReadAnswersDropTheHeadersTheUpstreamsConnectionNames(t *testing.T) {
	upstream := testenv.ServeTCP(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nConnection: X-Upstream-Hop, x-other-hop\r\n" +
			"X-Upstream-Hop: upstream-internal\r\nX-Other-Hop: upstream-internal\r\nX-End-To-End: kept\r\n" +
			"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"))
	})
	e := newAPIEnv(t, nil, nil, func(c *httpapi.APIConfig) {
		withReadRoute(c)
		c.BaseURL = "http://" + upstream
	})
	r := e.send("GET", "/v1/apis/payouts/v1/payouts", payerTokA, nil, "")
	if r.status != http.StatusOK || r.header.Get("X-End-To-End") != "kept" {
		t.Fatalf("read = %d %v", r.status, r.header)
	}
	for _, h := range []string{"X-Upstream-Hop", "X-Other-Hop"} {
		if v := r.header.Get(h); v != "" {
			t.Errorf("the read passed on %s: %q, a header the upstream's Connection names", h, v)
		}
	}
}

// An API's answer is data, never a page of the gateway's origin (which the
// console shares): an upstream's HTML, whatever CSP it sends, comes back
// with nosniff and a sandbox, on reads and on fenced calls alike.
func TestUpstreamHTMLIsServedAsDataNotAsAPage(t *testing.T) {
	upstream := testenv.ServeTCP(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		body := "<p>bad param <script>alert(1)</script></p>"
		_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Type: text/html\r\n" +
			"Content-Security-Policy: script-src *\r\nConnection: close\r\nContent-Length: " +
			strconv.Itoa(len(body)) + "\r\n\r\n" + body))
	})
	e := newAPIEnv(t, nil, nil, func(c *httpapi.APIConfig) {
		withReadRoute(c)
		c.BaseURL = "http://" + upstream
	})
	a := e.grantFor(payerA, payerTokA, 1)
	for name, r := range map[string]apiReply{
		"read": e.send("GET", "/v1/apis/payouts/v1/payouts?q=x", payerTokA, nil, ""),
		"call": e.payout(a, 1, payoutBody),
	} {
		if r.status != http.StatusBadRequest || r.header.Get("Content-Type") != "text/html" {
			t.Fatalf("%s = %d %v, want the upstream's HTML 400", name, r.status, r.header)
		}
		if r.header.Get("X-Content-Type-Options") != "nosniff" || r.header.Values("Content-Security-Policy")[0] != "sandbox" ||
			len(r.header.Values("Content-Security-Policy")) != 1 {
			t.Errorf("%s served without nosniff and a sandbox alone: %v", name, r.header)
		}
	}
}

// TestUpstreamNeverReplacesTheRequestID: every answer carries the caller's
// X-Request-Id (or a generated one; openapi.yaml), also when the upstream
// answers its own: on a write whose API keeps that header, and on a read,
// which passes the upstream's headers through, even one the upstream names
// hop-by-hop in Connection.
func TestUpstreamNeverReplacesTheRequestID(t *testing.T) {
	t.Run("write", func(t *testing.T) {
		e := newAPIEnv(t, nil, nil, func(c *httpapi.APIConfig) {
			c.KeepResponseHeaders = append(c.KeepResponseHeaders, "X-Request-Id")
		})
		inner := e.up.Config.Handler
		e.up.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Request-Id", "upstream-123")
			inner.ServeHTTP(w, r)
		})
		p := e.grantFor(payerA, payerTokA, 1)
		r := e.payout(p, 1, payoutBody)
		wantPaid(t, r)
		if got := r.header.Values("X-Request-Id"); len(got) != 1 || got[0] == "upstream-123" {
			t.Errorf("X-Request-Id %q, want the gateway's own", got)
		}
	})
	t.Run("read", func(t *testing.T) {
		e := newAPIEnv(t, nil, nil, func(c *httpapi.APIConfig) {
			c.Routes = append(c.Routes, httpapi.Route{Method: "GET", Path: "/v1/things/{id}", Resource: "payouts/reads"})
		})
		e.up.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Request-Id", "upstream-456")
			w.Header().Set("Connection", "X-Request-Id")
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{}`))
		})
		r := e.send("GET", "/v1/apis/payouts/v1/things/1", payerTokA, map[string]string{"X-Request-Id": "mine-1"}, "")
		if r.status != 200 {
			t.Fatalf("read: %d %s", r.status, r.body)
		}
		if got := r.header.Values("X-Request-Id"); len(got) != 1 || got[0] != "mine-1" {
			t.Errorf("X-Request-Id %q, want the caller's mine-1", got)
		}
	})
}
