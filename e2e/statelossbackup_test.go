package e2e

import (
	"path/filepath"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

// TestBackupFromBeforeAnEarlierLossIsClaimedAnew runs, against the binary on
// its own durable Redis, a restore of a backup taken before an earlier loss:
// A holds a lease, the backup is saved, Redis restarts empty (the earlier
// loss: the registry claims it and grants resume), then the backup is
// restored, bringing back the first claim's marker with A's lease HELD in
// it. The registry must take it for a loss and claim the backend anew (a
// marker of a later generation), not join the old marker as another
// registry's claim: grants pause and resume, A's status proof states
// REVOKED, not HELD, and A's write is refused.
func TestBackupFromBeforeAnEarlierLossIsClaimedAnew(t *testing.T) {
	r := testenv.OwnRedis(t, testenv.RedisDurable())
	dir := t.TempDir()
	conf := lossConfig(t, dir, "dev-1", "")
	p := startGateway(t, "dev", "--config", conf, "--data-dir", filepath.Join(dir, "data"),
		"--identity", "worker-a=token-a", "--identity", "worker-w=token-w", "--admin-token", "ops-token",
		"--registry-backend", "redis://"+r.Addr())
	incarnation := func() (string, float64) {
		st := p.do(t, "GET", "/v1/admin/state", "ops-token", nil, "")
		is, _ := st.json["issuance"].(map[string]any)
		id, _ := is["incarnation"].(string)
		losses, _ := is["losses"].(float64)
		return id, losses
	}
	const res = "local/ledger"
	a := p.acquire(t, "token-a", res, "a-1", "close-books", 60000)
	first, _ := incarnation()
	backup := r.Save() // the first claim's marker, A's lease HELD

	r.RestartEmpty() // the earlier loss
	if _, paused := p.acquireWhenResumed(t, "token-w", "local/w1", "w-1", "between"); paused == 0 {
		t.Fatal("grants were not paused after Redis restarted empty")
	}
	second, _ := incarnation()

	r.RestoreRDB(backup)
	if _, paused := p.acquireWhenResumed(t, "token-w", "local/w2", "w-2", "after"); paused == 0 {
		t.Fatal("grants were not paused after the backup was restored")
	}
	third, losses := incarnation()
	if third == first || third == second || losses != 2 {
		t.Fatalf("the restored backup's marker must be a second loss, claimed anew: incarnation %q (first %q, second %q), %v losses",
			third, first, second, losses)
	}
	var proof fencegate.Status
	if st := p.do(t, "GET", "/v1/leases/"+a.id, "token-a", nil, ""); st.status != 200 {
		t.Fatalf("A's lease restored with the backup: %d %s", st.status, st.body)
	} else if prooftest.PayloadOf(t, st.str("statusProof"), &proof); proof.State != fencegate.StateRevoked {
		t.Fatalf("A's lease restored with the backup: its status proof states %s, want REVOKED", proof.State)
	}
	if w := p.put(t, "token-a", a, res, 1, "A late"); w.status == 200 {
		t.Fatalf("A's write after the restore was accepted: %s", w.body)
	}
}
