package proofs

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/strictjson"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jws"
)

// Defaults of a Verifier.
const (
	// DefaultMaxTokenSize caps a token's length in bytes; longer tokens are
	// refused before any decoding.
	DefaultMaxTokenSize = 8 << 10
	// DefaultCacheSize is the number of verified grants (and, separately,
	// status proofs) kept.
	DefaultCacheSize = 8192
)

// Option configures a Verifier.
type Option func(*Verifier)

// WithClock sets the clock key windows and status freshness are checked
// against (default time.Now).
func WithClock(now func() time.Time) Option {
	return func(v *Verifier) {
		if now != nil {
			v.now = now
		}
	}
}

// WithCacheSize sets how many verified grants and status proofs are cached
// (each); 0 disables caching.
func WithCacheSize(n int) Option {
	return func(v *Verifier) { v.cacheSize = max(n, 0) }
}

// WithMaxTokenSize sets the token size cap in bytes (default 8 KiB).
func WithMaxTokenSize(n int) Option {
	return func(v *Verifier) {
		if n > 0 {
			v.maxSize = n
		}
	}
}

// Verifier verifies grants and status proofs against its current trust
// bundle. It is safe for concurrent use; the bundle is swapped atomically by
// SetBundle.
type Verifier struct {
	bundle    atomic.Pointer[Bundle]
	swap      sync.Mutex // serializes SetBundle
	now       func() time.Time
	maxSize   int
	cacheSize int
	grants    *lru.Cache[[sha256.Size]byte, grantEntry]
	statuses  *lru.Cache[[sha256.Size]byte, statusEntry]

	// sigChecks counts calls of jws.Verify; tests read it to prove that a
	// cached token skips the signature check.
	sigChecks atomic.Uint64
	// cache counts lookups of the verified-token caches (see CacheStats).
	cache CacheStats
	// revokedKeys are the thumbprints of keys revoked here (revokedkeys.go);
	// guarded by swap.
	revokedKeys map[string]bool
}

// CacheStats counts lookups of the verified-token caches since the Verifier
// was made: a hit skipped the signature check, a miss paid for it. With the
// cache off (WithCacheSize(0)) nothing is counted.
type CacheStats struct {
	GrantHits, GrantMisses, StatusHits, StatusMisses atomic.Uint64
}

// CacheStats returns the Verifier's cache counters (read them with Load).
func (v *Verifier) CacheStats() *CacheStats { return &v.cache }

type grantEntry struct {
	bundle *Bundle
	key    *bundleKey
	vg     fencegate.VerifiedGrant
}

type statusEntry struct {
	bundle *Bundle
	key    *bundleKey
	st     fencegate.Status
}

// NewVerifier returns a Verifier that trusts exactly the keys of b.
func NewVerifier(b *Bundle, opts ...Option) (*Verifier, error) {
	if b == nil {
		return nil, errors.New("proofs: NewVerifier needs a bundle")
	}
	v := &Verifier{now: time.Now, maxSize: DefaultMaxTokenSize, cacheSize: DefaultCacheSize, revokedKeys: map[string]bool{}}
	for _, o := range opts {
		o(v)
	}
	if err := v.trustsNoRevokedKey(b, nil); err != nil {
		return nil, err
	}
	if v.cacheSize > 0 {
		var err error
		if v.grants, err = lru.New[[sha256.Size]byte, grantEntry](v.cacheSize); err != nil {
			return nil, err
		}
		if v.statuses, err = lru.New[[sha256.Size]byte, statusEntry](v.cacheSize); err != nil {
			return nil, err
		}
	}
	v.bundle.Store(b)
	return v, nil
}

// Bundle returns the bundle in force.
func (v *Verifier) Bundle() *Bundle { return v.bundle.Load() }

// SetBundle replaces the trust bundle. It is the only way keys change: a file
// reload or an admin action calls it, a token never does. A bundle with a lower
// version than the current one is refused, and so is one of the current
// version with other content (replicas take only a higher version), and
// one that lifts a revocation of the current one (revocation is one-way). The caches are emptied, and entries
// verified under an earlier bundle are never used again.
func (v *Verifier) SetBundle(b *Bundle) error {
	v.swap.Lock()
	defer v.swap.Unlock()
	if err := v.admits(b); err != nil {
		return err
	}
	for _, p := range revokedBy(v.bundle.Load(), b) {
		v.revokedKeys[p] = true
	}
	v.bundle.Store(b)
	if v.grants != nil {
		v.grants.Purge()
		v.statuses.Purge()
	}
	return nil
}

