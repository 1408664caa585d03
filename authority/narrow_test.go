package authority_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

// missedTwoChanges has w's registry rotate K1→K2 (v2) and retire epoch 1
// (v3 = {K2}, signed by K2 only) while the replica stays at v1 = {K1}; it
// returns v2 and v3 as served.
func missedTwoChanges(t *testing.T, w *chainWorld) (v2, sig2, v3, sig3 []byte) {
	t.Helper()
	if _, err := w.registry.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	d2, s2 := w.served()
	if _, err := w.registry.RetireEpoch(ctx, 1); err != nil {
		t.Fatal(err)
	}
	d3, s3 := w.served()
	if got := signedBy(t, s3); !slices.Equal(got, []string{"registry-2"}) {
		t.Fatalf("v3 signed by %v", got)
	}
	return d2, []byte(s2), d3, []byte(s3)
}

// Rule: a replica two changes behind (K1→K2, then epoch 1 revoked) that is
// offered the registry's v3, which no key in force there signs, refuses
// it, yet revokes epoch 1 at once (logged once as an error naming the
// operator's step), keeps its bundle (version, keys, file) and so trusts
// no key of v3; the revocation survives a restart, and the registry's v3
// installs over it later.
func TestARefusedBundleStillRevokesWhatItRevokes(t *testing.T) {
	w := newChainWorld(t, false)
	_, _, v3, sig3 := missedTwoChanges(t, w)
	file := w.rep.read("trust-bundle.json")
	for range 2 {
		ok, _, err := w.replica.OfferBundle(v3, string(sig3))
		if ok {
			t.Fatal("v3 installed with no key in common")
		}
		wantCode(t, err, fencegate.CodeInvalidRequest)
	}
	check := func(when string) {
		t.Helper()
		b := w.replica.Verifier().Bundle()
		if !w.replica.EpochRevoked(1) || w.replica.EpochRevoked(2) {
			t.Fatalf("%s: epoch 1 revoked %v, epoch 2 revoked %v", when, w.replica.EpochRevoked(1), w.replica.EpochRevoked(2))
		}
		if b.Version() != 1 || !slices.Equal(b.KeyIDs(), []string{"registry-1"}) || !bytes.Equal(w.rep.read("trust-bundle.json"), file) {
			t.Fatalf("%s: bundle version %d keys %v, or its file changed", when, b.Version(), b.KeyIDs())
		}
	}
	check("after the offer")
	if n := strings.Count(w.rep.logs.String(), "its revocations applied here"); n != 1 || !strings.Contains(w.rep.logs.String(), "level=ERROR") {
		t.Fatalf("logged %d times, want one error:\n%s", n, w.rep.logs.String())
	}
	w.replica = w.rep.open()
	check("after a restart")
	if _, err := w.replica.SetTrustBundle(ctx, v3); err != nil {
		t.Fatalf("the operator installs the registry's v3: %v", err)
	}
	if b := w.replica.Verifier().Bundle(); b.Version() != 3 || !slices.Equal(b.KeyIDs(), []string{"registry-2"}) {
		t.Fatalf("after the operator's install: version %d keys %v", b.Version(), b.KeyIDs())
	}
}

// Rule: an impostor's bundle (its own key, signed by it) that revokes an
// epoch a key in force here signs for makes the replica revoke that epoch
// (a denial of service the registryURL endpoint can cause: refusing is the
// fail-safe side) and takes nothing else: none of its keys, not its
// version, not a key ID alone, and not an epoch no key here signs for, whose
// revocation would refuse for good the registry's later bundles bringing
// its key (the next rotation is still followed).
func TestAnImpostorsRevocationNarrowsButAddsNoKey(t *testing.T) {
	for name, c := range map[string]struct {
		rv      proofs.Revocations
		revoked bool // epoch 1, the one in force here
	}{
		"epoch in force":    {proofs.Revocations{Epochs: []uint64{1}}, true},
		"key ID alone":      {proofs.Revocations{KeyIDs: []string{"registry-1"}}, false},
		"epochs not yet in": {proofs.Revocations{Epochs: []uint64{2, 3, 4}}, false},
	} {
		w := newChainWorld(t, false)
		doc, sig, _ := prooftest.Impostor(t, "impostor-5", 5, 9, c.rv)
		bundleFile, stateFile := w.rep.read("trust-bundle.json"), w.rep.read("authority.json")
		_, _, err := w.replica.OfferBundle(doc, sig)
		wantCode(t, err, fencegate.CodeInvalidRequest)
		b := w.replica.Verifier().Bundle()
		// The bundle file never changes; the State file only by a narrowing.
		if !bytes.Equal(w.rep.read("trust-bundle.json"), bundleFile) ||
			bytes.Equal(w.rep.read("authority.json"), stateFile) == c.revoked {
			t.Fatalf("%s: the bundle file changed, or the State file changed %v (want %v)", name,
				!bytes.Equal(w.rep.read("authority.json"), stateFile), c.revoked)
		}
		if w.replica.EpochRevoked(1) != c.revoked || w.replica.EpochRevoked(2) || w.replica.EpochRevoked(5) {
			t.Fatalf("%s: epoch 1 revoked %v (want %v), epoch 2 %v, epoch 5 %v", name, w.replica.EpochRevoked(1), c.revoked,
				w.replica.EpochRevoked(2), w.replica.EpochRevoked(5))
		}
		if b.Version() != 1 || !slices.Equal(b.KeyIDs(), []string{"registry-1"}) {
			t.Fatalf("%s: the impostor's bundle widened trust: version %d keys %v", name, b.Version(), b.KeyIDs())
		}
		if c.revoked {
			continue
		}
		if _, err := w.registry.RotateKey(ctx); err != nil {
			t.Fatal(err)
		}
		data, sig := w.served()
		if ok, v, err := w.replica.OfferBundle(data, sig); err != nil || !ok || v != 2 {
			t.Fatalf("%s: the registry's rotation to epoch 2 after the impostor's bundle: installed %v, version %d, %v", name, ok, v, err)
		}
	}
}
