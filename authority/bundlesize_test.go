package authority_test

import (
	"bytes"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/proofs"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

// wantLimitRefusal checks that err is INVALID_REQUEST naming the limit.
func wantLimitRefusal(t *testing.T, err error) {
	t.Helper()
	wantCode(t, err, fencegate.CodeInvalidRequest)
	if !strings.Contains(err.Error(), fmt.Sprint(proofs.MaxBundleSize)) {
		t.Fatalf("the refusal does not name the limit: %v", err)
	}
}

// published is what a signing authority answers replicas and holds on
// disk: the served document and its signature, the chain after version 1,
// the bundle file and the signature file.
type published struct {
	doc, sig         string
	chain            fencegate.BundleChain
	bundle, sigsFile []byte
}

func publishedBy(t *testing.T, e *env, a *authority.Authority) published {
	t.Helper()
	doc, sig, err := a.SignedTrustBundle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := a.TrustBundleChain(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	return published{doc: string(doc), sig: sig, chain: chain,
		bundle: readFile(t, e.cfg.Files.Bundle), sigsFile: readFile(t, e.cfg.Files.Bundle+".sig")}
}

// Rule: a signing registry publishes no bundle whose served document (what
// Marshal writes) is longer than proofs.MaxBundleSize, the most a replica
// reads of GET /v1/trust-bundle and parses: an operator's upload under the
// limit as sent but over it as served is refused INVALID_REQUEST naming
// the limit, and changes nothing (bundle in force, its signature, the
// chain, both files; after a restart too). It used to be taken and served
// at about five times the limit, which every replica refused.
func TestAnUploadLongerThanTheLimitAsServedIsRefusedAndChangesNothing(t *testing.T) {
	e := newEnv(t, true)
	a := e.open()
	bundles(t, a, 2) // versions 1 to 3: a chain to answer
	cur := a.Verifier().Bundle()
	before := publishedBy(t, e, a)

	raw, _ := prooftest.OverServedDoc(t, cur)
	_, err := a.SetTrustBundle(ctx, raw)
	wantLimitRefusal(t, err)

	if v := a.Verifier().Bundle().Version(); v != cur.Version() {
		t.Fatalf("the refused upload is in force: version %d, was %d", v, cur.Version())
	}
	if after := publishedBy(t, e, a); !reflect.DeepEqual(after, before) {
		t.Fatal("the refused upload changed what is served or on disk")
	}
	if after := publishedBy(t, e, e.open()); !reflect.DeepEqual(after, before) {
		t.Fatal("after a restart, the refused upload changed what is served or on disk")
	}
}

// Rule: the limit holds for every bundle the registry publishes, not only
// an operator's: a rotation whose bundle would be served longer than
// proofs.MaxBundleSize (an uploaded bundle just under it, one key more) is
// refused INVALID_REQUEST naming the limit, and the signing key, the
// bundle in force and what is served and on disk stay as they were.
func TestARotationLongerThanTheLimitAsServedIsRefusedAndChangesNothing(t *testing.T) {
	e := newEnv(t, true)
	a := e.open()
	bundles(t, a, 1)
	cur := a.Verifier().Bundle()
	// One revoked key ID as padding, long enough to bring the served
	// document to 100 bytes under the limit: a new key does not fit.
	pad := func(n int) []byte {
		b, err := proofs.NewRevokingBundle(cur.Version()+1, proofs.Revocations{KeyIDs: []string{strings.Repeat("x", n)}}, cur.Keys()...)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := b.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return doc
	}
	doc := pad(1)
	doc = pad(1 + proofs.MaxBundleSize - 100 - len(doc))
	if len(doc) != proofs.MaxBundleSize-100 {
		t.Fatalf("padded document is %d bytes", len(doc))
	}
	if _, err := a.SetTrustBundle(ctx, doc); err != nil {
		t.Fatalf("an upload within the limit: %v", err)
	}
	before, epoch := publishedBy(t, e, a), a.CurrentEpoch()

	_, err := a.RotateKey(ctx)
	wantLimitRefusal(t, err)

	if a.CurrentEpoch() != epoch || a.Verifier().Bundle().Version() != cur.Version()+1 {
		t.Fatalf("the refused rotation moved: epoch %d, version %d", a.CurrentEpoch(), a.Verifier().Bundle().Version())
	}
	if after := publishedBy(t, e, a); !reflect.DeepEqual(after, before) {
		t.Fatal("the refused rotation changed what is served or on disk")
	}
	if _, err := os.Stat(e.cfg.Files.Key + ".next"); err == nil {
		t.Fatal("the refused rotation left its next key behind")
	}
}

// Rule: a signing registry does not start on a bundle file whose served
// document would be longer than proofs.MaxBundleSize (a file under the
// limit as written, replaced by hand): it would serve what no replica
// takes. The refusal names the limit, as does the one of a file over it
// as written (which LoadBundle refuses, on a replica too).
func TestARegistryDoesNotStartOnABundleFileLongerThanTheLimitAsServed(t *testing.T) {
	e := newEnv(t, true)
	a := e.open()
	raw, _ := prooftest.OverServedDoc(t, a.Verifier().Bundle())
	if err := os.WriteFile(e.cfg.Files.Bundle, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := authority.Open(e.cfg)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint(proofs.MaxBundleSize)) {
		t.Fatalf("start on a bundle served over the limit: %v", err)
	}

	over := append(bytes.Repeat([]byte(" "), proofs.MaxBundleSize), raw...)
	if err := os.WriteFile(e.cfg.Files.Bundle, over, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = authority.Open(e.cfg)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint(proofs.MaxBundleSize)) {
		t.Fatalf("start on a bundle file over the limit: %v", err)
	}
}
