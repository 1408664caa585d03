package gateway_test

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// vanishingQuerier answers like an in-process registry whose backend lost
// the lease: NOT_FOUND becomes STATUS_INVALID; it counts the questions.
type vanishingQuerier struct {
	n    int
	gone bool
}

func (q *vanishingQuerier) GrantStatus(ctx context.Context, g fencegate.VerifiedGrant) (fencegate.Status, error) {
	q.n++
	if q.gone {
		return fencegate.Status{}, fencegate.Errorf(fencegate.CodeStatusInvalid, "grant names an unknown lease")
	}
	return (&countingQuerier{}).GrantStatus(ctx, g)
}

func TestFreshProofOfAVanishedLeaseIsRefusedOnTheFirstSegmentWithoutStateChange(t *testing.T) {
	f := newFixture(t)
	q := &vanishingQuerier{}
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Confirm: q, Store: f.store, Now: f.kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := gw.Apply(ctx, f.request(5, 1, "v1")); err != nil || q.n != 1 {
		t.Fatalf("first segment of a held lease: %v, %d questions", err, q.n)
	}
	if _, err := gw.Apply(ctx, f.request(5, 2, "v2")); err != nil || q.n != 1 {
		t.Fatalf("later segments rely on the proof: %v, %d questions", err, q.n)
	}
	before, _ := f.store.Resource(ctx, resource)
	q.gone = true // the coordination state is lost: fence 6's lease no longer exists
	_, err = gw.Apply(ctx, f.request(6, 1, "stale"))
	if fencegate.ErrorCode(err) != fencegate.CodeStatusInvalid {
		t.Fatalf("vanished lease with a fresh proof: want STATUS_INVALID, got %v", err)
	}
	if after, _ := f.store.Resource(ctx, resource); after != before || f.content() != "v2" {
		t.Fatalf("the refusal changed state: %+v -> %+v, object %q", before, after, f.content())
	}
	if err := gw.Precheck(ctx, f.request(6, 1, "stale")); err != nil || q.n != 2 {
		t.Fatalf("precheck leaves the question to admission: %v, %d questions", err, q.n)
	}
}
