package proofs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/strictjson"
	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
)

// The algorithms this package accepts, and nothing else.
const (
	AlgEdDSA = jwa.EdDSA
	AlgES256 = jwa.ES256
	AlgHS256 = jwa.HS256
)

// Allowed reports whether alg is in the allow-list {EdDSA, ES256, HS256}.
func Allowed(alg jwa.SignatureAlgorithm) bool {
	switch alg {
	case AlgEdDSA, AlgES256, AlgHS256:
		return true
	}
	return false
}

// MinHMACKeySize is the shortest HS256 secret accepted, in bytes (RFC 7518
// §3.2: a key of the same size as the hash output or larger).
const MinHMACKeySize = 32

// MaxBundleSize caps a bundle document: one read or parsed here
// (LoadBundle, ParseBundle) and one a registry serves (authority publishes
// none longer), so a replica can read every document its registry serves.
// CheckBundleSize states the rule.
const MaxBundleSize = 1 << 20

// CheckBundleSize refuses (INVALID_REQUEST, naming the limit) a bundle
// document longer than MaxBundleSize. It is the one statement of the bound,
// for documents parsed (ParseBundle) and for those published (authority's
// seal, over what Marshal writes, which can be longer than the document
// the bundle was parsed from).
func CheckBundleSize(data []byte) error {
	if len(data) > MaxBundleSize {
		return bundleErr("larger than %d bytes (MaxBundleSize)", MaxBundleSize)
	}
	return nil
}

// BundleKey is one entry of a trust bundle: a verification key, the one
// algorithm it may be used with, the issuer epoch it signs for, and an
// optional validity window (zero times mean unbounded).
type BundleKey struct {
	// Key is the public key (EdDSA, ES256) or the shared secret (HS256). It
	// must carry a kid; an alg member, if set, must equal Alg.
	Key       jwk.Key
	Alg       jwa.SignatureAlgorithm
	Epoch     uint64
	NotBefore time.Time
	NotAfter  time.Time
}

// bundleKey is a checked BundleKey. It is never modified after construction.
type bundleKey struct {
	kid   string
	alg   jwa.SignatureAlgorithm
	epoch uint64
	nbf   time.Time
	exp   time.Time
	jwk   jwk.Key // a private clone with kid and alg set; never handed out
	raw   any     // ed25519.PublicKey, *ecdsa.PublicKey or []byte
}

// validAt reports nil if the key may be used at now.
func (k *bundleKey) validAt(now time.Time) error {
	if !k.nbf.IsZero() && now.Before(k.nbf) {
		return fmt.Errorf("key %s is not valid before %s", strictjson.Quote(k.kid), k.nbf.UTC().Format(time.RFC3339))
	}
	if !k.exp.IsZero() && !now.Before(k.exp) {
		return fmt.Errorf("key %s expired at %s", strictjson.Quote(k.kid), k.exp.UTC().Format(time.RFC3339))
	}
	return nil
}

func (k *bundleKey) public() BundleKey {
	c, err := k.jwk.Clone()
	if err != nil { // cannot happen for the key types admitted
		panic(fmt.Sprintf("proofs: clone bundle key: %v", err))
	}
	return BundleKey{Key: c, Alg: k.alg, Epoch: k.epoch, NotBefore: k.nbf, NotAfter: k.exp}
}

// Bundle is a versioned, immutable set of trusted keys indexed by kid, with
// the issuer epochs revoked as of its version. All methods are safe for
// concurrent use. Build one with NewBundle, NewRevokingBundle, ParseBundle or
// LoadBundle.
type Bundle struct {
	version uint64
	keys    map[string]*bundleKey
	order   []string
	revoked []uint64 // sorted, unique; no key of these epochs is in keys
	// revokedKids are the key IDs dropped by revocations (sorted, unique):
	// a token naming one is EPOCH_REVOKED rather than of an unknown key.
	revokedKids []string
}

