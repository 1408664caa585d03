package authority

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
)

// Rule: an operator's upload to a signing registry whose bundle file was
// renamed into place but whose directory sync failed (so the new version
// is on disk, with its signature, but not in force) stops every other
// publication until it is installed: a rotation, a retirement, another
// bundle of that version or a higher one are refused (INTERNAL) and leave
// the file as it is. They used to go on, and a rotation wrote a second
// bundle of the same version over it, which a replica sharing the file
// that took the first would never install. The same upload again
// installs it; so does a restart.
func TestAnUploadWhoseBundleLandedStopsOtherPublicationsUntilInstalled(t *testing.T) {
	a, cfg := openSigning(t)
	cur := a.Verifier().Bundle()
	revoking := func(version uint64, epoch uint64) []byte {
		t.Helper()
		b, err := proofs.NewRevokingBundle(version, proofs.Revocations{Epochs: []uint64{epoch}}, cur.Keys()...)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := b.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return doc
	}
	up := revoking(cur.Version()+1, 9)
	func() {
		saved := fsync
		defer func() { fsync = saved }()
		failingFsync(t, 4) // the signature's file and directory, the bundle's file, then its directory
		if _, err := a.SetTrustBundle(context.Background(), up); err == nil {
			t.Fatal("the upload answered success")
		}
	}()
	landed, err := os.ReadFile(cfg.Files.Bundle)
	if err != nil || !bytes.Equal(landed, up) || a.Verifier().Bundle().Version() != cur.Version() {
		t.Fatalf("the upload did not land on disk without being in force (version %d in force): this test pins nothing", a.Verifier().Bundle().Version())
	}

	for name, publish := range map[string]func() error{
		"rotation":   func() error { _, err := a.RotateKey(context.Background()); return err },
		"retirement": func() error { _, err := a.RetireEpoch(context.Background(), 1); return err },
		"another bundle of its version": func() error {
			_, err := a.SetTrustBundle(context.Background(), revoking(cur.Version()+1, 8))
			return err
		},
		"a higher version": func() error {
			_, err := a.SetTrustBundle(context.Background(), revoking(cur.Version()+2, 8))
			return err
		},
	} {
		if err := publish(); fencegate.ErrorCode(err) != fencegate.CodeInternal {
			t.Fatalf("%s over the landed upload: %v, want INTERNAL", name, err)
		}
		if now, _ := os.ReadFile(cfg.Files.Bundle); !bytes.Equal(now, landed) {
			t.Fatalf("%s over the landed upload: the bundle file changed", name)
		}
		if a.Verifier().Bundle().Version() != cur.Version() || a.CurrentEpoch() != 1 {
			t.Fatalf("%s over the landed upload: version %d, epoch %d in force", name, a.Verifier().Bundle().Version(), a.CurrentEpoch())
		}
	}

	if restarted, err := Open(cfg); err != nil || !restarted.EpochRevoked(9) || restarted.Verifier().Bundle().Version() != cur.Version()+1 {
		t.Fatalf("a restart does not install the landed upload: %v", err)
	}
	if _, err := a.SetTrustBundle(context.Background(), up); err != nil || !a.EpochRevoked(9) {
		t.Fatalf("the same upload again: %v", err)
	}
	doc, sig, _ := a.SignedTrustBundle(context.Background())
	if _, err := proofs.VerifyBundleSignature(cur, doc, sig, cur.Version()+1, a.now()); err != nil || !bytes.Equal(doc, up) {
		t.Fatalf("after the same upload again, the served bundle is not it, signed: %v", err)
	}
	if _, err := a.RotateKey(context.Background()); err != nil {
		t.Fatalf("a rotation once the upload is in force: %v", err)
	}
}
