package e2e

import (
	"fmt"
	"net/http"
	"testing"
)

// TestRepeatedRequestIDWithOtherParametersIsConflictAndChangesNothing asks
// again with a used requestId and one parameter changed at a time: each is
// 409 REQUEST_ID_CONFLICT, the lease (state, fence, expiry) is unchanged, no
// fence is burned, and the same parameters still return the same lease.
func TestRepeatedRequestIDWithOtherParametersIsConflictAndChangesNothing(t *testing.T) {
	p := startGateway(t, "dev", "--data-dir", t.TempDir(), "--identity", "worker-a=token-a", "--identity", "worker-b=token-b")
	const body = `{"resource":%q,"requestId":"r-1","ttlMs":%d,"operationId":%q%s}`
	acquire := func(resource string, ttl int, op, extra string) answer {
		return p.do(t, "POST", "/v1/leases", "token-a", map[string]string{"Content-Type": "application/json"},
			fmt.Sprintf(body, resource, ttl, op, extra))
	}
	first := acquire("local/inv/1", 30000, "op-1", "")
	if first.status != http.StatusCreated {
		t.Fatalf("acquire: %d %s", first.status, first.body)
	}
	before := p.do(t, "GET", "/v1/leases/"+first.str("lease"), "token-a", nil, "")
	for name, a := range map[string]answer{
		"resource":           acquire("local/inv/2", 30000, "op-1", ""),
		"ttl":                acquire("local/inv/1", 60000, "op-1", ""),
		"operation id":       acquire("local/inv/1", 30000, "op-2", ""),
		"operation root":     acquire("local/inv/1", 30000, "op-1", `,"operationRoot":"sha256:other"`),
		"operation category": acquire("local/inv/1", 30000, "op-1", `,"operationCategory":"payout"`),
	} {
		if a.status != http.StatusConflict || a.str("code") != "REQUEST_ID_CONFLICT" {
			t.Errorf("repeat with another %s: want 409 REQUEST_ID_CONFLICT, got %d %s", name, a.status, a.body)
		}
	}
	after := p.do(t, "GET", "/v1/leases/"+first.str("lease"), "token-a", nil, "")
	for _, k := range []string{"state", "expiresAt", "operationId", "operationRoot", "grant"} {
		if before.json[k] == nil || before.json[k] != after.json[k] {
			t.Errorf("%s changed: %v -> %v", k, before.json[k], after.json[k])
		}
	}
	if after.num("fenceToken") != first.num("fenceToken") {
		t.Errorf("fence changed: %d -> %d", first.num("fenceToken"), after.num("fenceToken"))
	}
	same := acquire("local/inv/1", 30000, "op-1", "")
	if same.status != http.StatusCreated || same.str("lease") != first.str("lease") || same.num("fenceToken") != first.num("fenceToken") {
		t.Fatalf("same parameters: want lease %s, got %d %s", first.str("lease"), same.status, same.body)
	}
	// No fence of either resource was burned by the refused repeats.
	other := p.acquire(t, "token-b", "local/inv/2", "b-1", "op-b", 30000)
	if other.fence != 1 {
		t.Errorf("local/inv/2: first fence %d, want 1", other.fence)
	}
	p.do(t, "DELETE", "/v1/leases/"+first.str("lease"), "token-a", nil, "")
	next := p.acquire(t, "token-b", "local/inv/1", "b-2", "op-b", 30000)
	if next.fence != first.num("fenceToken")+1 {
		t.Errorf("local/inv/1: next fence %d, want %d", next.fence, first.num("fenceToken")+1)
	}
}
