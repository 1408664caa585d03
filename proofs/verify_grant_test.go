package proofs_test

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
)

const grantInvalid = fencegate.CodeGrantInvalid

// The hand-built token that every rejection test mutates is itself accepted:
// each rejection below is caused by the one rule under test.
func TestCraftedTokenIsAccepted(t *testing.T) {
	f := newFixture(t)
	payload := f.grantJSON(nil)
	vg, err := f.v.VerifyGrant(f.craft(grantHdr, payload))
	mustOK(t, err)
	if vg.Digest != proofs.GrantDigest(payload) || vg.KeyID != "k1" || vg.FenceToken != 7 {
		t.Fatalf("verified grant %+v", vg)
	}
}

func TestAlgNoneIsRejected(t *testing.T) {
	f := newFixture(t)
	payload := f.grantJSON(nil)
	for _, alg := range []string{"none", "None", "NONE"} {
		hdr := `{"alg":"` + alg + `","kid":"k1","typ":"lockgrant+jws"}`
		// With a real signature, and with the empty signature of an unsecured JWS.
		tok := f.craft(hdr, payload)
		_, err := f.v.VerifyGrant(tok)
		wantRejected(t, err, grantInvalid, `"none" is refused`)
		unsecured := enc([]byte(hdr)) + "." + enc(payload) + "."
		_, err = f.v.VerifyGrant(unsecured)
		wantRejected(t, err, grantInvalid)
	}
	if n := proofs.SignatureChecks(f.v); n != 0 {
		t.Fatalf("%d signature checks for alg none", n)
	}
}

func TestAlgOutsideAllowListIsRejected(t *testing.T) {
	f := newFixture(t)
	payload := f.grantJSON(nil)
	for _, alg := range []string{"RS256", "HS512", "ES384", "PS256", "Ed25519", "eddsa", ""} {
		_, err := f.v.VerifyGrant(f.craft(`{"alg":"`+alg+`","kid":"k1","typ":"lockgrant+jws"}`, payload))
		wantRejected(t, err, grantInvalid, "alg")
	}
}

func TestMissingAlgIsRejected(t *testing.T) {
	f := newFixture(t)
	_, err := f.v.VerifyGrant(f.craft(`{"kid":"k1","typ":"lockgrant+jws"}`, f.grantJSON(nil)))
	wantRejected(t, err, grantInvalid, `"alg" is required`)
}

// A token signed HS256 with the Ed25519 public key bytes as the HMAC secret is
// refused: the key "k1" is an EdDSA key and is used only with EdDSA.
func TestHS256WithPublicKeyIsRejected(t *testing.T) {
	f := newFixture(t)
	input := enc([]byte(`{"alg":"HS256","kid":"k1","typ":"lockgrant+jws"}`)) + "." + enc(f.grantJSON(nil))
	mac := hmac.New(sha256.New, []byte(f.pub))
	mac.Write([]byte(input))
	tok := input + "." + enc(mac.Sum(nil))

	// The forgery is a valid HS256 token for the public key bytes: a verifier
	// that let the header choose the algorithm would accept it.
	if _, err := jws.Verify([]byte(tok), jws.WithKey(jwa.HS256, []byte(f.pub))); err != nil {
		t.Fatalf("the forgery is not even a valid HS256 token: %v", err)
	}
	_, err := f.v.VerifyGrant(tok)
	wantRejected(t, err, grantInvalid, `header alg "HS256" is not the alg EdDSA of key "k1"`)
	if n := proofs.SignatureChecks(f.v); n != 0 {
		t.Fatalf("%d signature checks ran for a key/alg mismatch", n)
	}
}

// The same for an ES256 header over an EdDSA key.
func TestAlgOtherThanTheKeysIsRejected(t *testing.T) {
	f := newFixture(t)
	_, err := f.v.VerifyGrant(f.craft(`{"alg":"ES256","kid":"k1","typ":"lockgrant+jws"}`, f.grantJSON(nil)))
	wantRejected(t, err, grantInvalid, "is not the alg EdDSA")
}

