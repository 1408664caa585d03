package proofs_test

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
)

func TestBundleCarriesRevokedEpochsThroughMarshalAndParse(t *testing.T) {
	k2, err := proofs.GenerateEd25519Signer("k2")
	mustOK(t, err)
	b, err := proofs.NewRevokingBundle(3, proofs.Revocations{Epochs: []uint64{1, 1}, KeyIDs: []string{"k1"}}, k2.BundleKey(2))
	mustOK(t, err)
	data, err := b.Marshal()
	mustOK(t, err)
	if !strings.Contains(string(data), `"revokedEpochs": [`) {
		t.Fatalf("revoked epochs not written: %s", data)
	}
	back, err := proofs.ParseBundle(data)
	mustOK(t, err)
	if got := back.RevokedEpochs(); len(got) != 1 || got[0] != 1 || !back.EpochRevoked(1) || back.EpochRevoked(2) ||
		!back.KeyRevoked("k1") || back.KeyRevoked("k2") {
		t.Fatalf("revoked epochs after parse: %v", got)
	}
}

func TestBundleHoldingAKeyOfARevokedEpochIsRefused(t *testing.T) {
	k1, err := proofs.GenerateEd25519Signer("k1")
	mustOK(t, err)
	_, err = proofs.NewRevokingBundle(2, proofs.Revocations{Epochs: []uint64{1}}, k1.BundleKey(1))
	wantRejected(t, err, fencegate.CodeInvalidRequest, "revoked epoch 1")
	_, err = proofs.NewRevokingBundle(2, proofs.Revocations{Epochs: []uint64{0}}, k1.BundleKey(1))
	wantRejected(t, err, fencegate.CodeInvalidRequest, "epoch 0")
	doc := `{"version":2,"revokedEpochs":[1],"keys":[` + keyJSON(t, k1, 1) + `]}`
	_, err = proofs.ParseBundle([]byte(doc))
	wantRejected(t, err, fencegate.CodeInvalidRequest, "revoked epoch 1")
	_, err = proofs.ParseBundle([]byte(`{"version":2,"revokedEpochs":[-1],"keys":[` + keyJSON(t, k1, 1) + `]}`))
	wantRejected(t, err, fencegate.CodeInvalidRequest)
}

func TestVerifierRefusesABundleThatLiftsARevocationAndKeepsItsOwn(t *testing.T) {
	k1, err := proofs.GenerateEd25519Signer("k1")
	mustOK(t, err)
	k2, err := proofs.GenerateEd25519Signer("k2")
	mustOK(t, err)
	revoking, err := proofs.NewRevokingBundle(2, proofs.Revocations{Epochs: []uint64{1}, KeyIDs: []string{"k1"}}, k2.BundleKey(2))
	mustOK(t, err)
	v, err := proofs.NewVerifier(revoking)
	mustOK(t, err)
	lifting, err := proofs.NewBundle(3, k1.BundleKey(1), k2.BundleKey(2))
	mustOK(t, err)
	wantRejected(t, v.SetBundle(lifting), fencegate.CodeInvalidRequest, "lifts the revocation of epoch 1")
	if v.Bundle() != revoking {
		t.Fatal("a refused bundle replaced the one in force")
	}
	dropsKid, err := proofs.NewRevokingBundle(3, proofs.Revocations{Epochs: []uint64{1}}, k2.BundleKey(2))
	mustOK(t, err)
	wantRejected(t, v.SetBundle(dropsKid), fencegate.CodeInvalidRequest, "lifts the revocation of key k1")
	later, err := proofs.NewRevokingBundle(3, proofs.Revocations{Epochs: []uint64{1}, KeyIDs: []string{"k1"}}, k2.BundleKey(2))
	mustOK(t, err)
	mustOK(t, v.SetBundle(later))
}

// Rule: a key revoked here (its epoch or key ID) never comes back, under
// any key ID and epoch: the Verifier remembers its thumbprint when the
// revoking bundle is installed, refuses a later bundle holding it, and a
// Verifier made again with RevokedKeys refuses it too.
func TestRevokedKeyMaterialNeverComesBackUnderAnotherIDOrEpoch(t *testing.T) {
	k1, err := proofs.GenerateEd25519Signer("k1")
	mustOK(t, err)
	k2, err := proofs.GenerateEd25519Signer("k2")
	mustOK(t, err)
	first, err := proofs.NewBundle(1, k1.BundleKey(1), k2.BundleKey(2))
	mustOK(t, err)
	v, err := proofs.NewVerifier(first)
	mustOK(t, err)
	revoking, err := proofs.NewRevokingBundle(2, proofs.Revocations{Epochs: []uint64{1}}, k2.BundleKey(2))
	mustOK(t, err)
	mustOK(t, v.SetBundle(revoking))
	if len(v.RevokedKeys()) != 1 {
		t.Fatalf("revoked keys remembered: %v, want k1's", v.RevokedKeys())
	}
	// k1's key material as a new key ID of a new epoch.
	again := k1.BundleKey(7)
	mustOK(t, again.Key.Set("kid", "k1-reborn"))
	back, err := proofs.NewRevokingBundle(3, proofs.Revocations{Epochs: []uint64{1}}, k2.BundleKey(2), again)
	mustOK(t, err)
	wantRejected(t, v.SetBundle(back), fencegate.CodeInvalidRequest, "a key that was revoked")
	if v.Bundle() != revoking {
		t.Fatal("a refused bundle replaced the one in force")
	}
	restarted, err := proofs.NewVerifier(revoking, proofs.WithRevokedKeys(v.RevokedKeys()))
	mustOK(t, err)
	wantRejected(t, restarted.SetBundle(back), fencegate.CodeInvalidRequest, "a key that was revoked")
	// A bundle that revokes a key and holds it under another ID at once.
	fresh, err := proofs.NewVerifier(first)
	mustOK(t, err)
	both, err := proofs.NewRevokingBundle(2, proofs.Revocations{Epochs: []uint64{1}}, k2.BundleKey(2), again)
	mustOK(t, err)
	wantRejected(t, fresh.SetBundle(both), fencegate.CodeInvalidRequest, "a key that was revoked")
}

// keyJSON is one bundle entry for s's key of epoch, as Marshal writes it.
func keyJSON(t *testing.T, s *proofs.Signer, epoch uint64) string {
	t.Helper()
	b, err := proofs.NewBundle(1, s.BundleKey(epoch))
	mustOK(t, err)
	data, err := b.Marshal()
	mustOK(t, err)
	i, j := strings.Index(string(data), "{\n      "), strings.LastIndex(string(data), "}\n  ]")
	if i < 0 || j < 0 {
		t.Fatalf("unexpected bundle layout: %s", data)
	}
	return string(data[i : j+1])
}

func TestTokenOfAKeyDroppedForRevocationIsEpochRevoked(t *testing.T) {
	f := newFixture(t)
	tok, _ := f.grantToken(nil)
	if _, err := f.v.VerifyGrant(tok); err != nil {
		t.Fatal(err)
	}
	k2, err := proofs.GenerateEd25519Signer("k2")
	mustOK(t, err)
	b, err := proofs.NewRevokingBundle(2, proofs.Revocations{Epochs: []uint64{1}, KeyIDs: []string{f.kid}}, k2.BundleKey(2))
	mustOK(t, err)
	mustOK(t, f.v.SetBundle(b))
	_, err = f.v.VerifyGrant(tok)
	wantRejected(t, err, fencegate.CodeEpochRevoked, "revoked issuer epoch")
}