func bundleErr(format string, args ...any) error {
	return fencegate.Errorf(fencegate.CodeInvalidRequest, "trust bundle: "+format, args...)
}

// NewBundle checks every entry and returns the bundle. Every key must have a
// kid, an allowed alg, a key type that fits the alg (OKP Ed25519 for EdDSA, EC
// P-256 for ES256, oct of at least MinHMACKeySize bytes for HS256), and must be
// a public key unless HS256; kids must be unique and the bundle non-empty.
func NewBundle(version uint64, entries ...BundleKey) (*Bundle, error) {
	return NewRevokingBundle(version, Revocations{}, entries...)
}

// Revocations are what a bundle revokes: issuer epochs, and the key IDs of
// the keys dropped for them (so that a token naming one is refused as
// EPOCH_REVOKED, not as signed by an unknown key).
type Revocations struct {
	Epochs []uint64
	KeyIDs []string
}

// NewRevokingBundle is NewBundle for a bundle that also carries revoked
// issuer epochs. Revocation has no overlap window: a bundle holding a key of
// a revoked epoch is refused, so the key is dropped in the same version that
// revokes it. Epoch 0 cannot be revoked (it is never issued).
func NewRevokingBundle(version uint64, revoked Revocations, entries ...BundleKey) (*Bundle, error) {
	if len(entries) == 0 {
		return nil, bundleErr("no keys")
	}
	b := &Bundle{version: version, keys: make(map[string]*bundleKey, len(entries))}
	b.revoked = slices.Compact(slices.Sorted(slices.Values(revoked.Epochs)))
	b.revokedKids = slices.Compact(slices.Sorted(slices.Values(revoked.KeyIDs)))
	if len(b.revoked) > 0 && b.revoked[0] == 0 {
		return nil, bundleErr("epoch 0 cannot be revoked")
	}
	for i, e := range entries {
		k, err := checkBundleKey(e)
		if err != nil {
			return nil, bundleErr("key #%d: %v", i, err)
		}
		if b.EpochRevoked(k.epoch) {
			return nil, bundleErr("key %s signs for revoked epoch %d: a revoked epoch's key is dropped, not kept", strictjson.Quote(k.kid), k.epoch)
		}
		if b.KeyRevoked(k.kid) {
			return nil, bundleErr("key %s is listed as revoked", strictjson.Quote(k.kid))
		}
		if _, dup := b.keys[k.kid]; dup {
			return nil, bundleErr("duplicate kid %s", strictjson.Quote(k.kid))
		}
		b.keys[k.kid] = k
		b.order = append(b.order, k.kid)
	}
	return b, nil
}

