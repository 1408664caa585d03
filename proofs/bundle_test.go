package proofs_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
)

func pubJWK(t testing.TB, raw any, kid string) jwk.Key {
	t.Helper()
	k, err := jwk.FromRaw(raw)
	mustOK(t, err)
	mustOK(t, k.Set(jwk.KeyIDKey, kid))
	return k
}

func TestBundleMarshalParseRoundTrip(t *testing.T) {
	ed, err := proofs.GenerateEd25519Signer("ed")
	mustOK(t, err)
	ecPriv, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ec, err := proofs.NewSigner(ecPriv, "ec", proofs.AlgES256)
	mustOK(t, err)
	hs, err := proofs.NewSigner([]byte(strings.Repeat("s", 32)), "hs", proofs.AlgHS256)
	mustOK(t, err)

	nbf := time.Unix(1_900_000_000, 0)
	exp := time.Unix(1_900_086_400, 0)
	b, err := proofs.NewBundle(7, ed.BundleKeyWindow(3, nbf, exp), ec.BundleKey(4), hs.BundleKey(5))
	mustOK(t, err)
	data, err := b.Marshal()
	mustOK(t, err)

	var doc struct {
		Version uint64           `json:"version"`
		Keys    []map[string]any `json:"keys"`
	}
	mustOK(t, json.Unmarshal(data, &doc))
	if doc.Version != 7 || len(doc.Keys) != 3 {
		t.Fatalf("document %s", data)
	}
	k0 := doc.Keys[0]
	if k0["kid"] != "ed" || k0["alg"] != "EdDSA" || k0["kty"] != "OKP" || k0["crv"] != "Ed25519" ||
		k0["epoch"] != 3.0 || k0["nbf"] != 1.9e9 || k0["exp"] != 1_900_086_400.0 || k0["d"] != nil {
		t.Fatalf("first key %v", k0)
	}
	if _, ok := doc.Keys[1]["nbf"]; ok {
		t.Fatalf("nbf written for a key without a window: %v", doc.Keys[1])
	}

	path := filepath.Join(t.TempDir(), "bundle.json")
	mustOK(t, os.WriteFile(path, data, 0o600))
	b2, err := proofs.LoadBundle(path)
	mustOK(t, err)
	if b2.Version() != 7 || strings.Join(b2.KeyIDs(), ",") != "ed,ec,hs" {
		t.Fatalf("loaded bundle v%d %v", b2.Version(), b2.KeyIDs())
	}
	e, ok := b2.Key("ed")
	if !ok || e.Alg != jwa.EdDSA || e.Epoch != 3 || !e.NotBefore.Equal(nbf) || !e.NotAfter.Equal(exp) || !jwk.Equal(e.Key, ed.PublicKey()) {
		t.Fatalf("entry %+v", e)
	}
	if e, _ := b2.Key("hs"); e.Alg != jwa.HS256 || e.Epoch != 5 || !e.NotBefore.IsZero() {
		t.Fatalf("entry %+v", e)
	}

	// Tokens of every signer verify against the loaded bundle, inside the window.
	v, err := proofs.NewVerifier(b2, proofs.WithClock(func() time.Time { return nbf.Add(time.Hour) }))
	mustOK(t, err)
	for _, c := range []struct {
		s     *proofs.Signer
		epoch uint64
	}{{ed, 3}, {ec, 4}, {hs, 5}} {
		g := fencegate.Grant{Schema: fencegate.GrantSchema, Resource: "r", Owner: "o", Lease: "l", FenceToken: 1,
			OperationRoot: "root", IssuerEpoch: c.epoch, IssuedAt: 1, ExpiresAt: 2}
		tok, _, err := c.s.SignGrant(g)
		mustOK(t, err)
		vg, err := v.VerifyGrant(tok)
		mustOK(t, err)
		if vg.KeyID != c.s.KeyID() {
			t.Fatalf("kid %q", vg.KeyID)
		}
	}
}

func TestBundleWindowIsWrittenInward(t *testing.T) {
	s, _ := proofs.GenerateEd25519Signer("k")
	b, err := proofs.NewBundle(1, s.BundleKeyWindow(1, time.Unix(100, 1), time.Unix(200, 999_999_999)))
	mustOK(t, err)
	data, err := b.Marshal()
	mustOK(t, err)
	b2, err := proofs.ParseBundle(data)
	mustOK(t, err)
	e, _ := b2.Key("k")
	if e.NotBefore.Unix() != 101 || e.NotAfter.Unix() != 200 {
		t.Fatalf("window %v..%v", e.NotBefore, e.NotAfter)
	}
}

