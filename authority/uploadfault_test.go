package authority_test

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
)

// Rule: an operator's upload to a signing registry (SetTrustBundle, behind
// PUT /v1/admin/trust-bundle) whose bundle file or signature file cannot be
// written leaves nothing half-done: it answers INTERNAL, the bundle in
// force is unchanged and served with its own signature, the chain answers
// as before, both files hold what they held, and no signature is kept for
// the version that was not installed. Once the directory is back, the same
// upload goes through.
func TestAnUploadThatCannotBePersistedLeavesBundleSignatureAndChainAsTheyWere(t *testing.T) {
	for _, lost := range []string{"bundle", "signature"} {
		t.Run(lost, func(t *testing.T) {
			e := newEnv(t, true)
			// The two files in directories of their own, so either can be
			// taken away alone.
			e.cfg.Files.BundleSignature = filepath.Join(e.dir, "trust-bundle.json.sig")
			path := &e.cfg.Files.Bundle
			if lost == "signature" {
				path = &e.cfg.Files.BundleSignature
			}
			lose, restore := elsewhere(e, path, lost)
			a := e.open()
			bundles(t, a, 2) // versions 1 to 3: a chain to answer
			cur := a.Verifier().Bundle()
			up, err := proofs.NewRevokingBundle(cur.Version()+1, proofs.Revocations{Epochs: []uint64{9}}, cur.Keys()...)
			if err != nil {
				t.Fatal(err)
			}
			doc, _ := up.Marshal()

			servedDoc, servedSig, _ := a.SignedTrustBundle(ctx)
			chain, err := a.TrustBundleChain(ctx, 1)
			if err != nil || len(chain.Bundles) != 2 {
				t.Fatalf("chain before: %+v %v", chain, err)
			}
			bundleFile, sigFile := readFile(t, e.cfg.Files.Bundle), readFile(t, e.cfg.Files.BundleSignature)

			lose()
			_, err = a.SetTrustBundle(ctx, doc)
			restore()
			wantCode(t, err, fencegate.CodeInternal)

			if v := a.Verifier().Bundle().Version(); v != cur.Version() || a.EpochRevoked(9) {
				t.Fatalf("an upload that was not persisted is in force: version %d, epoch 9 revoked %v", v, a.EpochRevoked(9))
			}
			if d, s, _ := a.SignedTrustBundle(ctx); !bytes.Equal(d, servedDoc) || s != servedSig {
				t.Fatalf("the served bundle changed:\n%s %s\n%s %s", servedDoc, servedSig, d, s)
			}
			if c, err := a.TrustBundleChain(ctx, 1); err != nil || !reflect.DeepEqual(c, chain) {
				t.Fatalf("the chain changed: %+v %v, was %+v", c, err, chain)
			}
			if !bytes.Equal(readFile(t, e.cfg.Files.Bundle), bundleFile) {
				t.Fatal("the bundle file changed")
			}
			if !bytes.Equal(readFile(t, e.cfg.Files.BundleSignature), sigFile) {
				t.Fatal("the signature file changed (a signature for a bundle not in force)")
			}
			if c, err := e.open().TrustBundleChain(ctx, 1); err != nil || !reflect.DeepEqual(c, chain) {
				t.Fatalf("after a restart the chain is %+v %v, was %+v", c, err, chain)
			}

			if _, err := a.SetTrustBundle(ctx, doc); err != nil || !a.EpochRevoked(9) {
				t.Fatalf("the upload once the directory is back: %v", err)
			}
			if c, err := a.TrustBundleChain(ctx, 1); err != nil || len(c.Bundles) != 3 || c.Bundles[2].Version != up.Version() {
				t.Fatalf("the chain after the upload: %+v %v", c, err)
			}
		})
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
