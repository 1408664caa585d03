package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// accessGateway runs gateway dev with the given access rules (YAML list).
func accessGateway(t *testing.T, rules string, extra ...string) *gatewayProc {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "access.yaml")
	if err := os.WriteFile(cfg, []byte("access:\n  rules:\n"+rules), 0o600); err != nil {
		t.Fatal(err)
	}
	return startGateway(t, append([]string{"dev", "--config", cfg, "--data-dir", filepath.Join(dir, "data"),
		"--identity", "worker-a=token-a", "--identity", "worker-b=token-b", "--identity", "auditor=token-audit",
		"--admin-token", "ops-token"}, extra...)...)
}

// TestAcquireOutsideThePolicyIsForbiddenAndReadsFollowThePolicy replays the
// attack: a workload leases a parent resource (a whole store) to take keys
// from their rightful owner. The registry refuses it (403 FORBIDDEN) and holds
// nothing; the owner leases and writes; an identity without read access gets
// FORBIDDEN for the resource, its object and its receipt, and lists leave the
// receipt out; an auditor with read access sees them.
func TestAcquireOutsideThePolicyIsForbiddenAndReadsFollowThePolicy(t *testing.T) {
	p := accessGateway(t, `    - {identity: worker-a, lease: ["local/inv/*"]}
    - {identity: worker-b, lease: ["local/b/*"]}
    - {identity: auditor, read: [local]}
`)
	for _, res := range []string{"local", "local/inv", "local/inv/7"} {
		body := fmt.Sprintf(`{"resource":%q,"requestId":"b-%s","ttlMs":60000,"operationId":"op-b"}`, res, strings.ReplaceAll(res, "/", "-"))
		wantCode(t, p.do(t, "POST", "/v1/leases", "token-b", nil, body), http.StatusForbidden, "FORBIDDEN")
	}
	wantCode(t, p.do(t, "POST", "/v1/leases", "token-audit", nil,
		`{"resource":"local/inv/7","requestId":"au-1","ttlMs":60000,"operationId":"op-au"}`), http.StatusForbidden, "FORBIDDEN")
	// Nothing is held: the owner gets the resource at once, at the first fence.
	a := p.acquire(t, "token-a", "local/inv/7", "a-1", "op-a", 60000)
	if a.fence != 1 {
		t.Fatalf("owner's fence = %d after refusals", a.fence)
	}
	w := p.put(t, "token-a", a, "local/inv/7/part-1", 1, "A1")
	if w.status != http.StatusOK {
		t.Fatalf("owner's write: %d %s", w.status, w.body)
	}
	rid := w.str("receiptId")

	// worker-b may read nothing of local/inv/7.
	for _, path := range []string{"/v1/resources/local/inv/7", "/v1/objects/local/inv/7/part-1", "/v1/receipts/" + rid,
		"/v1/receipts?resource=local/inv/7&fence=1&segment=1", "/v1/quarantine?resource=local/inv/7"} {
		wantCode(t, p.do(t, "GET", path, "token-b", nil, ""), http.StatusForbidden, "FORBIDDEN")
	}
	for _, path := range []string{"/v1/receipts?operationId=op-a", "/v1/unknown", "/v1/quarantine"} {
		if r := p.do(t, "GET", path, "token-b", nil, ""); r.status != 200 || strings.Contains(string(r.body), rid) {
			t.Fatalf("GET %s as worker-b: %d %s", path, r.status, r.body)
		}
	}
	// The owner and the auditor read it.
	for _, tok := range []string{"token-a", "token-audit"} {
		if r := p.do(t, "GET", "/v1/receipts?operationId=op-a", tok, nil, ""); !strings.Contains(string(r.body), rid) {
			t.Fatalf("%s: receipts %d %s", tok, r.status, r.body)
		}
		if r := p.do(t, "GET", "/v1/objects/local/inv/7/part-1", tok, nil, ""); r.status != 200 || string(r.body) != "A1" {
			t.Fatalf("%s: object %d %s", tok, r.status, r.body)
		}
		if r := p.do(t, "GET", "/v1/resources/local/inv/7", tok, nil, ""); r.num("highestFence") != a.fence {
			t.Fatalf("%s: resource %d %s", tok, r.status, r.body)
		}
	}
}

// TestServeDeniesByDefaultAndRechecksAtWrite: a registry-less `gateway serve`
// replica with no access rules refuses a write carrying a valid grant from a
// registry that issued it (FORBIDDEN, re-checked at write time), and stores
// nothing; once its rules grant the resource, the same grant writes.
func TestServeDeniesByDefaultAndRechecksAtWrite(t *testing.T) {
	regDir := t.TempDir()
	reg := startGateway(t, "dev", "--data-dir", regDir, "--identity", "worker-a=token-a")
	dir := t.TempDir() // both replicas share it: the second reads what the first stored
	replica := func(access string) *gatewayProc {
		cfg := filepath.Join(dir, "gw.yaml")
		yml := fmt.Sprintf("dataDir: %s\ntrustBundle: %s\nstores: {local: \"local:\"}\nidentities: [{name: worker-a, token: token-a}]\n%s",
			filepath.Join(dir, "data"), filepath.Join(regDir, "trust-bundle.json"), access)
		if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
			t.Fatal(err)
		}
		return startGateway(t, "serve", "--config", cfg)
	}
	a := reg.acquire(t, "token-a", "local/rep/1", "a-1", "op-rep", 60000)
	deny := replica("")
	wantCode(t, deny.put(t, "token-a", a, "local/rep/1", 1, "one"), http.StatusForbidden, "FORBIDDEN")
	wantCode(t, deny.do(t, "GET", "/v1/resources/local/rep/1", "token-a", nil, ""), http.StatusForbidden, "FORBIDDEN")
	deny.stop(t)
	allow := replica("access: {rules: [{identity: worker-a, lease: [local/rep]}]}\n")
	wantCode(t, allow.do(t, "GET", "/v1/resources/local/rep/1", "token-a", nil, ""), http.StatusNotFound, "NOT_FOUND")
	wantCode(t, allow.do(t, "GET", "/v1/objects/local/rep/1", "token-a", nil, ""), http.StatusNotFound, "NOT_FOUND")
	if r := allow.put(t, "token-a", a, "local/rep/1", 1, "one"); r.status != http.StatusOK {
		t.Fatalf("allowed write: %d %s", r.status, r.body)
	}
}
