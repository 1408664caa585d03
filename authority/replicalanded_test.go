package authority

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
)

// openReplica opens a registry-less authority whose bundle file is a
// signing registry's first bundle.
func openReplica(t *testing.T) (*Authority, Config) {
	t.Helper()
	reg, _ := openSigning(t)
	return openReplicaOf(t, reg)
}

// landAtReplica uploads doc to the replica a (bundle file cfg's) with the
// bundle's directory sync failing, so that it is on disk but not in force,
// failing t unless it so landed.
func landAtReplica(t *testing.T, a *Authority, cfg Config, doc []byte) {
	t.Helper()
	inForce := a.Verifier().Bundle().Version()
	func() {
		saved := fsync
		defer func() { fsync = saved }()
		failingFsync(t, 2) // the bundle's file, then its directory
		if _, err := a.SetTrustBundle(context.Background(), doc); err == nil {
			t.Fatal("the upload answered success")
		}
	}()
	if landed, err := os.ReadFile(cfg.Files.Bundle); err != nil || !bytes.Equal(landed, doc) || a.Verifier().Bundle().Version() != inForce {
		t.Fatal("the upload did not land on disk without being in force: this test pins nothing")
	}
}

// openReplicaOf opens a registry-less authority whose bundle file is reg's
// bundle in force.
func openReplicaOf(t *testing.T, reg *Authority) (*Authority, Config) {
	t.Helper()
	doc, err := reg.TrustBundle(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := Config{Files: Files{State: filepath.Join(dir, "state.json"), Bundle: filepath.Join(dir, "bundle.json")},
		Now: reg.now, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := os.WriteFile(cfg.Files.Bundle, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a, cfg
}

// Rule: at a replica, an upload whose bundle file was renamed into place
// but whose directory sync failed (on disk, not in force) stops the upload
// of any other bundle of its version or above (INTERNAL, the file and the
// bundle in force as they were) until it is installed: another bundle of
// its version used to be installed in memory while the file kept the first
// (the file is not written over a version as new), the same-version split
// the signing registry refuses. The same upload again installs it.
func TestAReplicasUploadWhoseBundleLandedStopsOtherBundlesOfItsVersionOrAbove(t *testing.T) {
	ctx := context.Background()
	a, cfg := openReplica(t)
	cur := a.Verifier().Bundle()
	up := revokingDoc(t, cur, cur.Version()+1, 9)
	landAtReplica(t, a, cfg, up)
	was := readFiles(cfg.Files.State)
	for name, doc := range map[string][]byte{
		"another bundle of its version": revokingDoc(t, cur, cur.Version()+1, 8),
		"a higher version":              revokingDoc(t, cur, cur.Version()+2, 8),
	} {
		if _, err := a.SetTrustBundle(ctx, doc); fencegate.ErrorCode(err) != fencegate.CodeInternal {
			t.Fatalf("%s over the landed upload: %v, want INTERNAL", name, err)
		}
		if now, _ := os.ReadFile(cfg.Files.Bundle); !bytes.Equal(now, up) {
			t.Fatalf("%s over the landed upload: the bundle file changed", name)
		}
		sameFiles(t, name+" over the landed upload", was)
		if v := a.Verifier().Bundle().Version(); v != cur.Version() || a.EpochRevoked(8) {
			t.Fatalf("%s over the landed upload: version %d in force, epoch 8 revoked %v", name, v, a.EpochRevoked(8))
		}
	}
	if _, err := a.SetTrustBundle(ctx, up); err != nil || !a.EpochRevoked(9) || a.Verifier().Bundle().Version() != cur.Version()+1 {
		t.Fatalf("the same upload again: %v", err)
	}
}

// Rule: the same upload sent again after one whose bundle file landed but
// whose directory sync failed syncs that directory before it is put in
// force (a failure there is INTERNAL and changes nothing): it skipped the
// write, as the file already held the bundle, and so never redid the sync,
// yet the state file then recorded the new version, and a crash losing the
// rename left a file below it, a start Open refuses.
func TestTheSameUploadAgainSyncsTheDirectoryOfTheLandedFile(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]struct {
		open         func(*testing.T) (*Authority, Config)
		landing, dir int // the failing fsync: the upload's bundle directory, then the retry's
	}{
		"replica":  {openReplica, 2, 1}, // the bundle's file and directory; the retry writes nothing else
		"registry": {openSigning, 4, 3}, // the signature's file and directory first, each time
	} {
		a, cfg := c.open(t)
		cur := a.Verifier().Bundle()
		up := revokingDoc(t, cur, cur.Version()+1, 9)
		for _, nth := range []int{c.landing, c.dir} {
			func() {
				saved := fsync
				defer func() { fsync = saved }()
				failingFsync(t, nth)
				if _, err := a.SetTrustBundle(ctx, up); fencegate.ErrorCode(err) != fencegate.CodeInternal {
					t.Fatalf("%s: the upload with fsync %d failing: %v, want INTERNAL", name, nth, err)
				}
			}()
			if landed, err := os.ReadFile(cfg.Files.Bundle); err != nil || !bytes.Equal(landed, up) {
				t.Fatalf("%s: the upload did not land on disk: this test pins nothing", name)
			}
			if a.Verifier().Bundle().Version() != cur.Version() || a.EpochRevoked(9) {
				t.Fatalf("%s: fsync %d failing: the upload is in force", name, nth)
			}
			if p, err := loadPersisted(cfg.Files.State); err != nil || p.BundleVersion > cur.Version() {
				t.Fatalf("%s: fsync %d failing: the state file records version %d", name, nth, p.BundleVersion)
			}
		}
		if _, err := a.SetTrustBundle(ctx, up); err != nil || !a.EpochRevoked(9) {
			t.Fatalf("%s: the same upload once its directory syncs: %v", name, err)
		}
	}
}

// Rule: a replica follows no registry bundle of the version its bundle file
// holds when the file holds another bundle of it (an upload here whose
// directory sync failed after the rename): INTERNAL, naming the two, with
// the file and the bundle in force as they were. It used to install the
// registry's in memory while the file kept the upload (never replaced by a
// version as new), so a restart put the upload in force and the registry's
// never installed again.
func TestAReplicaFollowsNoRegistryBundleOfTheVersionItsFileHoldsAnotherOf(t *testing.T) {
	ctx := context.Background()
	reg, _ := openSigning(t)
	a, cfg := openReplicaOf(t, reg)
	cur := a.Verifier().Bundle()
	if _, err := reg.SetTrustBundle(ctx, revokingDoc(t, cur, cur.Version()+1, 8)); err != nil {
		t.Fatal(err)
	}
	fetched, sig, err := reg.SignedTrustBundle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	up := revokingDoc(t, cur, cur.Version()+1, 9)
	landAtReplica(t, a, cfg, up)
	was := readFiles(cfg.Files.State)
	ok, _, err := a.OfferBundle(fetched, sig)
	if ok || fencegate.ErrorCode(err) != fencegate.CodeInternal || !strings.Contains(err.Error(), "revoking epochs [8]") || !strings.Contains(err.Error(), "revoking epochs [9]") {
		t.Fatalf("the registry's bundle of the landed upload's version: installed %v, %v; want INTERNAL naming both", ok, err)
	}
	if v := a.Verifier().Bundle().Version(); v != cur.Version() || a.EpochRevoked(8) {
		t.Fatalf("after the refusal: version %d in force, epoch 8 revoked %v", v, a.EpochRevoked(8))
	}
	if now, _ := os.ReadFile(cfg.Files.Bundle); !bytes.Equal(now, up) {
		t.Fatal("after the refusal: the bundle file changed")
	}
	if p, err := loadPersisted(cfg.Files.State); err != nil || p.BundleVersion != cur.Version() {
		t.Fatalf("after the refusal: the state file records version %d", p.BundleVersion)
	}
	sameFiles(t, "after the refusal", was)
}

// Rule: at a replica, a bundle file above the version in force that a
// reload refuses (it lifts a revocation an upload below its version put in
// force) stops no upload: a higher one replaces it and is in force. Every
// upload at or above the file's version used to be refused (INTERNAL),
// promising that a reload of the file or a restart would install it, which
// the reload never did: the replica took no upload until a restart.
func TestAReplicasBundleFileThatAReloadRefusesStopsNoHigherUpload(t *testing.T) {
	ctx := context.Background()
	a, cfg := openReplica(t)
	cur := a.Verifier().Bundle()
	landed := revokingDoc(t, cur, cur.Version()+2, 9)
	landAtReplica(t, a, cfg, landed)
	if _, err := a.SetTrustBundle(ctx, revokingDoc(t, cur, cur.Version()+1, 8)); err != nil || !a.EpochRevoked(8) {
		t.Fatalf("an upload below the file's version: %v", err)
	}
	if installed, _, err := a.ReloadBundle(); installed || err == nil {
		t.Fatalf("a reload of the file lifting the revocation of epoch 8: installed %v, %v; want refused", installed, err)
	}
	higher := revokingDoc(t, cur, cur.Version()+3, 8)
	if _, err := a.SetTrustBundle(ctx, higher); err != nil {
		t.Fatalf("an upload above the file a reload refuses: %v", err)
	}
	if v := a.Verifier().Bundle().Version(); v != cur.Version()+3 || !a.EpochRevoked(8) {
		t.Fatalf("after the higher upload: version %d in force, epoch 8 revoked %v", v, a.EpochRevoked(8))
	}
	if onDisk, _ := os.ReadFile(cfg.Files.Bundle); !bytes.Equal(onDisk, higher) {
		t.Fatal("after the higher upload: the bundle file does not hold it")
	}
}

// Rule: a reload syncs the bundle file's directory before it puts the file
// in force (a sync that fails is INTERNAL and changes nothing, the state
// file included): the state saved then records the file's version, and a
// crash losing the file's rename would leave a file below it, which Open
// refuses. It installed the file unsynced, while persistThenInstall syncs
// a file it keeps for the same reason.
func TestAReloadSyncsTheBundleFilesDirectoryBeforeItIsInForce(t *testing.T) {
	a, cfg := openReplica(t)
	cur := a.Verifier().Bundle()
	if err := WriteFileAtomic(cfg.Files.Bundle, revokingDoc(t, cur, cur.Version()+1, 9), 0o644); err != nil {
		t.Fatal(err)
	}
	func() {
		saved := fsync
		defer func() { fsync = saved }()
		failingFsync(t, 1)
		if installed, _, err := a.ReloadBundle(); installed || fencegate.ErrorCode(err) != fencegate.CodeInternal {
			t.Fatalf("a reload whose directory sync fails: installed %v, %v; want INTERNAL", installed, err)
		}
	}()
	if a.Verifier().Bundle().Version() != cur.Version() || a.EpochRevoked(9) {
		t.Fatalf("a reload whose directory sync failed: version %d in force", a.Verifier().Bundle().Version())
	}
	if p, err := loadPersisted(cfg.Files.State); err != nil || p.BundleVersion != cur.Version() {
		t.Fatalf("a reload whose directory sync failed: the state file records version %d", p.BundleVersion)
	}
	if installed, _, err := a.ReloadBundle(); !installed || err != nil || !a.EpochRevoked(9) {
		t.Fatalf("the reload again: installed %v, %v", installed, err)
	}
}
