package registry_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authz"
	"github.com/fencegate/fencegate/proofs"
	"github.com/fencegate/fencegate/proofs/prooftest"
	"github.com/fencegate/fencegate/registry"
	"github.com/fencegate/fencegate/registry/embedded"
)

// signingRegistry is a registry that signs with a prooftest kit, so what it
// mints verifies as a gateway would verify it.
func signingRegistry(t *testing.T, acc registry.Access) (*registry.Registry, *prooftest.Kit) {
	t.Helper()
	b, err := embedded.Open(filepath.Join(t.TempDir(), "registry.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	kit := prooftest.New(t)
	cfg := registry.Config{Backend: b, Signer: kit.Signer(), IssuerEpoch: kit.Epoch(), PolicyGeneration: 1, Now: kit.Now}
	if acc != nil {
		cfg.Access = acc
	}
	r, err := registry.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, kit
}

func TestOwnerMintsADelegationBoundToItsGrant(t *testing.T) {
	r, kit := signingRegistry(t, nil)
	ctx := context.Background()
	is := acquire(t, r, "coord", params("local/batch", "req-1"))
	dl, err := r.Delegate(ctx, "coord", is.Lease.ID, registry.DelegateParams{Delegate: "consumer", SegmentFrom: 2, SegmentTo: 9, TargetPrefix: "local/batch/a"})
	if err != nil {
		t.Fatal(err)
	}
	vg, err := kit.Verifier().VerifyGrant(is.Grant)
	if err != nil {
		t.Fatal(err)
	}
	d, err := kit.Verifier().VerifyDelegation(dl.Token, vg)
	if err != nil {
		t.Fatalf("the minted delegation does not verify against its grant: %v", err)
	}
	if d.Delegate != "consumer" || d.FenceToken != is.Lease.FenceToken || d.GrantDigest != is.GrantDigest || d.TargetPrefix != "local/batch/a" {
		t.Fatalf("delegation %+v", d)
	}
	// The delegate is issued a status proof for it; the gateway accepts it
	// for the delegation and refuses it as an owner's proof.
	tok, st, err := r.DelegationStatus(ctx, registry.DelegationStatusRequest{ID: d.ID, GrantDigest: is.GrantDigest, Caller: "consumer"})
	if err != nil || st.State != fencegate.StateHeld || st.Delegation != d.ID {
		t.Fatalf("delegate status: %+v %v", st, err)
	}
	if _, err := kit.Verifier().VerifyDelegationStatus(tok, vg, d.ID); err != nil {
		t.Fatalf("delegate proof: %v", err)
	}
	if _, err := kit.Verifier().VerifyStatus(tok, vg); fencegate.ErrorCode(err) != fencegate.CodeStatusInvalid {
		t.Fatalf("delegate proof as the owner's: %v", err)
	}
}

func TestDelegationIsRefusedToAnyoneButTheOwnerOfALiveLease(t *testing.T) {
	r, kit := signingRegistry(t, nil)
	ctx := context.Background()
	is := acquire(t, r, "coord", params("local/batch", "req-1"))
	ok := registry.DelegateParams{Delegate: "consumer", SegmentFrom: 1, SegmentTo: 3}
	for name, c := range map[string]struct {
		owner string
		p     registry.DelegateParams
		code  fencegate.Code
	}{
		"another identity": {"intruder", ok, fencegate.CodeOwnerMismatch},
		"no delegate":      {"coord", registry.DelegateParams{SegmentFrom: 1, SegmentTo: 3}, fencegate.CodeDelegationInvalid},
		"no segments":      {"coord", registry.DelegateParams{Delegate: "consumer"}, fencegate.CodeDelegationInvalid},
		"prefix outside":   {"coord", registry.DelegateParams{Delegate: "consumer", Segments: []uint64{2}, TargetPrefix: "local/other"}, fencegate.CodeDelegationInvalid},
		"unknown digest":   {"coord", registry.DelegateParams{Delegate: "consumer", Segments: []uint64{2}, GrantDigest: "sha256:00"}, fencegate.CodeDelegationInvalid},
	} {
		if _, err := r.Delegate(ctx, c.owner, is.Lease.ID, c.p); fencegate.ErrorCode(err) != c.code {
			t.Fatalf("%s: %v, want %s", name, err, c.code)
		}
	}
	kit.Advance(31 * time.Second) // the lease lapses
	if _, err := r.Delegate(ctx, "coord", is.Lease.ID, ok); fencegate.ErrorCode(err) != fencegate.CodeLeaseNotHeld {
		t.Fatalf("expired lease: %v", err)
	}
}

// A delegation dies with its lease: once the lease lapsed, the delegate's
// status proof states EXPIRED, which no gateway accepts.
func TestDelegationDiesWithItsLease(t *testing.T) {
	r, kit := signingRegistry(t, nil)
	ctx := context.Background()
	is := acquire(t, r, "coord", params("local/batch", "req-1"))
	dl, err := r.Delegate(ctx, "coord", is.Lease.ID, registry.DelegateParams{Delegate: "consumer", SegmentFrom: 1, SegmentTo: 3})
	if err != nil {
		t.Fatal(err)
	}
	kit.Advance(31 * time.Second)
	_, st, err := r.DelegationStatus(ctx, registry.DelegationStatusRequest{ID: dl.Delegation.ID, GrantDigest: is.GrantDigest, Caller: "consumer"})
	if err != nil || st.State != fencegate.StateExpired {
		t.Fatalf("status after the lease lapsed: %+v %v", st, err)
	}
}

// Revocation: only the owner revokes; from then on the registry states the
// delegation to nobody (delegate or gateway), and the refusal is
// DELEGATION_INVALID. Revoking twice is not an error.
func TestRevokedDelegationGetsNoStatus(t *testing.T) {
	r, _ := signingRegistry(t, nil)
	ctx := context.Background()
	is := acquire(t, r, "coord", params("local/batch", "req-1"))
	dl, err := r.Delegate(ctx, "coord", is.Lease.ID, registry.DelegateParams{Delegate: "consumer", SegmentFrom: 1, SegmentTo: 3})
	if err != nil {
		t.Fatal(err)
	}
	id := dl.Delegation.ID
	if _, _, err := r.DelegationStatus(ctx, registry.DelegationStatusRequest{ID: id, GrantDigest: is.GrantDigest, Caller: "other"}); fencegate.ErrorCode(err) != fencegate.CodeOwnerMismatch {
		t.Fatalf("status for another caller: %v", err)
	}
	if err := r.RevokeDelegation(ctx, "consumer", id); fencegate.ErrorCode(err) != fencegate.CodeOwnerMismatch {
		t.Fatalf("revoke by the delegate: %v", err)
	}
	if _, _, err := r.DelegationStatus(ctx, registry.DelegationStatusRequest{ID: id, GrantDigest: is.GrantDigest, Caller: "consumer"}); err != nil {
		t.Fatalf("a refused revocation revoked: %v", err)
	}
	for range 2 {
		if err := r.RevokeDelegation(ctx, "coord", id); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := r.DelegationStatus(ctx, registry.DelegationStatusRequest{ID: id, GrantDigest: is.GrantDigest, Caller: "consumer"}); fencegate.ErrorCode(err) != fencegate.CodeDelegationInvalid {
		t.Fatalf("revoked, delegate asks: %v", err)
	}
	if _, _, err := r.DelegationStatus(ctx, registry.DelegationStatusRequest{ID: id, GrantDigest: is.GrantDigest}); fencegate.ErrorCode(err) != fencegate.CodeDelegationInvalid {
		t.Fatalf("revoked, gateway asks: %v", err)
	}
	if err := r.RevokeDelegation(ctx, "coord", "dlg_unknown"); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("unknown: %v", err)
	}
	if _, _, err := r.DelegationStatus(ctx, registry.DelegationStatusRequest{ID: "dlg_unknown", GrantDigest: is.GrantDigest}); fencegate.ErrorCode(err) != fencegate.CodeDelegationInvalid {
		t.Fatalf("unknown delegation status: %v", err)
	}
}

// The access policy decides at minting: the delegate needs a delegate (or
// lease) rule on the delegated resource or prefix.
func TestDelegationToAnIdentityThePolicyDoesNotNameIsForbidden(t *testing.T) {
	pol, err := authz.New([]authz.Rule{
		{Identity: "coord", Lease: []string{"local/batch"}},
		{Identity: "consumer", Delegate: []string{"local/batch/a"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := signingRegistry(t, pol)
	ctx := context.Background()
	is := acquire(t, r, "coord", params("local/batch", "req-1"))
	if _, err := r.Delegate(ctx, "coord", is.Lease.ID, registry.DelegateParams{Delegate: "stranger", Segments: []uint64{1}}); fencegate.ErrorCode(err) != fencegate.CodeForbidden {
		t.Fatalf("stranger: %v", err)
	}
	if _, err := r.Delegate(ctx, "coord", is.Lease.ID, registry.DelegateParams{Delegate: "consumer", Segments: []uint64{1}}); fencegate.ErrorCode(err) != fencegate.CodeForbidden {
		t.Fatalf("consumer on the whole resource: %v", err)
	}
	if _, err := r.Delegate(ctx, "coord", is.Lease.ID, registry.DelegateParams{Delegate: "consumer", Segments: []uint64{1}, TargetPrefix: "local/batch/a"}); err != nil {
		t.Fatalf("consumer inside its prefix: %v", err)
	}
}

// A store that forgot a delegation (eviction, restart) fails closed.
func TestForgottenDelegationIsRefused(t *testing.T) {
	m := registry.NewMemoryDelegations(1)
	ctx := context.Background()
	_ = m.Put(ctx, registry.DelegationRecord{ID: "a"})
	_ = m.Put(ctx, registry.DelegationRecord{ID: "b"})
	if _, err := m.Get(ctx, "a"); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("evicted record: %v", err)
	}
}

// The largest delegation the registry mints (the longest segment set of the
// largest numbers, a long prefix) still verifies under the default token cap.
func TestLargestDelegationFitsTheTokenSizeCap(t *testing.T) {
	r, kit := signingRegistry(t, nil)
	ctx := context.Background()
	is := acquire(t, r, "coord", params("local/batch", "req-1"))
	segs := make([]uint64, fencegate.MaxDelegationSegments)
	for i := range segs {
		segs[i] = ^uint64(0) - uint64(i)
	}
	prefix := "local/batch/" + strings.Repeat("p", 200)
	dl, err := r.Delegate(ctx, "coord", is.Lease.ID, registry.DelegateParams{Delegate: strings.Repeat("d", 200), Segments: segs, TargetPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	vg, _ := kit.Verifier().VerifyGrant(is.Grant)
	if _, err := kit.Verifier().VerifyDelegation(dl.Token, vg); err != nil {
		t.Fatalf("%d-byte delegation: %v", len(dl.Token), err)
	}
	if _, err := r.Delegate(ctx, "coord", is.Lease.ID, registry.DelegateParams{Delegate: "d", Segments: append(segs, 1)}); fencegate.ErrorCode(err) != fencegate.CodeDelegationInvalid {
		t.Fatalf("one segment more: %v", err)
	}
}

func TestDelegationLargerThanGatewaysAcceptIsRefused(t *testing.T) {
	r, _ := signingRegistry(t, nil)
	is := acquire(t, r, "coord", params("local/batch", "req-1"))
	_, err := r.Delegate(context.Background(), "coord", is.Lease.ID, registry.DelegateParams{Delegate: strings.Repeat("d", 9000), Segments: []uint64{2}})
	if fencegate.ErrorCode(err) != fencegate.CodeDelegationInvalid {
		t.Fatalf("oversized: %v", err)
	}
}

func TestDelegationTokenCapIsTheVerifiersDefault(t *testing.T) {
	if registry.MaxDelegationToken != proofs.DefaultMaxTokenSize {
		t.Fatalf("registry mints up to %d bytes, gateways accept %d", registry.MaxDelegationToken, proofs.DefaultMaxTokenSize)
	}
}

// A full store forgets the oldest delegation of the owner holding the most:
// one owner minting without end forgets its own, never another owner's
// live delegation (whose delegate would be refused).
func TestDelegationFloodForgetsTheFloodersOwn(t *testing.T) {
	m := registry.NewMemoryDelegations(3)
	ctx := context.Background()
	_ = m.Put(ctx, registry.DelegationRecord{ID: "b1", Owner: "bob"})
	for i := range 10 {
		_ = m.Put(ctx, registry.DelegationRecord{ID: fmt.Sprintf("a%d", i), Owner: "mallory"})
	}
	if rec, err := m.Get(ctx, "b1"); err != nil || rec.Owner != "bob" {
		t.Fatalf("another owner's delegation was forgotten: %+v %v", rec, err)
	}
	for _, id := range []string{"a8", "a9"} {
		if _, err := m.Get(ctx, id); err != nil {
			t.Fatalf("the flooder's newest %s: %v", id, err)
		}
	}
	if _, err := m.Get(ctx, "a0"); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("the flooder's oldest is kept beyond the capacity: %v", err)
	}
	// Revocation survives in place and is not a new record.
	if err := m.Revoke(ctx, "b1"); err != nil {
		t.Fatal(err)
	}
	_ = m.Put(ctx, registry.DelegationRecord{ID: "a10", Owner: "mallory"})
	if rec, err := m.Get(ctx, "b1"); err != nil || !rec.Revoked {
		t.Fatalf("revoked record: %+v %v", rec, err)
	}
}
