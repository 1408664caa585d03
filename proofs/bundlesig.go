package proofs

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/strictjson"
	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jws"
)

// A trust bundle's signature: the registry signs the exact bytes of the
// bundle document it serves, with a detached-payload compact JWS
// ("header..signature", RFC 7515 Appendix F) per signing key, and a replica
// installs a fetched bundle only when one of them verifies under a key of
// the bundle already in force there. Each bundle is so signed by a key the
// previous one trusts: a chain across rotations.
const (
	// TypBundle is the typ header of a trust bundle signature. A grant,
	// status proof or delegation verifier refuses it, and VerifyBundleSignature
	// refuses every other typ: no signature stands in for another document.
	TypBundle = "fencegate-bundle+jws"
	// bundleVersionMember is the protected header member naming the version
	// of the bundle signed (the version in the payload must equal it).
	bundleVersionMember = "bundleVersion"
	// maxBundleSignatures caps how many signatures one header may carry;
	// maxBundleSignatureSize caps its length in bytes, checked before any
	// decoding.
	maxBundleSignatures    = 8
	maxBundleSignatureSize = 8 << 10
)

// ErrUnsignedBundle is under (errors.Is) the refusal of a fetched bundle
// that carries no signature at all (a registry too old to sign, or a
// signature stripped on the way).
var ErrUnsignedBundle = errors.New("the trust bundle carries no signature")

// SignBundle returns the signature of data, a bundle document of version
// version, by every signer (each with its own alg and kid, duplicates of a
// kid signed once): detached compact JWS with typ fencegate-bundle+jws and a
// bundleVersion member, joined by ", " (the value of fencegate.BundleSignatureHeader).
func SignBundle(data []byte, version uint64, signers ...*Signer) (string, error) {
	var out []string
	seen := map[string]bool{}
	for _, s := range signers {
		if s == nil || seen[s.kid] {
			continue
		}
		seen[s.kid] = true
		hdr := jws.NewHeaders()
		for k, v := range map[string]any{jws.KeyIDKey: s.kid, jws.TypeKey: TypBundle, bundleVersionMember: version} {
			if err := hdr.Set(k, v); err != nil {
				return "", err
			}
		}
		sig, err := jws.Sign(nil, jws.WithKey(s.alg, s.key, jws.WithProtectedHeaders(hdr)), jws.WithDetachedPayload(data))
		if err != nil {
			return "", fmt.Errorf("proofs: sign bundle: %w", err)
		}
		out = append(out, string(sig))
	}
	if len(out) == 0 {
		return "", errors.New("proofs: sign bundle: no signer")
	}
	return strings.Join(out, ", "), nil
}

// VerifyBundleSignature checks signature (a fencegate.BundleSignatureHeader value)
// over data, the exact bytes of a bundle document of version version, and
// returns the kid of the first signature that verifies. One must: be a
// detached compact JWS of unpadded base64url segments (no white space inside
// one, no padding) with a strict protected header of exactly alg, kid,
// typ fencegate-bundle+jws and bundleVersion equal to version; name a key of
// trusted (the bundle in force here, never the one being verified) valid at
// now, an EdDSA key (a registry's; HS256 secrets are held by every replica
// of a MAC deployment), under that key's own alg; and verify over data.
// Anything else is refused: a grant or status proof, alg none, a kid trusted
// does not hold, a public key used as an HMAC secret. An empty signature is
// refused with ErrUnsignedBundle. Every refusal is INVALID_REQUEST and lists
// why each signature failed.
func VerifyBundleSignature(trusted *Bundle, data []byte, signature string, version uint64, now time.Time) (string, error) {
	if trusted == nil {
		return "", bundleErr("no bundle in force to verify a signature with")
	}
	signature = strings.TrimSpace(signature)
	if signature == "" {
		return "", fencegate.Wrap(ErrUnsignedBundle, fencegate.CodeInvalidRequest, fmt.Sprintf("trust bundle: version %d carries no signature", version))
	}
	if len(signature) > maxBundleSignatureSize {
		return "", bundleErr("signature of %d bytes exceeds the limit of %d", len(signature), maxBundleSignatureSize)
	}
	parts := strings.Split(signature, ",")
	if len(parts) > maxBundleSignatures {
		return "", bundleErr("%d signatures exceed the limit of %d", len(parts), maxBundleSignatures)
	}
	var why []string
	for i, p := range parts {
		kid, err := verifyBundleJWS(trusted, data, strings.TrimSpace(p), version, now)
		if err == nil {
			return kid, nil
		}
		why = append(why, fmt.Sprintf("#%d: %v", i, err))
	}
	return "", bundleErr("version %d: no signature verifies under a key of the bundle in force (version %d, keys %s): %s",
		version, trusted.Version(), strings.Join(trusted.KeyIDs(), ", "), strings.Join(why, "; "))
}

// verifyBundleJWS checks one detached compact JWS of a bundle signature.
func verifyBundleJWS(trusted *Bundle, data []byte, sig string, version uint64, now time.Time) (string, error) {
	hdrJSON, _, err := splitCompact(sig, true)
	if err != nil {
		return "", err
	}
	alg, kid, err := parseBundleHeader(hdrJSON, version)
	if err != nil {
		return "", err
	}
	key, ok := trusted.lookup(kid)
	if !ok {
		return "", fmt.Errorf("kid %s is not in the bundle in force", strictjson.Quote(kid))
	}
	if alg != key.alg {
		return "", fmt.Errorf("header alg %s is not the alg %s of key %s", strictjson.Quote(alg.String()), key.alg, strictjson.Quote(kid))
	}
	if key.alg != AlgEdDSA {
		// A registry signs with EdDSA only. An HS256 key is a secret every
		// replica of a MAC deployment holds, so any of them could vouch
		// for a bundle with it; no key of another alg vouches for one.
		return "", fmt.Errorf("key %s is %s: only a registry's EdDSA key vouches for a bundle", strictjson.Quote(kid), key.alg)
	}
	if err := key.validAt(now); err != nil {
		return "", err
	}
	if _, err := jws.Verify([]byte(sig), jws.WithKey(key.alg, key.raw), jws.WithDetachedPayload(data)); err != nil {
		return "", fmt.Errorf("does not verify with key %s", strictjson.Quote(kid))
	}
	return kid, nil
}

// parseBundleHeader parses a bundle signature's protected header strictly
// (parseHeader, with bundleVersion as a fourth member, required) and checks
// its typ and version.
func parseBundleHeader(data []byte, version uint64) (jwa.SignatureAlgorithm, string, error) {
	h, raw, err := parseHeader(data, bundleVersionMember)
	if err != nil {
		return "", "", fmt.Errorf("header: %v", err)
	}
	n, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		return "", "", fmt.Errorf("header: %q must be an integer in 0..2^64-1", bundleVersionMember)
	}
	if !strings.EqualFold(h.Typ, TypBundle) {
		return "", "", fmt.Errorf("header typ %s is not %q", strictjson.Quote(h.Typ), TypBundle)
	}
	if n != version {
		return "", "", fmt.Errorf("signs bundle version %d, not %d", n, version)
	}
	return jwa.SignatureAlgorithm(h.Alg), h.Kid, nil
}
