package proofs

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/strictjson"
	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
)

// The typ header values of the two documents.
const (
	TypGrant  = "lockgrant+jws"
	TypStatus = "grantstatus+jws"
)

// GrantDigest returns "sha256:" + hex(SHA-256(payload)), the digest status
// proofs bind to. payload must be the exact bytes that were signed.
func GrantDigest(payload []byte) string {
	sum := sha256.Sum256(payload)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Signer signs grants and status proofs with one key under one kid. It is safe
// for concurrent use.
type Signer struct {
	kid string
	alg jwa.SignatureAlgorithm
	key any     // ed25519.PrivateKey, *ecdsa.PrivateKey or []byte
	pub jwk.Key // public key (the secret for HS256) with kid and alg set
}

// NewSigner returns a Signer for key, which may be a jwk.Key or a raw key:
// ed25519.PrivateKey for EdDSA, *ecdsa.PrivateKey on P-256 for ES256, or a
// []byte secret of at least MinHMACKeySize bytes for HS256.
func NewSigner(key any, kid string, alg jwa.SignatureAlgorithm) (*Signer, error) {
	if kid == "" {
		return nil, fmt.Errorf("proofs: signer needs a kid")
	}
	if !Allowed(alg) {
		return nil, fmt.Errorf("proofs: alg %s is not allowed", strictjson.Quote(alg.String()))
	}
	if k, ok := key.(jwk.Key); ok {
		var raw any
		if err := k.Raw(&raw); err != nil {
			return nil, fmt.Errorf("proofs: signer key: %w", err)
		}
		key = raw
	}
	s := &Signer{kid: kid, alg: alg}
	var pubRaw any
	switch alg {
	case AlgEdDSA:
		var k ed25519.PrivateKey
		switch v := key.(type) {
		case ed25519.PrivateKey:
			k = v
		case *ed25519.PrivateKey:
			k = *v
		default:
			return nil, fmt.Errorf("proofs: EdDSA needs an Ed25519 private key, not %T", key)
		}
		if len(k) != ed25519.PrivateKeySize {
			return nil, fmt.Errorf("proofs: Ed25519 private key has %d bytes", len(k))
		}
		k = append(ed25519.PrivateKey(nil), k...)
		s.key, pubRaw = k, k.Public()
	case AlgES256:
		k, ok := key.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("proofs: ES256 needs an *ecdsa.PrivateKey, not %T", key)
		}
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("proofs: ES256 needs a P-256 key")
		}
		s.key, pubRaw = k, &k.PublicKey
	case AlgHS256:
		k, ok := key.([]byte)
		if !ok {
			return nil, fmt.Errorf("proofs: HS256 needs a []byte secret, not %T", key)
		}
		if len(k) < MinHMACKeySize {
			return nil, fmt.Errorf("proofs: HS256 secret has %d bytes, fewer than %d", len(k), MinHMACKeySize)
		}
		k = append([]byte(nil), k...)
		s.key, pubRaw = k, k
	}
	pub, err := jwk.FromRaw(pubRaw)
	if err != nil {
		return nil, fmt.Errorf("proofs: public key: %w", err)
	}
	if err := pub.Set(jwk.KeyIDKey, kid); err != nil {
		return nil, err
	}
	if err := pub.Set(jwk.AlgorithmKey, alg); err != nil {
		return nil, err
	}
	s.pub = pub
	return s, nil
}

// GenerateEd25519Signer returns an EdDSA Signer with a fresh key.
func GenerateEd25519Signer(kid string) (*Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return NewSigner(priv, kid, AlgEdDSA)
}

// KeyID returns the kid the signer puts in every header.
func (s *Signer) KeyID() string { return s.kid }

// Alg returns the signer's algorithm.
func (s *Signer) Alg() jwa.SignatureAlgorithm { return s.alg }

// PublicKey returns a copy of the verification key as a jwk.Key with kid and
// alg set: the public key for EdDSA and ES256, the shared secret itself for
// HS256 (a MAC deployment shares it with every verifier).
func (s *Signer) PublicKey() jwk.Key {
	c, err := s.pub.Clone()
	if err != nil { // cannot happen for the key types admitted
		panic(fmt.Sprintf("proofs: clone public key: %v", err))
	}
	return c
}

// BundleKey returns the trust-bundle entry for this signer's key, signing for
// epoch, without a validity window.
func (s *Signer) BundleKey(epoch uint64) BundleKey {
	return BundleKey{Key: s.PublicKey(), Alg: s.alg, Epoch: epoch}
}

// BundleKeyWindow is BundleKey with a validity window (zero means unbounded).
func (s *Signer) BundleKeyWindow(epoch uint64, notBefore, notAfter time.Time) BundleKey {
	return BundleKey{Key: s.PublicKey(), Alg: s.alg, Epoch: epoch, NotBefore: notBefore, NotAfter: notAfter}
}

// SignGrant signs json.Marshal(g) as a compact JWS with typ lockgrant+jws and
// returns the token and the digest of the signed payload. It does not validate
// g: the registry does before it signs.
func (s *Signer) SignGrant(g fencegate.Grant) (token string, digest string, err error) {
	payload, err := json.Marshal(g)
	if err != nil {
		return "", "", err
	}
	tok, err := s.sign(payload, TypGrant)
	if err != nil {
		return "", "", err
	}
	return tok, GrantDigest(payload), nil
}

// GrantDigest returns the digest SignGrant would return for g, without
// signing: the grant's payload bytes do not depend on the key.
func (s *Signer) GrantDigest(g fencegate.Grant) (string, error) {
	payload, err := json.Marshal(g)
	if err != nil {
		return "", err
	}
	return GrantDigest(payload), nil
}

// SignStatus signs json.Marshal(st) as a compact JWS with typ grantstatus+jws.
func (s *Signer) SignStatus(st fencegate.Status) (string, error) {
	payload, err := json.Marshal(st)
	if err != nil {
		return "", err
	}
	return s.sign(payload, TypStatus)
}

// SignPayload signs arbitrary payload bytes under typ. It exists for tests
// that need a correctly signed token around a payload the typed methods
// would never produce.
func (s *Signer) SignPayload(payload []byte, typ string) (string, error) {
	return s.sign(payload, typ)
}

func (s *Signer) sign(payload []byte, typ string) (string, error) {
	hdr := jws.NewHeaders()
	if err := hdr.Set(jws.KeyIDKey, s.kid); err != nil {
		return "", err
	}
	if err := hdr.Set(jws.TypeKey, typ); err != nil {
		return "", err
	}
	out, err := jws.Sign(payload, jws.WithKey(s.alg, s.key, jws.WithProtectedHeaders(hdr)))
	if err != nil {
		return "", fmt.Errorf("proofs: sign: %w", err)
	}
	return string(out), nil
}