func TestUnknownKidIsRejected(t *testing.T) {
	f := newFixture(t)
	_, err := f.v.VerifyGrant(f.craft(`{"alg":"EdDSA","kid":"k2","typ":"lockgrant+jws"}`, f.grantJSON(nil)))
	wantRejected(t, err, grantInvalid, `kid "k2" is not in the trust bundle`)
}

func TestMissingKidIsRejected(t *testing.T) {
	f := newFixture(t)
	_, err := f.v.VerifyGrant(f.craft(`{"alg":"EdDSA","typ":"lockgrant+jws"}`, f.grantJSON(nil)))
	wantRejected(t, err, grantInvalid, `"kid" is required`)
	_, err = f.v.VerifyGrant(f.craft(`{"alg":"EdDSA","kid":"","typ":"lockgrant+jws"}`, f.grantJSON(nil)))
	wantRejected(t, err, grantInvalid, `"kid" must be a non-empty string`)
	_, err = f.v.VerifyGrant(f.craft(`{"alg":"EdDSA","kid":1,"typ":"lockgrant+jws"}`, f.grantJSON(nil)))
	wantRejected(t, err, grantInvalid, `"kid" must be a non-empty string`)
}

// The embedded key is the real public key and the token is signed by the real
// key: the header member alone makes it fail.
func TestEmbeddedJWKIsRejected(t *testing.T) {
	f := newFixture(t)
	pub, err := json.Marshal(f.signer.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	hdr := `{"alg":"EdDSA","jwk":` + string(pub) + `,"kid":"k1","typ":"lockgrant+jws"}`
	_, err = f.v.VerifyGrant(f.craft(hdr, f.grantJSON(nil)))
	wantRejected(t, err, grantInvalid, `member "jwk" is refused`)
}

func TestJKUIsRejected(t *testing.T) {
	f := newFixture(t)
	hdr := `{"alg":"EdDSA","jku":"https://keys.example/jwks.json","kid":"k1","typ":"lockgrant+jws"}`
	_, err := f.v.VerifyGrant(f.craft(hdr, f.grantJSON(nil)))
	wantRejected(t, err, grantInvalid, `member "jku" is refused`)
}

func TestX5UIsRejected(t *testing.T) {
	f := newFixture(t)
	hdr := `{"alg":"EdDSA","kid":"k1","typ":"lockgrant+jws","x5u":"https://keys.example/cert.pem"}`
	_, err := f.v.VerifyGrant(f.craft(hdr, f.grantJSON(nil)))
	wantRejected(t, err, grantInvalid, `member "x5u" is refused`)
}

func TestX5CIsRejected(t *testing.T) {
	f := newFixture(t)
	hdr := `{"alg":"EdDSA","kid":"k1","typ":"lockgrant+jws","x5c":["MIIB"]}`
	_, err := f.v.VerifyGrant(f.craft(hdr, f.grantJSON(nil)))
	wantRejected(t, err, grantInvalid, `member "x5c" is refused`)
}

func TestUnknownCritIsRejected(t *testing.T) {
	f := newFixture(t)
	for _, hdr := range []string{
		`{"alg":"EdDSA","crit":["urn:example:ext"],"kid":"k1","typ":"lockgrant+jws","urn:example:ext":true}`,
		`{"alg":"EdDSA","crit":["b64"],"b64":true,"kid":"k1","typ":"lockgrant+jws"}`,
		`{"alg":"EdDSA","crit":[],"kid":"k1","typ":"lockgrant+jws"}`,
	} {
		_, err := f.v.VerifyGrant(f.craft(hdr, f.grantJSON(nil)))
		wantRejected(t, err, grantInvalid, `member "crit" is refused`)
	}
}

// Header members other than alg, kid and typ are refused, b64 among them
// (b64:false would change what the signature covers).
func TestUnknownHeaderMemberIsRejected(t *testing.T) {
	f := newFixture(t)
	for _, hdr := range []string{
		`{"alg":"EdDSA","b64":false,"kid":"k1","typ":"lockgrant+jws"}`,
		`{"alg":"EdDSA","cty":"json","kid":"k1","typ":"lockgrant+jws"}`,
		`{"alg":"EdDSA","Kid":"k2","kid":"k1","typ":"lockgrant+jws"}`,
	} {
		_, err := f.v.VerifyGrant(f.craft(hdr, f.grantJSON(nil)))
		wantRejected(t, err, grantInvalid, "is not allowed")
	}
}

// A status proof is not a grant, and the other way round.
func TestWrongTypIsRejected(t *testing.T) {
	f := newFixture(t)
	_, err := f.v.VerifyGrant(f.craft(statusHdr, f.grantJSON(nil)))
	wantRejected(t, err, grantInvalid, `typ "grantstatus+jws" is not "lockgrant+jws"`)
	_, err = f.v.VerifyGrant(f.craft(`{"alg":"EdDSA","kid":"k1"}`, f.grantJSON(nil)))
	wantRejected(t, err, grantInvalid, `"typ" is required`)
}

func TestOversizedTokenIsRejectedBeforeParsing(t *testing.T) {
	f := newFixture(t)
	// Well-formed and correctly signed, but one byte over the default cap.
	pad := strings.Repeat("x", proofs.DefaultMaxTokenSize)
	tok := f.craft(grantHdr, f.grantJSON(func(g *fencegate.Grant) { g.OperationCategory = pad }))
	if len(tok) <= proofs.DefaultMaxTokenSize {
		t.Fatalf("token of %d bytes is not oversized", len(tok))
	}
	_, err := f.v.VerifyGrant(tok)
	wantRejected(t, err, grantInvalid, "exceeds the limit of 8192")

	// Garbage of that size is refused for its size, not for what it contains:
	// nothing was decoded.
	for _, junk := range []string{
		strings.Repeat("{", proofs.DefaultMaxTokenSize+1),
		strings.Repeat(".", proofs.DefaultMaxTokenSize+1),
		strings.Repeat("\xff", proofs.DefaultMaxTokenSize+1),
	} {
		_, err := f.v.VerifyGrant(junk)
		wantRejected(t, err, grantInvalid, "exceeds the limit")
		_, err = f.v.VerifyStatus(junk, fencegate.VerifiedGrant{})
		wantRejected(t, err, fencegate.CodeStatusInvalid, "exceeds the limit")
	}
	if n := proofs.SignatureChecks(f.v); n != 0 {
		t.Fatalf("%d signature checks for oversized tokens", n)
	}

	// The cap is configurable and exact.
	ok := f.craft(grantHdr, f.grantJSON(nil))
	v, err := proofs.NewVerifier(f.bundle, proofs.WithClock(f.clock), proofs.WithMaxTokenSize(len(ok)))
	mustOK(t, err)
	_, err = v.VerifyGrant(ok)
	mustOK(t, err)
	v, err = proofs.NewVerifier(f.bundle, proofs.WithClock(f.clock), proofs.WithMaxTokenSize(len(ok)-1))
	mustOK(t, err)
	_, err = v.VerifyGrant(ok)
	wantRejected(t, err, grantInvalid, "exceeds the limit")
}

func TestExtraDotsAreRejected(t *testing.T) {
	f := newFixture(t)
	tok, _ := f.grantToken(nil)
	parts := strings.Split(tok, ".")
	for _, bad := range []string{
		tok + ".",
		tok + "." + parts[2],
		parts[0] + ".." + parts[1] + "." + parts[2],
		"." + tok,
		parts[0] + "." + parts[1], // one dot
		parts[0] + parts[1] + parts[2],
	} {
		_, err := f.v.VerifyGrant(bad)
		wantRejected(t, err, grantInvalid, "exactly two dots")
	}
	// Empty segments with the right number of dots.
	for _, bad := range []string{"..", parts[0] + ".." + parts[2], "." + parts[1] + "." + parts[2]} {
		_, err := f.v.VerifyGrant(bad)
		wantRejected(t, err, grantInvalid, "empty segment")
	}
}

func TestJSONSerializationIsRejected(t *testing.T) {
	f := newFixture(t)
	hdr := jws.NewHeaders()
	_ = hdr.Set(jws.KeyIDKey, "k1")
	_ = hdr.Set(jws.TypeKey, proofs.TypGrant)
	for _, opt := range []jws.SignVerifyParseOption{jws.WithJSON(), jws.WithJSON(jws.WithPretty(true))} {
		out, err := jws.Sign(f.grantJSON(nil), opt, jws.WithKey(jwa.EdDSA, f.priv, jws.WithProtectedHeaders(hdr)))
		mustOK(t, err)
		// It is a valid JWS for the right key in the JSON serialization...
		if _, err := jws.Verify(out, jws.WithKey(jwa.EdDSA, f.pub)); err != nil {
			t.Fatalf("JSON-serialized JWS does not verify: %v", err)
		}
		// ...and refused, also with leading white space.
		for _, tok := range []string{string(out), " \n" + string(out)} {
			_, err = f.v.VerifyGrant(tok)
			wantRejected(t, err, grantInvalid, "JSON serialization is not accepted")
		}
	}
}

// Segments must be unpadded base64url: padding, the standard alphabet, white
// space (which Go's decoder would skip) and non-canonical trailing bits are refused.
func TestNonCanonicalBase64IsRejected(t *testing.T) {
	f := newFixture(t)
	tok, _ := f.grantToken(nil)
	p := strings.Split(tok, ".")
	for _, bad := range []string{
		p[0] + "=." + p[1] + "." + p[2],
		p[0] + "." + p[1][:10] + "\n" + p[1][10:] + "." + p[2],
		p[0] + "." + p[1] + "." + strings.NewReplacer("-", "+", "_", "/").Replace(p[2]) + "+",
	} {
		_, err := f.v.VerifyGrant(bad)
		wantRejected(t, err, grantInvalid, "base64url")
	}
	// The signature is 64 bytes: its last base64url character carries 4 unused
	// bits, which must be zero.
	sig := []byte(p[2])
	last := sig[len(sig)-1]
	alpha := "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	sig[len(sig)-1] = alpha[strings.IndexByte(alpha, last)|1]
	_, err := f.v.VerifyGrant(p[0] + "." + p[1] + "." + string(sig))
	wantRejected(t, err, grantInvalid, "signature is not base64url")
}

func TestDuplicateJSONKeysAreRejected(t *testing.T) {
	f := newFixture(t)
	good := string(f.grantJSON(nil))
	for name, payload := range map[string]string{
		"top level":        strings.Replace(good, `"fenceToken":7`, `"fenceToken":7,"fenceToken":9`, 1),
		"same value twice": strings.Replace(good, `"owner":"worker-a"`, `"owner":"worker-a","owner":"worker-a"`, 1),
		"nested":           strings.Replace(good, `"owner":"worker-a"`, `"owner":{"a":1,"a":2}`, 1),
		"in an array":      strings.Replace(good, `"owner":"worker-a"`, `"owner":[{"x":1},{"y":1,"y":2}]`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := f.v.VerifyGrant(f.craft(grantHdr, []byte(payload)))
			wantRejected(t, err, grantInvalid, "duplicate JSON key")
		})
	}
	// In the protected header too.
	_, err := f.v.VerifyGrant(f.craft(`{"alg":"EdDSA","kid":"k1","kid":"k1","typ":"lockgrant+jws"}`, []byte(good)))
	wantRejected(t, err, grantInvalid, `duplicate JSON key "kid"`)
	_, err = f.v.VerifyGrant(f.craft(`{"alg":"HS256","alg":"EdDSA","kid":"k1","typ":"lockgrant+jws"}`, []byte(good)))
	wantRejected(t, err, grantInvalid, `duplicate JSON key "alg"`)
}

