package proofs_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
)

// fixture: one Ed25519 key "k1" for epoch 1 in a version-1 bundle, and a
// verifier on a clock the test moves.
type fixture struct {
	t      testing.TB
	priv   ed25519.PrivateKey
	pub    ed25519.PublicKey
	kid    string
	signer *proofs.Signer
	bundle *proofs.Bundle
	v      *proofs.Verifier

	mu  sync.Mutex
	now time.Time
}

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func newFixture(t testing.TB, opts ...proofs.Option) *fixture {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, priv: priv, pub: pub, kid: "k1", now: t0}
	f.signer, err = proofs.NewSigner(priv, f.kid, proofs.AlgEdDSA)
	if err != nil {
		t.Fatal(err)
	}
	f.bundle, err = proofs.NewBundle(1, f.signer.BundleKey(1))
	if err != nil {
		t.Fatal(err)
	}
	f.v, err = proofs.NewVerifier(f.bundle, append([]proofs.Option{proofs.WithClock(f.clock)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fixture) set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = t
}

func (f *fixture) grant(mod func(*fencegate.Grant)) fencegate.Grant {
	now := f.clock()
	g := fencegate.Grant{
		Schema: fencegate.GrantSchema, Resource: "bucket/reports", Owner: "worker-a",
		RequestID: "req-1", Lease: "lease-1", FenceToken: 7, BackendRevision: 3,
		PolicyGeneration: 1, OperationID: "op-1", OperationRoot: "root-1",
		OperationCategory: "write", IssuerEpoch: 1, TTLMs: 30000,
		IssuedAt: now.UnixMilli(), ExpiresAt: now.Add(30 * time.Second).UnixMilli(),
	}
	if mod != nil {
		mod(&g)
	}
	return g
}

func (f *fixture) grantJSON(mod func(*fencegate.Grant)) []byte {
	b, err := json.Marshal(f.grant(mod))
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

func enc(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// hdr is the header a grant token carries.
const grantHdr = `{"alg":"EdDSA","kid":"k1","typ":"lockgrant+jws"}`
const statusHdr = `{"alg":"EdDSA","kid":"k1","typ":"grantstatus+jws"}`

// craft builds a compact JWS from a literal header and payload and signs it
// with the fixture's real Ed25519 key, so that only the rule under test can
// make it fail.
func (f *fixture) craft(header string, payload []byte) string {
	input := enc([]byte(header)) + "." + enc(payload)
	return input + "." + enc(ed25519.Sign(f.priv, []byte(input)))
}

func (f *fixture) grantToken(mod func(*fencegate.Grant)) (string, string) {
	tok, digest, err := f.signer.SignGrant(f.grant(mod))
	if err != nil {
		f.t.Fatal(err)
	}
	return tok, digest
}

func (f *fixture) verifiedGrant(mod func(*fencegate.Grant)) (string, fencegate.VerifiedGrant) {
	f.t.Helper()
	tok, _ := f.grantToken(mod)
	vg, err := f.v.VerifyGrant(tok)
	if err != nil {
		f.t.Fatalf("VerifyGrant: %v", err)
	}
	return tok, vg
}

func (f *fixture) statusOf(vg fencegate.VerifiedGrant, mod func(*fencegate.Status)) fencegate.Status {
	now := f.clock()
	st := fencegate.Status{
		Schema: fencegate.StatusSchema, GrantDigest: vg.Digest, Resource: vg.Resource,
		Lease: vg.Lease, FenceToken: vg.FenceToken, State: fencegate.StateHeld,
		Revision: 4, IssuerEpoch: 1, IssuedAtMs: now.UnixMilli(),
		ExpiresAtMs: now.Add(fencegate.DefaultStatusLife).UnixMilli(),
	}
	if mod != nil {
		mod(&st)
	}
	return st
}

func (f *fixture) statusToken(vg fencegate.VerifiedGrant, mod func(*fencegate.Status)) string {
	tok, err := f.signer.SignStatus(f.statusOf(vg, mod))
	if err != nil {
		f.t.Fatal(err)
	}
	return tok
}

// wantRejected fails unless err is a *fencegate.Error with code whose message
// contains every one of substrs.
func wantRejected(t testing.TB, err error, code fencegate.Code, substrs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want %s", code)
	}
	var fe *fencegate.Error
	if !errors.As(err, &fe) {
		t.Fatalf("error %T %v is not a *fencegate.Error", err, err)
	}
	if fe.Code != code {
		t.Fatalf("code %s (%v); want %s", fe.Code, err, code)
	}
	for _, s := range substrs {
		if !strings.Contains(fe.Message, s) {
			t.Fatalf("message %q does not contain %q", fe.Message, s)
		}
	}
}

func mustOK(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

const hour = time.Hour

func decodeSeg(t testing.TB, seg string) string {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// flipSig changes the first character of tok's signature segment.
func flipSig(tok string) string {
	i := strings.LastIndexByte(tok, '.') + 1
	c := byte('A')
	if tok[i] == 'A' {
		c = 'B'
	}
	return tok[:i] + string(c) + tok[i+1:]
}
