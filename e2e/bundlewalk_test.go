package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/fencegate/fencegate/proofs/prooftest"
)

// TestAReplicaDownAcrossARotationAndARevocationFollowsTheChain: a replica
// is stopped; the registry rotates its key (K1→K2) and revokes epoch 1, so
// its bundle (v3 = {K2}) is signed by K2 alone, which the replica's bundle
// file (v1 = {K1}) never trusted. Started again from that file, the replica
// follows the registry's chain (GET /v1/trust-bundle/chain) to v3 by
// itself: a grant under K2 is accepted there and one under K1 is refused
// EPOCH_REVOKED.
func TestAReplicaDownAcrossARotationAndARevocationFollowsTheChain(t *testing.T) {
	regDir := t.TempDir()
	reg := startGateway(t, "dev", "--data-dir", regDir, "--identity", "worker-a=token-a",
		"--gateway", "replica=replica-token", "--admin-token", "ops-token")
	cfg, _ := pullingReplica(t, regDir, reg.base, "50ms")
	rep := startGateway(t, "serve", "--config", cfg)
	underK1 := reg.acquire(t, "token-a", "local/walk/1", "a-1", "walk", 60000)
	if r := rep.put(t, "token-a", underK1, "local/walk/1", 1, "one"); r.status != http.StatusOK {
		t.Fatalf("a grant under K1 before the changes: %d %s", r.status, r.body)
	}
	rep.sigterm(t)

	if r := reg.do(t, "POST", "/v1/admin/keys/rotate", "ops-token", nil, ""); r.status != http.StatusOK {
		t.Fatalf("rotate: %d %s", r.status, r.body)
	}
	if r := reg.do(t, "POST", "/v1/admin/epochs/1/revoke", "ops-token", nil, ""); r.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	if st := reg.do(t, "GET", "/v1/admin/state", "ops-token", nil, ""); st.num("trustBundleVersion") != 3 {
		t.Fatalf("the registry's state: %s", st.body)
	}

	rep = startGateway(t, "serve", "--config", cfg)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if st := rep.do(t, "GET", "/v1/admin/state", "rep-ops", nil, ""); st.num("trustBundleVersion") == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica never reached the registry's v3:\n%s", rep.logs.String())
		}
	}
	underK2 := reg.acquire(t, "token-a", "local/walk/2", "a-2", "walk", 60000)
	if prooftest.GrantOf(t, underK2.grant).IssuerEpoch != 2 {
		t.Fatalf("the registry's grant is of epoch %d, want 2", prooftest.GrantOf(t, underK2.grant).IssuerEpoch)
	}
	if r := rep.put(t, "token-a", underK2, "local/walk/2", 1, "two"); r.status != http.StatusOK {
		t.Fatalf("a grant under K2 at the replica: %d %s\n%s", r.status, r.body, rep.logs.String())
	}
	wantCode(t, rep.put(t, "token-a", underK1, "local/walk/1", 2, "stale"), http.StatusUnauthorized, "EPOCH_REVOKED")
}
