package proofs_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
)

// bundleDoc is a bundle of version 2 holding the fixture's k1 and its
// document, the bytes a registry serves.
func (f *fixture) bundleDoc(extra ...proofs.BundleKey) (*proofs.Bundle, []byte) {
	f.t.Helper()
	b, err := proofs.NewBundle(2, append([]proofs.BundleKey{f.signer.BundleKey(1)}, extra...)...)
	if err != nil {
		f.t.Fatal(err)
	}
	data, err := b.Marshal()
	if err != nil {
		f.t.Fatal(err)
	}
	return b, data
}

// detached signs header over data with the fixture's Ed25519 key as a
// detached compact JWS, so that only the rule under test can make it fail.
func (f *fixture) detached(header string, data []byte) string {
	input := enc([]byte(header)) + "." + enc(data)
	return enc([]byte(header)) + ".." + enc(ed25519.Sign(f.priv, []byte(input)))
}

const bundleHdr = `{"alg":"EdDSA","bundleVersion":2,"kid":"k1","typ":"fencegate-bundle+jws"}`

func TestABundleIsSignedByEveryKeyGivenEachUnderItsOwnAlg(t *testing.T) {
	f := newFixture(t)
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	mustOK(t, err)
	es, err := proofs.NewSigner(ec, "k2", proofs.AlgES256)
	mustOK(t, err)
	hs, err := proofs.NewSigner([]byte(strings.Repeat("s", 32)), "k3", proofs.AlgHS256)
	mustOK(t, err)
	b, data := f.bundleDoc(es.BundleKey(2), hs.BundleKey(3))
	sig, err := proofs.SignBundle(data, b.Version(), f.signer, es, hs, f.signer)
	mustOK(t, err)
	parts := strings.Split(sig, ", ")
	if len(parts) != 3 {
		t.Fatalf("%d signatures, want one per key (k1 given twice): %s", len(parts), sig)
	}
	for i, want := range []struct{ kid, alg string }{{"k1", "EdDSA"}, {"k2", "ES256"}, {"k3", "HS256"}} {
		hdr := decodeSeg(t, strings.Split(parts[i], ".")[0])
		if !strings.Contains(hdr, `"kid":"`+want.kid+`"`) || !strings.Contains(hdr, `"alg":"`+want.alg+`"`) ||
			!strings.Contains(hdr, `"typ":"fencegate-bundle+jws"`) || !strings.Contains(hdr, `"bundleVersion":2`) {
			t.Fatalf("signature #%d header %s", i, hdr)
		}
		if strings.Split(parts[i], ".")[1] != "" {
			t.Fatalf("signature #%d carries its payload; want detached", i)
		}
		// Only an EdDSA key, a registry's, vouches for a bundle: an HS256
		// secret is held by every replica of a MAC deployment.
		kid, err := proofs.VerifyBundleSignature(b, data, parts[i], 2, f.clock())
		if want.alg == "EdDSA" && (err != nil || kid != want.kid) {
			t.Fatalf("signature #%d alone: %q %v", i, kid, err)
		}
		if want.alg != "EdDSA" && (err == nil || !strings.Contains(err.Error(), "only a registry's EdDSA key vouches")) {
			t.Fatalf("signature #%d by a %s key alone: %q %v; want refused", i, want.alg, kid, err)
		}
	}
	if kid, err := proofs.VerifyBundleSignature(f.bundle, data, sig, 2, f.clock()); err != nil || kid != "k1" {
		t.Fatalf("the whole header under a bundle holding k1 only: %q %v", kid, err)
	}
}

