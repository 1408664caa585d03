package authority_test

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// A rotation whose new key cannot be written (the key's directory is gone,
// as a read-only Secret mount refuses writes) publishes nothing: the bundle
// in force and on disk is unchanged, the key still signing keeps no expiry,
// and the signer is the old one. It used to publish the new key (whose
// private half was then lost) and cap the signing key at the overlap, so
// that every grant failed once the overlap ended.
func TestARotationWhoseKeyCannotBeWrittenPublishesNothing(t *testing.T) {
	e := newEnv(t, true)
	lose, restore := elsewhere(e, &e.cfg.Files.Key, "keys")
	a := e.open()
	bundle := e.read("trust-bundle.json")
	lose()
	_, err := a.RotateKey(ctx)
	wantCode(t, err, fencegate.CodeInternal)
	restore()
	if b := a.Verifier().Bundle(); b.Version() != 1 || len(b.Keys()) != 1 || !b.Keys()[0].NotAfter.IsZero() {
		t.Fatalf("bundle in force after a refused rotation: version %d, keys %+v", b.Version(), b.Keys())
	}
	if got := e.read("trust-bundle.json"); !bytes.Equal(got, bundle) {
		t.Fatalf("bundle file changed:\n%s\n%s", bundle, got)
	}
	if a.Signer().KeyID() != "registry-1" || a.CurrentEpoch() != 1 {
		t.Fatalf("signer %s epoch %d after a refused rotation", a.Signer().KeyID(), a.CurrentEpoch())
	}
	if _, err := os.Stat(e.cfg.Files.Key + ".next"); !os.IsNotExist(err) {
		t.Fatalf("a next key was left: %v", err)
	}
	if st, err := a.RotateKey(ctx); err != nil || st.IssuerEpoch != 2 || e.open().Signer().KeyID() != "registry-2" {
		t.Fatalf("rotation once the key directory is back: %+v %v", st, err)
	}
}

