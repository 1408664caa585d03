package e2e

import (
	"net/http"
	"testing"
)

// TestQueryModeAsksTheRegistryInsteadOfProofs: with --status-mode query a
// write needs no Fence-Status; the gateway asks the registry, so a released
// lease is refused at once, without waiting for any proof to expire.
func TestQueryModeAsksTheRegistryInsteadOfProofs(t *testing.T) {
	p := startGateway(t, "dev", "--data-dir", t.TempDir(), "--identity", "worker-a=token-a", "--status-mode", "query")
	a := p.acquire(t, "token-a", "local/q/1", "a-1", "q-1", 60000)
	hdr := map[string]string{"Fence-Grant": a.grant, "Fence-Segment": "1"}
	if r := p.do(t, "PUT", "/v1/objects/local/q/1", "token-a", hdr, "v1"); r.status != http.StatusOK {
		t.Fatalf("query-mode write: %d %s", r.status, r.body)
	}
	if r := p.do(t, "DELETE", "/v1/leases/"+a.id, "token-a", nil, ""); r.status != http.StatusOK {
		t.Fatalf("release: %d %s", r.status, r.body)
	}
	hdr["Fence-Segment"] = "2"
	// The status proof the worker still holds would be fresh; query mode ignores it.
	hdr["Fence-Status"] = a.status
	wantCode(t, p.do(t, "PUT", "/v1/objects/local/q/1", "token-a", hdr, "v2"), http.StatusUnauthorized, "STATUS_INVALID")
}
