package authority

import (
	"bytes"
	"context"
	"os"
	"reflect"
	"testing"

	"github.com/fencegate/fencegate"
)

// rotated is a signing authority rotated once, so that the chain from the
// version before has a link to answer, with what it serves and keeps.
type rotated struct {
	a         *Authority
	cfg       Config
	v         uint64 // the version in force
	doc       []byte // the bundle in force as served
	servedSig string
	before    fencegate.BundleChain // the chain from v-1
	sigFile   string
	sigs      []byte // the signature file's bytes
}

func openRotated(t *testing.T) rotated {
	t.Helper()
	ctx := context.Background()
	var (
		r   rotated
		err error
	)
	r.a, r.cfg = openSigning(t)
	if _, err := r.a.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	r.v = r.a.Verifier().Bundle().Version()
	if r.before, err = r.a.TrustBundleChain(ctx, r.v-1); err != nil || len(r.before.Bundles) != 1 {
		t.Fatalf("the chain from version %d after the rotation: %+v, %v", r.v-1, r.before, err)
	}
	r.sigFile = r.cfg.Files.Bundle + ".sig"
	if r.sigs, err = os.ReadFile(r.sigFile); err != nil {
		t.Fatal(err)
	}
	if r.doc, r.servedSig, err = r.a.SignedTrustBundle(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

// Rule: the bundle in force uploaded again to a signing registry is an
// idempotent success that signs nothing again: after a rotation, the chain
// from the version before answers the same links and signatures (the
// outgoing key's among them), and the signature file is byte-identical. It
// used to be signed again by the signing key alone, recorded as published
// over an unknown version, so the chain from the version before answered
// NOT_FOUND and a replica one version behind lost the outgoing key's
// signature.
func TestTheBundleInForceUploadedAgainKeepsItsSignatureAndTheChain(t *testing.T) {
	ctx := context.Background()
	r := openRotated(t)
	st, err := r.a.SetTrustBundle(ctx, r.doc)
	if err != nil || st.TrustBundleVersion != r.v {
		t.Fatalf("the bundle in force uploaded again: version %d, %v", st.TrustBundleVersion, err)
	}
	after, err := r.a.TrustBundleChain(ctx, r.v-1)
	if err != nil || !reflect.DeepEqual(after, r.before) {
		t.Fatalf("the chain from version %d after the upload again: %+v, %v; want %+v", r.v-1, after, err, r.before)
	}
	if now, _ := os.ReadFile(r.sigFile); !bytes.Equal(now, r.sigs) {
		t.Fatal("the upload again changed the signature file")
	}
	if _, sig, _ := r.a.SignedTrustBundle(ctx); sig != r.servedSig {
		t.Fatal("the upload again changed the signature served")
	}
}

// Rule: the bundle in force uploaded again restores its bundle file and
// signature file when they were lost, as served (nothing signed again), so
// a restart then serves the same signature and the same chain.
func TestTheBundleInForceUploadedAgainRestoresLostFiles(t *testing.T) {
	ctx := context.Background()
	r := openRotated(t)
	for _, f := range []string{r.cfg.Files.Bundle, r.sigFile} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.a.SetTrustBundle(ctx, r.doc); err != nil {
		t.Fatalf("the bundle in force uploaded again: %v", err)
	}
	if now, err := os.ReadFile(r.sigFile); err != nil || !bytes.Equal(now, r.sigs) {
		t.Fatalf("the signature file is not restored as it was: %v", err)
	}
	restarted, err := Open(r.cfg)
	if err != nil {
		t.Fatalf("a restart: %v", err)
	}
	if _, sig, _ := restarted.SignedTrustBundle(ctx); sig != r.servedSig {
		t.Fatal("a restart serves another signature")
	}
	if after, err := restarted.TrustBundleChain(ctx, r.v-1); err != nil || !reflect.DeepEqual(after, r.before) {
		t.Fatalf("a restart answers another chain from version %d: %+v, %v", r.v-1, after, err)
	}
}
