package registry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry"
	"github.com/fencegate/fencegate/registry/embedded"
)

// grantOf decodes a grant token of jsonSigner, which signs the claims as
// plain JSON (prooftest.GrantOf reads a compact JWS, which these are not).
func grantOf(t *testing.T, token string) fencegate.Grant {
	t.Helper()
	var g fencegate.Grant
	if err := json.Unmarshal([]byte(token), &g); err != nil {
		t.Fatal(err)
	}
	return g
}

// mutableAuthority stands in for package authority: tests change what the
// registry signs with between calls.
type mutableAuthority struct {
	mu sync.Mutex
	is registry.Issuing
}

func (m *mutableAuthority) Issuing() registry.Issuing { m.mu.Lock(); defer m.mu.Unlock(); return m.is }
func (m *mutableAuthority) set(f func(*registry.Issuing)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(&m.is)
}

func newAuthorityRegistry(t *testing.T) (*registry.Registry, *mutableAuthority) {
	t.Helper()
	b, err := embedded.Open(filepath.Join(t.TempDir(), "registry.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	auth := &mutableAuthority{is: registry.Issuing{Signer: jsonSigner{}, Epoch: 3, PolicyGeneration: 7}}
	c := &clock{now: t0}
	n := 0
	r, err := registry.New(registry.Config{Backend: b, Authority: auth, Now: c.Now, StatusLife: 5 * time.Second,
		NewID: func() string { n++; return fmt.Sprintf("lease-%d", n) }})
	if err != nil {
		t.Fatal(err)
	}
	return r, auth
}

func TestRegistryReadsItsAuthorityAtEveryIssuance(t *testing.T) {
	r, auth := newAuthorityRegistry(t)
	is := acquire(t, r, "w", params("res/a", "q1"))
	if g := grantOf(t, is.Grant); g.IssuerEpoch != 3 || g.PolicyGeneration != 7 {
		t.Fatalf("first grant %+v", g)
	}
	auth.set(func(is *registry.Issuing) { is.Epoch, is.PolicyGeneration, is.Standing = 4, 8, []uint64{3} })
	again, err := r.Status(context.Background(), is.Lease.ID)
	if err != nil {
		t.Fatal(err)
	}
	g := grantOf(t, again.Grant)
	if g.IssuerEpoch != 4 || g.PolicyGeneration != 8 || g.FenceToken != is.Lease.FenceToken || g.Lease != is.Lease.ID {
		t.Fatalf("re-issued grant %+v", g)
	}
}

// attest is AttestStatus decoded (jsonSigner proofs are plain JSON).
func attest(t *testing.T, r *registry.Registry, req registry.AttestRequest) (fencegate.Status, error) {
	t.Helper()
	tok, err := r.AttestStatus(context.Background(), req)
	if err != nil {
		return fencegate.Status{}, err
	}
	return decode[fencegate.Status](t, tok), nil
}

func TestAttestFindsTheGrantByDigestAndNeverTakesTheAskersEpoch(t *testing.T) {
	r, auth := newAuthorityRegistry(t)
	ctx := context.Background()
	is := acquire(t, r, "alice", params("res/a", "q1"))
	other := acquire(t, r, "alice", params("res/b", "q2"))
	req := registry.AttestRequest{Lease: is.Lease.ID, GrantDigest: is.GrantDigest, Caller: "alice"}
	if st, err := attest(t, r, req); err != nil || st.State != fencegate.StateHeld || st.GrantDigest != is.GrantDigest {
		t.Fatalf("owner, current grant: %+v %v", st, err)
	}
	gw := req
	gw.Caller = "" // a gateway identity
	if st, err := attest(t, r, gw); err != nil || st.State != fencegate.StateHeld {
		t.Fatalf("gateway, current grant: %+v %v", st, err)
	}

	// Rotation: the epoch-3 grant stands during the overlap.
	auth.set(func(is *registry.Issuing) { is.Epoch, is.Standing = 4, []uint64{3} })
	if st, err := attest(t, r, req); err != nil || st.State != fencegate.StateHeld || st.IssuerEpoch != 4 {
		t.Fatalf("standing epoch-3 grant: %+v %v", st, err)
	}
	// Revocation: no overlap; the grant is stated REVOKED whatever the asker claims.
	auth.set(func(is *registry.Issuing) { is.Standing, is.Revoked = nil, map[uint64]bool{3: true} })
	if st, err := attest(t, r, req); err != nil || st.State != fencegate.StateRevoked {
		t.Fatalf("revoked epoch-3 grant: %+v %v", st, err)
	}

	refused := map[string]struct {
		req  registry.AttestRequest
		code fencegate.Code
	}{
		"another epoch in the body":        {registry.AttestRequest{Lease: is.Lease.ID, GrantDigest: is.GrantDigest, IssuerEpoch: 4, Caller: "alice"}, fencegate.CodeStatusInvalid},
		"a digest the lease never had":     {registry.AttestRequest{Lease: is.Lease.ID, GrantDigest: "sha256:" + fmt.Sprintf("%064x", 1), Caller: "alice"}, fencegate.CodeStatusInvalid},
		"another lease's digest":           {registry.AttestRequest{Lease: is.Lease.ID, GrantDigest: other.GrantDigest, Caller: "alice"}, fencegate.CodeStatusInvalid},
		"no digest":                        {registry.AttestRequest{Lease: is.Lease.ID, Caller: "alice"}, fencegate.CodeStatusInvalid},
		"another fence in the body":        {registry.AttestRequest{Lease: is.Lease.ID, GrantDigest: is.GrantDigest, FenceToken: 99, Caller: "alice"}, fencegate.CodeStatusInvalid},
		"a workload that is not the owner": {registry.AttestRequest{Lease: is.Lease.ID, GrantDigest: is.GrantDigest, Caller: "mallory"}, fencegate.CodeOwnerMismatch},
		"an unknown lease":                 {registry.AttestRequest{Lease: "nope", GrantDigest: is.GrantDigest, Caller: "alice"}, fencegate.CodeStatusInvalid},
	}
	before, err := r.Status(ctx, is.Lease.ID)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range refused {
		if _, err := r.AttestStatus(ctx, c.req); fencegate.ErrorCode(err) != c.code {
			t.Errorf("%s: want %s, got %v", name, c.code, err)
		}
	}
	after, err := r.Status(ctx, is.Lease.ID)
	if err != nil || after.Lease != before.Lease {
		t.Fatalf("refused attests changed the lease: %+v -> %+v (%v)", before.Lease, after.Lease, err)
	}

	// A policy bump retires every grant of the older generation.
	cur := registry.AttestRequest{Lease: is.Lease.ID, GrantDigest: after.GrantDigest, Caller: "alice"}
	if st, err := attest(t, r, cur); err != nil || st.State != fencegate.StateHeld {
		t.Fatalf("current epoch-4 grant: %+v %v", st, err)
	}
	auth.set(func(is *registry.Issuing) { is.PolicyGeneration++ })
	if _, err := r.AttestStatus(ctx, cur); fencegate.ErrorCode(err) != fencegate.CodeStatusInvalid {
		t.Fatalf("grant of an older policy generation: %v", err)
	}
}

func TestInProcessStatusOfAnOlderPolicyGenerationIsStatedForTheGatewayToRefuse(t *testing.T) {
	r, auth := newAuthorityRegistry(t)
	ctx := context.Background()
	is := acquire(t, r, "alice", params("res/a", "q1"))
	vg := fencegate.VerifiedGrant{Grant: grantOf(t, is.Grant), Digest: is.GrantDigest}
	auth.set(func(is *registry.Issuing) { is.PolicyGeneration++ })
	// In process, the gateway shares the policy and answers POLICY_STALE itself.
	if st, err := r.GrantStatus(ctx, vg); err != nil || st.State != fencegate.StateHeld {
		t.Fatalf("in-process status of a policy-stale grant: %+v %v", st, err)
	}
	// Over the network the registry attests current-policy grants only.
	_, err := r.AttestStatus(ctx, registry.AttestRequest{Lease: is.Lease.ID, GrantDigest: is.GrantDigest, Caller: "alice"})
	wantCode(t, err, fencegate.CodeStatusInvalid)
}
