package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/e2e/upstream"
)

// smuggled are headers a worker may send that an upstream must never see,
// whatever the API declares.
var smuggled = map[string]string{
	"Connection": "X-Hop, Keep-Alive", "X-Hop": "1", "Keep-Alive": "timeout=5", "Proxy-Connection": "keep-alive",
	"Proxy-Authorization": "Basic eA==", "Te": "trailers", "Trailer": "X-T", "Upgrade": "h2c",
	"Authorization": "Bearer worker-token", "Cookie": "s=1", "Accept-Encoding": "br",
	"X-Http-Method-Override": "DELETE", "X-Http-Method": "DELETE", "X-Method-Override": "DELETE",
	"X-Original-Url": "/v1/admin", "X-Rewrite-Url": "/v1/admin", "X-Original-Uri": "/v1/admin",
	"Forwarded": "for=10.0.0.1;host=evil", "X-Forwarded-For": "10.0.0.1", "X-Forwarded-Host": "evil",
	"X-Forwarded-Proto": "http", "X-Forwarded-Prefix": "/admin", "Via": "1.1 evil", "X-Real-Ip": "10.0.0.1",
	"True-Client-Ip": "10.0.0.1", "X-Client-Ip": "10.0.0.1", "X-Cluster-Client-Ip": "10.0.0.1",
	"Fence-Token": "999", "Idempotency-Key": "worker-chosen", "X-Idempotency-Key": "worker-chosen",
	"X-Undeclared": "x",
}

// TestOnlyDeclaredAndNegotiationHeadersReachUpstream: of everything a worker
// sends, the upstream sees the declared headers, content negotiation and the
// body's type, plus what the gateway sets itself (its credential and the
// idempotency key); hop-by-hop, override, rewrite, forwarding, credential,
// fence and undeclared headers never, and the receipt keeps no more.
func TestOnlyDeclaredAndNegotiationHeadersReachUpstream(t *testing.T) {
	h := newHarness(t, upstream.Options{}, func(c *APIConfig) { c.ForwardHeaders = []string{"x-request-id", "Stripe-Version"} })
	hd := http.Header{}
	for k, v := range smuggled {
		hd.Set(k, v)
	}
	allowed := map[string]string{"Content-Type": "application/json", "Accept": "application/json", "Accept-Language": "de",
		"Accept-Charset": "utf-8", "X-Request-Id": "req-1", "Stripe-Version": "2024-06-20"}
	for k, v := range allowed {
		hd.Set(k, v)
	}
	r := h.receipt(1, 1)
	out, err := h.call(r, hd, payout)
	if err != nil || out.State != fencegate.ReceiptCommitted {
		t.Fatalf("outcome %+v, err %v", out, err)
	}
	got := h.seen[0]
	for k := range smuggled {
		switch k {
		case "Authorization":
			if got.Get(k) != secret {
				t.Errorf("upstream Authorization = %q, want only the gateway's credential", got.Get(k))
			}
		case "Idempotency-Key":
			if got.Get(k) != IdempotencyKey(r) {
				t.Errorf("upstream Idempotency-Key = %q, want the gateway's", got.Get(k))
			}
		case "Accept-Encoding", "Connection": // the transport's own (gzip; close), never the worker's value
			if got.Get(k) == smuggled[k] {
				t.Errorf("upstream saw the worker's %s", k)
			}
		default:
			if v := got.Values(k); len(v) > 0 {
				t.Errorf("upstream saw %s: %q", k, v)
			}
		}
	}
	for k, v := range allowed {
		if got.Get(k) != v {
			t.Errorf("upstream %s = %q, want %q", k, got.Get(k), v)
		}
	}
	kept := h.api.keptHeader(hd)
	for k := range kept {
		if _, ok := allowed[k]; !ok {
			t.Errorf("the receipt keeps %s", k)
		}
	}
}

// TestForwardingAForbiddenHeaderIsRefusedAtStart: an API that declares a
// header that is never forwarded is refused when the config is validated,
// naming the header.
func TestForwardingAForbiddenHeaderIsRefusedAtStart(t *testing.T) {
	for _, name := range []string{"X-HTTP-Method-Override", "x-original-url", "X-Rewrite-URL", "Forwarded",
		"X-Forwarded-Host", "Connection", "Transfer-Encoding", "Authorization", "Cookie", "Fence-Grant", "Idempotency-Key", "bad header"} {
		c := validConfig("http://127.0.0.1:1")
		c.ForwardHeaders = []string{name}
		err := Config{APIs: []APIConfig{c}}.Validate()
		if err == nil || !strings.Contains(err.Error(), "forwardHeaders") {
			t.Errorf("declaring %q accepted: %v", name, err)
		}
	}
	c := validConfig("http://127.0.0.1:1")
	c.ForwardHeaders = []string{"X-Request-Id", "Stripe-Version"}
	if err := (Config{APIs: []APIConfig{c}}).Validate(); err != nil {
		t.Fatalf("ordinary headers refused: %v", err)
	}
}

// TestUnderscoreSpellingsOfAForbiddenHeaderAreRefusedAtStart: CGI-style
// servers (RFC 3875 §4.1.18: "-" becomes "_" in HTTP_* meta-variables, as in
// Rack and WSGI) read X_Forwarded_For as X-Forwarded-For, so declaring the
// underscore spelling of a never-forwarded header is refused too.
func TestUnderscoreSpellingsOfAForbiddenHeaderAreRefusedAtStart(t *testing.T) {
	for _, name := range []string{"X_Forwarded_For", "x_forwarded_host", "X_HTTP_Method_Override", "X_Original_URL",
		"Transfer_Encoding", "Proxy_Authorization", "Fence_Grant"} {
		c := validConfig("http://127.0.0.1:1")
		c.ForwardHeaders = []string{name}
		err := Config{APIs: []APIConfig{c}}.Validate()
		if err == nil || !strings.Contains(err.Error(), "never forwarded") {
			t.Errorf("declaring %q accepted: %v", name, err)
		}
	}
}