func TestTrailingDataIsRejected(t *testing.T) {
	f := newFixture(t)
	good := string(f.grantJSON(nil))
	for _, payload := range []string{good + "{}", good + " x", good + `{"fenceToken":9}`, good + "]", good + "null"} {
		_, err := f.v.VerifyGrant(f.craft(grantHdr, []byte(payload)))
		wantRejected(t, err, grantInvalid, "trailing data")
	}
	_, err := f.v.VerifyGrant(f.craft(grantHdr+"{}", []byte(good)))
	wantRejected(t, err, grantInvalid, "trailing data")
	// Trailing white space is still one JSON object.
	_, err = f.v.VerifyGrant(f.craft(grantHdr, []byte(good+" \n")))
	mustOK(t, err)
}

func TestTamperedPayloadIsRejected(t *testing.T) {
	f := newFixture(t)
	tok, _ := f.grantToken(nil)
	p := strings.Split(tok, ".")
	forged := enc(f.grantJSON(func(g *fencegate.Grant) { g.FenceToken = 8 }))
	_, err := f.v.VerifyGrant(p[0] + "." + forged + "." + p[2])
	wantRejected(t, err, grantInvalid, "signature does not verify")

	// A header re-encoded with the same meaning is a different signing input.
	_, err = f.v.VerifyGrant(enc([]byte(`{"kid":"k1","alg":"EdDSA","typ":"lockgrant+jws"}`)) + "." + p[1] + "." + p[2])
	wantRejected(t, err, grantInvalid, "signature does not verify")

	// A changed signature.
	_, err = f.v.VerifyGrant(flipSig(tok))
	wantRejected(t, err, grantInvalid, "signature does not verify")

	// A token signed by another Ed25519 key under kid k1.
	_, other, _ := ed25519.GenerateKey(nil)
	input := p[0] + "." + p[1]
	_, err = f.v.VerifyGrant(input + "." + enc(ed25519.Sign(other, []byte(input))))
	wantRejected(t, err, grantInvalid, "signature does not verify")
}

