package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// TestOperatorClearsAKeysBindingOnceNoLiveLeaseCoversIt replays the issue's
// attack in gateway dev (open policy): a workload leases a parent resource,
// writes a key under it, deletes it and releases, so the key's own resource
// gets RESOURCE_MISMATCH forever. The operator reads the binding, is refused
// (nothing changes) while any live lease covers the key, then clears it —
// logged with the operator's identity — and the rightful owner writes.
func TestOperatorClearsAKeysBindingOnceNoLiveLeaseCoversIt(t *testing.T) {
	p := startGateway(t, "dev", "--data-dir", t.TempDir(), "--identity", "worker-a=token-a", "--identity", "worker-b=token-b",
		"--admin-token", "ops-token")
	const bindingPath = "/v1/admin/bindings/local/inv/7/a"
	b := p.acquire(t, "token-b", "local/inv", "b-1", "op-b", 60000)
	if r := p.put(t, "token-b", b, "local/inv/7/a", 1, "B"); r.status != http.StatusOK {
		t.Fatalf("parent write: %d %s", r.status, r.body)
	}
	if r := p.do(t, "DELETE", "/v1/objects/local/inv/7/a", "token-b", fenceHeaders(b, 2), ""); r.status != http.StatusOK {
		t.Fatalf("parent delete: %d %s", r.status, r.body)
	}
	a := p.acquire(t, "token-a", "local/inv/7/a", "a-1", "op-a", 60000)
	wantCode(t, p.put(t, "token-a", a, "local/inv/7/a", 1, "A"), http.StatusForbidden, "RESOURCE_MISMATCH")

	wantCode(t, p.do(t, "GET", bindingPath, "token-a", nil, ""), http.StatusForbidden, "FORBIDDEN")
	wantCode(t, p.do(t, "DELETE", bindingPath, "token-a", nil, ""), http.StatusForbidden, "FORBIDDEN")
	bound := func() string {
		t.Helper()
		r := p.do(t, "GET", bindingPath, "ops-token", nil, "")
		if r.status != http.StatusOK {
			t.Fatalf("binding: %d %s", r.status, r.body)
		}
		return r.str("resource")
	}
	if got := bound(); got != "local/inv" {
		t.Fatalf("bound to %q, want local/inv", got)
	}
	// Refused while A's lease (the key's own resource) or B's (a parent) lives.
	wantCode(t, p.do(t, "DELETE", bindingPath, "ops-token", nil, ""), http.StatusConflict, "LEASE_HELD")
	p.do(t, "DELETE", "/v1/leases/"+a.id, "token-a", nil, "")
	wantCode(t, p.do(t, "DELETE", bindingPath, "ops-token", nil, ""), http.StatusConflict, "LEASE_HELD")
	if got := bound(); got != "local/inv" {
		t.Fatalf("a refused clear changed the binding to %q", got)
	}
	p.do(t, "DELETE", "/v1/leases/"+b.id, "token-b", nil, "")

	if r := p.do(t, "DELETE", bindingPath, "ops-token", nil, ""); r.status != http.StatusOK || r.str("resource") != "local/inv" {
		t.Fatalf("clear: %d %s", r.status, r.body)
	}
	wantCode(t, p.do(t, "GET", bindingPath, "ops-token", nil, ""), http.StatusNotFound, "NOT_FOUND")
	if logs := p.logs.String(); !strings.Contains(logs, "binding cleared") || !strings.Contains(logs, "operator=admin:") {
		t.Fatalf("no audit line for the clearing:\n%s", logs)
	}
	// The parent's fence state is kept; the rightful owner now writes the key.
	if r := p.do(t, "GET", "/v1/resources/local/inv", "token-a", nil, ""); r.num("highestFence") != b.fence {
		t.Fatalf("parent state after clear: %s", r.body)
	}
	a2 := p.acquire(t, "token-a", "local/inv/7/a", "a-2", "op-a", 60000)
	if r := p.put(t, "token-a", a2, "local/inv/7/a", 1, "A"); r.status != http.StatusOK {
		t.Fatalf("owner's write after clear: %d %s", r.status, r.body)
	}
	if got := bound(); got != "local/inv/7/a" {
		t.Fatalf("bound to %q after the owner's write", got)
	}
	b2 := p.acquire(t, "token-b", "local/inv", "b-2", "op-b", 60000)
	wantCode(t, p.put(t, "token-b", b2, "local/inv/7/a", 1, "B2"), http.StatusForbidden, "RESOURCE_MISMATCH")
}