func checkBundleKey(e BundleKey) (*bundleKey, error) {
	if e.Key == nil {
		return nil, fmt.Errorf("no key")
	}
	kid := e.Key.KeyID()
	if kid == "" {
		return nil, fmt.Errorf("no kid")
	}
	if e.Alg == "" {
		return nil, fmt.Errorf("kid %s has no alg", strictjson.Quote(kid))
	}
	if !Allowed(e.Alg) {
		return nil, fmt.Errorf("kid %s: alg %s is not allowed", strictjson.Quote(kid), strictjson.Quote(e.Alg.String()))
	}
	if a := e.Key.Algorithm(); a != nil && a.String() != "" && a.String() != e.Alg.String() {
		return nil, fmt.Errorf("kid %s: key alg %s differs from entry alg %s", strictjson.Quote(kid), strictjson.Quote(a.String()), e.Alg)
	}
	if use := e.Key.KeyUsage(); use != "" && use != "sig" {
		return nil, fmt.Errorf("kid %s: key use %s is not sig", strictjson.Quote(kid), strictjson.Quote(use))
	}
	if !e.NotBefore.IsZero() && !e.NotAfter.IsZero() && !e.NotBefore.Before(e.NotAfter) {
		return nil, fmt.Errorf("kid %s: nbf is not before exp", strictjson.Quote(kid))
	}
	if err := e.Key.Validate(); err != nil {
		return nil, fmt.Errorf("kid %s: %v", strictjson.Quote(kid), err)
	}
	var raw any
	if err := e.Key.Raw(&raw); err != nil {
		return nil, fmt.Errorf("kid %s: %v", strictjson.Quote(kid), err)
	}
	raw, err := publicRawForAlg(raw, e.Alg)
	if err != nil {
		return nil, fmt.Errorf("kid %s: %v", strictjson.Quote(kid), err)
	}
	if e.Epoch == 0 {
		// Epoch 0 is never issued and cannot be revoked (NewRevokingBundle,
		// the admin route): a key at epoch 0 would verify epoch-0 grants
		// that no epoch revocation could refuse.
		return nil, fmt.Errorf("kid %s: epoch 0 is never issued (epochs start at 1)", strictjson.Quote(kid))
	}
	c, err := e.Key.Clone()
	if err != nil {
		return nil, fmt.Errorf("kid %s: %v", strictjson.Quote(kid), err)
	}
	if err := c.Set(jwk.AlgorithmKey, e.Alg); err != nil {
		return nil, fmt.Errorf("kid %s: %v", strictjson.Quote(kid), err)
	}
	return &bundleKey{kid: kid, alg: e.Alg, epoch: e.Epoch, nbf: e.NotBefore, exp: e.NotAfter, jwk: c, raw: raw}, nil
}

// publicRawForAlg checks that raw is a verification key that fits alg and
// returns a private copy of it.
func publicRawForAlg(raw any, alg jwa.SignatureAlgorithm) (any, error) {
	switch alg {
	case AlgEdDSA:
		switch k := raw.(type) {
		case ed25519.PublicKey:
			if len(k) != ed25519.PublicKeySize {
				return nil, fmt.Errorf("Ed25519 key has %d bytes", len(k))
			}
			return append(ed25519.PublicKey(nil), k...), nil
		case ed25519.PrivateKey:
			return nil, fmt.Errorf("a trust bundle holds public keys only")
		}
		return nil, fmt.Errorf("alg EdDSA needs an OKP Ed25519 key, not %T", raw)
	case AlgES256:
		switch k := raw.(type) {
		case *ecdsa.PublicKey:
			if k.Curve != elliptic.P256() {
				return nil, fmt.Errorf("alg ES256 needs a P-256 key")
			}
			if _, err := k.ECDH(); err != nil {
				return nil, fmt.Errorf("invalid P-256 key: %v", err)
			}
			c := *k
			return &c, nil
		case *ecdsa.PrivateKey:
			return nil, fmt.Errorf("a trust bundle holds public keys only")
		}
		return nil, fmt.Errorf("alg ES256 needs an EC P-256 key, not %T", raw)
	case AlgHS256:
		k, ok := raw.([]byte)
		if !ok {
			return nil, fmt.Errorf("alg HS256 needs an oct key, not %T", raw)
		}
		if len(k) < MinHMACKeySize {
			return nil, fmt.Errorf("HS256 secret has %d bytes, fewer than %d", len(k), MinHMACKeySize)
		}
		return append([]byte(nil), k...), nil
	}
	return nil, fmt.Errorf("alg %s is not allowed", strictjson.Quote(alg.String()))
}

// Version returns the bundle's version. A Verifier never moves to a lower one.
func (b *Bundle) Version() uint64 { return b.version }

// RevokedEpochs returns the revoked issuer epochs, ascending.
func (b *Bundle) RevokedEpochs() []uint64 { return slices.Clone(b.revoked) }

// Revocations returns what the bundle revokes.
func (b *Bundle) Revocations() Revocations {
	return Revocations{Epochs: slices.Clone(b.revoked), KeyIDs: slices.Clone(b.revokedKids)}
}