// Admits reports whether SetBundle would take b now, changing nothing: a
// caller that persists a bundle before installing it asks first.
func (v *Verifier) Admits(b *Bundle) error {
	v.swap.Lock()
	defer v.swap.Unlock()
	return v.admits(b)
}

// admits is SetBundle's check; the caller holds swap.
func (v *Verifier) admits(b *Bundle) error {
	if b == nil {
		return bundleErr("nil bundle")
	}
	cur := v.bundle.Load()
	if b.Version() < cur.Version() {
		return bundleErr("version %d is lower than the current version %d", b.Version(), cur.Version())
	}
	if b.Version() == cur.Version() && !b.Equal(cur) {
		// Replicas take a bundle only of a higher version (the authority's
		// offer): installed here, it would never reach them.
		return bundleErr("version %d is the current version with other content: a changed bundle needs a higher version", b.Version())
	}
	for _, e := range cur.revoked {
		if !b.EpochRevoked(e) {
			return bundleErr("version %d lifts the revocation of epoch %d", b.Version(), e)
		}
	}
	return v.keepsKeysRevoked(cur, b)
}

// docKind names the document a token must carry.
type docKind struct {
	name string
	typ  string
	code fencegate.Code
}

var (
	grantKind  = docKind{name: "grant", typ: TypGrant, code: fencegate.CodeGrantInvalid}
	statusKind = docKind{name: "status proof", typ: TypStatus, code: fencegate.CodeStatusInvalid}
)

// ErrUnknownKey is under (errors.Is) a refusal of a document signed by a
// key the trust bundle does not hold, neither trusted nor revoked: one a
// newer bundle may hold (a key the registry rotated to since).
var ErrUnknownKey = errors.New("kid not in the trust bundle")

func (d docKind) errorf(format string, args ...any) *fencegate.Error {
	return fencegate.Errorf(d.code, d.name+": "+format, args...)
}

var (
	grantFields  = strictjson.FieldsOf[fencegate.Grant]()
	statusFields = strictjson.FieldsOf[fencegate.Status]()
)

// VerifyGrant verifies a compact lockGrant.v1 JWS and returns the grant with
// its digest and the kid that signed it. Any failure is GRANT_INVALID. The
// grant's expiresAt is not checked here: whether the lease is still held is
// what the status proof says.
func (v *Verifier) VerifyGrant(token string) (fencegate.VerifiedGrant, error) {
	if err := v.checkSize(token, grantKind); err != nil {
		return fencegate.VerifiedGrant{}, err
	}
	cur := v.bundle.Load()
	now := v.now()
	var id [sha256.Size]byte
	if v.grants != nil {
		id = tokenID(token)
		e, ok := v.grants.Get(id)
		if !ok || e.bundle != cur {
			v.cache.GrantMisses.Add(1)
		} else {
			v.cache.GrantHits.Add(1)
			if err := e.key.validAt(now); err != nil {
				return fencegate.VerifiedGrant{}, grantKind.errorf("%v", err)
			}
			return e.vg, nil
		}
	}
	key, payload, err := v.verifyToken(token, grantKind, cur, now)
	if err != nil {
		return fencegate.VerifiedGrant{}, err
	}
	var g fencegate.Grant
	if _, err := strictjson.Decode(payload, &g, grantFields); err != nil {
		return fencegate.VerifiedGrant{}, grantKind.errorf("payload: %v", err)
	}
	if err := g.Validate(); err != nil {
		return fencegate.VerifiedGrant{}, err
	}
	if g.IssuerEpoch != key.epoch {
		return fencegate.VerifiedGrant{}, grantKind.errorf("issuerEpoch %d is not the epoch %d of key %s", g.IssuerEpoch, key.epoch, strictjson.Quote(key.kid))
	}
	vg := fencegate.VerifiedGrant{Grant: g, Digest: GrantDigest(payload), KeyID: key.kid}
	if v.grants != nil {
		v.grants.Add(id, grantEntry{bundle: cur, key: key, vg: vg})
	}
	return vg, nil
}

// VerifyStatus verifies a compact grantStatus.v1 JWS for the verified grant g
// and returns the status. Any failure is STATUS_INVALID. The claims (binding to
// g, state, freshness) are checked on every call, also when the signature check
// is served from the cache. Whether the issuer epoch is revoked is the caller's
// check.
func (v *Verifier) VerifyStatus(token string, g fencegate.VerifiedGrant) (fencegate.Status, error) {
	return v.verifyStatus(token, g, "", true)
}

