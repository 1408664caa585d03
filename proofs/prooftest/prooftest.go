// Package prooftest gives other packages' tests a ready trust setup: an
// Ed25519 signer, a one-key bundle, and a Verifier on a clock the test moves.
// Tokens it issues are valid by default (issuer epoch 1, policy generation 1,
// state HELD, status life 5 s, times from the kit clock); a mod function
// changes any claim before signing.
package prooftest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
)

// Kit bundles a signer, its bundle and a verifier with an injectable clock.
// Its methods are safe for concurrent use.
type Kit struct {
	t testing.TB

	mu       sync.Mutex
	now      time.Time
	signer   *proofs.Signer
	epoch    uint64
	keys     []proofs.BundleKey
	version  uint64
	verifier *proofs.Verifier
}

// Defaults of the tokens a Kit issues.
const (
	DefaultResource = "bucket/reports"
	DefaultOwner    = "spiffe://test/worker"
	DefaultLease    = "lease-1"
	DefaultGrantTTL = 30 * time.Second
)

// New returns a Kit whose clock starts at the current time (to the
// millisecond) and stands still until Set or Advance moves it. opts are passed
// to proofs.NewVerifier after the kit's clock.
func New(t testing.TB, opts ...proofs.Option) *Kit {
	t.Helper()
	k := &Kit{t: t, now: time.Now().Truncate(time.Millisecond), epoch: 1, version: 1}
	s, err := proofs.GenerateEd25519Signer("test-key-1")
	if err != nil {
		t.Fatalf("prooftest: %v", err)
	}
	k.signer = s
	k.keys = []proofs.BundleKey{s.BundleKey(1)}
	b, err := proofs.NewBundle(k.version, k.keys...)
	if err != nil {
		t.Fatalf("prooftest: %v", err)
	}
	v, err := proofs.NewVerifier(b, append([]proofs.Option{proofs.WithClock(k.Now)}, opts...)...)
	if err != nil {
		t.Fatalf("prooftest: %v", err)
	}
	k.verifier = v
	return k
}

// Now returns the kit clock's time.
func (k *Kit) Now() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.now
}

// Clock returns the kit clock as a function, for other components under test.
func (k *Kit) Clock() func() time.Time { return k.Now }

// Set moves the kit clock to t.
func (k *Kit) Set(t time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.now = t
}

// Advance moves the kit clock by d.
func (k *Kit) Advance(d time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.now = k.now.Add(d)
}

// Signer returns the current signer.
func (k *Kit) Signer() *proofs.Signer {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.signer
}

// Epoch returns the issuer epoch of the current signer.
func (k *Kit) Epoch() uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.epoch
}

// Verifier returns the kit's verifier (it uses the kit clock).
func (k *Kit) Verifier() *proofs.Verifier { return k.verifier }

// Bundle returns the bundle in force.
func (k *Kit) Bundle() *proofs.Bundle { return k.verifier.Bundle() }

// NewGrant returns the default grant for the kit clock, changed by mod (nil
// for none): resource DefaultResource, owner DefaultOwner, lease DefaultLease,
// fence 1, backend revision 1, policy generation 1, the current epoch, TTL 30 s.
func (k *Kit) NewGrant(mod func(*fencegate.Grant)) fencegate.Grant {
	now := k.Now()
	g := fencegate.Grant{
		Schema:            fencegate.GrantSchema,
		Resource:          DefaultResource,
		Owner:             DefaultOwner,
		RequestID:         "req-1",
		Lease:             DefaultLease,
		FenceToken:        1,
		BackendRevision:   1,
		PolicyGeneration:  1,
		OperationID:       "op-1",
		OperationRoot:     "root-1",
		OperationCategory: "write",
		IssuerEpoch:       k.Epoch(),
		TTLMs:             uint64(DefaultGrantTTL.Milliseconds()),
		IssuedAt:          now.UnixMilli(),
		ExpiresAt:         now.Add(DefaultGrantTTL).UnixMilli(),
	}
	if mod != nil {
		mod(&g)
	}
	return g
}

// Grant signs NewGrant(mod) and returns the token and its digest.
func (k *Kit) Grant(mod func(*fencegate.Grant)) (token, digest string) {
	k.t.Helper()
	token, digest, err := k.Signer().SignGrant(k.NewGrant(mod))
	if err != nil {
		k.t.Fatalf("prooftest: sign grant: %v", err)
	}
	return token, digest
}

