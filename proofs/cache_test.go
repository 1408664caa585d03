package proofs_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
	"github.com/lestrrat-go/jwx/v2/jwa"
)

func TestSecondVerificationSkipsSignatureCheck(t *testing.T) {
	f := newFixture(t)
	tok, _ := f.grantToken(nil)
	vg1, err := f.v.VerifyGrant(tok)
	mustOK(t, err)
	if n := proofs.SignatureChecks(f.v); n != 1 {
		t.Fatalf("%d signature checks after the first verification", n)
	}
	vg2, err := f.v.VerifyGrant(tok)
	mustOK(t, err)
	if n := proofs.SignatureChecks(f.v); n != 1 {
		t.Fatalf("%d signature checks after the second verification; want 1", n)
	}
	if vg1 != vg2 {
		t.Fatalf("cached grant differs: %+v vs %+v", vg1, vg2)
	}

	// Status proofs: the signature check is cached, the claims are not.
	st := f.statusToken(vg1, nil)
	for range 3 {
		_, err = f.v.VerifyStatus(st, vg1)
		mustOK(t, err)
	}
	if n := proofs.SignatureChecks(f.v); n != 2 {
		t.Fatalf("%d signature checks after three status verifications; want 2", n)
	}
	_, other := f.verifiedGrant(func(g *fencegate.Grant) { g.RequestID = "req-2" })
	_, err = f.v.VerifyStatus(st, other)
	wantRejected(t, err, fencegate.CodeStatusInvalid, "another grant")
}

// The cache is keyed by the exact bytes: another encoding of the same token
// is verified afresh (and here refused).
func TestCacheIsKeyedByExactBytes(t *testing.T) {
	f := newFixture(t)
	tok, _ := f.grantToken(nil)
	_, err := f.v.VerifyGrant(tok)
	mustOK(t, err)
	_, err = f.v.VerifyGrant(tok + "=")
	wantRejected(t, err, grantInvalid)
	_, err = f.v.VerifyGrant(" " + tok)
	wantRejected(t, err, grantInvalid)
	// A failed token is not cached: it fails again with its own reason.
	bad := flipSig(tok)
	for range 2 {
		_, err = f.v.VerifyGrant(bad)
		wantRejected(t, err, grantInvalid, "signature")
	}
}

func TestCacheIsInvalidatedWhenTheBundleChanges(t *testing.T) {
	f := newFixture(t)
	tok, _ := f.grantToken(nil)
	_, err := f.v.VerifyGrant(tok)
	mustOK(t, err)
	b2, _ := proofs.NewBundle(2, f.signer.BundleKey(1))
	mustOK(t, f.v.SetBundle(b2))
	_, err = f.v.VerifyGrant(tok)
	mustOK(t, err)
	if n := proofs.SignatureChecks(f.v); n != 2 {
		t.Fatalf("%d signature checks; the new bundle must verify afresh", n)
	}
	// A bundle that gives k1 another epoch refuses the once-cached grant.
	b3, _ := proofs.NewBundle(3, f.signer.BundleKey(9))
	mustOK(t, f.v.SetBundle(b3))
	_, err = f.v.VerifyGrant(tok)
	wantRejected(t, err, grantInvalid, "is not the epoch 9")
}

func TestCacheCanBeDisabled(t *testing.T) {
	f := newFixture(t, proofs.WithCacheSize(0))
	tok, vg := f.verifiedGrant(nil)
	_, err := f.v.VerifyGrant(tok)
	mustOK(t, err)
	st := f.statusToken(vg, nil)
	_, err = f.v.VerifyStatus(st, vg)
	mustOK(t, err)
	_, err = f.v.VerifyStatus(st, vg)
	mustOK(t, err)
	if n := proofs.SignatureChecks(f.v); n != 4 {
		t.Fatalf("%d signature checks without a cache; want 4", n)
	}
}

func TestCacheIsBounded(t *testing.T) {
	f := newFixture(t, proofs.WithCacheSize(2))
	var toks []string
	for i := range 3 {
		tok, _ := f.grantToken(func(g *fencegate.Grant) { g.FenceToken = uint64(i + 1) })
		toks = append(toks, tok)
		_, err := f.v.VerifyGrant(tok)
		mustOK(t, err)
	}
	_, err := f.v.VerifyGrant(toks[0]) // evicted: checked again
	mustOK(t, err)
	if n := proofs.SignatureChecks(f.v); n != 4 {
		t.Fatalf("%d signature checks; want 4", n)
	}
}