// KeyRevoked reports whether kid is a key the bundle dropped for a revocation.
func (b *Bundle) KeyRevoked(kid string) bool {
	_, ok := slices.BinarySearch(b.revokedKids, kid)
	return ok
}

// EpochRevoked reports whether the bundle revokes epoch.
func (b *Bundle) EpochRevoked(epoch uint64) bool {
	_, ok := slices.BinarySearch(b.revoked, epoch)
	return ok
}

// KeyIDs returns the kids in bundle order.
func (b *Bundle) KeyIDs() []string { return append([]string(nil), b.order...) }

// Key returns a copy of the entry for kid.
func (b *Bundle) Key(kid string) (BundleKey, bool) {
	k, ok := b.keys[kid]
	if !ok {
		return BundleKey{}, false
	}
	return k.public(), true
}

// Keys returns copies of all entries in bundle order.
func (b *Bundle) Keys() []BundleKey {
	out := make([]BundleKey, 0, len(b.order))
	for _, kid := range b.order {
		out = append(out, b.keys[kid].public())
	}
	return out
}

func (b *Bundle) lookup(kid string) (*bundleKey, bool) {
	k, ok := b.keys[kid]
	return k, ok
}

// bundleFile is the on-disk form: a JWKS with a version.
type bundleFile struct {
	Version       uint64            `json:"version"`
	Keys          []json.RawMessage `json:"keys"`
	RevokedEpochs []uint64          `json:"revokedEpochs,omitempty"`
	RevokedKeyIDs []string          `json:"revokedKeyIds,omitempty"`
}

