package authority_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/proofs"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

// signedBy returns the kids of the signatures in sig, in order.
func signedBy(t *testing.T, sig string) []string {
	t.Helper()
	var kids []string
	for _, part := range strings.Split(sig, ", ") {
		kids = append(kids, kidOf(t, part))
	}
	return kids
}

// kidOf returns the kid of one detached JWS.
func kidOf(t *testing.T, jws string) string {
	t.Helper()
	h, _, _ := strings.Cut(jws, ".")
	raw, err := base64.RawURLEncoding.DecodeString(h)
	var hdr struct{ Kid string }
	if err == nil {
		err = json.Unmarshal(raw, &hdr)
	}
	if err != nil {
		t.Fatalf("header of %q: %v", jws, err)
	}
	return hdr.Kid
}

// chainWorld is a signing registry and a replica that started with the
// registry's first bundle as its file.
type chainWorld struct {
	reg, rep *env
	registry *authority.Authority
	replica  *authority.Authority
}

func newChainWorld(t *testing.T, acceptUnsigned bool) *chainWorld {
	t.Helper()
	w := &chainWorld{reg: newEnv(t, true), rep: newEnv(t, false)}
	w.registry = w.reg.open()
	v1, _ := w.registry.TrustBundle(ctx)
	if err := os.WriteFile(w.rep.cfg.Files.Bundle, v1, 0o644); err != nil {
		t.Fatal(err)
	}
	w.rep.cfg.AcceptUnsignedBundles = acceptUnsigned
	w.replica = w.rep.open()
	return w
}

// served is the registry's bundle and signature as GET /v1/trust-bundle answers them.
func (w *chainWorld) served() ([]byte, string) {
	data, sig, err := w.registry.SignedTrustBundle(ctx)
	if err != nil {
		w.reg.t.Fatal(err)
	}
	return data, sig
}

// Rule: every bundle a registry publishes is signed by the key that signed
// before the change and the one after (one key when it did not move), and
// each signature verifies under the bundle before: a rotation, a
// retirement of the signing epoch and of an older one, and the first bundle.
func TestEveryPublishedBundleIsSignedByTheKeyBeforeAndTheKeyAfter(t *testing.T) {
	w := newChainWorld(t, false)
	prev := w.registry.Verifier().Bundle()
	data, sig := w.served()
	if got := signedBy(t, sig); !slices.Equal(got, []string{"registry-1"}) {
		t.Fatalf("first bundle signed by %v", got)
	}
	if _, err := proofs.VerifyBundleSignature(prev, data, sig, 1, t0); err != nil {
		t.Fatalf("first bundle: %v", err)
	}
	for _, step := range []struct {
		name string
		do   func() error
		kids []string
	}{
		{"rotation", func() error { _, err := w.registry.RotateKey(ctx); return err }, []string{"registry-1", "registry-2"}},
		{"retiring the signing epoch", func() error { _, err := w.registry.RetireEpoch(ctx, 2); return err }, []string{"registry-2", "registry-3"}},
		{"retiring an older epoch", func() error { _, err := w.registry.RetireEpoch(ctx, 1); return err }, []string{"registry-3"}},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		data, sig := w.served()
		cur := w.registry.Verifier().Bundle()
		if got := signedBy(t, sig); !slices.Equal(got, step.kids) {
			t.Fatalf("%s: signed by %v, want %v", step.name, got, step.kids)
		}
		if onDisk := w.reg.read("trust-bundle.json"); !bytes.Equal(onDisk, data) {
			t.Fatalf("%s: the bytes served are not the bundle file's", step.name)
		}
		if kid, err := proofs.VerifyBundleSignature(prev, data, sig, cur.Version(), t0); err != nil || kid != step.kids[0] {
			t.Fatalf("%s: not verified under the bundle before by the outgoing key %s: %q %v", step.name, step.kids[0], kid, err)
		}
		prev = cur
	}
}

// Rule: the signatures of the bundle in force survive a restart of the
// registry (persisted beside the bundle when it was published), so a
// replica one change behind still follows after the outgoing key is gone.
func TestTheChainSignatureSurvivesARegistryRestart(t *testing.T) {
	w := newChainWorld(t, false)
	if _, err := w.registry.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	_, before := w.served()
	w.registry = w.reg.open()
	data, sig := w.served()
	if sig != before || !slices.Contains(signedBy(t, sig), "registry-1") {
		t.Fatalf("after a restart the signature is %q (signed by %v), was %q", sig, signedBy(t, sig), before)
	}
	if ok, v, err := w.replica.OfferBundle(data, sig); !ok || v != 2 || err != nil {
		t.Fatalf("the replica one rotation behind: %v %d %v", ok, v, err)
	}
}