// VerifyStatement is VerifyStatus for the registry's statement of any state:
// its answer to a gateway's own query, where a REVOKED or EXPIRED lease is a
// verified verdict for the gateway to answer by (a REVOKED lease's write is
// EPOCH_REVOKED), not a broken proof. Everything else is checked as by
// VerifyStatus; a proof a client presents is checked by VerifyStatus, which
// takes only HELD.
func (v *Verifier) VerifyStatement(token string, g fencegate.VerifiedGrant) (fencegate.Status, error) {
	return v.verifyStatus(token, g, "", false)
}

// VerifyDelegationStatement is VerifyStatement for a delegated write's
// statement (VerifyDelegationStatus's checks, any state).
func (v *Verifier) VerifyDelegationStatement(token string, g fencegate.VerifiedGrant, delegation string) (fencegate.Status, error) {
	if delegation == "" {
		return fencegate.Status{}, statusKind.errorf("no delegation named")
	}
	return v.verifyStatus(token, g, delegation, false)
}

// VerifyDelegationStatus is VerifyStatus for a delegated write: the proof
// must also have been issued for the delegation with ID delegation (its
// delegation claim), which the registry does only while the delegation is
// not revoked. An owner's proof (no delegation claim) is refused, and
// VerifyStatus refuses a delegate's proof: neither stands in for the other.
func (v *Verifier) VerifyDelegationStatus(token string, g fencegate.VerifiedGrant, delegation string) (fencegate.Status, error) {
	if delegation == "" {
		return fencegate.Status{}, statusKind.errorf("no delegation named")
	}
	return v.verifyStatus(token, g, delegation, true)
}

// verifyStatus verifies a status proof for g (and delegation, if named);
// held requires the state HELD.
func (v *Verifier) verifyStatus(token string, g fencegate.VerifiedGrant, delegation string, held bool) (fencegate.Status, error) {
	if err := v.checkSize(token, statusKind); err != nil {
		return fencegate.Status{}, err
	}
	cur := v.bundle.Load()
	now := v.now()
	var id [sha256.Size]byte
	var st fencegate.Status
	var key *bundleKey
	cached := false
	if v.statuses != nil {
		id = tokenID(token)
		if e, ok := v.statuses.Get(id); ok && e.bundle == cur {
			st, key, cached = e.st, e.key, true
			v.cache.StatusHits.Add(1)
		} else {
			v.cache.StatusMisses.Add(1)
		}
	}
	if !cached {
		k, payload, err := v.verifyToken(token, statusKind, cur, now)
		if err != nil {
			return fencegate.Status{}, err
		}
		var dec fencegate.Status // st itself stays on the stack for cached proofs
		if _, err := strictjson.Decode(payload, &dec, statusFields); err != nil {
			return fencegate.Status{}, statusKind.errorf("payload: %v", err)
		}
		st = dec
		if st.IssuerEpoch != k.epoch {
			return fencegate.Status{}, statusKind.errorf("issuerEpoch %d is not the epoch %d of key %s", st.IssuerEpoch, k.epoch, strictjson.Quote(k.kid))
		}
		key = k
		if v.statuses != nil {
			v.statuses.Add(id, statusEntry{bundle: cur, key: key, st: st})
		}
	} else if err := key.validAt(now); err != nil {
		return fencegate.Status{}, statusKind.errorf("%v", err)
	}
	if err := checkStatusClaims(st, g, now, held); err != nil {
		return fencegate.Status{}, err
	}
	if st.Delegation != delegation {
		if delegation == "" {
			return fencegate.Status{}, statusKind.errorf("the proof was issued to a delegate, not to the grant's owner")
		}
		return fencegate.Status{}, statusKind.errorf("the proof was not issued for delegation %s", strictjson.Quote(delegation))
	}
	return st, nil
}