func TestABundleSignatureThatIsNotTheChainsIsRefused(t *testing.T) {
	f := newFixture(t)
	_, data := f.bundleDoc()
	other, err := proofs.GenerateEd25519Signer("k1") // the kid in force, another key
	mustOK(t, err)
	stranger, err := proofs.GenerateEd25519Signer("k9")
	mustOK(t, err)
	sign := func(s *proofs.Signer, d []byte) string {
		sig, err := proofs.SignBundle(d, 2, s)
		mustOK(t, err)
		return sig
	}
	grant, _ := f.grantToken(nil)
	hmacOverPublic := func() string {
		h := `{"alg":"HS256","bundleVersion":2,"kid":"k1","typ":"fencegate-bundle+jws"}`
		m := hmac.New(sha256.New, f.pub)
		m.Write([]byte(enc([]byte(h)) + "." + enc(data)))
		return enc([]byte(h)) + ".." + enc(m.Sum(nil))
	}
	for name, c := range map[string]struct {
		sig  string
		data []byte
		why  string
	}{
		"another key under the kid in force": {sign(other, data), data, "does not verify"},
		"a kid not in the bundle in force":   {sign(stranger, data), data, `kid "k9" is not in the bundle in force`},
		"other bytes":                        {sign(f.signer, data), append([]byte(" "), data...), "does not verify"},
		"another version":                    {f.detached(strings.Replace(bundleHdr, ":2,", ":3,", 1), data), data, "signs bundle version 3, not 2"},
		"a grant's typ":                      {f.detached(strings.Replace(bundleHdr, "fencegate-bundle+jws", proofs.TypGrant, 1), data), data, "typ"},
		"a status proof's typ":               {f.detached(strings.Replace(bundleHdr, "fencegate-bundle+jws", proofs.TypStatus, 1), data), data, "typ"},
		"alg none":                           {enc([]byte(`{"alg":"none","bundleVersion":2,"kid":"k1","typ":"fencegate-bundle+jws"}`)) + "..AAAA", data, `alg "none" is refused`},
		"HS256 with the public key":          {hmacOverPublic(), data, `header alg "HS256" is not the alg EdDSA of key "k1"`},
		"a key-source member":                {f.detached(`{"alg":"EdDSA","bundleVersion":2,"jwk":{},"kid":"k1","typ":"fencegate-bundle+jws"}`, data), data, `"jwk" is refused`},
		"no version":                         {f.detached(`{"alg":"EdDSA","kid":"k1","typ":"fencegate-bundle+jws"}`, data), data, `"bundleVersion" is required`},
		"a grant JWS":                        {grant, data, "payload is attached"},
		"garbage":                            {"not a signature", data, "exactly two dots, not 0"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := proofs.VerifyBundleSignature(f.bundle, c.data, c.sig, 2, f.clock())
			wantRejected(t, err, fencegate.CodeInvalidRequest, "no signature verifies under a key of the bundle in force", c.why)
		})
	}
}

func TestAnUnsignedBundleIsRefusedAsUnsigned(t *testing.T) {
	f := newFixture(t)
	_, data := f.bundleDoc()
	for _, sig := range []string{"", "  "} {
		_, err := proofs.VerifyBundleSignature(f.bundle, data, sig, 2, f.clock())
		wantRejected(t, err, fencegate.CodeInvalidRequest, "carries no signature")
		if !errors.Is(err, proofs.ErrUnsignedBundle) {
			t.Fatalf("%q: %v is not ErrUnsignedBundle", sig, err)
		}
	}
}

func TestABundleSignatureByAKeyPastItsWindowIsRefused(t *testing.T) {
	f := newFixture(t)
	trusted, err := proofs.NewBundle(1, f.signer.BundleKeyWindow(1, t0.Add(-2*hour), t0.Add(-hour)))
	mustOK(t, err)
	_, data := f.bundleDoc()
	sig, err := proofs.SignBundle(data, 2, f.signer)
	mustOK(t, err)
	_, err = proofs.VerifyBundleSignature(trusted, data, sig, 2, f.clock())
	wantRejected(t, err, fencegate.CodeInvalidRequest, "expired")
}

// The grant and status verifiers refuse a bundle signature, detached or
// with its payload put back (a valid JWS over the bundle bytes), and a token
// of the bundle typ even with a grant's payload and a grant's header shape.
func TestTheGrantVerifierRefusesABundleSignature(t *testing.T) {
	f := newFixture(t)
	_, data := f.bundleDoc()
	sig, err := proofs.SignBundle(data, 2, f.signer)
	mustOK(t, err)
	attached := strings.Replace(sig, "..", "."+enc(data)+".", 1)
	typOnly := `{"alg":"EdDSA","kid":"k1","typ":"fencegate-bundle+jws"}`
	for name, c := range map[string]struct{ tok, why string }{
		"detached":                             {sig, "empty segment"},
		"payload put back":                     {attached, "bundleVersion"},
		"a grant payload under the bundle typ": {f.craft(typOnly, f.grantJSON(nil)), `typ "fencegate-bundle+jws" is not`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := f.v.VerifyGrant(c.tok)
			wantRejected(t, err, fencegate.CodeGrantInvalid, c.why)
			_, vg := f.verifiedGrant(nil)
			_, err = f.v.VerifyStatus(c.tok, vg)
			wantRejected(t, err, fencegate.CodeStatusInvalid, c.why)
		})
	}
}