// Rule: a replica installs a fetched bundle signed along the chain, and
// refuses, changing nothing (bundle, file), one signed only by keys of its
// own, one carrying another version's signature, and one of a registry that
// rotated twice since (no key in common; the refusal names the operator's
// step).
func TestAReplicaFollowsTheChainAndRefusesABundleOffIt(t *testing.T) {
	w := newChainWorld(t, false)
	if _, err := w.registry.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	v2, sig2 := w.served()
	forgedDoc, forgedSig, _ := prooftest.Impostor(t, "registry-2", 2, 2, proofs.Revocations{})
	file := w.rep.read("trust-bundle.json")
	for name, c := range map[string]struct {
		data []byte
		sig  string
	}{
		"signed by its own key":      {forgedDoc, forgedSig},
		"another bundle's signature": {forgedDoc, sig2},
	} {
		_, _, err := w.replica.OfferBundle(c.data, c.sig)
		wantCode(t, err, fencegate.CodeInvalidRequest)
		if v := w.replica.Verifier().Bundle().Version(); v != 1 || !bytes.Equal(w.rep.read("trust-bundle.json"), file) {
			t.Fatalf("%s: refused, yet the replica is at version %d or its file changed", name, v)
		}
	}
	if _, err := w.registry.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	v3, sig3 := w.served()
	_, _, err := w.replica.OfferBundle(v3, sig3)
	wantCode(t, err, fencegate.CodeInvalidRequest)
	if !strings.Contains(err.Error(), "replace the trust bundle file") || w.replica.Verifier().Bundle().Version() != 1 {
		t.Fatalf("two rotations behind: %v (version %d)", err, w.replica.Verifier().Bundle().Version())
	}
	if ok, _, err := w.replica.OfferBundle(v2, sig2); !ok || err != nil {
		t.Fatalf("v2 along the chain: %v %v", ok, err)
	}
	if ok, _, err := w.replica.OfferBundle(v3, sig3); !ok || err != nil {
		t.Fatalf("v3 along the chain: %v %v", ok, err)
	}
}

// Rule: an unsigned fetched bundle is refused by default and installed only
// with AcceptUnsignedBundles (logged), which does not let a signature that
// fails verification through.
func TestAnUnsignedBundleIsRefusedUnlessUnsignedBundlesAreAccepted(t *testing.T) {
	for _, accept := range []bool{false, true} {
		w := newChainWorld(t, accept)
		if _, err := w.registry.RotateKey(ctx); err != nil {
			t.Fatal(err)
		}
		v2, sig2 := w.served()
		_, _, err := w.replica.OfferBundle(v2, strings.Replace(sig2, "..", "..A", 1))
		wantCode(t, err, fencegate.CodeInvalidRequest)
		ok, _, err := w.replica.OfferBundle(v2, "")
		switch {
		case !accept && (ok || !errors.Is(err, proofs.ErrUnsignedBundle)):
			t.Fatalf("unsigned, refused by default: %v %v", ok, err)
		case accept && (!ok || err != nil || !strings.Contains(w.rep.logs.String(), "unsigned trust bundle")):
			t.Fatalf("unsigned, accepted: %v %v\n%s", ok, err, w.rep.logs.String())
		}
	}
}

// Rule: a key of an epoch revoked at the replica (by its operator: the key
// may be in a thief's hands) does not vouch for a bundle there, though the
// bundle in force still holds it: the registry's bundle that revokes the
// epoch too, signed by that key and its successor, is refused (the
// operator installs it), not taken on the revoked key's word.
func TestAKeyOfAnEpochRevokedHereDoesNotVouchForABundle(t *testing.T) {
	w := newChainWorld(t, false)
	if _, err := w.registry.RetireEpoch(ctx, 1); err != nil { // the signing epoch: rotates in the same version
		t.Fatal(err)
	}
	v2, sig2 := w.served()
	if got := signedBy(t, sig2); !slices.Equal(got, []string{"registry-1", "registry-2"}) {
		t.Fatalf("signed by %v", got)
	}
	if _, err := w.replica.RetireEpoch(ctx, 1); err != nil {
		t.Fatal(err)
	}
	_, _, err := w.replica.OfferBundle(v2, sig2)
	wantCode(t, err, fencegate.CodeInvalidRequest)
	if w.replica.Verifier().Bundle().Version() != 1 {
		t.Fatal("installed on the word of a key revoked here")
	}
}