func TestFenceOutsideUint64IsRejected(t *testing.T) {
	f := newFixture(t)
	good := string(f.grantJSON(nil))
	for _, v := range []string{"-1", "18446744073709551616", "99999999999999999999999", "1.5", "7.0", "7e0", "-0", `"7"`, "true"} {
		payload := strings.Replace(good, `"fenceToken":7`, `"fenceToken":`+v, 1)
		_, err := f.v.VerifyGrant(f.craft(grantHdr, []byte(payload)))
		wantRejected(t, err, grantInvalid, "fenceToken")
	}
	// Other uint64 fields get the same treatment.
	for _, field := range []string{`"issuerEpoch":1`, `"policyGeneration":1`, `"backendRevision":3`, `"ttlMs":30000`} {
		name, _, _ := strings.Cut(field, ":")
		payload := strings.Replace(good, field, name+":-1", 1)
		_, err := f.v.VerifyGrant(f.craft(grantHdr, []byte(payload)))
		wantRejected(t, err, grantInvalid, "does not fit uint64")
	}
	// The largest uint64 is a valid fence.
	payload := strings.Replace(good, `"fenceToken":7`, `"fenceToken":18446744073709551615`, 1)
	vg, err := f.v.VerifyGrant(f.craft(grantHdr, []byte(payload)))
	mustOK(t, err)
	if vg.FenceToken != 1<<64-1 {
		t.Fatalf("fence %d", vg.FenceToken)
	}
}