// VerifiedGrant signs NewGrant(mod), verifies it with the kit verifier and
// returns the token and the verified grant; it fails the test if the grant
// does not verify.
func (k *Kit) VerifiedGrant(mod func(*fencegate.Grant)) (string, fencegate.VerifiedGrant) {
	k.t.Helper()
	token, _ := k.Grant(mod)
	vg, err := k.verifier.VerifyGrant(token)
	if err != nil {
		k.t.Fatalf("prooftest: verify grant: %v", err)
	}
	return token, vg
}

// NewStatus returns a HELD status proof for grant g with digest, issued now by
// the kit clock, living fencegate.DefaultStatusLife, revision 1, changed by mod.
func (k *Kit) NewStatus(g fencegate.Grant, digest string, mod func(*fencegate.Status)) fencegate.Status {
	now := k.Now()
	st := fencegate.Status{
		Schema:      fencegate.StatusSchema,
		GrantDigest: digest,
		Resource:    g.Resource,
		Lease:       g.Lease,
		FenceToken:  g.FenceToken,
		State:       fencegate.StateHeld,
		Revision:    1,
		IssuerEpoch: k.Epoch(),
		IssuedAtMs:  now.UnixMilli(),
		ExpiresAtMs: now.Add(fencegate.DefaultStatusLife).UnixMilli(),
	}
	if mod != nil {
		mod(&st)
	}
	return st
}

// Status signs a status proof for the verified grant g (see NewStatus).
func (k *Kit) Status(g fencegate.VerifiedGrant, mod func(*fencegate.Status)) string {
	k.t.Helper()
	return k.StatusFor(g.Grant, g.Digest, mod)
}

// StatusFor signs a status proof for grant g whose digest is digest.
func (k *Kit) StatusFor(g fencegate.Grant, digest string, mod func(*fencegate.Status)) string {
	k.t.Helper()
	tok, err := k.Signer().SignStatus(k.NewStatus(g, digest, mod))
	if err != nil {
		k.t.Fatalf("prooftest: sign status: %v", err)
	}
	return tok
}

// Rotate adds a fresh Ed25519 key for the next issuer epoch to the bundle
// (version + 1, earlier keys kept), installs it with SetBundle and makes it
// the kit's signer. It returns the new signer.
func (k *Kit) Rotate() *proofs.Signer {
	k.t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	epoch := k.epoch + 1
	s, err := proofs.GenerateEd25519Signer(fmt.Sprintf("test-key-%d", epoch))
	if err != nil {
		k.t.Fatalf("prooftest: %v", err)
	}
	keys := append(append([]proofs.BundleKey(nil), k.keys...), s.BundleKey(epoch))
	b, err := proofs.NewBundle(k.version+1, keys...)
	if err != nil {
		k.t.Fatalf("prooftest: %v", err)
	}
	if err := k.verifier.SetBundle(b); err != nil {
		k.t.Fatalf("prooftest: %v", err)
	}
	k.keys, k.version, k.signer, k.epoch = keys, k.version+1, s, epoch
	return s
}

// Impostor is a trust bundle an impostor at a registry's URL would serve:
// version holding one fresh Ed25519 key of its own under kid and epoch (a
// registry's kid, say), revoking rv, signed by that key alone (doc and sig,
// as GET /v1/trust-bundle and its Fence-Bundle-Signature carry them), and
// the key's signer, which signs grants the bundle would make trusted.
func Impostor(t testing.TB, kid string, epoch, version uint64, rv proofs.Revocations) (doc []byte, sig string, signer *proofs.Signer) {
	t.Helper()
	signer, err := proofs.GenerateEd25519Signer(kid)
	if err != nil {
		t.Fatal(err)
	}
	b, err := proofs.NewRevokingBundle(version, rv, signer.BundleKey(epoch))
	if err != nil {
		t.Fatal(err)
	}
	if doc, err = b.Marshal(); err != nil {
		t.Fatal(err)
	}
	if sig, err = proofs.SignBundle(doc, version, signer); err != nil {
		t.Fatal(err)
	}
	return doc, sig, signer
}
