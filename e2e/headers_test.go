package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// echoUpstream answers every request with the headers it received, as JSON,
// and remembers them: the worst case for a secret the gateway injects.
type echoUpstream struct {
	mu   sync.Mutex
	seen []http.Header
}

func (e *echoUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	e.seen = append(e.seen, r.Header.Clone())
	e.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"method": r.Method, "path": r.URL.Path, "headers": r.Header})
}

// TestUpstreamSeesOnlyAllowedHeadersAndItsSecretStaysWithReaders sends a
// fenced API call through the binary carrying method-override, URL-rewrite,
// forwarding and hop-by-hop headers to an upstream that echoes what it gets.
// The upstream sees only the declared headers, content negotiation and the
// gateway's own (its credential, the idempotency key); the echoed answer,
// which holds the gateway's upstream secret, is stored in the receipt and
// readable by the caller, but another workload reading receipts gets neither
// the receipt nor the secret.
func TestUpstreamSeesOnlyAllowedHeadersAndItsSecretStaysWithReaders(t *testing.T) {
	const upstreamSecret = "sk_live_echo_secret"
	echo := &echoUpstream{}
	srv := httptest.NewServer(echo)
	defer srv.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gw.yaml")
	yml := fmt.Sprintf(`apis:
  - name: echo
    baseURL: %s
    credentials: {header: Authorization, prefix: "Bearer ", env: ECHO_TOKEN}
    timeout: 5s
    forwardHeaders: [X-Request-Id]
    contract:
      idempotency:
        keyRetention: 24h
    routes:
      - {method: POST, path: "/echo/{id}", resource: "echo/{id}"}
access:
  rules:
    - {identity: worker-a, lease: ["echo/*"]}
    - {identity: worker-b, lease: ["local/*"]}
`, srv.URL)
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startGatewayEnv(t, []string{"ECHO_TOKEN=" + upstreamSecret}, "dev", "--config", cfg, "--data-dir", filepath.Join(dir, "data"),
		"--identity", "worker-a=token-a", "--identity", "worker-b=token-b")

	smuggled := map[string]string{
		"X-HTTP-Method-Override": "DELETE", "X-Method-Override": "DELETE", "X-HTTP-Method": "DELETE",
		"X-Original-URL": "/admin", "X-Rewrite-URL": "/admin",
		"Forwarded": "for=10.0.0.1;host=evil.example", "X-Forwarded-For": "10.0.0.1", "X-Forwarded-Host": "evil.example",
		"X-Forwarded-Proto": "http", "X-Real-IP": "10.0.0.1", "Via": "1.1 evil",
		"Connection": "X-Hop", "X-Hop": "1", "Keep-Alive": "timeout=99", "Proxy-Authorization": "Basic eA==",
		"Cookie": "session=1", "Idempotency-Key": "worker-chosen", "X-Undeclared": "1",
	}
	a := p.acquire(t, "token-a", "echo/1", "a-1", "op-echo", 60000)
	hdr := fenceHeaders(a, 1)
	for k, v := range smuggled {
		hdr[k] = v
	}
	hdr["Content-Type"], hdr["Accept"], hdr["X-Request-Id"] = "application/json", "application/json", "req-7"
	r := p.do(t, "POST", "/v1/apis/echo/echo/1", "token-a", hdr, `{"n":1}`)
	if r.status != http.StatusOK {
		t.Fatalf("call: %d %s", r.status, r.body)
	}
	echo.mu.Lock()
	seen := echo.seen
	echo.mu.Unlock()
	if len(seen) != 1 {
		t.Fatalf("upstream got %d requests", len(seen))
	}
	got := seen[0]
	for k, v := range smuggled {
		if k == "Connection" || k == "Idempotency-Key" {
			if got.Get(k) == v {
				t.Errorf("upstream saw the worker's %s", k)
			}
			continue
		}
		if vals := got.Values(k); len(vals) > 0 {
			t.Errorf("upstream saw %s: %q", k, vals)
		}
	}
	if got.Get("Authorization") != "Bearer "+upstreamSecret || got.Get("X-Request-Id") != "req-7" ||
		got.Get("Accept") != "application/json" || !strings.HasPrefix(got.Get("Idempotency-Key"), "fg-") {
		t.Fatalf("upstream headers: %v", got)
	}
	rid := r.header.Get("Fence-Receipt")
	if !strings.Contains(string(r.body), upstreamSecret) {
		t.Fatalf("the echo upstream did not echo the secret; nothing to protect: %s", r.body)
	}

	// The caller reads its receipt with the stored answer; another workload
	// gets neither the receipt nor the secret, however it asks.
	own := p.do(t, "GET", "/v1/receipts/"+rid, "token-a", nil, "")
	if own.status != http.StatusOK || !strings.Contains(string(own.body), rid) {
		t.Fatalf("owner's receipt: %d %s", own.status, own.body)
	}
	wantCode(t, p.do(t, "GET", "/v1/receipts/"+rid, "token-b", nil, ""), http.StatusForbidden, "FORBIDDEN")
	wantCode(t, p.do(t, "GET", "/v1/receipts?resource=echo/1&fence=1&segment=1", "token-b", nil, ""), http.StatusForbidden, "FORBIDDEN")
	for _, path := range []string{"/v1/receipts?operationId=op-echo", "/v1/unknown", "/v1/quarantine"} {
		other := p.do(t, "GET", path, "token-b", nil, "")
		if other.status != http.StatusOK || strings.Contains(string(other.body), upstreamSecret) || strings.Contains(string(other.body), rid) {
			t.Fatalf("GET %s as worker-b: %d %s", path, other.status, other.body)
		}
	}
	// Nor can it call the API to replay the stored answer: it may not lease echo/1.
	body := `{"resource":"echo/1","requestId":"b-1","ttlMs":60000,"operationId":"op-echo"}`
	wantCode(t, p.do(t, "POST", "/v1/leases", "token-b", nil, body), http.StatusForbidden, "FORBIDDEN")
	wantCode(t, p.do(t, "POST", "/v1/apis/echo/echo/1", "token-b", fenceHeaders(a, 1), `{"n":1}`), http.StatusForbidden, "OWNER_MISMATCH")
	echo.mu.Lock()
	defer echo.mu.Unlock()
	if len(echo.seen) != 1 {
		t.Fatalf("refused calls reached the upstream: %d requests", len(echo.seen))
	}
}
