package authority

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
)

// Rule: a retirement whose bundle file landed but was not put in force (the
// directory's sync failed after the rename) is put in force by its retry,
// as a restart would (its directory synced first: a sync that fails
// leaves it out of force): the retry answers success with the epoch revoked and
// publishes nothing more, so the retirement is one bundle version, on disk,
// in memory and in the signature file alike. The retry used to be refused
// (INTERNAL) until a restart, asking for "that same bundle" to be uploaded,
// which an operator retiring an epoch never had.
func TestARetriedRetirementWhoseBundleLandedInstallsItAsOneVersion(t *testing.T) {
	ctx := context.Background()
	a, cfg := openSigning(t)
	if _, err := a.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	v := a.Verifier().Bundle().Version()
	before := a.Verifier().Bundle()
	landed := landRetirement(t, a, cfg, 4) // the signature's file and directory, the bundle's file, then its directory

	func() { // the landed file's directory synced before it is in force
		saved := fsync
		defer func() { fsync = saved }()
		failingFsync(t, 1)
		if _, err := a.RetireEpoch(ctx, 1); err == nil || a.Verifier().Bundle().Version() != v {
			t.Fatalf("a retry whose directory sync failed: %v, version %d in force", err, a.Verifier().Bundle().Version())
		}
	}()
	if _, err := a.RetireEpoch(ctx, 1); err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if !a.EpochRevoked(1) || a.CurrentEpoch() != 2 || a.Verifier().Bundle().Version() != v+1 {
		t.Fatalf("after the retry: epoch 1 revoked %v, epoch %d, version %d in force; want revoked, 2, %d",
			a.EpochRevoked(1), a.CurrentEpoch(), a.Verifier().Bundle().Version(), v+1)
	}
	if now, _ := os.ReadFile(cfg.Files.Bundle); !bytes.Equal(now, landed) {
		t.Fatal("the retry wrote another bundle file")
	}
	doc, sig, _ := a.SignedTrustBundle(ctx)
	if _, err := proofs.VerifyBundleSignature(before, doc, sig, v+1, a.now()); err != nil || !bytes.Equal(doc, landed) {
		t.Fatalf("the served bundle is not the landed one, signed under the one before: %v", err)
	}
	var docs int
	for _, e := range readSignatures(a.sigFile()) {
		if e.Version > v+1 || e.Version == v+1 && e.Document != string(landed) {
			t.Fatalf("the signature file holds version %d with another document", e.Version)
		}
		if e.Version == v+1 {
			docs++
		}
	}
	if docs != 1 {
		t.Fatalf("the signature file holds version %d %d times", v+1, docs)
	}
	restarted, err := Open(cfg)
	if err != nil || restarted.Verifier().Bundle().Version() != v+1 || !restarted.EpochRevoked(1) {
		t.Fatalf("restart: %v", err)
	}
}

// Rule: a publication that stopped after its bundle file landed is put in
// force by the next one only if a restart would start on it (Open: the
// signing key in it): a retirement of the signing epoch whose bundle landed
// (it trusts the next epoch's key, not the signing one) and whose next key
// file is then gone is refused on retry (INTERNAL), changing nothing:
// memory, the bundle, signature and state files stay as they were. The
// retry used to put it in force, a bundle lacking the key still signing,
// which Open refuses to start on.
func TestALandedBundleARestartWouldRefuseIsNotPutInForce(t *testing.T) {
	ctx := context.Background()
	a, cfg := openSigning(t)
	v := a.Verifier().Bundle().Version()
	landed := landRetirement(t, a, cfg, 6) // the next key's file and directory, the signature's, the bundle's file, then its directory
	if err := os.Remove(nextKeyFile(cfg.Files.Key)); err != nil {
		t.Fatalf("the retirement kept no next key file: this test pins nothing (%v)", err)
	}
	if _, err := Open(cfg); err == nil {
		t.Fatal("a restart starts on the landed file: this test pins nothing")
	}
	sigs, _ := os.ReadFile(a.sigFile())
	state, _ := os.ReadFile(cfg.Files.State)
	if _, err := a.RetireEpoch(ctx, 1); fencegate.ErrorCode(err) != fencegate.CodeInternal {
		t.Fatalf("the retry: %v, want INTERNAL", err)
	}
	if a.Verifier().Bundle().Version() != v || a.EpochRevoked(1) || a.CurrentEpoch() != 1 {
		t.Fatalf("after the retry: version %d in force, epoch 1 revoked %v, epoch %d", a.Verifier().Bundle().Version(), a.EpochRevoked(1), a.CurrentEpoch())
	}
	for name, c := range map[string]struct {
		path string
		was  []byte
	}{"bundle": {cfg.Files.Bundle, landed}, "signature": {a.sigFile(), sigs}, "state": {cfg.Files.State, state}} {
		if now, _ := os.ReadFile(c.path); !bytes.Equal(now, c.was) {
			t.Fatalf("after the retry: the %s file changed", name)
		}
	}
}

// landRetirement retires epoch 1 at a with the nth fsync failing (the
// bundle's directory), so that the retirement's bundle is on disk, one
// version above the one in force, but not in force, failing t unless it so
// landed; it answers the file's bytes.
func landRetirement(t *testing.T, a *Authority, cfg Config, nth int) []byte {
	t.Helper()
	v := a.Verifier().Bundle().Version()
	func() {
		saved := fsync
		defer func() { fsync = saved }()
		failingFsync(t, nth)
		if _, err := a.RetireEpoch(context.Background(), 1); err == nil {
			t.Fatal("the retirement answered success")
		}
	}()
	landed, err := os.ReadFile(cfg.Files.Bundle)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := proofs.ParseBundle(landed); err != nil || b.Version() != v+1 || a.Verifier().Bundle().Version() != v {
		t.Fatalf("the retirement did not land on disk without being in force (version %d in force): this test pins nothing", a.Verifier().Bundle().Version())
	}
	return landed
}
