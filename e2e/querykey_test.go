package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestBinaryQueryKeyFormKeepsTheCanonicalMapping: through the binary, the
// ?key= form of the object routes (what generated clients send) refuses
// every form the path refuses (sent raw, exactly as written), changes no
// state on any refusal, and then writes a nested key that reads back in
// either form.
func TestBinaryQueryKeyFormKeepsTheCanonicalMapping(t *testing.T) {
	p := startGateway(t, "dev", "--data-dir", t.TempDir(), "--identity", "worker-a=token-a")
	addr := strings.TrimPrefix(p.base, "http://")
	l := p.acquire(t, "token-a", "local/inv", "q-1", "op-qkey", 60000)
	for _, q := range []string{
		"key=inv/./7", "key=inv/x/../7", "key=inv//7", "key=inv/7/", "key=/inv/7", "key=inv/%2E%2E/7",
		"key=inv%5C7", "key=inv%252F7", "key=inv/a%00b", "key=inv/e%CC%81", "key=", "key=inv/7&key=inv/8",
		"key=inv/%zz", "key=..%2Flocal%2Finv%2F7",
	} {
		for _, method := range []string{"PUT", "DELETE"} {
			req := method + " /v1/objects/local?" + q + " HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer token-a\r\n" +
				"Fence-Grant: " + l.grant + "\r\nFence-Status: " + l.status + "\r\nFence-Segment: 1\r\n" +
				"Content-Length: 1\r\nConnection: close\r\n\r\nx"
			resp, body := rawExchange(t, addr, req)
			var pr struct{ Code string }
			_ = json.Unmarshal(body, &pr)
			if resp.StatusCode != http.StatusBadRequest || pr.Code != "INVALID_REQUEST" {
				t.Errorf("%s ?%s: %d %s", method, q, resp.StatusCode, body)
			}
		}
	}
	// Both forms at once are refused too.
	wantCode(t, p.do(t, "PUT", "/v1/objects/local/inv/7?key=inv/8", "token-a", fenceHeaders(l, 1), "x"), http.StatusBadRequest, "INVALID_REQUEST")
	// Another resource's key is outside the grant.
	wantCode(t, p.do(t, "PUT", "/v1/objects/local?key=INV%2F7", "token-a", fenceHeaders(l, 1), "x"), http.StatusForbidden, "RESOURCE_MISMATCH")
	wantCode(t, p.do(t, "PUT", "/v1/objects/local?key=inv0%2F7", "token-a", fenceHeaders(l, 1), "x"), http.StatusForbidden, "RESOURCE_MISMATCH")
	// Nothing was admitted, nothing written.
	wantCode(t, p.do(t, "GET", "/v1/resources/local/inv", "token-a", nil, ""), http.StatusNotFound, "NOT_FOUND")
	if r := p.do(t, "GET", "/v1/receipts?operationId=op-qkey", "token-a", nil, ""); !strings.Contains(string(r.body), `"receipts":[]`) {
		t.Fatalf("receipts after refusals: %s", r.body)
	}
	// The nested key, escaped as a generator escapes it, is written once.
	if a := p.do(t, "PUT", "/v1/objects/local?key=inv%2F7%2Fpart-1", "token-a", fenceHeaders(l, 1), "one"); a.status != 200 || a.str("target") != "objects/local/inv/7/part-1" {
		t.Fatalf("query-form write: %d %s", a.status, a.body)
	}
	if a := p.do(t, "GET", "/v1/objects/local/inv/7/part-1", "token-a", nil, ""); a.status != 200 || string(a.body) != "one" {
		t.Fatalf("path-form read: %d %s", a.status, a.body)
	}
}
