package authority

import (
	"bytes"
	"context"
	"os"
	"reflect"
	"testing"
)

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
	a, cfg := openSigning(t)
	if _, err := a.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	v := a.Verifier().Bundle().Version()
	before, err := a.TrustBundleChain(ctx, v-1)
	if err != nil || len(before.Bundles) != 1 {
		t.Fatalf("the chain from version %d after the rotation: %+v, %v", v-1, before, err)
	}
	sigFile := cfg.Files.Bundle + ".sig"
	sigs, err := os.ReadFile(sigFile)
	if err != nil {
		t.Fatal(err)
	}
	doc, servedSig, err := a.SignedTrustBundle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := a.SetTrustBundle(ctx, doc)
	if err != nil || st.TrustBundleVersion != v {
		t.Fatalf("the bundle in force uploaded again: version %d, %v", st.TrustBundleVersion, err)
	}
	after, err := a.TrustBundleChain(ctx, v-1)
	if err != nil || !reflect.DeepEqual(after, before) {
		t.Fatalf("the chain from version %d after the upload again: %+v, %v; want %+v", v-1, after, err, before)
	}
	if now, _ := os.ReadFile(sigFile); !bytes.Equal(now, sigs) {
		t.Fatal("the upload again changed the signature file")
	}
	if _, sig, _ := a.SignedTrustBundle(ctx); sig != servedSig {
		t.Fatal("the upload again changed the signature served")
	}
}

// Rule: the bundle in force uploaded again restores its bundle file and
// signature file when they were lost, as served (nothing signed again), so
// a restart then serves the same signature and the same chain.
func TestTheBundleInForceUploadedAgainRestoresLostFiles(t *testing.T) {
	ctx := context.Background()
	a, cfg := openSigning(t)
	if _, err := a.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	v := a.Verifier().Bundle().Version()
	sigFile := cfg.Files.Bundle + ".sig"
	sigs, err := os.ReadFile(sigFile)
	if err != nil {
		t.Fatal(err)
	}
	doc, servedSig, err := a.SignedTrustBundle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before, err := a.TrustBundleChain(ctx, v-1)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{cfg.Files.Bundle, sigFile} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.SetTrustBundle(ctx, doc); err != nil {
		t.Fatalf("the bundle in force uploaded again: %v", err)
	}
	if now, err := os.ReadFile(sigFile); err != nil || !bytes.Equal(now, sigs) {
		t.Fatalf("the signature file is not restored as it was: %v", err)
	}
	restarted, err := Open(cfg)
	if err != nil {
		t.Fatalf("a restart: %v", err)
	}
	if _, sig, _ := restarted.SignedTrustBundle(ctx); sig != servedSig {
		t.Fatal("a restart serves another signature")
	}
	if after, err := restarted.TrustBundleChain(ctx, v-1); err != nil || !reflect.DeepEqual(after, before) {
		t.Fatalf("a restart answers another chain from version %d: %+v, %v", v-1, after, err)
	}
}
