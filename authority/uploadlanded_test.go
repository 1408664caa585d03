package authority

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"os"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
	"github.com/lestrrat-go/jwx/v2/jwa"
)

// revokingDoc is a document of version holding cur's keys and revoking epoch.
func revokingDoc(t *testing.T, cur *proofs.Bundle, version, epoch uint64) []byte {
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

// readFiles reads each of paths (nil for one absent), for sameFiles.
func readFiles(paths ...string) map[string][]byte {
	was := map[string][]byte{}
	for _, p := range paths {
		was[p], _ = os.ReadFile(p)
	}
	return was
}

// sameFiles fails t, saying when, unless each file read by readFiles still
// holds the bytes it held then.
func sameFiles(t *testing.T, when string, was map[string][]byte) {
	t.Helper()
	for p, b := range was {
		if now, _ := os.ReadFile(p); !bytes.Equal(now, b) {
			t.Fatalf("%s: %s changed", when, p)
		}
	}
}

// Rule: an operator's upload to a signing registry whose bundle file was
// renamed into place but whose directory sync failed (so the new version
// is on disk, with its signature, but not in force) is put in force by the
// next publication, as a restart would, which then goes on from it: a
// rotation publishes the version after it, a retirement revokes over it,
// and an upload is checked against it (another bundle of its version, or a
// higher one lifting its revocation, refused). No publication writes a
// second bundle of the landed version over it (a rotation used to, which a
// replica sharing the file that took the first would never install).
func TestAnUploadWhoseBundleLandedIsInstalledByTheNextPublication(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]struct {
		publish func(a *Authority, cur *proofs.Bundle) error
		version uint64 // in force after it, above cur's
		code    fencegate.Code
	}{
		"rotation": {func(a *Authority, _ *proofs.Bundle) error { _, err := a.RotateKey(ctx); return err }, 2, ""},
		"retirement": {func(a *Authority, _ *proofs.Bundle) error {
			_, err := a.RetireEpoch(ctx, 1)
			return err
		}, 2, ""},
		"another bundle of its version": {func(a *Authority, cur *proofs.Bundle) error {
			_, err := a.SetTrustBundle(ctx, revokingDoc(t, cur, cur.Version()+1, 8))
			return err
		}, 1, fencegate.CodeInvalidRequest},
		"a higher version lifting its revocation": {func(a *Authority, cur *proofs.Bundle) error {
			_, err := a.SetTrustBundle(ctx, revokingDoc(t, cur, cur.Version()+2, 8))
			return err
		}, 1, fencegate.CodeInvalidRequest},
		"the same upload": {func(a *Authority, cur *proofs.Bundle) error {
			_, err := a.SetTrustBundle(ctx, revokingDoc(t, cur, cur.Version()+1, 9))
			return err
		}, 1, ""},
	} {
		a, cfg := openSigning(t)
		cur := a.Verifier().Bundle()
		up := revokingDoc(t, cur, cur.Version()+1, 9)
		func() {
			saved := fsync
			defer func() { fsync = saved }()
			failingFsync(t, 4) // the signature's file and directory, the bundle's file, then its directory
			if _, err := a.SetTrustBundle(ctx, up); err == nil {
				t.Fatal("the upload answered success")
			}
		}()
		if landed, err := os.ReadFile(cfg.Files.Bundle); err != nil || !bytes.Equal(landed, up) || a.Verifier().Bundle().Version() != cur.Version() {
			t.Fatalf("%s: the upload did not land on disk without being in force: this test pins nothing", name)
		}
		if err := c.publish(a, cur); fencegate.ErrorCode(err) != c.code {
			t.Fatalf("%s over the landed upload: %v, want code %q", name, err, c.code)
		}
		got := a.Verifier().Bundle()
		if got.Version() != cur.Version()+c.version || !a.EpochRevoked(9) {
			t.Fatalf("%s over the landed upload: version %d in force, epoch 9 revoked %v; want %d, revoked", name, got.Version(), a.EpochRevoked(9), cur.Version()+c.version)
		}
		onDisk, err := os.ReadFile(cfg.Files.Bundle)
		if doc, _ := got.Marshal(); err != nil || !bytes.Equal(onDisk, doc) {
			t.Fatalf("%s over the landed upload: the bundle file is not the bundle in force", name)
		}
		if c.version == 1 {
			doc, sig, _ := a.SignedTrustBundle(ctx)
			if _, err := proofs.VerifyBundleSignature(cur, doc, sig, cur.Version()+1, a.now()); err != nil || !bytes.Equal(doc, up) {
				t.Fatalf("%s: the served bundle is not the landed upload, signed: %v", name, err)
			}
		}
	}
}

