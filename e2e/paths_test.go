package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rawExchange writes one raw HTTP/1.1 request (exactly as given: no client
// cleans its path) and reads the answer.
func rawExchange(t *testing.T, addr, request string) (*http.Response, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", request, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// TestBinaryRefusesDotAndEmptySegmentsWithoutRedirect: the binary serves the
// router as it is. Paths with ".", ".." or empty segments (and the other
// refused forms) answer 400 INVALID_REQUEST, never a redirect to a cleaned
// path a redirect-following client would then write to; nothing is stored.
func TestBinaryRefusesDotAndEmptySegmentsWithoutRedirect(t *testing.T) {
	p := startGateway(t, "dev", "--data-dir", t.TempDir(), "--identity", "worker-a=token-a")
	addr := strings.TrimPrefix(p.base, "http://")
	l := p.acquire(t, "token-a", "local/inv", "a-1", "op-paths", 60000)
	for _, path := range []string{
		"/v1/objects/local/inv/./7", "/v1/objects/local/inv/x/../7", "/v1/objects/local/inv//7",
		"/v1/objects/local/inv/7/", "/v1/objects/local/inv/%2E%2E/7", "/v1/objects/local/inv%2F7",
		"/v1/objects/local/inv/a%5Cb", "/v1/objects/local/inv/a%00b",
		"/v1//objects/local/inv/7", "/v1/./objects/local/inv/7", "/v1/objects/../objects/local/inv/7",
	} {
		req := "PUT " + path + " HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer token-a\r\n" +
			"Fence-Grant: " + l.grant + "\r\nFence-Status: " + l.status + "\r\nFence-Segment: 1\r\n" +
			"Content-Length: 1\r\nConnection: close\r\n\r\nx"
		resp, body := rawExchange(t, addr, req)
		var pr struct{ Code string }
		_ = json.Unmarshal(body, &pr)
		if resp.StatusCode/100 == 3 || resp.Header.Get("Location") != "" {
			t.Errorf("PUT %s redirected: %d Location %q", path, resp.StatusCode, resp.Header.Get("Location"))
			continue
		}
		if resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusNotFound {
			t.Errorf("PUT %s: %d %s", path, resp.StatusCode, body)
		}
		if pr.Code == "" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
			t.Errorf("PUT %s: not a problem answer: %s", path, body)
		}
		get := "GET " + path + " HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer token-a\r\nConnection: close\r\n\r\n"
		if resp, _ := rawExchange(t, addr, get); resp.StatusCode/100 == 3 {
			t.Errorf("GET %s redirected: %d", path, resp.StatusCode)
		}
	}
	// The dot forms of an object key are INVALID_REQUEST, exactly.
	for _, path := range []string{"/v1/objects/local/inv/./7", "/v1/objects/local/inv/x/../7", "/v1/objects/local/inv//7"} {
		resp, body := rawExchange(t, addr, "DELETE "+path+" HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer token-a\r\n"+
			"Fence-Grant: "+l.grant+"\r\nFence-Status: "+l.status+"\r\nFence-Segment: 1\r\nConnection: close\r\n\r\n")
		var pr struct{ Code string }
		_ = json.Unmarshal(body, &pr)
		if resp.StatusCode != http.StatusBadRequest || pr.Code != "INVALID_REQUEST" {
			t.Errorf("DELETE %s: %d %s", path, resp.StatusCode, body)
		}
	}
	// Nothing was admitted under the lease's resource, nor written anywhere.
	wantCode(t, p.do(t, "GET", "/v1/resources/local/inv", "token-a", nil, ""), http.StatusNotFound, "NOT_FOUND")
	wantCode(t, p.do(t, "GET", "/v1/resources/local/inv/7", "token-a", nil, ""), http.StatusNotFound, "NOT_FOUND")
	if r := p.do(t, "GET", "/v1/receipts?operationId=op-paths", "token-a", nil, ""); !strings.Contains(string(r.body), `"receipts":[]`) {
		t.Fatalf("receipts after refusals: %s", r.body)
	}
	wantCode(t, p.do(t, "GET", "/v1/objects/local/inv/7", "token-a", nil, ""), http.StatusNotFound, "NOT_FOUND")
}

// TestMetricsAreServedOnlyOnTheOperatorListener: /metrics is not on the API
// port (a workload or anyone else gets 404 there); --metrics-addr serves it.
func TestMetricsAreServedOnlyOnTheOperatorListener(t *testing.T) {
	maddr := freePort(t)
	p := startGateway(t, "dev", "--data-dir", t.TempDir(), "--identity", "worker-a=token-a", "--metrics-addr", maddr)
	wantCode(t, p.do(t, "GET", "/metrics", "", nil, ""), http.StatusNotFound, "NOT_FOUND")
	wantCode(t, p.do(t, "GET", "/metrics", "token-a", nil, ""), http.StatusNotFound, "NOT_FOUND")
	resp, err := http.Get("http://" + maddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "fencegate_unknown_overdue") {
		t.Fatalf("operator /metrics: %d %.300s", resp.StatusCode, b)
	}
	resp, err = http.Get("http://" + maddr + "/v1/receipts")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the operator listener serves the API: %d", resp.StatusCode)
	}
}
