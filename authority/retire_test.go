package authority_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
)

// An epoch revoked before it was issued (the config's revokedEpochs, or a
// bundle put through the admin API) is never the one a rotation signs for:
// the rotation takes the epoch above it, so its key stays in the bundle and
// grants keep verifying, and the authority opens again afterwards.
func TestARotationSkipsAnEpochRevokedBeforeItWasIssued(t *testing.T) {
	e := newEnv(t, true)
	e.cfg.RevokedEpochs = []uint64{2}
	a := e.open()
	st, err := a.RotateKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.IssuerEpoch != 3 || a.EpochRevoked(a.CurrentEpoch()) {
		t.Fatalf("rotation signs for epoch %d (revoked %v); want 3, above the revoked 2", st.IssuerEpoch, a.EpochRevoked(a.CurrentEpoch()))
	}
	if _, ok := a.Verifier().Bundle().Key(a.Signer().KeyID()); !ok {
		t.Fatalf("the new signing key %s is not in the bundle %v", a.Signer().KeyID(), a.Verifier().Bundle().KeyIDs())
	}
	if b := e.open(); b.CurrentEpoch() != 3 {
		t.Fatalf("reopened at epoch %d", b.CurrentEpoch())
	}
}

// The state-loss hook's retirement of the signing epoch, after a bundle
// revoked the next epoch: the signing epoch is revoked and a key of an
// unrevoked epoch signs, in one call. It used to rotate into the revoked
// epoch, fail with "no keys" after moving the signer there, and its retry
// then answered success with the pre-loss epoch still trusted.
func TestRetiringTheSigningEpochAfterABundleRevokedTheNextOne(t *testing.T) {
	e := newEnv(t, true)
	a := e.open()
	cur := a.Verifier().Bundle()
	b, err := proofs.NewRevokingBundle(cur.Version()+1, proofs.Revocations{Epochs: []uint64{2}}, cur.Keys()...)
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := b.Marshal()
	if _, err := a.SetTrustBundle(ctx, doc); err != nil {
		t.Fatal(err)
	}
	st, err := a.RetireEpoch(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !a.EpochRevoked(1) || st.IssuerEpoch != 3 || a.EpochRevoked(3) {
		t.Fatalf("after retiring 1: epoch %d, revoked %v", st.IssuerEpoch, st.RevokedEpochs)
	}
	if _, ok := a.Verifier().Bundle().Key("registry-1"); ok {
		t.Fatalf("the retired key is still trusted: %v", a.Verifier().Bundle().KeyIDs())
	}
}

// A replica's retirement whose save fails changes nothing, in memory too;
// once the state file can be written the retry revokes the epoch and the
// revocation is there after a restart.
func TestAReplicasRetirementThatIsNotPersistedChangesNothing(t *testing.T) {
	reg := newEnv(t, true)
	v1, _ := reg.open().TrustBundle(ctx)
	rep := newEnv(t, false)
	if err := os.WriteFile(rep.cfg.Files.Bundle, v1, 0o644); err != nil {
		t.Fatal(err)
	}
	lose, restore := stateElsewhere(rep)
	replica := rep.open()
	lose()
	_, err := replica.RetireEpoch(ctx, 1)
	wantCode(t, err, fencegate.CodeInternal)
	if replica.EpochRevoked(1) {
		t.Fatal("a retirement that was not persisted is in force")
	}
	restore()
	if _, err := replica.RetireEpoch(ctx, 1); err != nil || !replica.EpochRevoked(1) {
		t.Fatalf("retry: %v, revoked %v", err, replica.EpochRevoked(1))
	}
	if !rep.open().EpochRevoked(1) {
		t.Fatal("the retried retirement is gone after a restart")
	}
}

// Retiring an epoch already revoked in memory saves the state again: an
// earlier retirement whose bundle was published but whose state save failed
// is on disk once a retry answers success.
func TestRetiringARevokedEpochAgainSavesTheState(t *testing.T) {
	e := newEnv(t, true)
	lose, restore := stateElsewhere(e)
	a := e.open()
	if _, err := a.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	lose()
	_, err := a.RetireEpoch(ctx, 1)
	wantCode(t, err, fencegate.CodeInternal)
	restore()
	if _, err := a.RetireEpoch(ctx, 1); err != nil {
		t.Fatal(err)
	}
	var p struct{ RevokedEpochs []uint64 }
	readJSON(t, e.cfg.Files.State, &p)
	if len(p.RevokedEpochs) != 1 || p.RevokedEpochs[0] != 1 {
		t.Fatalf("state file after the retry: revoked %v", p.RevokedEpochs)
	}
}

// readJSON decodes the JSON file at path into v.
func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		t.Fatal(err)
	}
}