// A rotation that stopped after publishing its bundle, before its new key
// replaced the old one, is completed at Open: the next key the bundle
// trusts becomes the key file and signs, so grants do not fail when the old
// key's overlap ends. A next key no bundle trusts (a rotation that stopped
// before publishing) is removed, and the old key keeps signing.
func TestARotationThatStoppedAfterItsBundleIsCompletedAtOpen(t *testing.T) {
	e := newEnv(t, true)
	a := e.open()
	oldKey, state := e.read("key"), e.read("authority.json")
	if _, err := a.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	newKey := e.read("key")
	// The crash: bundle published, the new key still beside the old one.
	for path, data := range map[string][]byte{e.cfg.Files.Key + ".next": newKey, e.cfg.Files.Key: oldKey, e.cfg.Files.State: state} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b := e.open()
	if b.CurrentEpoch() != 2 || b.Signer().KeyID() != "registry-2" || !bytes.Equal(e.read("key"), newKey) {
		t.Fatalf("after the interrupted rotation: epoch %d key %s", b.CurrentEpoch(), b.Signer().KeyID())
	}
	if _, err := os.Stat(e.cfg.Files.Key + ".next"); !os.IsNotExist(err) {
		t.Fatalf("the next key is still there: %v", err)
	}
	if !strings.Contains(e.logs.String(), "completing a key rotation") {
		t.Fatalf("completion not logged:\n%s", e.logs.String())
	}
	e.clock.Advance(11 * time.Minute) // past the old key's overlap: the new key still signs
	if err := os.WriteFile(e.cfg.Files.Key+".next", []byte(strings.Repeat("cd", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := e.open()
	if c.Signer().KeyID() != "registry-2" || !bytes.Equal(e.read("key"), newKey) {
		t.Fatalf("an unpublished next key was taken: signer %s", c.Signer().KeyID())
	}
	if _, err := os.Stat(e.cfg.Files.Key + ".next"); !os.IsNotExist(err) {
		t.Fatalf("an unpublished next key was left: %v", err)
	}
}

// A trust bundle that cannot be written is never in force: SetTrustBundle
// (an operator's upload) and OfferBundle (a replica's fetch) write the file
// first, and a refused write leaves the bundle in force, its revocations
// and the file as they were. The upload used to answer INTERNAL with the
// new keys and revocations already in force, and a restart took them back.
func TestABundleThatCannotBeWrittenIsNotInForce(t *testing.T) {
	reg := newEnv(t, true)
	registry := reg.open()
	v1, _ := registry.TrustBundle(ctx)
	// Retiring the signing epoch: one version later, epoch 1 revoked, signed
	// by key 1, which the replica trusts (a fetch follows the chain).
	if _, err := registry.RetireEpoch(ctx, 1); err != nil {
		t.Fatal(err)
	}
	v3, sig3, _ := registry.SignedTrustBundle(ctx)
	rep := newEnv(t, false)
	lose, restore := elsewhere(rep, &rep.cfg.Files.Bundle, "trust")
	if err := os.WriteFile(rep.cfg.Files.Bundle, v1, 0o644); err != nil {
		t.Fatal(err)
	}
	replica := rep.open()
	for name, offer := range map[string]func() error{
		"upload": func() error { _, err := replica.SetTrustBundle(ctx, v3); return err },
		"fetch":  func() error { _, _, err := replica.OfferBundle(v3, sig3); return err },
	} {
		lose()
		err := offer()
		restore()
		if fencegate.ErrorCode(err) != fencegate.CodeInternal {
			t.Fatalf("%s with the bundle's directory gone: %v, want INTERNAL", name, err)
		}
		if replica.Verifier().Bundle().Version() != 1 || replica.EpochRevoked(1) {
			t.Fatalf("%s: a bundle that was not written is in force (version %d, epoch 1 revoked %v)",
				name, replica.Verifier().Bundle().Version(), replica.EpochRevoked(1))
		}
		if got, _ := os.ReadFile(rep.cfg.Files.Bundle); !bytes.Equal(got, v1) {
			t.Fatalf("%s: the bundle file changed", name)
		}
	}
	if _, err := replica.SetTrustBundle(ctx, v3); err != nil || !replica.EpochRevoked(1) || !rep.open().EpochRevoked(1) {
		t.Fatalf("upload once the directory is back: %v", err)
	}
}

// A trust bundle file shared with the registry and other replicas (compose's
// volume "trust") is never moved back: an upload the verifier refuses (a
// lower version than the one in force) writes nothing, and one older than
// the file holds is installed without replacing the file. A refused upload
// used to be written first and the file "restored" with the bundle in force,
// older than what the registry had written there.
func TestASharedBundleFileIsNeverMovedBack(t *testing.T) {
	reg := newEnv(t, true)
	registry := reg.open()
	vs := bundles(t, registry, 2)
	v1, v2, v3 := vs[0], vs[1], vs[2]
	rep := newEnv(t, false)
	if err := os.WriteFile(rep.cfg.Files.Bundle, v1, 0o644); err != nil {
		t.Fatal(err)
	}
	replica := rep.open()
	if err := os.WriteFile(rep.cfg.Files.Bundle, v3, 0o644); err != nil { // the registry wrote v3 there since
		t.Fatal(err)
	}
	if _, err := replica.SetTrustBundle(ctx, v2); err != nil || replica.Verifier().Bundle().Version() != 2 {
		t.Fatalf("upload v2: %v", err)
	}
	if !bytes.Equal(rep.read("trust-bundle.json"), v3) {
		t.Fatal("an upload older than the shared file replaced it")
	}
	_, err := replica.SetTrustBundle(ctx, v1)
	wantCode(t, err, fencegate.CodeInvalidRequest)
	if !bytes.Equal(rep.read("trust-bundle.json"), v3) || replica.Verifier().Bundle().Version() != 2 {
		t.Fatal("a refused upload changed the shared file or the bundle in force")
	}
	if v := rep.open().Verifier().Bundle().Version(); v != 3 {
		t.Fatalf("after a restart: version %d, want the file's 3", v)
	}
}
