package app

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
)

// Rule: a replica asking a registry that rotated its key since the last
// bundle pull fetches the bundle at once and verifies the answer under it:
// the lease the registry holds is HELD, not STATUS_INVALID ("kid not in the
// trust bundle") until the next tick.
func TestAQueryAnsweredUnderANewKeyFetchesTheBundleAtOnce(t *testing.T) {
	w := newS3World(t)
	ctx := context.Background()
	replica, err := proofs.NewVerifier(w.app.auth.Verifier().Bundle())
	if err != nil {
		t.Fatal(err)
	}
	q, err := newRemoteQuerier(w.srv.URL, "token-gw", replica, nil)
	if err != nil {
		t.Fatal(err)
	}
	pulls := 0
	q.refresh = func(ctx context.Context) {
		pulls++
		data, _, err := q.FetchBundle(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := proofs.ParseBundle(data); err == nil && b.Version() > replica.Bundle().Version() {
			_ = replica.SetBundle(b)
		}
	}
	held := w.acquire("token-a", "local/reports/20", "r-1")
	vg, err := replica.VerifyGrant(held.Grant)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := q.GrantStatus(ctx, vg); err != nil || st.State != fencegate.StateHeld || pulls != 0 {
		t.Fatalf("before the rotation: %+v %v (%d pulls)", st, err, pulls)
	}
	if _, err := w.app.auth.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := q.GrantStatus(ctx, vg); err != nil || st.State != fencegate.StateHeld || pulls != 1 {
		t.Fatalf("after the rotation: %+v %v (%d pulls); want HELD after one pull", st, err, pulls)
	}
}

// Rule: only a statement signed by a key the bundle does not hold
// (proofs.ErrUnknownKey) fetches the bundle on the request's path; any
// other failure (expired, another grant, a revoked epoch) is answered as it
// is, with no fetch.
func TestOnlyAnUnknownKeyFetchesTheBundleOnAQuery(t *testing.T) {
	w := newS3World(t)
	q, err := newRemoteQuerier(w.srv.URL, "token-gw", w.app.auth.Verifier(), nil)
	if err != nil {
		t.Fatal(err)
	}
	pulls := 0
	q.refresh = func(context.Context) { pulls++ }
	for _, c := range []struct {
		err   error
		pulls int
	}{
		{fencegate.Errorf(fencegate.CodeStatusInvalid, "status proof: expired"), 0},
		{fencegate.Errorf(fencegate.CodeEpochRevoked, "status proof: kid of a revoked epoch"), 0},
		{&fencegate.Error{Code: fencegate.CodeStatusInvalid, Message: "status proof: kid not in the bundle", Err: proofs.ErrUnknownKey}, 1},
	} {
		pulls = 0
		if _, err := q.verify(context.Background(), func() (fencegate.Status, error) { return fencegate.Status{}, c.err }); err == nil {
			t.Fatalf("%v: verified", c.err)
		}
		if pulls != c.pulls {
			t.Fatalf("%v: %d pulls, want %d", c.err, pulls, c.pulls)
		}
	}
}