func TestBundleRefusesBadKeys(t *testing.T) {
	edPub, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	secret := []byte(strings.Repeat("k", 32))

	noKid, _ := jwk.FromRaw(edPub)
	wrongAlg := pubJWK(t, edPub, "a")
	mustOK(t, wrongAlg.Set(jwk.AlgorithmKey, jwa.ES256))
	encUse := pubJWK(t, edPub, "a")
	mustOK(t, encUse.Set(jwk.KeyUsageKey, "enc"))

	for name, c := range map[string]struct {
		e    proofs.BundleKey
		want string
	}{
		"nil key":              {proofs.BundleKey{Alg: jwa.EdDSA}, "no key"},
		"no kid":               {proofs.BundleKey{Key: noKid, Alg: jwa.EdDSA}, "no kid"},
		"no alg":               {proofs.BundleKey{Key: pubJWK(t, edPub, "a")}, "has no alg"},
		"alg none":             {proofs.BundleKey{Key: pubJWK(t, edPub, "a"), Alg: jwa.NoSignature}, "is not allowed"},
		"alg RS256":            {proofs.BundleKey{Key: pubJWK(t, edPub, "a"), Alg: jwa.RS256}, "is not allowed"},
		"key alg differs":      {proofs.BundleKey{Key: wrongAlg, Alg: jwa.EdDSA}, "differs from entry alg"},
		"use enc":              {proofs.BundleKey{Key: encUse, Alg: jwa.EdDSA}, "is not sig"},
		"Ed25519 as ES256":     {proofs.BundleKey{Key: pubJWK(t, edPub, "a"), Alg: jwa.ES256}, "needs an EC P-256 key"},
		"Ed25519 as HS256":     {proofs.BundleKey{Key: pubJWK(t, edPub, "a"), Alg: jwa.HS256}, "needs an oct key"},
		"P-256 as EdDSA":       {proofs.BundleKey{Key: pubJWK(t, &p256.PublicKey, "a"), Alg: jwa.EdDSA}, "needs an OKP Ed25519 key"},
		"P-384 as ES256":       {proofs.BundleKey{Key: pubJWK(t, &p384.PublicKey, "a"), Alg: jwa.ES256}, "needs a P-256 key"},
		"oct as EdDSA":         {proofs.BundleKey{Key: pubJWK(t, secret, "a"), Alg: jwa.EdDSA}, "needs an OKP Ed25519 key"},
		"short HMAC secret":    {proofs.BundleKey{Key: pubJWK(t, secret[:31], "a"), Alg: jwa.HS256}, "fewer than 32"},
		"Ed25519 private key":  {proofs.BundleKey{Key: pubJWK(t, edPriv, "a"), Alg: jwa.EdDSA}, "public keys only"},
		"P-256 private key":    {proofs.BundleKey{Key: pubJWK(t, p256, "a"), Alg: jwa.ES256}, "public keys only"},
		"window nbf after exp": {proofs.BundleKey{Key: pubJWK(t, edPub, "a"), Alg: jwa.EdDSA, NotBefore: time.Unix(2, 0), NotAfter: time.Unix(2, 0)}, "nbf is not before exp"},
		// Epoch 0 is never issued and cannot be revoked: a key at epoch 0
		// would verify grants no epoch revocation refuses.
		"epoch 0": {proofs.BundleKey{Key: pubJWK(t, edPub, "a"), Alg: jwa.EdDSA}, "epoch 0 is never issued"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := proofs.NewBundle(1, c.e)
			wantRejected(t, err, fencegate.CodeInvalidRequest, c.want)
		})
	}

	_, err := proofs.NewBundle(1, proofs.BundleKey{Key: pubJWK(t, edPub, "a"), Alg: jwa.EdDSA, Epoch: 1},
		proofs.BundleKey{Key: pubJWK(t, &p256.PublicKey, "a"), Alg: jwa.ES256, Epoch: 1})
	wantRejected(t, err, fencegate.CodeInvalidRequest, `duplicate kid "a"`)
	_, err = proofs.NewBundle(1)
	wantRejected(t, err, fencegate.CodeInvalidRequest, "no keys")
}