// checkStatusClaims checks what a status proof says against grant g at now
// (and, when held, that it states the lease HELD).
func checkStatusClaims(st fencegate.Status, g fencegate.VerifiedGrant, now time.Time, held bool) error {
	sk := statusKind
	switch {
	case st.Schema != fencegate.StatusSchema:
		return sk.errorf("schema must be %q", fencegate.StatusSchema)
	case g.Digest == "":
		return sk.errorf("the grant has no digest")
	case st.GrantDigest != g.Digest:
		return sk.errorf("grantDigest names another grant")
	case st.Resource != g.Resource:
		return sk.errorf("resource is not the grant's resource")
	case st.Lease != g.Lease:
		return sk.errorf("lease is not the grant's lease")
	case st.FenceToken != g.FenceToken:
		return sk.errorf("fenceToken is not the grant's fenceToken")
	case held && st.State != fencegate.StateHeld:
		return sk.errorf("lease state is %s, not HELD", strictjson.Quote(string(st.State)))
	case !validState(st.State):
		return sk.errorf("lease state %s is not a lease state", strictjson.Quote(string(st.State)))
	}
	nowMs := now.UnixMilli()
	switch {
	case st.ExpiresAtMs <= nowMs:
		return sk.errorf("expired %d ms ago", nowMs-st.ExpiresAtMs)
	case st.IssuedAtMs > nowMs+fencegate.MaxClockSkew.Milliseconds():
		return sk.errorf("iat is %d ms in the future, more than the %s skew allowed", st.IssuedAtMs-nowMs, fencegate.MaxClockSkew)
	case st.ExpiresAtMs <= st.IssuedAtMs:
		return sk.errorf("exp is not after iat")
	case st.IssuedAtMs < nowMs-fencegate.MaxStatusLife.Milliseconds()-fencegate.MaxClockSkew.Milliseconds():
		// Bounds iat before subtracting, so exp-iat cannot overflow.
		return sk.errorf("iat is older than the longest status proof life")
	case st.ExpiresAtMs-st.IssuedAtMs > fencegate.MaxStatusLife.Milliseconds():
		return sk.errorf("life of %d ms exceeds the maximum %s", st.ExpiresAtMs-st.IssuedAtMs, fencegate.MaxStatusLife)
	}
	return nil
}

// validState reports whether s is one of the states a registry states.
func validState(s fencegate.StatusState) bool {
	switch s {
	case fencegate.StateHeld, fencegate.StateExpired, fencegate.StateReleased, fencegate.StateRevoked:
		return true
	}
	return false
}

// tokenID is the cache key of a token: the SHA-256 of its exact bytes,
// hashed in place (a []byte(token) conversion would copy every token of
// every request, twice per token and write).
func tokenID(token string) [sha256.Size]byte {
	return sha256.Sum256(unsafe.Slice(unsafe.StringData(token), len(token))) // Sum256 only reads
}

func (v *Verifier) checkSize(token string, kind docKind) error {
	if len(token) > v.maxSize {
		return kind.errorf("token of %d bytes exceeds the limit of %d", len(token), v.maxSize)
	}
	return nil
}

// verifyToken runs every structural, header and signature rule on token
// against bundle b at now and returns the key that verified it and the exact
// signed payload bytes.
func (v *Verifier) verifyToken(token string, kind docKind, b *Bundle, now time.Time) (*bundleKey, []byte, error) {
	if token == "" {
		return nil, nil, kind.errorf("empty token")
	}
	if strings.HasPrefix(strings.TrimLeft(token, " \t\r\n"), "{") {
		return nil, nil, kind.errorf("JSON serialization is not accepted; only compact JWS")
	}
	hdrJSON, payload, err := splitCompact(token, false)
	if err != nil {
		return nil, nil, kind.errorf("%v", err)
	}
	hdr, _, err := parseHeader(hdrJSON, "")
	if err != nil {
		return nil, nil, kind.errorf("header: %v", err)
	}
	if !strings.EqualFold(hdr.Typ, kind.typ) {
		return nil, nil, kind.errorf("header typ %s is not %q", strictjson.Quote(hdr.Typ), kind.typ)
	}
	key, ok := b.lookup(hdr.Kid)
	if !ok && b.KeyRevoked(hdr.Kid) {
		return nil, nil, fencegate.Errorf(fencegate.CodeEpochRevoked, "%s: kid %s belongs to a revoked issuer epoch (trust bundle version %d)", kind.name, strictjson.Quote(hdr.Kid), b.Version())
	}
	if !ok {
		e := kind.errorf("kid %s is not in the trust bundle (version %d)", strictjson.Quote(hdr.Kid), b.Version())
		e.Err = ErrUnknownKey
		return nil, nil, e
	}
	alg := jwa.SignatureAlgorithm(hdr.Alg)
	if alg != key.alg {
		return nil, nil, kind.errorf("header alg %s is not the alg %s of key %s", strictjson.Quote(hdr.Alg), key.alg, strictjson.Quote(key.kid))
	}
	if err := key.validAt(now); err != nil {
		return nil, nil, kind.errorf("%v", err)
	}
	v.sigChecks.Add(1)
	signed, err := jws.Verify([]byte(token), jws.WithKey(key.alg, key.raw), jws.WithCompact())
	if err != nil {
		return nil, nil, kind.errorf("signature does not verify with key %s", strictjson.Quote(key.kid))
	}
	if !bytes.Equal(signed, payload) { // defence in depth: both parsed the same bytes
		return nil, nil, kind.errorf("signed payload differs from the token's payload")
	}
	return key, payload, nil
}