func roundTrip(t *testing.T, s *proofs.Signer) {
	t.Helper()
	now := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	b, err := proofs.NewBundle(1, s.BundleKey(4))
	mustOK(t, err)
	v, err := proofs.NewVerifier(b, proofs.WithClock(func() time.Time { return now }))
	mustOK(t, err)
	g := fencegate.Grant{
		Schema: fencegate.GrantSchema, Resource: "bucket/a/b", Owner: "spiffe://x/w", RequestID: "r",
		Lease: "L", FenceToken: 1<<64 - 1, BackendRevision: 1<<63 + 5, PolicyGeneration: 2,
		OperationID: "op", OperationRoot: "sha256:ab", OperationCategory: "payment", IssuerEpoch: 4,
		TTLMs: 10000, IssuedAt: now.UnixMilli(), ExpiresAt: now.UnixMilli() + 10000,
	}
	tok, digest, err := s.SignGrant(g)
	mustOK(t, err)
	if !strings.HasPrefix(digest, "sha256:") || len(digest) != 7+64 {
		t.Fatalf("digest %q", digest)
	}
	vg, err := v.VerifyGrant(tok)
	mustOK(t, err)
	if vg.Grant != g || vg.Digest != digest || vg.KeyID != s.KeyID() {
		t.Fatalf("verified %+v", vg)
	}
	st := fencegate.Status{
		Schema: fencegate.StatusSchema, GrantDigest: digest, Resource: g.Resource, Lease: g.Lease,
		FenceToken: g.FenceToken, State: fencegate.StateHeld, Revision: 9, IssuerEpoch: 4,
		IssuedAtMs: now.UnixMilli(), ExpiresAtMs: now.UnixMilli() + 5000,
	}
	stok, err := s.SignStatus(st)
	mustOK(t, err)
	got, err := v.VerifyStatus(stok, vg)
	mustOK(t, err)
	if got != st {
		t.Fatalf("status %+v", got)
	}
	// The header is exactly alg, kid, typ.
	hdr, _, _ := strings.Cut(tok, ".")
	want := fmt.Sprintf(`{"alg":%q,"kid":%q,"typ":"lockgrant+jws"}`, s.Alg(), s.KeyID())
	if got := decodeSeg(t, hdr); got != want {
		t.Fatalf("header %s; want %s", got, want)
	}
}

func TestRoundTripEdDSA(t *testing.T) {
	s, err := proofs.GenerateEd25519Signer("ed-1")
	mustOK(t, err)
	roundTrip(t, s)
}

func TestRoundTripES256(t *testing.T) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	s, err := proofs.NewSigner(k, "ec-1", proofs.AlgES256)
	mustOK(t, err)
	roundTrip(t, s)
}

func TestRoundTripHS256(t *testing.T) {
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	s, err := proofs.NewSigner(secret, "mac-1", proofs.AlgHS256)
	mustOK(t, err)
	// For HS256 the "public" key is the shared secret itself.
	var raw []byte
	mustOK(t, s.PublicKey().Raw(&raw))
	if string(raw) != string(secret) {
		t.Fatal("HS256 PublicKey is not the secret")
	}
	roundTrip(t, s)
}

func TestNewSignerRefusesBadKeys(t *testing.T) {
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for name, c := range map[string]struct {
		key any
		kid string
		alg jwa.SignatureAlgorithm
	}{
		"no kid":         {p256, "", jwa.ES256},
		"alg none":       {p256, "k", jwa.NoSignature},
		"alg RS256":      {p256, "k", jwa.RS256},
		"P-384 as ES256": {p384, "k", jwa.ES256},
		"EC as EdDSA":    {p256, "k", jwa.EdDSA},
		"short secret":   {make([]byte, 16), "k", jwa.HS256},
		"public key":     {&p256.PublicKey, "k", jwa.ES256},
	} {
		if _, err := proofs.NewSigner(c.key, c.kid, c.alg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Verification under concurrent bundle swaps (run with -race).
func TestConcurrentVerifyAndSetBundle(t *testing.T) {
	f := newFixture(t, proofs.WithCacheSize(16))
	var toks []string
	for i := range 32 {
		tok, _ := f.grantToken(func(g *fencegate.Grant) { g.FenceToken = uint64(i + 1) })
		toks = append(toks, tok)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				tok := toks[(i*7+w)%len(toks)]
				vg, err := f.v.VerifyGrant(tok)
				if err != nil {
					t.Errorf("VerifyGrant: %v", err)
					return
				}
				if _, err := f.v.VerifyStatus(f.statusToken(vg, nil), vg); err != nil {
					t.Errorf("VerifyStatus: %v", err)
					return
				}
			}
		}()
	}
	for i := range 20 {
		b, _ := proofs.NewBundle(uint64(2+i), f.signer.BundleKey(1))
		mustOK(t, f.v.SetBundle(b))
	}
	wg.Wait()
}

func benchVerify(b *testing.B, opts ...proofs.Option) {
	f := newFixture(b, opts...)
	tok, _ := f.grantToken(nil)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := f.v.VerifyGrant(tok); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyGrantCached(b *testing.B)   { benchVerify(b) }
func BenchmarkVerifyGrantUncached(b *testing.B) { benchVerify(b, proofs.WithCacheSize(0)) }

func BenchmarkVerifyStatusCached(b *testing.B) {
	f := newFixture(b)
	_, vg := f.verifiedGrant(nil)
	st := f.statusToken(vg, nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.v.VerifyStatus(st, vg); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCacheStatsCountHitsAndMissesPerKind: the counters behind the
// fencegate_proof_cache_{hits,misses}_total metrics count what the cache
// served and what paid for a signature check.
func TestCacheStatsCountHitsAndMissesPerKind(t *testing.T) {
	f := newFixture(t)
	tok, _ := f.grantToken(nil)
	var vg fencegate.VerifiedGrant
	for range 3 {
		var err error
		vg, err = f.v.VerifyGrant(tok)
		mustOK(t, err)
	}
	st := f.statusToken(vg, nil)
	for range 2 {
		_, err := f.v.VerifyStatus(st, vg)
		mustOK(t, err)
	}
	c := f.v.CacheStats()
	if got := [4]uint64{c.GrantHits.Load(), c.GrantMisses.Load(), c.StatusHits.Load(), c.StatusMisses.Load()}; got != [4]uint64{2, 1, 1, 1} {
		t.Fatalf("grant hits/misses, status hits/misses = %v, want [2 1 1 1]", got)
	}
}
