package authority

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencegate/fencegate/proofs"
)

// failingFsync makes the nth fsync from now fail (EIO), until the test ends.
func failingFsync(t *testing.T, nth int) {
	t.Helper()
	saved, calls := fsync, 0
	t.Cleanup(func() { fsync = saved })
	fsync = func(f *os.File) error {
		if calls++; calls == nth {
			return errors.New("EIO")
		}
		return saved(f)
	}
}

func openSigning(t *testing.T) (*Authority, Config) {
	t.Helper()
	dir := t.TempDir()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	cfg := Config{Files: Files{State: filepath.Join(dir, "state.json"), Bundle: filepath.Join(dir, "bundle.json"), Key: filepath.Join(dir, "key")},
		Signing: true, KeyID: "registry-1", IssuerEpoch: 1, Overlap: 10 * time.Minute, Now: func() time.Time { return now },
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	a, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a, cfg
}

// Retiring the signing epoch rotates and revokes in one bundle version, so a
// failed write leaves neither done, and a retry for the same epoch retires
// it. It used to rotate first and publish the revocation in a second
// version; when that second write failed, the signer had moved to epoch 2
// with epoch 1 still trusted, and the loss hook's retry (the epoch then
// current) retired 2 instead.
func TestRetiringTheSigningEpochIsOneBundleVersion(t *testing.T) {
	a, _ := openSigning(t)
	saved, syncs := fsync, 0
	fsync = func(f *os.File) error { syncs++; return saved(f) }
	_, err := a.RetireEpoch(context.Background(), 1)
	fsync = saved
	if err != nil || syncs == 0 {
		t.Fatalf("retirement: %v after %d fsyncs", err, syncs)
	}
	for nth := 1; nth <= syncs; nth++ { // each fsync the retirement makes, failing
		a, _ := openSigning(t)
		v := a.Verifier().Bundle().Version()
		func() {
			saved := fsync
			defer func() { fsync = saved }()
			failingFsync(t, nth)
			_, err := a.RetireEpoch(context.Background(), 1)
			if err == nil {
				t.Fatalf("fsync %d failing: the retirement answered success", nth)
			}
		}()
		if a.CurrentEpoch() != 1 && !a.EpochRevoked(1) {
			t.Fatalf("fsync %d failing: the signer moved to epoch %d with epoch 1 still trusted", nth, a.CurrentEpoch())
		}
		if _, err := a.RetireEpoch(context.Background(), 1); err != nil && a.CurrentEpoch() == 1 && !a.EpochRevoked(1) {
			continue // refused whole, and refused again: nothing changed (a stopped rotation waits for a restart)
		}
		if !a.EpochRevoked(1) {
			t.Fatalf("fsync %d failing, then a retry: epoch 1 is still trusted (signing %d)", nth, a.CurrentEpoch())
		}
		if got := a.Verifier().Bundle().Version(); got > v+2 {
			t.Fatalf("fsync %d failing: %d bundle versions for one retirement", nth, got-v)
		}
	}
}

// A rotation whose bundle file was renamed into place but whose directory
// sync failed keeps the new key (the file on disk trusts it), so a restart
// completes the rotation instead of starting on a bundle that caps the only
// key it has; a second rotation in this process is refused meanwhile, since
// it would publish another bundle of the same version.
func TestARotationWhoseBundleLandedKeepsItsKey(t *testing.T) {
	a, cfg := openSigning(t)
	failingFsync(t, 6) // the new key's file and directory, the signature's file and directory, the bundle's file, then its directory
	if _, err := a.RotateKey(context.Background()); err == nil {
		t.Fatal("the rotation answered success")
	}
	fsync = func(f *os.File) error { return f.Sync() }
	if _, err := a.RotateKey(context.Background()); err == nil {
		t.Fatal("a second rotation went on over the stopped one")
	}
	b, err := Open(cfg)
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	if b.CurrentEpoch() != 2 {
		t.Fatalf("after the restart: epoch %d, want the rotation completed (2)", b.CurrentEpoch())
	}
	if k, _ := b.Verifier().Bundle().Key(b.Signer().KeyID()); !k.NotAfter.IsZero() {
		t.Fatalf("the signing key %s expires at %v", b.Signer().KeyID(), k.NotAfter)
	}
}

// A retirement is refused too while a rotation stopped after its bundle
// landed: it would publish another bundle of the version on disk, which a
// replica that took the first would never install (its revocation lost
// there).
func TestARetirementWaitsForAStoppedRotation(t *testing.T) {
	a, cfg := openSigning(t)
	if _, err := a.RotateKey(context.Background()); err != nil {
		t.Fatal(err)
	}
	func() {
		saved := fsync
		defer func() { fsync = saved }()
		failingFsync(t, 6) // the second rotation's bundle directory (after its key's and signature's)
		if _, err := a.RotateKey(context.Background()); err == nil {
			t.Fatal("the rotation answered success")
		}
	}()
	onDisk, err := os.ReadFile(cfg.Files.Bundle)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.RetireEpoch(context.Background(), 1); err == nil {
		t.Fatal("a retirement published over a stopped rotation's bundle")
	}
	if now, _ := os.ReadFile(cfg.Files.Bundle); string(now) != string(onDisk) {
		t.Fatal("the bundle file changed")
	}
}

// Rule: a publication whose bundle file could not be written leaves no
// signed document of its version in the signature file (it was never
// published, yet signed by a key replicas trust), and a reopen drops one a
// crash left there.
func TestAFailedPublicationLeavesNoSignedDocumentBehind(t *testing.T) {
	a, _ := openSigning(t)
	saved, syncs := fsync, 0
	fsync = func(f *os.File) error { syncs++; return saved(f) }
	_, err := a.RotateKey(context.Background())
	fsync = saved
	if err != nil || syncs == 0 {
		t.Fatalf("rotation: %v after %d fsyncs", err, syncs)
	}
	failed := 0
	for nth := 1; nth <= syncs; nth++ { // each fsync the rotation makes, failing
		a, cfg := openSigning(t)
		v := a.Verifier().Bundle().Version()
		func() {
			failingFsync(t, nth)
			if _, err := a.RotateKey(context.Background()); err != nil {
				failed++
			}
		}()
		fsync = saved
		if got := a.Verifier().Bundle().Version(); got != v && got != v+1 {
			t.Fatalf("fsync %d failing: version %d in force, was %d", nth, got, v)
		}
		// Above the bundle in force only when the bundle file landed (its
		// directory sync failed after the rename): a restart serves it.
		published := a.Verifier().Bundle().Version()
		if onDisk, err := proofs.LoadBundle(cfg.Files.Bundle); err == nil {
			published = max(published, onDisk.Version())
		}
		for _, e := range readSignatures(a.sigFile()) {
			if e.Version > published {
				t.Fatalf("fsync %d failing: the signature file keeps version %d, never published (%d)", nth, e.Version, published)
			}
		}
		if _, err := Open(cfg); err != nil {
			t.Fatalf("fsync %d failing: reopen: %v", nth, err)
		}
	}
	if failed == 0 {
		t.Fatal("no failing fsync failed the rotation")
	}
	// A crash between the signature file and the bundle file: an entry
	// above the bundle in force, which Open drops.
	a, cfg := openSigning(t)
	entries := readSignatures(a.sigFile())
	orphan := entries[len(entries)-1]
	orphan.Version, orphan.Previous = orphan.Version+1, orphan.Version
	if err := a.writeSignatures(append(entries, orphan)); err != nil {
		t.Fatal(err)
	}
	b, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range readSignatures(b.sigFile()) {
		if e.Version > b.Verifier().Bundle().Version() {
			t.Fatalf("after a reopen the signature file keeps version %d above the one in force", e.Version)
		}
	}
}
