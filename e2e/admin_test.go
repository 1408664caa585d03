package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/proofs/prooftest"
)

// refresh asks the registry for the lease's current grant and status proof.
func (p *gatewayProc) refresh(t *testing.T, token string, l lease) lease {
	t.Helper()
	a := p.do(t, "GET", "/v1/leases/"+l.id, token, nil, "")
	if a.status != http.StatusOK {
		t.Fatalf("lease status: %d %s", a.status, a.body)
	}
	return lease{id: l.id, grant: a.str("grant"), status: a.str("statusProof"), fence: a.num("fenceToken")}
}

func TestKeyRotationAndEpochRevocationWhileWritesGoOn(t *testing.T) {
	dir := t.TempDir()
	args := []string{"dev", "--data-dir", dir, "--identity", "worker-a=token-a", "--admin-token", "ops-token"}
	p := startGateway(t, args...)

	a := p.acquire(t, "token-a", "local/jobs/1", "a-1", "job-1", 60000)
	if prooftest.GrantOf(t, a.grant).IssuerEpoch != 1 {
		t.Fatalf("first grant epoch %d", prooftest.GrantOf(t, a.grant).IssuerEpoch)
	}
	if r := p.put(t, "token-a", a, "local/jobs/1", 1, "s1"); r.status != 200 {
		t.Fatalf("segment 1: %d %s", r.status, r.body)
	}
	// Workload credentials cannot act as operators.
	wantCode(t, p.do(t, "POST", "/v1/admin/keys/rotate", "token-a", nil, ""), http.StatusForbidden, "FORBIDDEN")

	rot := p.do(t, "POST", "/v1/admin/keys/rotate", "ops-token", nil, "")
	if rot.status != 200 || rot.num("issuerEpoch") != 2 || rot.num("trustBundleVersion") != 2 {
		t.Fatalf("rotate: %d %s", rot.status, rot.body)
	}
	// During the overlap the epoch-1 grant still works.
	if r := p.put(t, "token-a", a, "local/jobs/1", 2, "s2"); r.status != 200 {
		t.Fatalf("segment 2 on the old key: %d %s", r.status, r.body)
	}
	// Revoke epoch 1: the old grant is refused at once, and nothing moves.
	rev := p.do(t, "POST", "/v1/admin/epochs/1/revoke", "ops-token", nil, "")
	if rev.status != 200 {
		t.Fatalf("revoke: %d %s", rev.status, rev.body)
	}
	wantCode(t, p.put(t, "token-a", a, "local/jobs/1", 3, "s3-old"), http.StatusUnauthorized, "EPOCH_REVOKED")
	if st := p.do(t, "GET", "/v1/resources/local/jobs/1", "token-a", nil, ""); st.num("lastSegmentSeq") != 2 {
		t.Fatalf("refused write moved state: %s", st.body)
	}
	// The worker re-fetches its grant: same lease and fence, epoch 2, and goes on.
	a2 := p.refresh(t, "token-a", a)
	if a2.fence != a.fence || prooftest.GrantOf(t, a2.grant).IssuerEpoch != 2 {
		t.Fatalf("re-issued grant: fence %d epoch %d", a2.fence, prooftest.GrantOf(t, a2.grant).IssuerEpoch)
	}
	if r := p.put(t, "token-a", a2, "local/jobs/1", 3, "s3"); r.status != 200 {
		t.Fatalf("segment 3 on the new key: %d %s", r.status, r.body)
	}
	// Revocation has no overlap: the bundle (version 3: rotation, then
	// revocation) holds the epoch-2 key alone and lists epoch 1 as revoked.
	tb := p.do(t, "GET", "/v1/admin/trust-bundle", "ops-token", nil, "")
	if keys, _ := tb.json["keys"].([]any); tb.num("version") != 3 || len(keys) != 1 ||
		!strings.Contains(string(tb.body), `"revokedEpochs": [`) {
		t.Fatalf("trust bundle: %s", tb.body)
	}

	// A restart keeps the epoch, the key and the revocation.
	p.stop(t)
	p = startGateway(t, args...)
	st := p.do(t, "GET", "/v1/admin/state", "ops-token", nil, "")
	if st.num("issuerEpoch") != 2 || !strings.Contains(string(st.body), `"revokedEpochs":[1]`) {
		t.Fatalf("state after restart: %s", st.body)
	}
	wantCode(t, p.put(t, "token-a", a, "local/jobs/1", 4, "s4-old"), http.StatusUnauthorized, "EPOCH_REVOKED")
	a3 := p.refresh(t, "token-a", a)
	if r := p.put(t, "token-a", a3, "local/jobs/1", 4, "s4"); r.status != 200 {
		t.Fatalf("segment 4 after restart: %d %s", r.status, r.body)
	}
}

func TestPolicyBumpMakesOlderGrantsStale(t *testing.T) {
	p := startGateway(t, "dev", "--data-dir", t.TempDir(), "--identity", "worker-a=token-a", "--admin-token", "ops-token")
	a := p.acquire(t, "token-a", "local/jobs/2", "a-1", "job-2", 60000)
	if b := p.do(t, "POST", "/v1/admin/policy/bump", "ops-token", nil, ""); b.status != 200 || b.num("policyGeneration") != 2 {
		t.Fatalf("bump: %d %s", b.status, b.body)
	}
	wantCode(t, p.put(t, "token-a", a, "local/jobs/2", 1, "x"), http.StatusForbidden, "POLICY_STALE")
	a2 := p.refresh(t, "token-a", a)
	if r := p.put(t, "token-a", a2, "local/jobs/2", 1, "x"); r.status != 200 {
		t.Fatalf("re-issued grant: %d %s", r.status, r.body)
	}
}

func TestEnforcedModeSurvivesRestartAndShadowNeedsBreakGlass(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(cfg, []byte("modes:\n  - {pattern: \"local/roll/*\", mode: shadow}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"dev", "--config", cfg, "--data-dir", filepath.Join(dir, "data"), "--identity", "worker-a=token-a", "--admin-token", "ops-token"}
	p := startGateway(t, args...)
	a := p.acquire(t, "token-a", "local/roll/x", "a-1", "roll", 60000)
	// Shadow: a skipped segment is recorded and forwarded anyway.
	r := p.put(t, "token-a", a, "local/roll/x", 3, "shadowed")
	if r.status != 200 || r.header.Get("Fence-Verdict") != "SEGMENT_OUT_OF_ORDER" {
		t.Fatalf("shadow write: %d %v %s", r.status, r.header, r.body)
	}
	if m := p.do(t, "PUT", "/v1/admin/modes", "ops-token", nil, `{"pattern":"local/roll/*","mode":"enforce"}`); m.status != 200 {
		t.Fatalf("enforce: %d %s", m.status, m.body)
	}
	wantCode(t, p.put(t, "token-a", a, "local/roll/x", 3, "refused"), http.StatusConflict, "SEGMENT_OUT_OF_ORDER")
	wantCode(t, p.do(t, "PUT", "/v1/admin/modes", "ops-token", nil, `{"pattern":"local/roll/*","mode":"shadow"}`), http.StatusForbidden, "FORBIDDEN")

	p.stop(t)
	p = startGateway(t, args...)
	wantCode(t, p.put(t, "token-a", a, "local/roll/x", 3, "still refused"), http.StatusConflict, "SEGMENT_OUT_OF_ORDER")
	if m := p.do(t, "PUT", "/v1/admin/modes", "ops-token", nil, `{"pattern":"local/roll/*","mode":"shadow","breakGlass":true}`); m.status != 200 {
		t.Fatalf("break-glass: %d %s", m.status, m.body)
	}
}