// A bundle signature's segments must be unpadded base64url, as a token's
// are: a line break inside one (which Go's decoder would skip) and '='
// padding are refused, though the signature verifies without them.
func TestABundleSignatureWithAByteOutsideUnpaddedBase64URLIsRefused(t *testing.T) {
	f := newFixture(t)
	_, data := f.bundleDoc()
	sig, err := proofs.SignBundle(data, 2, f.signer)
	mustOK(t, err)
	if kid, err := proofs.VerifyBundleSignature(f.bundle, data, sig, 2, f.clock()); err != nil || kid != "k1" {
		t.Fatalf("the signature unchanged: %q %v; want verified by k1", kid, err)
	}
	h, s, _ := strings.Cut(sig, "..")
	for name, bad := range map[string]string{
		"a newline in the header":     h[:10] + "\n" + h[10:] + ".." + s,
		"a newline in the signature":  h + ".." + s[:10] + "\n" + s[10:],
		"a CRLF in the signature":     h + ".." + s[:10] + "\r\n" + s[10:],
		"padding after the header":    h + "=.." + s,
		"padding after the signature": h + ".." + s + "==",
		"the standard alphabet's '+'": h + ".." + s[:10] + "+" + s[11:],
	} {
		t.Run(name, func(t *testing.T) {
			_, err := proofs.VerifyBundleSignature(f.bundle, data, bad, 2, f.clock())
			wantRejected(t, err, fencegate.CodeInvalidRequest, "no signature verifies", "outside unpadded base64url")
		})
	}
}

// A bundle signature's header is held to a token's rules with bundleVersion
// as a fourth member, required, an integer in 0..2^64-1 written as one: any
// other member, a key-source member, crit, a duplicate, a version in another
// form, or anything after the object is refused.
func TestABundleSignatureHeaderIsParsedStrictly(t *testing.T) {
	f := newFixture(t)
	_, data := f.bundleDoc()
	for name, c := range map[string]struct{ hdr, why string }{
		"a version as a string":      {strings.Replace(bundleHdr, ":2,", `:"2",`, 1), `"bundleVersion" must be an integer`},
		"a negative version":         {strings.Replace(bundleHdr, ":2,", ":-2,", 1), `"bundleVersion" must be an integer`},
		"a fractional version":       {strings.Replace(bundleHdr, ":2,", ":2.0,", 1), `"bundleVersion" must be an integer`},
		"an exponent":                {strings.Replace(bundleHdr, ":2,", ":2e0,", 1), `"bundleVersion" must be an integer`},
		"a version above uint64":     {strings.Replace(bundleHdr, ":2,", ":18446744073709551616,", 1), `"bundleVersion" must be an integer`},
		"a duplicate version":        {strings.Replace(bundleHdr, `"bundleVersion":2,`, `"bundleVersion":2,"bundleVersion":2,`, 1), "duplicate JSON key"},
		"another member":             {strings.Replace(bundleHdr, `"kid"`, `"cty":"json","kid"`, 1), `member "cty" is not allowed`},
		"the version's name in caps": {strings.Replace(bundleHdr, `"kid"`, `"BundleVersion":2,"kid"`, 1), `member "BundleVersion" is not allowed`},
		"an empty member name":       {strings.Replace(bundleHdr, `"kid"`, `"":2,"kid"`, 1), `member "" is not allowed`},
		"crit":                       {strings.Replace(bundleHdr, `"kid"`, `"crit":["bundleVersion"],"kid"`, 1), `"crit" is refused`},
		"x5u":                        {`{"alg":"EdDSA","bundleVersion":2,"kid":"k1","typ":"fencegate-bundle+jws","x5u":"https://keys.example/k"}`, `"x5u" is refused`},
		"no typ":                     {`{"alg":"EdDSA","bundleVersion":2,"kid":"k1"}`, `"typ" is required`},
		"no kid":                     {`{"alg":"EdDSA","bundleVersion":2,"typ":"fencegate-bundle+jws"}`, `"kid" is required`},
		"an empty alg":               {strings.Replace(bundleHdr, `"EdDSA"`, `""`, 1), `"alg" must be a non-empty string`},
		"trailing data":              {bundleHdr + "{}", "trailing data"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := proofs.VerifyBundleSignature(f.bundle, data, f.detached(c.hdr, data), 2, f.clock())
			wantRejected(t, err, fencegate.CodeInvalidRequest, "no signature verifies", c.why)
		})
	}
	if kid, err := proofs.VerifyBundleSignature(f.bundle, data, f.detached(bundleHdr, data), 2, f.clock()); err != nil || kid != "k1" {
		t.Fatalf("the header as SignBundle writes it: %q %v; want verified by k1", kid, err)
	}
}

// A token's header has no extra member: an empty member name is refused
// there as any other name is.
func TestATokenHeaderWithAnEmptyMemberNameIsRefused(t *testing.T) {
	f := newFixture(t)
	_, err := f.v.VerifyGrant(f.craft(`{"":1,"alg":"EdDSA","kid":"k1","typ":"lockgrant+jws"}`, f.grantJSON(nil)))
	wantRejected(t, err, fencegate.CodeGrantInvalid, `member "" is not allowed`)
}