func TestParseBundleIsStrict(t *testing.T) {
	s, _ := proofs.GenerateEd25519Signer("k1")
	kj, err := json.Marshal(s.PublicKey())
	mustOK(t, err)
	key := strings.TrimSuffix(string(kj), "}") // {"alg":"EdDSA",...,"x":"..."
	good := `{"version":3,"keys":[` + key + `,"epoch":1}]}`
	b, err := proofs.ParseBundle([]byte(good))
	mustOK(t, err)
	if b.Version() != 3 {
		t.Fatalf("version %d", b.Version())
	}
	other, _ := proofs.GenerateEd25519Signer("k2")
	kj2, _ := json.Marshal(other.PublicKey())
	key2 := strings.TrimSuffix(string(kj2), "}")
	noAlg := strings.Replace(key, `"alg":"EdDSA",`, "", 1)

	for name, c := range map[string]struct{ doc, want string }{
		"duplicate top key":    {`{"version":3,"version":4,"keys":[` + key + `,"epoch":1}]}`, "duplicate JSON key"},
		"duplicate key member": {`{"version":3,"keys":[` + key + `,"epoch":1,"epoch":2}]}`, "duplicate JSON key"},
		"trailing data":        {good + "[]", "trailing data"},
		"unknown top member":   {`{"version":3,"keys":[` + key + `,"epoch":1}],"url":"x"}`, `unknown field "url"`},
		"missing version":      {`{"keys":[` + key + `,"epoch":1}]}`, `"version" is required`},
		"negative version":     {`{"version":-3,"keys":[` + key + `,"epoch":1}]}`, "does not fit uint64"},
		"missing epoch":        {`{"version":3,"keys":[` + key + `}]}`, `"epoch" is required`},
		"negative epoch":       {`{"version":3,"keys":[` + key + `,"epoch":-1}]}`, `"epoch" must be an integer`},
		"fractional epoch":     {`{"version":3,"keys":[` + key + `,"epoch":1.5}]}`, `"epoch" must be an integer`},
		"epoch 0":              {`{"version":3,"keys":[` + key + `,"epoch":0}]}`, "epoch 0 is never issued"},
		"epoch above uint64":   {`{"version":3,"keys":[` + key + `,"epoch":18446744073709551616}]}`, `"epoch" must be an integer`},
		"string nbf":           {`{"version":3,"keys":[` + key + `,"epoch":1,"nbf":"soon"}]}`, `"nbf" must be an integer`},
		"missing alg":          {`{"version":3,"keys":[` + noAlg + `,"epoch":1}]}`, `"alg" is required`},
		"alg not allowed":      {`{"version":3,"keys":[` + strings.Replace(key, `"EdDSA"`, `"RS256"`, 1) + `,"epoch":1}]}`, "is not allowed"},
		"alg none":             {`{"version":3,"keys":[` + strings.Replace(key, `"EdDSA"`, `"none"`, 1) + `,"epoch":1}]}`, "is not allowed"},
		"alg does not fit key": {`{"version":3,"keys":[` + strings.Replace(key, `"EdDSA"`, `"HS256"`, 1) + `,"epoch":1}]}`, "needs an oct key"},
		"duplicate kid":        {`{"version":3,"keys":[` + key + `,"epoch":1},` + strings.Replace(key2, `"k2"`, `"k1"`, 1) + `,"epoch":1}]}`, `duplicate kid "k1"`},
		"no keys":              {`{"version":3,"keys":[]}`, "no keys"},
		"null":                 {`{"version":3,"keys":null}`, "null"},
		"not an object":        {`[]`, "single object"},
		"nbf not before exp":   {`{"version":3,"keys":[` + key + `,"epoch":1,"nbf":5,"exp":5}]}`, "nbf is not before exp"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := proofs.ParseBundle([]byte(c.doc))
			wantRejected(t, err, fencegate.CodeInvalidRequest, c.want)
		})
	}
	_, err = proofs.LoadBundle(filepath.Join(t.TempDir(), "missing.json"))
	wantRejected(t, err, fencegate.CodeInvalidRequest, "cannot open")
}

// The bundle hands out copies: changing them changes nothing it verifies with.
func TestBundleKeysAreCopies(t *testing.T) {
	f := newFixture(t)
	e, _ := f.bundle.Key("k1")
	mustOK(t, e.Key.Set(jwk.KeyIDKey, "changed"))
	for _, e := range f.bundle.Keys() {
		mustOK(t, e.Key.Set(jwk.AlgorithmKey, jwa.HS256))
	}
	if e, _ := f.bundle.Key("k1"); e.Key.KeyID() != "k1" || e.Key.Algorithm() != jwa.EdDSA {
		t.Fatalf("bundle key changed: %v %v", e.Key.KeyID(), e.Key.Algorithm())
	}
	f.verifiedGrant(nil)
}