func TestUnknownPayloadFieldIsRejected(t *testing.T) {
	f := newFixture(t)
	good := string(f.grantJSON(nil))
	_, err := f.v.VerifyGrant(f.craft(grantHdr, []byte(strings.Replace(good, `{`, `{"admin":true,`, 1))))
	wantRejected(t, err, grantInvalid, `unknown field "admin"`)
	// encoding/json would match "FenceToken" to fenceToken; we do not.
	_, err = f.v.VerifyGrant(f.craft(grantHdr, []byte(strings.Replace(good, `"fenceToken"`, `"FenceToken"`, 1))))
	wantRejected(t, err, grantInvalid, `unknown field "FenceToken"`)
}

func TestNullIsRejected(t *testing.T) {
	f := newFixture(t)
	good := string(f.grantJSON(nil))
	_, err := f.v.VerifyGrant(f.craft(grantHdr, []byte(strings.Replace(good, `"backendRevision":3`, `"backendRevision":null`, 1))))
	wantRejected(t, err, grantInvalid, "null")
}

func TestPayloadThatIsNotAnObjectIsRejected(t *testing.T) {
	f := newFixture(t)
	for _, p := range []string{`[]`, `"grant"`, `7`, `{`, `{"schema":}`, "\xff\xfe"} {
		_, err := f.v.VerifyGrant(f.craft(grantHdr, []byte(p)))
		wantRejected(t, err, grantInvalid, "payload")
	}
}

