package e2e

import (
	"net/http"
	"testing"
	"time"
)

// TestQuickstartStaleOwnerIsRefused runs the README quickstart against the
// built binary: A writes two segments, A's lease lapses, B acquires a higher
// fence and writes, A's late write is STALE_OWNER, receipts list by operation.
func TestQuickstartStaleOwnerIsRefused(t *testing.T) {
	p := startGateway(t, "dev", "--data-dir", t.TempDir(), "--identity", "worker-a=token-a", "--identity", "worker-b=token-b")

	a := p.acquire(t, "token-a", "local/inv/7", "a-1", "invoice-7", 500)
	for seg, body := range []string{"A part 1", "A part 2"} {
		r := p.put(t, "token-a", a, "local/inv/7/part-"+string(rune('1'+seg)), seg+1, body)
		if r.status != http.StatusOK || r.str("state") != "COMMITTED" {
			t.Fatalf("A segment %d: %d %s", seg+1, r.status, r.body)
		}
	}
	// The same request ID again recovers the same lease and fence.
	if again := p.acquire(t, "token-a", "local/inv/7", "a-1", "invoice-7", 500); again.id != a.id || again.fence != a.fence {
		t.Fatalf("idempotent acquire gave %+v, first was %+v", again, a)
	}
	// Only A may read A's lease (its grant and a fresh proof).
	wantCode(t, p.do(t, "GET", "/v1/leases/"+a.id, "token-b", nil, ""), http.StatusForbidden, "OWNER_MISMATCH")
	// While A holds the lease, B is refused.
	held := p.do(t, "POST", "/v1/leases", "token-b", nil, `{"resource":"local/inv/7","requestId":"b-0","ttlMs":5000,"operationId":"invoice-7"}`)
	wantCode(t, held, http.StatusConflict, "LEASE_HELD")

	time.Sleep(700 * time.Millisecond) // A pauses past its TTL
	b := p.acquire(t, "token-b", "local/inv/7", "b-1", "invoice-7", 5000)
	if b.fence <= a.fence {
		t.Fatalf("B's fence %d is not above A's %d", b.fence, a.fence)
	}
	if r := p.put(t, "token-b", b, "local/inv/7/part-1", 1, "B part 1"); r.status != http.StatusOK {
		t.Fatalf("B write: %d %s", r.status, r.body)
	}
	// A wakes up and writes with its old grant and its still-fresh status proof.
	late := p.put(t, "token-a", a, "local/inv/7/part-3", 3, "A part 3")
	wantCode(t, late, http.StatusConflict, "STALE_OWNER")

	obj := p.do(t, "GET", "/v1/objects/local/inv/7/part-1", "token-a", nil, "")
	if string(obj.body) != "B part 1" || obj.header.Get("Fence-Token") == "" {
		t.Fatalf("object = %q (fence %q), want B's bytes", obj.body, obj.header.Get("Fence-Token"))
	}
	res := p.do(t, "GET", "/v1/resources/local/inv/7", "token-a", nil, "")
	if res.num("highestFence") != b.fence || res.num("lastSegmentSeq") != 1 {
		t.Fatalf("resource state %s", res.body)
	}
	rc := p.do(t, "GET", "/v1/receipts?operationId=invoice-7", "token-a", nil, "")
	list, _ := rc.json["receipts"].([]any)
	if len(list) != 3 {
		t.Fatalf("want 3 receipts for invoice-7, got %s", rc.body)
	}
	for _, x := range list {
		if m := x.(map[string]any); m["fenceToken"] == nil || m["state"] != "COMMITTED" {
			t.Fatalf("receipt %v lacks fenceToken or is not committed", m)
		}
	}
}