// Marshal returns the bundle as a JWKS document: {"version": N, "keys": [...]}
// plus "revokedEpochs": [...] and "revokedKeyIds": [...] when it revokes any,
// each key with its standard JWK members (kid and alg included) plus "epoch"
// and, when set, "nbf" and "exp" in Unix seconds. A window is written inward:
// nbf rounded up, exp rounded down to the second. No '<', '>', '&', U+2028,
// U+2029 or control character but newline is written raw (encoding/json's
// HTML escaping): a replica's bound on the registry's chain answer counts on
// it (internal/app's maxChainAnswer). The escapes (six bytes each) and the
// indentation can make the document longer than the one the bundle was
// parsed from, past MaxBundleSize too: a registry publishes none that is
// (authority's seal checks it with CheckBundleSize).
func (b *Bundle) Marshal() ([]byte, error) {
	f := bundleFile{Version: b.version, RevokedEpochs: b.revoked, RevokedKeyIDs: b.revokedKids}
	for _, kid := range b.order {
		k := b.keys[kid]
		js, err := json.Marshal(k.jwk)
		if err != nil {
			return nil, fmt.Errorf("trust bundle: marshal kid %s: %w", strictjson.Quote(kid), err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(js, &m); err != nil {
			return nil, fmt.Errorf("trust bundle: marshal kid %s: %w", strictjson.Quote(kid), err)
		}
		m["epoch"] = json.RawMessage(strconv.FormatUint(k.epoch, 10))
		if !k.nbf.IsZero() {
			s := k.nbf.Unix()
			if k.nbf.Nanosecond() != 0 {
				s++
			}
			m["nbf"] = json.RawMessage(strconv.FormatInt(s, 10))
		}
		if !k.exp.IsZero() {
			m["exp"] = json.RawMessage(strconv.FormatInt(k.exp.Unix(), 10))
		}
		raw, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("trust bundle: marshal kid %s: %w", strictjson.Quote(kid), err)
		}
		f.Keys = append(f.Keys, raw)
	}
	return json.MarshalIndent(f, "", "  ")
}

// Equal reports whether b and o are one bundle: Marshal writes one document
// for both (their versions, keys with epochs and windows, and revocations
// alike). A nil bundle equals only nil.
func (b *Bundle) Equal(o *Bundle) bool {
	if b == nil || o == nil || b.version != o.version {
		return b == o // the version is in the document: unequal without marshalling
	}
	bm, berr := b.Marshal()
	om, oerr := o.Marshal()
	return berr == nil && oerr == nil && bytes.Equal(bm, om)
}

var bundleFields = strictjson.FieldsOf[bundleFile]()

// ParseBundle parses a bundle document (see Marshal) under the same strict JSON
// rules as tokens (no duplicate keys, no trailing data, no unknown top-level
// members) and checks every key as NewRevokingBundle does (no key of a
// revoked epoch). Each key must carry "kid",
// "alg" and "epoch"; "nbf" and "exp" are optional Unix seconds.
func ParseBundle(data []byte) (*Bundle, error) {
	if err := CheckBundleSize(data); err != nil {
		return nil, err
	}
	var f bundleFile
	if _, err := strictjson.Decode(data, &f, bundleFields, "version", "keys"); err != nil {
		return nil, bundleErr("%v", err)
	}
	entries := make([]BundleKey, 0, len(f.Keys))
	for i, raw := range f.Keys {
		e, err := parseBundleEntry(raw)
		if err != nil {
			return nil, bundleErr("key #%d: %v", i, err)
		}
		entries = append(entries, e)
	}
	return NewRevokingBundle(f.Version, Revocations{Epochs: f.RevokedEpochs, KeyIDs: f.RevokedKeyIDs}, entries...)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func parseBundleEntry(raw json.RawMessage) (BundleKey, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return BundleKey{}, fmt.Errorf("not a JSON object")
	}
	var e BundleKey
	epoch, ok := m["epoch"]
	if !ok {
		return BundleKey{}, fmt.Errorf(`"epoch" is required`)
	}
	n, err := parseUintMember(epoch, "epoch")
	if err != nil {
		return BundleKey{}, err
	}
	e.Epoch = n
	for _, name := range []string{"nbf", "exp"} {
		v, ok := m[name]
		if !ok {
			continue
		}
		n, err := parseUintMember(v, name)
		if err != nil {
			return BundleKey{}, err
		}
		if n > uint64(math.MaxInt64/int64(time.Second)) {
			return BundleKey{}, fmt.Errorf("%q is out of range", name)
		}
		t := time.Unix(int64(n), 0)
		if name == "nbf" {
			e.NotBefore = t
		} else {
			e.NotAfter = t
		}
	}
	var alg string
	if err := json.Unmarshal(m["alg"], &alg); err != nil || alg == "" {
		return BundleKey{}, fmt.Errorf(`"alg" is required and must be a string`)
	}
	var kid string
	if err := json.Unmarshal(m["kid"], &kid); err != nil || kid == "" {
		return BundleKey{}, fmt.Errorf(`"kid" is required and must be a string`)
	}
	e.Alg = jwa.SignatureAlgorithm(alg)
	if !Allowed(e.Alg) {
		return BundleKey{}, fmt.Errorf("kid %s: alg %s is not allowed", strictjson.Quote(kid), strictjson.Quote(alg))
	}
	delete(m, "epoch")
	delete(m, "nbf")
	delete(m, "exp")
	rest, err := json.Marshal(m)
	if err != nil {
		return BundleKey{}, err
	}
	k, err := jwk.ParseKey(rest)
	if err != nil {
		return BundleKey{}, fmt.Errorf("kid %s: %v", strictjson.Quote(kid), err)
	}
	e.Key = k
	return e, nil
}

func parseUintMember(v json.RawMessage, name string) (uint64, error) {
	n, err := strconv.ParseUint(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q must be an integer in 0..2^64-1", name)
	}
	return n, nil
}

// LoadBundle reads and parses the bundle file at path.
func LoadBundle(path string) (*Bundle, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fencegate.Wrap(err, fencegate.CodeInvalidRequest, "trust bundle: cannot open file")
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxBundleSize+1))
	if err != nil {
		return nil, fencegate.Wrap(err, fencegate.CodeInvalidRequest, "trust bundle: cannot read file")
	}
	return ParseBundle(data)
}