func TestInvalidGrantIsRejected(t *testing.T) {
	f := newFixture(t)
	for _, mod := range []func(*fencegate.Grant){
		func(g *fencegate.Grant) { g.Schema = "lockGrant.v2" },
		func(g *fencegate.Grant) { g.Owner = "" },
		func(g *fencegate.Grant) { g.FenceToken = 0 },
		func(g *fencegate.Grant) { g.ExpiresAt = g.IssuedAt },
	} {
		_, err := f.v.VerifyGrant(f.craft(grantHdr, f.grantJSON(mod)))
		wantRejected(t, err, grantInvalid)
	}
}

// A key signs only for its own issuer epoch.
func TestEpochMismatchIsRejected(t *testing.T) {
	f := newFixture(t)
	tok, _ := f.grantToken(func(g *fencegate.Grant) { g.IssuerEpoch = 2 })
	_, err := f.v.VerifyGrant(tok)
	wantRejected(t, err, grantInvalid, `issuerEpoch 2 is not the epoch 1 of key "k1"`)
	tok, _ = f.grantToken(func(g *fencegate.Grant) { g.IssuerEpoch = 0 })
	_, err = f.v.VerifyGrant(tok)
	wantRejected(t, err, grantInvalid, "issuerEpoch 0")
}

func TestKeyOutsideValidityWindowIsRejected(t *testing.T) {
	f := newFixture(t)
	nbf, exp := t0.Add(-hour), t0.Add(hour)
	b, err := proofs.NewBundle(2, f.signer.BundleKeyWindow(1, nbf, exp))
	mustOK(t, err)
	mustOK(t, f.v.SetBundle(b))
	tok, _ := f.grantToken(func(g *fencegate.Grant) { g.IssuedAt = nbf.UnixMilli() })

	f.set(nbf.Add(-1))
	_, err = f.v.VerifyGrant(tok)
	wantRejected(t, err, grantInvalid, `key "k1" is not valid before`)

	f.set(nbf)
	_, err = f.v.VerifyGrant(tok)
	mustOK(t, err)

	// Once cached, the window is still checked on every use.
	f.set(exp)
	_, err = f.v.VerifyGrant(tok)
	wantRejected(t, err, grantInvalid, `key "k1" expired at`)
	f.set(exp.Add(-1))
	_, err = f.v.VerifyGrant(tok)
	mustOK(t, err)

	// Same for status proofs.
	_, vg := f.verifiedGrant(nil)
	st := f.statusToken(vg, nil)
	_, err = f.v.VerifyStatus(st, vg)
	mustOK(t, err)
	f.set(exp.Add(hour))
	_, err = f.v.VerifyStatus(st, vg)
	wantRejected(t, err, fencegate.CodeStatusInvalid, "expired at")
}

func TestJWKKeyForSignerRoundTrips(t *testing.T) {
	// NewSigner takes a jwk.Key as well as a raw key.
	_, priv, _ := ed25519.GenerateKey(nil)
	k, err := jwk.FromRaw(priv)
	mustOK(t, err)
	s, err := proofs.NewSigner(k, "jwk-key", proofs.AlgEdDSA)
	mustOK(t, err)
	if s.KeyID() != "jwk-key" || s.Alg() != jwa.EdDSA {
		t.Fatalf("signer %s %s", s.KeyID(), s.Alg())
	}
}