// TestSetBundleRefusesLowerVersion: keys change only forward: a lower
// version, or other content under the current version, is refused.
func TestSetBundleRefusesLowerVersion(t *testing.T) {
	f := newFixture(t)
	b5, err := proofs.NewBundle(5, f.signer.BundleKey(1))
	mustOK(t, err)
	mustOK(t, f.v.SetBundle(b5))
	b4, _ := proofs.NewBundle(4, f.signer.BundleKey(1))
	wantRejected(t, f.v.SetBundle(b4), fencegate.CodeInvalidRequest, "version 4 is lower than the current version 5")
	if f.v.Bundle() != b5 {
		t.Fatal("bundle replaced by a lower version")
	}
	// The same version again (a reload of the same file) is accepted; the
	// same version with other content is not: replicas take only a higher
	// version, so it would never reach them.
	b5again, _ := proofs.NewBundle(5, f.signer.BundleKey(1))
	mustOK(t, f.v.SetBundle(b5again))
	next, _ := proofs.GenerateEd25519Signer("k2")
	b5changed, err := proofs.NewBundle(5, f.signer.BundleKey(1), next.BundleKey(2))
	mustOK(t, err)
	wantRejected(t, f.v.SetBundle(b5changed), fencegate.CodeInvalidRequest, "version 5 is the current version with other content")
	if f.v.Bundle() != b5again {
		t.Fatal("bundle replaced by other content under the same version")
	}
	wantRejected(t, f.v.SetBundle(nil), fencegate.CodeInvalidRequest, "nil bundle")
}

// Rotation: a new key is trusted from the bundle that adds it, an old key not
// after the bundle that drops it; nothing a token says changes that.
func TestRotationGoesThroughSetBundle(t *testing.T) {
	f := newFixture(t)
	next, _ := proofs.GenerateEd25519Signer("k2")
	g := f.grant(func(g *fencegate.Grant) { g.IssuerEpoch = 2 })
	tok2, _, err := next.SignGrant(g)
	mustOK(t, err)
	_, err = f.v.VerifyGrant(tok2)
	wantRejected(t, err, grantInvalid, `kid "k2" is not in the trust bundle (version 1)`)

	tok1, _ := f.grantToken(nil)
	_, err = f.v.VerifyGrant(tok1)
	mustOK(t, err)

	overlap, _ := proofs.NewBundle(2, f.signer.BundleKey(1), next.BundleKey(2))
	mustOK(t, f.v.SetBundle(overlap))
	_, err = f.v.VerifyGrant(tok2)
	mustOK(t, err)
	_, err = f.v.VerifyGrant(tok1)
	mustOK(t, err)

	only2, _ := proofs.NewBundle(3, next.BundleKey(2))
	mustOK(t, f.v.SetBundle(only2))
	_, err = f.v.VerifyGrant(tok1) // was cached under bundle 2
	wantRejected(t, err, grantInvalid, `kid "k1" is not in the trust bundle (version 3)`)
	_, err = f.v.VerifyGrant(tok2)
	mustOK(t, err)
}

// Rule: Equal holds exactly for bundles Marshal writes as one document: a
// bundle and its document parsed again are equal; another version, another
// revocation or another key is not; nil equals only nil.
func TestBundlesAreEqualExactlyWhenTheyMarshalToOneDocument(t *testing.T) {
	s, _ := proofs.GenerateEd25519Signer("k1")
	other, _ := proofs.GenerateEd25519Signer("k2")
	b, err := proofs.NewRevokingBundle(2, proofs.Revocations{Epochs: []uint64{7}}, s.BundleKey(1))
	mustOK(t, err)
	doc, err := b.Marshal()
	mustOK(t, err)
	again, err := proofs.ParseBundle(doc)
	mustOK(t, err)
	if !b.Equal(again) || !again.Equal(b) {
		t.Fatal("a bundle and its document parsed again are not equal")
	}
	for name, mk := range map[string]func() (*proofs.Bundle, error){
		"another version": func() (*proofs.Bundle, error) {
			return proofs.NewRevokingBundle(3, proofs.Revocations{Epochs: []uint64{7}}, s.BundleKey(1))
		},
		"another revocation": func() (*proofs.Bundle, error) {
			return proofs.NewRevokingBundle(2, proofs.Revocations{Epochs: []uint64{8}}, s.BundleKey(1))
		},
		"another key": func() (*proofs.Bundle, error) {
			return proofs.NewRevokingBundle(2, proofs.Revocations{Epochs: []uint64{7}}, other.BundleKey(1))
		},
	} {
		o, err := mk()
		mustOK(t, err)
		if b.Equal(o) || o.Equal(b) {
			t.Fatalf("%s: equal", name)
		}
	}
	var none *proofs.Bundle
	if b.Equal(nil) || none.Equal(b) || !none.Equal(nil) {
		t.Fatal("nil: equal to a bundle, or not to nil")
	}
}