// Rule: a bundle file above the version in force that this registry did
// not publish (written by another process or by hand: no signature of it
// here) stops every other publication, refused (INTERNAL) with the file
// left as it is, until it is installed: by a restart, or by an upload of
// that same bundle.
func TestABundleFileNotPublishedHereStopsOtherPublications(t *testing.T) {
	ctx := context.Background()
	a, cfg := openSigning(t)
	cur := a.Verifier().Bundle()
	foreign := revokingDoc(t, cur, cur.Version()+1, 9)
	if err := WriteFileAtomic(cfg.Files.Bundle, foreign, 0o644); err != nil {
		t.Fatal(err)
	}
	was := readFiles(cfg.Files.State, a.sigFile())
	for name, publish := range map[string]func() error{
		"rotation":   func() error { _, err := a.RotateKey(ctx); return err },
		"retirement": func() error { _, err := a.RetireEpoch(ctx, 1); return err },
		"another bundle of its version": func() error {
			_, err := a.SetTrustBundle(ctx, revokingDoc(t, cur, cur.Version()+1, 8))
			return err
		},
		"a higher version": func() error {
			_, err := a.SetTrustBundle(ctx, revokingDoc(t, cur, cur.Version()+2, 8))
			return err
		},
	} {
		if err := publish(); fencegate.ErrorCode(err) != fencegate.CodeInternal {
			t.Fatalf("%s over the file: %v, want INTERNAL", name, err)
		}
		if now, _ := os.ReadFile(cfg.Files.Bundle); !bytes.Equal(now, foreign) {
			t.Fatalf("%s over the file: the bundle file changed", name)
		}
		sameFiles(t, name+" over the file", was)
		if a.Verifier().Bundle().Version() != cur.Version() || a.CurrentEpoch() != 1 {
			t.Fatalf("%s over the file: version %d, epoch %d in force", name, a.Verifier().Bundle().Version(), a.CurrentEpoch())
		}
	}
	if restarted, err := Open(cfg); err != nil || !restarted.EpochRevoked(9) || restarted.Verifier().Bundle().Version() != cur.Version()+1 {
		t.Fatalf("a restart does not install the file: %v", err)
	}
	if _, err := a.SetTrustBundle(ctx, foreign); err != nil || !a.EpochRevoked(9) {
		t.Fatalf("the same bundle uploaded: %v", err)
	}
	if _, err := a.RotateKey(ctx); err != nil {
		t.Fatalf("a rotation once the file is in force: %v", err)
	}
}

// Rule: a bundle file above the version in force that this registry did
// not publish and cannot take (here: it lacks the signing key, so a
// restart refuses it too) is refused with a message that promises no
// restart (it says a restart installs the file only if it can) and names
// replacing the file; the file and the bundle in force stay as they were.
func TestABundleFileNotPublishedHereThatARestartRefusesSaysToReplaceIt(t *testing.T) {
	ctx := context.Background()
	a, cfg := openSigning(t)
	cur := a.Verifier().Bundle()
	// A valid bundle of another key only: it lacks the signing key.
	other, err := proofs.NewSigner(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)), "other-7", jwa.EdDSA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := proofs.NewBundle(cur.Version()+1, other.BundleKey(7))
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(cfg.Files.Bundle, foreign, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(cfg); err == nil {
		t.Fatal("a restart started on a bundle file without the signing key")
	}
	_, err = a.RotateKey(ctx)
	if fencegate.ErrorCode(err) != fencegate.CodeInternal || !strings.Contains(err.Error(), "replace the file") || strings.Contains(err.Error(), "restart to install it") {
		t.Fatalf("a rotation over the file: %v, want INTERNAL naming replacing the file, promising no restart", err)
	}
	if now, _ := os.ReadFile(cfg.Files.Bundle); !bytes.Equal(now, foreign) || a.Verifier().Bundle().Version() != cur.Version() {
		t.Fatal("the refused rotation changed the file or the bundle in force")
	}
}
