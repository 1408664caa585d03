package registry_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/fencegate/fencegate"
)

func grantOf(t *testing.T, token string) fencegate.Grant {
	t.Helper()
	var g fencegate.Grant
	if err := json.Unmarshal([]byte(token), &g); err != nil {
		t.Fatal(err)
	}
	return g
}

func TestRotationReissuesGrantsUnderTheNewEpochKeepingTheFence(t *testing.T) {
	r, _ := newRegistry(t)
	is := acquire(t, r, "w", params("res/a", "q1"))
	if err := r.Rotate(jsonSigner{}, 3); err == nil {
		t.Fatal("rotation to the same epoch accepted")
	}
	if err := r.Rotate(jsonSigner{}, 4); err != nil {
		t.Fatal(err)
	}
	again, err := r.Status(context.Background(), is.Lease.ID)
	if err != nil {
		t.Fatal(err)
	}
	g := grantOf(t, again.Grant)
	if g.IssuerEpoch != 4 || g.FenceToken != is.Lease.FenceToken || g.Lease != is.Lease.ID {
		t.Fatalf("re-issued grant %+v", g)
	}
}

func TestRevokedEpochGrantsAreStatedRevoked(t *testing.T) {
	r, _ := newRegistry(t)
	ctx := context.Background()
	is := acquire(t, r, "w", params("res/a", "q1"))
	old := fencegate.VerifiedGrant{Grant: grantOf(t, is.Grant), Digest: is.GrantDigest}
	if err := r.RevokeEpoch(3); err == nil {
		t.Fatal("the current epoch was revoked without a rotation")
	}
	if err := r.Rotate(jsonSigner{}, 4); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.GrantStatus(ctx, old); st.State != fencegate.StateHeld {
		t.Fatalf("before revocation: %s", st.State)
	}
	if err := r.RevokeEpoch(3); err != nil {
		t.Fatal(err)
	}
	st, err := r.GrantStatus(ctx, old)
	if err != nil || st.State != fencegate.StateRevoked || !r.EpochRevoked(3) {
		t.Fatalf("after revocation: %+v %v", st, err)
	}
	// The lease itself lives on under the new epoch.
	fresh, err := r.Status(ctx, is.Lease.ID)
	if err != nil {
		t.Fatal(err)
	}
	nv := fencegate.VerifiedGrant{Grant: grantOf(t, fresh.Grant), Digest: fresh.GrantDigest}
	if st, _ := r.GrantStatus(ctx, nv); st.State != fencegate.StateHeld {
		t.Fatalf("new-epoch grant is %s", st.State)
	}
}

func TestPolicyBumpIsStampedIntoNewGrantsAndRestored(t *testing.T) {
	r, _ := newRegistry(t)
	if g := r.BumpPolicy(); g != 8 {
		t.Fatalf("bumped to %d", g)
	}
	is := acquire(t, r, "w", params("res/a", "q1"))
	if g := grantOf(t, is.Grant); g.PolicyGeneration != 8 {
		t.Fatalf("grant policy generation %d", g.PolicyGeneration)
	}
	r2, _ := newRegistry(t)
	if err := r2.Restore(r.State()); err != nil {
		t.Fatal(err)
	}
	if r2.PolicyGeneration() != 8 {
		t.Fatalf("restored generation %d", r2.PolicyGeneration())
	}
	st := r.State()
	st.IssuerEpoch = 99
	if err := r2.Restore(st); err == nil {
		t.Fatal("restore with another epoch accepted")
	}
}
