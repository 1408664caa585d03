// Package proofs signs and verifies the two documents a fenced request carries:
// the grant (lockGrant.v1) and the short-lived status proof (grantStatus.v1),
// both compact JWS (github.com/lestrrat-go/jwx/v2), and holds the trust bundle
// the gateway verifies them against.
//
// What a successful VerifyGrant or VerifyStatus guarantees:
//
//   - Fixed trust bundle. The signing key is looked up by the protected
//     header's kid in the Bundle the Verifier was given, and only there. A token
//     can never name where its key comes from: jku, x5u, jwk and x5c header
//     members are refused, not ignored. The bundle changes only through
//     Verifier.SetBundle (a file reload or an admin action), never to a lower
//     version.
//   - Algorithm allow-list. Only EdDSA (Ed25519), ES256 (P-256) and HS256 are
//     accepted; "none" never is. Every bundle key carries its own algorithm and
//     the key type must fit it; a token whose header alg differs from the key's
//     alg is refused before any signature check, so a public key can never be
//     used as an HMAC secret. The signature is checked with jws.Verify and an
//     explicit (alg, key) pair, never with a key provider that reads the header.
//   - Strict headers. The protected header holds exactly alg, kid and typ; typ
//     must name the document (lockgrant+jws or grantstatus+jws); any crit is
//     refused since no extension is understood; unknown members are refused.
//   - Strict JSON. Header and payload must be one JSON object with no duplicate
//     key at any depth, no trailing data, no null, no member outside the schema
//     (names compared byte-exactly), valid UTF-8, and integer fields in range
//     (negative, fractional or above 2^64-1 values in uint64 fields are refused).
//   - Bounded input. A token longer than the size cap (default 8 KiB) is refused
//     before any decoding; only the compact serialization with exactly two dots
//     and unpadded base64url segments is accepted.
//   - Key windows and epochs. A bundle key is usable only inside its nbf/exp
//     window, checked against the injected clock on every verification, cached
//     or not; a key signs only for its own issuer epoch (the document's
//     issuerEpoch must equal the key's epoch). Whether an epoch is revoked is the
//     caller's check.
//   - Status freshness and binding. A status proof is accepted only for the
//     grant it names (grantDigest, resource, lease and fenceToken), in state
//     HELD, with exp in the future, iat at most 2 s ahead, and a life of at most
//     fencegate.MaxStatusLife. These claims are rechecked on every call, also
//     when the signature check came from the cache.
//   - Cache keyed by exact bytes. Verified grants and status proofs are kept in
//     a bounded LRU keyed by the SHA-256 of the exact token bytes and tied to the
//     bundle they were verified under; a bundle change empties the cache, and an
//     entry of another bundle is never used.
//
// Every rejection is a *fencegate.Error: GRANT_INVALID from VerifyGrant,
// STATUS_INVALID from VerifyStatus.
//
// Trust bundle signatures (bundlesig.go) chain bundles across rotations:
// SignBundle signs the exact bytes of a bundle document with a detached
// compact JWS per key (typ fencegate-bundle+jws, bundleVersion in the
// protected header), and VerifyBundleSignature accepts it only under a key of
// the bundle already in force, with that key's own alg, inside its window;
// its segments pass the same structural check as a token's (splitCompact in
// compact.go: two dots, unpadded base64url only). The typ keeps the
// documents apart: the grant and status verifiers refuse a bundle
// signature, and VerifyBundleSignature refuses a grant or status proof. A
// refused signature is INVALID_REQUEST.
//
// Package prooftest holds helpers for other packages' tests: a signer, a
// bundle and a verifier on an injectable clock, issuing valid tokens by default.
package proofs
