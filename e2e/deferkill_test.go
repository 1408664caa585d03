package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// TestKillBeforeTheDeferredSettleKeepsTheAnswer: with a deferred settle
// window longer than the test (deferSettle: 1s), a write is answered
// COMMITTED and the process is killed (SIGKILL) before its settle is
// durable. After the restart the receipt reads COMMITTED at the answered
// version (its object names it: read-repair), the resource has no effect in
// flight, and the next segment is admitted at once, not after
// reconcile.orphan.
func TestKillBeforeTheDeferredSettleKeepsTheAnswer(t *testing.T) {
	const token = "token-a"
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(cfg, []byte("deferSettle: 1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"dev", "--data-dir", filepath.Join(dir, "data"), "--identity", "worker-a=" + token}
	p1 := startGateway(t, append(args, "--config", cfg)...)
	l := p1.acquire(t, token, "local/deferkill", "deferkill-1", "op-deferkill", 120_000)
	a := p1.do(t, "PUT", "/v1/objects/local/deferkill", token, fenceHeaders(l, 1), "v1")
	if a.status != http.StatusOK || a.str("state") != "COMMITTED" || a.str("version") == "" {
		t.Fatalf("write: %d %s", a.status, a.body)
	}
	_ = p1.cmd.Process.Kill()
	_ = p1.cmd.Wait()

	p2 := startGateway(t, args...)
	r := p2.do(t, "GET", "/v1/receipts/"+a.str("receiptId"), token, nil, "")
	if r.status != http.StatusOK || r.str("state") != "COMMITTED" || r.str("version") != a.str("version") {
		t.Fatalf("answered COMMITTED at %s; after the kill: %d %s", a.str("version"), r.status, r.body)
	}
	res := p2.do(t, "GET", "/v1/resources/local/deferkill", token, nil, "")
	if res.str("pendingReceipt") != "" {
		t.Fatalf("resource after the kill: %s", res.body)
	}
	if b := p2.do(t, "PUT", "/v1/objects/local/deferkill", token, fenceHeaders(l, 2), "v2"); b.status != http.StatusOK {
		t.Fatalf("next segment after the kill: %d %s", b.status, b.body)
	}
}
